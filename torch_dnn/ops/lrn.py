"""local_response_norm: a window of `size` channels (zero padding: size // 2 before, (size - 1) // 2 after),
y = x / (k + alpha / size * sum of x^2 over the window)^beta, as torch.nn.functional.local_response_norm.
Fake kernels (mirroring csrc/lrn/lrn_ops.h's layout rule), autograd (backward = a torch_dnn op), functional
wrapper. CUDA autocast to float32: PyTorch's composite runs its pow in float32 there, so its result is float32."""
import torch

from torch_dnn.ops._registry import add_family, ops, register_autograd
from torch_dnn.ops.group_norm import _dense_input

_ops = ops  # torch.ops.torch_dnn, below autograd when no gradient is needed


@torch.library.register_fake("torch_dnn::local_response_norm")
def _lrn_fake(x, size, alpha, beta, k):
    return torch.empty_like(_dense_input(x))


@torch.library.register_fake("torch_dnn::local_response_norm_backward")
def _lrn_backward_fake(grad_out, x, size, alpha, beta, k):
    return torch.empty_like(_dense_input(x))


def _lrn_setup(ctx, inputs, output):
    x, *params = inputs
    ctx.save_for_backward(x)
    ctx.params = params


def _lrn_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return (_ops.local_response_norm_backward(grad, x, *ctx.params),) + (None,) * len(ctx.params)


register_autograd("torch_dnn::local_response_norm", _lrn_backward, setup_context=_lrn_setup, cpp_kernel=True)  # lrn.cpp
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
