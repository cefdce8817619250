"""local_response_norm: a window of `size` channels (zero padding: size // 2 before, (size - 1) // 2 after),
y = x / (k + alpha / size * sum of x^2 over the window)^beta, as torch.nn.functional.local_response_norm.
Fake kernels (mirroring csrc/lrn/lrn_ops.h's layout rule: PyTorch's), autograd (backward = a torch_dnn op), functional
wrapper. CUDA autocast to float32: PyTorch's composite runs its pow in float32 there, so its result is float32."""
import torch

from torch_dnn.ops._layout import iter_empty
from torch_dnn.ops._registry import add_family, ops, register_single_input_formula
from torch_dnn.ops import _checks

_ops = ops  # torch.ops.torch_dnn, below autograd when no gradient is needed


# the result in x's layout, the gradient in grad_out's, as PyTorch's composite (csrc/lrn/lrn_ops.h)
@torch.library.register_fake("torch_dnn::local_response_norm")
def _lrn_fake(x, size, alpha, beta, k):
    _checks.lrn(x, size)
    return iter_empty(x)


@torch.library.register_fake("torch_dnn::local_response_norm_backward")
def _lrn_backward_fake(grad_out, x, size, alpha, beta, k):
    _checks.lrn(x, size, grad_out)
    return iter_empty(grad_out, x)


register_single_input_formula("local_response_norm")  # from the C++ kernel's spec (csrc/lrn/lrn.cpp)
torch.library.register_autocast("torch_dnn::local_response_norm", "cuda", torch.float32)

add_family("lrn", ["local_response_norm", "local_response_norm_backward"])


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    dim = input.dim()
    if dim < 3:  # PyTorch's check and message
        raise ValueError(f"Expected 3D or higher dimensionality input (got {dim} dimensions)")
    if input.numel() == 0:
        return input  # as PyTorch: the input itself
    return _ops.local_response_norm(input, int(size), float(alpha), float(beta), float(k))


FUNCTIONAL = ["local_response_norm"]


def selfcheck_cases():
    """python -m torch_dnn's rows of this family: (op, callable(device, dtype) -> list of Verdicts)."""
    from torch_dnn.reference.lrn import local_response_norm_reference
    from torch_dnn.testing import check_against_torch, random_like_case

    out = []
    for cl in (False, True):
        def make(d, t, cl=cl):
            x = random_like_case((2, 16, 13, 11), t, d)
            return [x.contiguous(memory_format=torch.channels_last) if cl else x]
        out.append((f"local_response_norm(5){' NHWC' if cl else ''}", lambda d, t, m=make:
                    check_against_torch(lambda x: local_response_norm(x, 5, 1e-3, 0.75, 1.0),
                                        lambda x: local_response_norm_reference(x, 5, 1e-3, 0.75, 1.0), m(d, t), name="lrn")))
    return out
