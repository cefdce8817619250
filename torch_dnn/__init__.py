"""torch_dnn: cuDNN-class deep-learning primitives as our own kernels, shipped as a PyTorch operator plugin.

    import torch_dnn
    torch_dnn.functional.gelu(x)          # mirrors torch.nn.functional
    torch.ops.torch_dnn.gelu(x)           # the raw op
    torch_dnn.nn.GELU()                   # drop-in module
    model, report = torch_dnn.convert(model)
"""
import torch

from torch_dnn._extension import build_info, load_extension

_C = load_extension()

from torch_dnn import ops  # noqa: E402  (registers fake kernels, autograd and autocast for every family)
from torch_dnn import functional, nn  # noqa: E402
from torch_dnn.convert import ConvertReport, convert  # noqa: E402

__version__ = "0.1.0"
__all__ = ["functional", "nn", "ops", "convert", "ConvertReport", "build_info", "families", "has_cuda_kernel"]


def families():
    """The op families this build registers, each with its op names."""
    return dict(ops.FAMILIES)


def has_cuda_kernel(op_name: str) -> bool:
    """Whether torch.ops.torch_dnn.<op_name> has a CUDA kernel in this build."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(f"torch_dnn::{op_name}", "CUDA")
