"""Drop-in pooling modules, ranks 1 to 3 (LPPool3d where the installed torch has it)."""
import torch

from torch_dnn import functional as F
from torch_dnn.convert import register_swap

__all__ = [f"{kind}{r}d" for kind in ("MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool") for r in (1, 2, 3)]
__all__ += ["LPPool1d", "LPPool2d"] + (["LPPool3d"] if hasattr(torch.nn, "LPPool3d") else [])  # torch >= 2.2


@register_swap(torch.nn.MaxPool1d)
class MaxPool1d(torch.nn.MaxPool1d):
    def forward(self, input):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


@register_swap(torch.nn.MaxPool2d)
class MaxPool2d(torch.nn.MaxPool2d):
    def forward(self, input):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


@register_swap(torch.nn.MaxPool3d)
class MaxPool3d(torch.nn.MaxPool3d):
    def forward(self, input):
        return F.max_pool3d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


@register_swap(torch.nn.AvgPool1d)
class AvgPool1d(torch.nn.AvgPool1d):
    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)


@register_swap(torch.nn.AvgPool2d)
class AvgPool2d(torch.nn.AvgPool2d):
    def forward(self, input):
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


@register_swap(torch.nn.AvgPool3d)
class AvgPool3d(torch.nn.AvgPool3d):
    def forward(self, input):
        return F.avg_pool3d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


@register_swap(torch.nn.AdaptiveAvgPool1d)
class AdaptiveAvgPool1d(torch.nn.AdaptiveAvgPool1d):
    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)


@register_swap(torch.nn.AdaptiveAvgPool2d)
class AdaptiveAvgPool2d(torch.nn.AdaptiveAvgPool2d):
    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)


@register_swap(torch.nn.AdaptiveAvgPool3d)
class AdaptiveAvgPool3d(torch.nn.AdaptiveAvgPool3d):
    def forward(self, input):
        return F.adaptive_avg_pool3d(input, self.output_size)


@register_swap(torch.nn.AdaptiveMaxPool1d)
class AdaptiveMaxPool1d(torch.nn.AdaptiveMaxPool1d):
    def forward(self, input):
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


@register_swap(torch.nn.AdaptiveMaxPool2d)
class AdaptiveMaxPool2d(torch.nn.AdaptiveMaxPool2d):
    def forward(self, input):
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)


@register_swap(torch.nn.AdaptiveMaxPool3d)
class AdaptiveMaxPool3d(torch.nn.AdaptiveMaxPool3d):
    def forward(self, input):
        return F.adaptive_max_pool3d(input, self.output_size, self.return_indices)


@register_swap(torch.nn.LPPool1d)
class LPPool1d(torch.nn.LPPool1d):
    def forward(self, input):
        return F.lp_pool1d(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)


@register_swap(torch.nn.LPPool2d)
class LPPool2d(torch.nn.LPPool2d):
    def forward(self, input):
        return F.lp_pool2d(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)


if hasattr(torch.nn, "LPPool3d"):
    @register_swap(torch.nn.LPPool3d)
    class LPPool3d(torch.nn.LPPool3d):
        def forward(self, input):
            return F.lp_pool3d(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)
