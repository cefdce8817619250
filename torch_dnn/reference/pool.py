"""PyTorch's pooling as the reference, minus a known PyTorch bug.

PyTorch's CUDA avg_pool2d backward for channels_last inputs with padding > 0 returns wrong input gradients
(pytorch/pytorch#188344, fixed by #188345 in mid-2026; the device's torch 2.11 still has it): its NHWC kernel
drops the padding offset when it maps an input pixel to the windows covering it. The reference therefore runs
channels_last CUDA inputs through the NCHW kernels, which are right, and returns the result in channels_last.
"""
import torch
import torch.nn.functional as F


def avg_pool2d_reference(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                         divisor_override=None):
    cl = x.is_cuda and x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    y = F.avg_pool2d(x.contiguous() if cl else x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)
    return y.contiguous(memory_format=torch.channels_last) if cl else y
