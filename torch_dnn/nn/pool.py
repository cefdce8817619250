"""Drop-in pooling modules."""
import torch

from torch_dnn import functional as F
from torch_dnn.convert import register_swap


@register_swap(torch.nn.MaxPool2d)
class MaxPool2d(torch.nn.MaxPool2d):
    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


@register_swap(torch.nn.AvgPool2d)
class AvgPool2d(torch.nn.AvgPool2d):
    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


@register_swap(torch.nn.AdaptiveAvgPool2d)
class AdaptiveAvgPool2d(torch.nn.AdaptiveAvgPool2d):
    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)
