"""Pooling family: max_pool2d (with PyTorch's indices), avg_pool2d, adaptive_avg_pool2d. Fake kernels (mirroring
the C++ shape and layout rules in csrc/pool/pool_ops.h), autograd (backward = torch_dnn ops), and functional
wrappers mirroring torch.nn.functional. No autocast: PyTorch runs pooling in the input's dtype."""
import torch
from torch._prims_common import suggest_memory_format

from torch_dnn.ops._registry import add_family

_ops = torch.ops.torch_dnn


# ---- shapes and layout: mirror output_size / as_4d / empty_out in csrc/pool/pool_ops.h ----

def _out_size(size, k, pad, stride, dil, ceil_mode):
    num = size + 2 * pad - dil * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = num // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _empty_out(x, oh, ow, dtype=None):
    """The output as the op makes it: channels_last when the 4-D input suggests it, 3-D inputs contiguous."""
    dtype = dtype or x.dtype
    if x.dim() == 3:
        return x.new_empty((x.shape[0], oh, ow), dtype=dtype)
    x4 = x.contiguous(memory_format=suggest_memory_format(x))
    return torch.empty((x.shape[0], x.shape[1], oh, ow), dtype=dtype, device=x.device,
                       memory_format=suggest_memory_format(x4))


def _empty_input_like(x):
    if x.dim() == 3:
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    return torch.empty_like(x.contiguous(memory_format=suggest_memory_format(x)))


def _window_out(x, k, s, p, d, ceil_mode):
    return (_out_size(x.shape[-2], k[0], p[0], s[0], d[0], ceil_mode),
            _out_size(x.shape[-1], k[1], p[1], s[1], d[1], ceil_mode))


@torch.library.register_fake("torch_dnn::max_pool2d")
def _max_pool2d_fake(x, kernel_size, stride, padding, dilation, ceil_mode):
    oh, ow = _window_out(x, kernel_size, stride, padding, dilation, ceil_mode)
    return _empty_out(x, oh, ow), _empty_out(x, oh, ow, torch.int64)


@torch.library.register_fake("torch_dnn::max_pool2d_backward")
def _max_pool2d_backward_fake(grad, x, indices, kernel_size, stride, padding, dilation, ceil_mode):
    return _empty_input_like(x)


@torch.library.register_fake("torch_dnn::avg_pool2d")
def _avg_pool2d_fake(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    oh, ow = _window_out(x, kernel_size, stride, padding, (1, 1), ceil_mode)
    return _empty_out(x, oh, ow)


@torch.library.register_fake("torch_dnn::avg_pool2d_backward")
def _avg_pool2d_backward_fake(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _empty_input_like(x)


@torch.library.register_fake("torch_dnn::adaptive_avg_pool2d")
def _adaptive_avg_pool2d_fake(x, output_size):
    return _empty_out(x, output_size[0], output_size[1])


@torch.library.register_fake("torch_dnn::adaptive_avg_pool2d_backward")
def _adaptive_avg_pool2d_backward_fake(grad, x):
    return _empty_input_like(x)


# ---- autograd: every backward is itself a torch_dnn op ----

def _max_setup(ctx, inputs, output):
    x, *params = inputs
    ctx.save_for_backward(x, output[1])
    ctx.params = params


def _max_backward(ctx, grad, _grad_indices):
    x, indices = ctx.saved_tensors
    return (_ops.max_pool2d_backward(grad, x, indices, *ctx.params),) + (None,) * len(ctx.params)


def _avg_setup(ctx, inputs, output):
    x, *params = inputs
    ctx.save_for_backward(x)
    ctx.params = params


def _avg_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return (_ops.avg_pool2d_backward(grad, x, *ctx.params),) + (None,) * len(ctx.params)


def _adaptive_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _adaptive_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return _ops.adaptive_avg_pool2d_backward(grad, x), None


torch.library.register_autograd("torch_dnn::max_pool2d", _max_backward, setup_context=_max_setup)
torch.library.register_autograd("torch_dnn::avg_pool2d", _avg_backward, setup_context=_avg_setup)
torch.library.register_autograd("torch_dnn::adaptive_avg_pool2d", _adaptive_backward, setup_context=_adaptive_setup)

add_family("pool", ["max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward",
                    "adaptive_avg_pool2d", "adaptive_avg_pool2d_backward"])


# ---- functional wrappers (torch.nn.functional signatures) ----

def _pair(v, name):
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2:
        raise ValueError(f"torch_dnn: expected {name} to be an int or a pair of ints, but got {v}")
    return v


def _stride(stride, kernel):
    if stride is None or (not isinstance(stride, int) and len(stride) == 0):
        return kernel
    return _pair(stride, "stride")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    k = _pair(kernel_size, "kernel_size")
    out, indices = _ops.max_pool2d(input, k, _stride(stride, k), _pair(padding, "padding"),
                                   _pair(dilation, "dilation"), ceil_mode)
    return (out, indices) if return_indices else out


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    k = _pair(kernel_size, "kernel_size")
    return _ops.avg_pool2d(input, k, _stride(stride, k), _pair(padding, "padding"), ceil_mode, count_include_pad,
                           divisor_override)


def adaptive_avg_pool2d(input, output_size):
    size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    if len(size) == 1:
        size = (size[0], size[0])
    # None keeps the input's size, as in torch.nn.functional
    size = tuple(input.shape[-2 + i] if v is None else v for i, v in enumerate(size))
    return _ops.adaptive_avg_pool2d(input, size)


FUNCTIONAL = ["max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d"]
