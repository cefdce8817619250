"""The fused norm ops as PyTorch composes them: add, then the norm."""
import torch.nn.functional as F


def add_layer_norm_reference(x, residual, normalized_shape, weight=None, bias=None, eps=1e-5):
    s = x + residual
    return s, F.layer_norm(s, normalized_shape, weight, bias, eps)


def add_rms_norm_reference(x, residual, normalized_shape, weight=None, eps=None):
    s = x + residual
    return s, F.rms_norm(s, normalized_shape, weight, eps)
