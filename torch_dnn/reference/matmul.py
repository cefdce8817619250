"""linear_act as PyTorch composes it: F.linear, then the activation, then the residual add."""
import torch.nn.functional as F

from torch_dnn.reference.activation import BIAS_ACT_TORCH


def _act(z, activation, act_a=None, act_b=None):
    if activation == "leaky_relu" and act_a is not None:
        return F.leaky_relu(z, act_a)
    if activation == "elu" and act_a is not None:
        return F.elu(z, act_a)
    if activation == "softplus" and (act_a is not None or act_b is not None):
        return F.softplus(z, 1.0 if act_a is None else act_a, 20.0 if act_b is None else act_b)
    return BIAS_ACT_TORCH["none" if activation == "identity" else activation](z)


def linear_act_reference(x, weight, bias=None, activation="relu", residual=None, act_a=None, act_b=None):
    y = _act(F.linear(x, weight, bias), activation, act_a, act_b)
    return y if residual is None else y + residual
