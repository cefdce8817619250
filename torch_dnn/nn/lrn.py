"""Drop-in LocalResponseNorm."""
import torch

from torch_dnn import functional as F
from torch_dnn.convert import register_swap

__all__ = ["LocalResponseNorm"]


@register_swap(torch.nn.LocalResponseNorm)
class LocalResponseNorm(torch.nn.LocalResponseNorm):
    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)
