"""Drop-in GroupNorm and InstanceNorm1d/2d/3d (affine and track_running_stats as PyTorch's: the running
statistics are updated in place in training mode and used in eval mode)."""
import torch

from torch_dnn import functional as F
from torch_dnn.convert import register_swap

__all__ = ["GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]


@register_swap(torch.nn.GroupNorm)
class GroupNorm(torch.nn.GroupNorm):
    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)


def _apply_instance_norm(self, input):
    return F.instance_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                           self.training or not self.track_running_stats,
                           self.momentum if self.momentum is not None else 0.0, self.eps)


@register_swap(torch.nn.InstanceNorm1d)
class InstanceNorm1d(torch.nn.InstanceNorm1d):
    _apply_instance_norm = _apply_instance_norm


@register_swap(torch.nn.InstanceNorm2d)
class InstanceNorm2d(torch.nn.InstanceNorm2d):
    _apply_instance_norm = _apply_instance_norm


@register_swap(torch.nn.InstanceNorm3d)
class InstanceNorm3d(torch.nn.InstanceNorm3d):
    _apply_instance_norm = _apply_instance_norm
