"""Softmax family: fake kernels, autograd (backward = torch_dnn ops), CUDA autocast to float32 (as PyTorch
autocasts softmax and log_softmax), and functional wrappers mirroring torch.nn.functional."""
import warnings

import torch

from torch_dnn.ops._layout import contiguous_empty
from torch_dnn.ops._registry import add_family, ops, register_single_input_formula
from torch_dnn.ops import _checks

_ops = ops  # torch.ops.torch_dnn, below autograd when no gradient is needed


def _register(name: str) -> None:
    qual = f"torch_dnn::{name}"
    # contiguous results whatever the layout, as PyTorch's (csrc/softmax/softmax_ops.h)
    @torch.library.register_fake(qual)
    def _fake(x, dim, dtype=None):
        _checks.softmax(name, x, dim, dtype)
        return contiguous_empty(x, dtype=dtype if dtype is not None else x.dtype)

    @torch.library.register_fake(f"torch_dnn::{name}_backward")
    def _fake_backward(grad, output, dim, input_dtype):
        _checks.softmax_backward(name, grad, output, dim, input_dtype)
        return contiguous_empty(output, dtype=input_dtype)

    register_single_input_formula(name)  # from the C++ kernel's spec (csrc/softmax/softmax.cpp)
    torch.library.register_autocast(qual, "cuda", torch.float32)


for _name in ("softmax", "log_softmax"):
    _register(_name)

add_family("softmax", ["softmax", "log_softmax", "softmax_backward", "log_softmax_backward"])


def _legacy_softmax_dim(name: str, ndim: int) -> int:
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _legacy_softmax_dim("softmax", input.dim())
    return _ops.softmax(input, dim, dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _legacy_softmax_dim("log_softmax", input.dim())
    return _ops.log_softmax(input, dim, dtype)


FUNCTIONAL = ["softmax", "log_softmax"]


def selfcheck_cases():
    """python -m torch_dnn's rows of this family: (op, callable(device, dtype) -> list of Verdicts)."""
    import torch.nn.functional as TF

    from torch_dnn.testing import check_against_torch, random_like_case

    out = []
    for name, ours, theirs in (("softmax", softmax, TF.softmax), ("log_softmax", log_softmax, TF.log_softmax)):
        for shape, dim in (((33, 100), -1), ((4, 3000), -1), ((6, 7, 5), 1)):
            out.append((f"{name}{list(shape)} dim={dim}", lambda d, t, o=ours, p=theirs, s=shape, dm=dim, n=name:
                        check_against_torch(lambda x: o(x, dm), lambda x: p(x, dm), [random_like_case(s, t, d)],
                                            name=n)))
    return out
