"""Drop-in softmax modules."""
import torch

from torch_dnn import functional as F
from torch_dnn.convert import register_swap

__all__ = ["Softmax", "LogSoftmax"]


@register_swap(torch.nn.Softmax)
class Softmax(torch.nn.Softmax):
    def forward(self, input):
        return F.softmax(input, self.dim, _stacklevel=5)


@register_swap(torch.nn.LogSoftmax)
class LogSoftmax(torch.nn.LogSoftmax):
    def forward(self, input):
        return F.log_softmax(input, self.dim, _stacklevel=5)
