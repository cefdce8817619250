"""Drop-in norm modules, and the fused pre-norm residual steps (torch_dnn's own)."""
import torch

from torch_dnn import functional as F
from torch_dnn.convert import register_swap

__all__ = ["LayerNorm", "RMSNorm", "AddLayerNorm", "AddRMSNorm"]


@register_swap(torch.nn.LayerNorm)
class LayerNorm(torch.nn.LayerNorm):
    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


@register_swap(torch.nn.RMSNorm)
class RMSNorm(torch.nn.RMSNorm):
    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class AddLayerNorm(torch.nn.LayerNorm):
    """forward(x, residual) -> (x + residual, layer_norm(x + residual)) in one pass: the residual step of a
    pre-norm transformer block. Parameters and state_dict keys are nn.LayerNorm's, so weights load from one.
    torch_dnn.convert does not swap to it (a model's add and norm are separate modules, or none): use it
    explicitly."""

    def forward(self, x, residual):
        return F.add_layer_norm(x, residual, self.normalized_shape, self.weight, self.bias, self.eps)


class AddRMSNorm(torch.nn.RMSNorm):
    """forward(x, residual) -> (x + residual, rms_norm(x + residual)) in one pass: the residual step of a
    pre-norm transformer block. Parameters and state_dict keys are nn.RMSNorm's, so weights load from one.
    torch_dnn.convert does not swap to it (a model's add and norm are separate modules, or none): use it
    explicitly."""

    def forward(self, x, residual):
        return F.add_rms_norm(x, residual, self.normalized_shape, self.weight, self.eps)
