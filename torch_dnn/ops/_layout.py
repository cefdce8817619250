"""The fake kernels' side of csrc/common/memory_format.h: results laid out as PyTorch's own op lays them out, so that
a fake kernel gives the strides its real kernel gives (opcheck compares them; tests/test_memory_format.py compares
the real ones with PyTorch's)."""
import torch
from torch._prims_common import compute_elementwise_output_strides


def iter_empty(*operands, dtype=None):
    """An empty tensor shaped as the operands (one shape), with the strides a TensorIterator gives the output of an
    elementwise op over them in this order (the first operand that orders two dims decides; a dense first operand
    gives its own layout)."""
    first = operands[0]
    strides = compute_elementwise_output_strides(*operands)
    return torch.empty_strided(first.shape, strides, dtype=dtype or first.dtype, device=first.device)


def contiguous_empty(like, dtype=None):
    return torch.empty(like.shape, dtype=dtype or like.dtype, device=like.device)
