"""Drop-in BatchNorm1d/2d/3d and SyncBatchNorm, and BatchNormAddAct (torch_dnn's own: act(bn(x) + residual))."""
import torch

from torch_dnn import functional as F
from torch_dnn.convert import register_swap
from torch_dnn.ops import batch_norm as _ops_bn

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "BatchNormAddAct"]


def _factor_and_mode(m):
    # torch.nn.modules.batchnorm._BatchNorm.forward's logic, unchanged
    eaf = 0.0 if m.momentum is None else m.momentum
    if m.training and m.track_running_stats and m.num_batches_tracked is not None:
        m.num_batches_tracked.add_(1)
        eaf = 1.0 / float(m.num_batches_tracked) if m.momentum is None else m.momentum
    bn_training = True if m.training else (m.running_mean is None) and (m.running_var is None)
    use_stats = not m.training or m.track_running_stats
    return eaf, bn_training, (m.running_mean if use_stats else None), (m.running_var if use_stats else None)


class _BNMixin:
    def forward(self, input):
        self._check_input_dim(input)
        eaf, bn_training, rm, rv = _factor_and_mode(self)
        return F.batch_norm(input, rm, rv, self.weight, self.bias, bn_training, eaf, self.eps)


@register_swap(torch.nn.BatchNorm1d)
class BatchNorm1d(_BNMixin, torch.nn.BatchNorm1d):
    pass


@register_swap(torch.nn.BatchNorm2d)
class BatchNorm2d(_BNMixin, torch.nn.BatchNorm2d):
    pass


@register_swap(torch.nn.BatchNorm3d)
class BatchNorm3d(_BNMixin, torch.nn.BatchNorm3d):
    pass


class BatchNormAddAct(torch.nn.BatchNorm2d):
    """forward(x, residual=None) -> act(batch_norm(x) + residual) in one op: the end of a ResNet block.
    Parameters, buffers and state_dict keys are nn.BatchNorm2d's. torch_dnn.convert does not fuse into it."""

    def __init__(self, num_features, act="relu", **kwargs):
        super().__init__(num_features, **kwargs)
        self.act = act

    def forward(self, x, residual=None):
        self._check_input_dim(x)
        eaf, bn_training, rm, rv = _factor_and_mode(self)
        return F.batch_norm_add_act(x, rm, rv, self.weight, self.bias, residual, self.act, bn_training, eaf, self.eps)


@register_swap(torch.nn.SyncBatchNorm)
class SyncBatchNorm(torch.nn.SyncBatchNorm):
    """Drop-in torch.nn.SyncBatchNorm (same constructor, parameters, buffers, state_dict keys, process_group).
    In training with more than one process (torch.distributed initialised), the local statistics come from
    torch_dnn's kernels and are merged across the process group through torch.distributed (NCCL on GPUs, gloo
    on CPU: unlike torch.nn.SyncBatchNorm, CPU tensors are accepted); otherwise torch_dnn's batch_norm."""

    def forward(self, input):
        self._check_input_dim(input)
        self._check_non_zero_input_channels(input)
        eaf, bn_training, rm, rv = _factor_and_mode(self)
        need_sync = (bn_training and self.training and torch.distributed.is_available()
                     and torch.distributed.is_initialized())
        if need_sync:
            process_group = self.process_group or torch.distributed.group.WORLD
            world_size = torch.distributed.get_world_size(process_group)
            need_sync = world_size > 1
        if not need_sync:
            return F.batch_norm(input, rm, rv, self.weight, self.bias, bn_training, eaf, self.eps)
        return _ops_bn.sync_batch_norm(input, rm, rv, self.weight, self.bias, eaf, self.eps, process_group,
                                       world_size)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """torch.nn.SyncBatchNorm.convert_sync_batchnorm, producing torch_dnn.nn.SyncBatchNorm layers."""
        out = torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
        for m in out.modules():
            if type(m) is torch.nn.SyncBatchNorm:
                m.__class__ = cls
        return out
