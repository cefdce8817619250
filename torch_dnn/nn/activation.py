"""Drop-in activation modules."""
import torch

from torch_dnn import functional as F
from torch_dnn.convert import register_swap

__all__ = ["ReLU", "ReLU6", "Hardtanh", "LeakyReLU", "ELU", "GELU", "SiLU", "Sigmoid", "Tanh", "Softplus", "Mish",
           "Hardswish", "Hardsigmoid", "BiasAct"]


@register_swap(torch.nn.ReLU)
class ReLU(torch.nn.ReLU):
    def forward(self, input):
        return F.relu(input, inplace=self.inplace)


@register_swap(torch.nn.ReLU6)
class ReLU6(torch.nn.ReLU6):
    def forward(self, input):
        return F.relu6(input, inplace=self.inplace)


@register_swap(torch.nn.Hardtanh)
class Hardtanh(torch.nn.Hardtanh):
    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)


@register_swap(torch.nn.LeakyReLU)
class LeakyReLU(torch.nn.LeakyReLU):
    def forward(self, input):
        return F.leaky_relu(input, self.negative_slope, self.inplace)


@register_swap(torch.nn.ELU)
class ELU(torch.nn.ELU):
    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)


@register_swap(torch.nn.GELU)
class GELU(torch.nn.GELU):
    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)


@register_swap(torch.nn.SiLU)
class SiLU(torch.nn.SiLU):
    def forward(self, input):
        return F.silu(input, inplace=self.inplace)


@register_swap(torch.nn.Sigmoid)
class Sigmoid(torch.nn.Sigmoid):
    def forward(self, input):
        return F.sigmoid(input)


@register_swap(torch.nn.Tanh)
class Tanh(torch.nn.Tanh):
    def forward(self, input):
        return F.tanh(input)


@register_swap(torch.nn.Softplus)
class Softplus(torch.nn.Softplus):
    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)


@register_swap(torch.nn.Mish)
class Mish(torch.nn.Mish):
    def forward(self, input):
        return F.mish(input, inplace=self.inplace)


@register_swap(torch.nn.Hardswish)
class Hardswish(torch.nn.Hardswish):
    def forward(self, input):
        return F.hardswish(input, inplace=self.inplace)


@register_swap(torch.nn.Hardsigmoid)
class Hardsigmoid(torch.nn.Hardsigmoid):
    def forward(self, input):
        return F.hardsigmoid(input, inplace=self.inplace)


class BiasAct(torch.nn.Module):
    """act(input + bias) with a learnable bias of `num_features` along `dim` (torch_dnn's own module)."""

    def __init__(self, num_features: int, act: str = "relu", dim: int = 1, device=None, dtype=None):
        super().__init__()
        self.num_features, self.act, self.dim = num_features, act, dim
        self.bias = torch.nn.Parameter(torch.zeros(num_features, device=device, dtype=dtype))

    def forward(self, input):
        return F.bias_act(input, self.bias, self.dim, self.act)

    def extra_repr(self):
        return f"{self.num_features}, act={self.act!r}, dim={self.dim}"
