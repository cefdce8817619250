"""PyTorch's pooling as the reference, minus a known PyTorch bug.

PyTorch's CUDA avg_pool2d backward for channels_last inputs with padding > 0 returns wrong input gradients
(pytorch/pytorch#188344, fixed by #188345 in mid-2026; the device's torch 2.11 still has it): its NHWC kernel
drops the padding offset when it maps an input pixel to the windows covering it. avg_pool1d runs through
avg_pool2d, so an (N, L, C)-strided 1-D input meets the same kernel. PyTorch's 3-D avg_pool CUDA kernels
compute on a contiguous copy (no channels_last_3d kernel in its source), so they should be free of it; the
reference routes every non-contiguous CUDA input through the contiguous kernels all the same, so that it does
not depend on that, and returns its results in the layout PyTorch's own op gives them.

PyTorch's CPU avg_pool3d (and so lp_pool3d) has no float16 / bfloat16 kernel: there the reference computes it in
float32 and rounds the result once, as PyTorch's 2-D kernels (float accumulation) do in those dtypes; lp_pool3d
runs PyTorch's own formula around that avg_pool3d.
"""
import torch
import torch.nn.functional as F


def _as_on_cuda(y, fn, x, *args, **kwargs):
    """y, computed for the CUDA input x some other way (on a contiguous copy, or on the CPU), laid out as PyTorch's
    CUDA op lays out its result for x itself: channels-last for a channels-last batch of max_pool1d/2d/3d and
    avg_pool1d/2d (also without gradient: PyTorch's CPU-only max_pool1d kernel returns contiguous), contiguous for
    avg_pool3d. Those are the strides of its meta kernels: the structured max_pool2d_with_indices / avg_pool2d meta
    functions allocate the CUDA results (the 1-D ops run through them), and max_pool3d's CUDA kernel keeps
    channels_last_3d for a batch as its meta function does."""
    like = fn(x.detach().to("meta"), *args, **kwargs)
    if isinstance(y, tuple):
        return tuple(_restrided(t, m) for t, m in zip(y, like))
    return _restrided(y, like)


def _restrided(t, like):
    if t.stride() == like.stride():
        return t
    return torch.empty_strided(like.shape, like.stride(), dtype=t.dtype, device=t.device).copy_(t)


def _on_cpu(fn, x, *args, **kwargs):
    y = fn(x.cpu(), *args, **kwargs)
    y = tuple(t.to(x.device) for t in y) if isinstance(y, tuple) else y.to(x.device)
    return _as_on_cuda(y, fn, x, *args, **kwargs)


def _through_contiguous(fn, x, *args, rank=None, **kwargs):
    if x.is_cuda and rank is not None and x.dim() > rank and x.size(x.dim() - rank - 1) == 1:
        # one channel: a contiguous tensor's strides then read as channels_last as well, PyTorch takes its NHWC
        # kernel (and its bug) anyway; the CPU kernel is the reference there
        return _on_cpu(fn, x, *args, **kwargs)
    if not (x.is_cuda and not x.is_contiguous()):
        return fn(x, *args, **kwargs)
    return _as_on_cuda(fn(x.contiguous(), *args, **kwargs), fn, x, *args, **kwargs)


# PyTorch's CUDA max_pool NHWC kernel writes float64 values to a misaligned shared-memory address (on the H100
# with torch 2.11, compute-sanitizer: "Invalid __shared__ write of size 8" in max_pool_forward_nhwc<double, int>,
# a sticky error that ends the process's CUDA context). PyTorch picks that kernel for contiguous inputs too when
# their strides also read as channels_last (C == 1, 1-D pooling's unsqueezed dim), so float64 CUDA max pooling's
# reference runs on the CPU; the other dtypes go through the contiguous kernels, as avg pooling's.
def _max_pool(fn, x, *args, **kwargs):
    if x.is_cuda and x.dtype == torch.float64:
        return _on_cpu(fn, x, *args, **kwargs)
    return _through_contiguous(fn, x, *args, **kwargs)


def max_pool1d_reference(x, *args, **kwargs):
    return _max_pool(F.max_pool1d, x, *args, **kwargs)


def max_pool2d_reference(x, *args, **kwargs):
    return _max_pool(F.max_pool2d, x, *args, **kwargs)


def max_pool3d_reference(x, *args, **kwargs):
    return _max_pool(F.max_pool3d, x, *args, **kwargs)


def avg_pool1d_reference(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _through_contiguous(F.avg_pool1d, x, kernel_size, stride, padding, ceil_mode, count_include_pad, rank=1)


def avg_pool2d_reference(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                         divisor_override=None):
    return _through_contiguous(F.avg_pool2d, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                               divisor_override, rank=2)


def _in_float32_on_cpu(fn, x, *args):
    if x.is_cuda or x.dtype not in (torch.float16, torch.bfloat16):
        return fn(x, *args)
    return fn(x.float(), *args).to(x.dtype)


def avg_pool3d_reference(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                         divisor_override=None):
    return _in_float32_on_cpu(lambda x, *a: _through_contiguous(F.avg_pool3d, x, *a), x, kernel_size, stride, padding,
                              ceil_mode, count_include_pad, divisor_override)


def lp_pool3d_reference(x, norm_type, kernel_size, stride=None, ceil_mode=False):
    """F.lp_pool3d, its avg_pool3d through avg_pool3d_reference where PyTorch has no kernel (its formula)."""
    if x.is_cuda or x.dtype not in (torch.float16, torch.bfloat16):
        return F.lp_pool3d(x, norm_type, kernel_size, stride, ceil_mode)
    k = (kernel_size,) * 3 if isinstance(kernel_size, int) else tuple(kernel_size)
    out = avg_pool3d_reference(x.pow(norm_type), k, stride, 0, ceil_mode)
    return (torch.sign(out) * torch.relu(torch.abs(out))).mul(k[0] * k[1] * k[2]).pow(1.0 / norm_type)
