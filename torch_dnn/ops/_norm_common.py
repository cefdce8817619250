"""What the normalisation families (batch_norm, group_norm, norm) share: the dtype of their statistics and the
cast of their parameter gradients to the parameter's dtype."""
import torch


def stat_dtype(dtype):
    """The statistics' (mean, rstd / invstd, running statistics) dtype for an input of `dtype`: the accumulation
    type, float64 for float64, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def dtype_of(t):
    return None if t is None else t.dtype


def param_grad(g, dtype, wanted):
    """A backward op's parameter gradient (in the input's dtype) cast to the parameter's dtype; None where not
    wanted."""
    return g.to(dtype) if wanted else None
