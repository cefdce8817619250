"""bias_act as PyTorch composes it: broadcast add, then the activation."""
import torch
import torch.nn.functional as F

# act name -> the torch.nn.functional call it stands for
BIAS_ACT_TORCH = {
    "none": lambda z: z,
    "relu": F.relu,
    "relu6": F.relu6,
    "leaky_relu": F.leaky_relu,
    "elu": F.elu,
    "gelu": F.gelu,
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "softplus": F.softplus,
    "mish": F.mish,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
}


def hardsigmoid_reference(x: torch.Tensor) -> torch.Tensor:
    """hardsigmoid with its exact derivative (1/6 on (-3, 3), 0 elsewhere, NaN propagated), as ATen ops: a float64
    reference where PyTorch's own op is not one. Its CPU gradient multiplies by 1/6 rounded to float32 in every
    dtype, 3e-8 off in float64 (tests/test_float64.py)."""
    return torch.where(x <= -3, 0.0, torch.where(x >= 3, 1.0, (x + 3) / 6))


def hardswish_reference(x: torch.Tensor) -> torch.Tensor:
    """hardswish as exact ATen ops (x (x + 3) / 6 on (-3, 3), 0 below, x above; derivative x / 3 + 1/2 inside): a
    float64 reference where PyTorch's own op is not one. Its CUDA forward multiplies by 1/6 rounded to float32 in
    every dtype, 3e-8 off in float64 (seen on the H100, torch 2.11)."""
    return torch.where(x <= -3, 0.0, torch.where(x >= 3, x, x * (x + 3) / 6))


def bias_act_reference(x: torch.Tensor, bias, dim: int = 1, act: str = "relu") -> torch.Tensor:
    if bias is not None:
        dim = dim % x.dim()
        shape = [1] * x.dim()
        shape[dim] = -1
        x = x + bias.view(shape)
    return BIAS_ACT_TORCH[act](x)
