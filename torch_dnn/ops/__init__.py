"""Per-family Python registrations (fake kernels, autograd, autocast) and functional wrappers.

Each family module registers its ops on import and adds itself to FAMILIES.
"""
from torch_dnn.ops._registry import FAMILIES
from torch_dnn.ops import activation, batch_norm, group_norm, lrn, matmul, norm, pool, softmax  # noqa: F401

__all__ = ["FAMILIES", "activation", "batch_norm", "group_norm", "lrn", "matmul", "norm", "pool", "softmax"]
