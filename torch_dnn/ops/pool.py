"""Pooling family, ranks 1 to 3: max_pool (with PyTorch's indices), avg_pool, adaptive_avg_pool,
adaptive_max_pool, lp_pool. Fake kernels (mirroring the C++ shape and layout rules in csrc/pool/pool_ops.h),
autograd (backward = torch_dnn ops), and functional wrappers mirroring torch.nn.functional. Each op exists per
rank (max_pool1d, max_pool2d, max_pool3d, ...); the registrations below are made once for every rank. No
autocast: PyTorch runs pooling in the input's dtype."""
import math

import torch
from torch._prims_common import suggest_memory_format

from torch_dnn.ops._layout import contiguous_empty, iter_empty
from torch_dnn.ops._registry import add_family, needs_autograd, ops, register_single_input_formula
from torch_dnn.ops import _checks

_ops = ops  # torch.ops.torch_dnn, below autograd when no gradient is needed
RANKS = (1, 2, 3)
KINDS = ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "lp_pool")


def _op(kind, r, backward=False):
    return _OPS[kind, r, backward]


# ---- shapes and layout: mirror output_size / wants_channels_last / empty_in_layout in csrc/pool/pool_ops.h (the
# output size is _checks.pool_output_size, which the fake kernels' checks use too) ----

def _channels_last(x, r, keeps_layout=True):
    """Whether a rank-r op computes (and returns) channels-last: a batched input suggesting it, as PyTorch, where
    PyTorch's op keeps the input's layout (keeps_layout: prepare_input in csrc/pool/pool_ops.h)."""
    if x.dim() != r + 2 or not keeps_layout:
        return False
    if r == 1:
        return suggest_memory_format(x.unsqueeze(-2)) == torch.channels_last
    return suggest_memory_format(x) == (torch.channels_last if r == 2 else torch.channels_last_3d)


def _empty(x, r, spatial, dtype=None, keeps_layout=True):
    """A tensor of x's leading sizes and `spatial` sizes, laid out as the op lays out its results."""
    sizes = tuple(x.shape[:-r]) + tuple(spatial)
    dtype = dtype or x.dtype
    if not _channels_last(x, r, keeps_layout):
        return x.new_empty(sizes, dtype=dtype)
    if r == 1:
        return x.new_empty((sizes[0], sizes[2], sizes[1]), dtype=dtype).transpose(1, 2)
    fmt = torch.channels_last if r == 2 else torch.channels_last_3d
    return torch.empty(sizes, dtype=dtype, device=x.device, memory_format=fmt)


def _window_out(x, r, k, s, p, d, ceil_mode):
    return [_checks.pool_output_size(x.shape[-r + i], k[i], p[i], s[i], d[i], ceil_mode) for i in range(r)]


def _checked(check, r, fake):
    """The fake kernel `fake` of a rank-r op after `check`, the real kernel's argument checks (ops/_checks.py)."""
    def run(*args):
        check(r, *args)
        return fake(*args)
    return run


def _register_fakes(r):
    keeps = r != 3  # PyTorch's avg_pool3d, adaptive pools 3d (and lp_pool3d) return contiguous results

    def max_pool(x, kernel_size, stride, padding, dilation, ceil_mode):
        out = _window_out(x, r, kernel_size, stride, padding, dilation, ceil_mode)
        return _empty(x, r, out), _empty(x, r, out, torch.int64)

    def avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
        out = _window_out(x, r, kernel_size, stride, padding, (1,) * r, ceil_mode)
        return _empty(x, r, out, keeps_layout=keeps)

    def adaptive_avg_pool(x, output_size):
        return _empty(x, r, output_size, keeps_layout=keeps)

    def adaptive_max_pool(x, output_size):
        return (_empty(x, r, output_size, keeps_layout=keeps),
                _empty(x, r, output_size, torch.int64, keeps_layout=keeps))

    def lp_pool(x, norm_type, kernel_size, stride, ceil_mode):
        out = _window_out(x, r, kernel_size, stride, (0,) * r, (1,) * r, ceil_mode)
        return _empty(x, r, out, keeps_layout=keeps)

    def backward(grad, x, *args):
        return _empty(x, r, x.shape[-r:])

    def backward_contiguous_3d(grad, x, *args):
        return _empty(x, r, x.shape[-r:], keeps_layout=keeps)

    def adaptive_avg_backward(grad, x):
        # PyTorch computes a global average as a mean: its gradient is contiguous where x suggests channels-last,
        # else elementwise over grad expanded to the input (adaptive_avg_pool_backward in csrc/pool/pool_ops.h)
        if all(s == 1 for s in grad.shape[-r:]):
            return contiguous_empty(x) if _channels_last(x, r) else iter_empty(grad.expand(x.shape))
        return _empty(x, r, x.shape[-r:], keeps_layout=keeps)

    for kind, fn, bwd in (("max_pool", max_pool, backward), ("avg_pool", avg_pool, backward_contiguous_3d),
                          ("adaptive_avg_pool", adaptive_avg_pool, adaptive_avg_backward),
                          ("adaptive_max_pool", adaptive_max_pool, backward_contiguous_3d),
                          ("lp_pool", lp_pool, backward_contiguous_3d)):
        torch.library.register_fake(f"torch_dnn::{kind}{r}d")(_checked(getattr(_checks, kind), r, fn))
        torch.library.register_fake(f"torch_dnn::{kind}{r}d_backward")(
            _checked(getattr(_checks, f"{kind}_backward"), r, bwd))


# ---- autograd: every backward is itself a torch_dnn op; the formulas torch.func runs come from the C++ kernels'
# specs (csrc/pool/pool.cpp) ----

for _r in RANKS:
    _register_fakes(_r)
    for _kind in KINDS:
        register_single_input_formula(f"{_kind}{_r}d")

add_family("pool", [f"{kind}{r}d{b}" for kind in KINDS for r in RANKS for b in ("", "_backward")])
# each op looked up once (a name built and looked up on every call is host time)
_OPS = {(kind, r, b): getattr(_ops, f"{kind}{r}d{'_backward' if b else ''}")
        for kind in KINDS for r in RANKS for b in (False, True)}


# ---- functional wrappers (torch.nn.functional signatures) ----

def _tuple(v, r, name):
    """An int or a sequence of 1 or r ints, as a tuple of r ints."""
    if isinstance(v, int):
        return (v,) * r
    v = tuple(v)
    if len(v) == 1:
        return v * r
    if len(v) != r:
        raise ValueError(f"torch_dnn: expected {name} to be an int or {r} ints, but got {v}")
    return v


def _stride(stride, kernel, r):
    if stride is None or (not isinstance(stride, int) and len(stride) == 0):
        return kernel
    return _tuple(stride, r, "stride")


def _output_size(input, output_size, r):
    size = _tuple(output_size, r, "output_size") if output_size is not None else (None,) * r
    # None keeps the input's size, as in torch.nn.functional
    return tuple(input.shape[-r + i] if v is None else v for i, v in enumerate(size))


def _max_pool(r, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    # every value an int (not a bool) or None: the common call, whose ints the ops' int[r] arguments take as r of
    # each (no tuples built, no helper frame: host time)
    if (type(kernel_size) is int and (stride is None or type(stride) is int)
            and (padding is None or type(padding) is int) and (dilation is None or type(dilation) is int)):
        out, indices = _OPS["max_pool", r, False](input, kernel_size, kernel_size if stride is None else stride,
                                                  padding, dilation, ceil_mode)
    else:
        k = _tuple(kernel_size, r, "kernel_size")
        out, indices = _op("max_pool", r)(input, k, _stride(stride, k, r), _tuple(padding, r, "padding"),
                                          _tuple(dilation, r, "dilation"), ceil_mode)
    if return_indices:
        return out, indices
    if r == 1 and input.device.type == "cpu" and not needs_autograd(input):
        # PyTorch's CPU max_pool1d without indices or gradient runs its own kernel, whose result is contiguous
        out = out.contiguous()
    return out


def _avg_pool(r, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    if (type(kernel_size) is int and (stride is None or type(stride) is int)
            and (padding is None or type(padding) is int)):  # as _max_pool's
        return _OPS["avg_pool", r, False](input, kernel_size, kernel_size if stride is None else stride, padding,
                                          ceil_mode, count_include_pad, divisor_override)
    k = _tuple(kernel_size, r, "kernel_size")
    return _op("avg_pool", r)(input, k, _stride(stride, k, r), _tuple(padding, r, "padding"), ceil_mode,
                              count_include_pad, divisor_override)


def _adaptive_max_pool(r, input, output_size, return_indices):
    out, indices = _op("adaptive_max_pool", r)(input, _output_size(input, output_size, r))
    return (out, indices) if return_indices else out


def _lp_pool(r, input, norm_type, kernel_size, stride, ceil_mode):
    if norm_type == 0:
        raise ValueError(f"torch_dnn.lp_pool{r}d: norm_type must be a non-zero value, but got {norm_type}")
    if math.isinf(norm_type):
        # the limit, as torch.nn.functional (2.14) computes it: the max (or min) of |x| over each window
        out = _max_pool(r, input.abs() if norm_type > 0 else -input.abs(), kernel_size, stride, 0, 1, ceil_mode, False)
        return out if norm_type > 0 else -out
    k = _tuple(kernel_size, r, "kernel_size")
    return _op("lp_pool", r)(input, float(norm_type), k, _stride(stride, k, r), ceil_mode)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def adaptive_avg_pool1d(input, output_size):
    return _op("adaptive_avg_pool", 1)(input, _output_size(input, output_size, 1))


def adaptive_avg_pool2d(input, output_size):
    return _op("adaptive_avg_pool", 2)(input, _output_size(input, output_size, 2))


def adaptive_avg_pool3d(input, output_size):
    return _op("adaptive_avg_pool", 3)(input, _output_size(input, output_size, 3))


def adaptive_max_pool1d(input, output_size, return_indices=False):
    return _adaptive_max_pool(1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    return _adaptive_max_pool(2, input, output_size, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    return _adaptive_max_pool(3, input, output_size, return_indices)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=True):
    return _adaptive_max_pool(1, input, output_size, True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=True):
    return _adaptive_max_pool(2, input, output_size, True)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=True):
    return _adaptive_max_pool(3, input, output_size, True)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(3, input, norm_type, kernel_size, stride, ceil_mode)


FUNCTIONAL = [f"{kind}{r}d" for kind in KINDS for r in RANKS] + [
    f"{kind}{r}d_with_indices" for kind in ("max_pool", "adaptive_max_pool") for r in RANKS]


def selfcheck_cases():
    """python -m torch_dnn's rows of this family: (op, callable(device, dtype) -> list of Verdicts)."""
    import torch.nn.functional as TF

    from torch_dnn.reference.pool import avg_pool1d_reference, avg_pool2d_reference, avg_pool3d_reference
    from torch_dnn.testing import check_against_torch, random_like_case

    pools = {
        "max_pool2d 3x3/2 pad 1": (2, lambda x: max_pool2d(x, 3, 2, 1), lambda x: TF.max_pool2d(x, 3, 2, 1)),
        "avg_pool2d 3x3/2 pad 1": (2, lambda x: avg_pool2d(x, 3, 2, 1), lambda x: avg_pool2d_reference(x, 3, 2, 1)),
        "adaptive_avg_pool2d(3)": (2, lambda x: adaptive_avg_pool2d(x, 3), lambda x: TF.adaptive_avg_pool2d(x, 3)),
        "adaptive_max_pool2d(3)": (2, lambda x: adaptive_max_pool2d(x, 3), lambda x: TF.adaptive_max_pool2d(x, 3)),
        "lp_pool2d(2) 3x3/2": (2, lambda x: lp_pool2d(x, 2, 3, 2), lambda x: TF.lp_pool2d(x, 2, 3, 2)),
        "max_pool1d 3/2 pad 1": (1, lambda x: max_pool1d(x, 3, 2, 1), lambda x: TF.max_pool1d(x, 3, 2, 1)),
        "avg_pool1d 3/2 pad 1": (1, lambda x: avg_pool1d(x, 3, 2, 1), lambda x: avg_pool1d_reference(x, 3, 2, 1)),
        "max_pool3d 3x3x3/2 pad 1": (3, lambda x: max_pool3d(x, 3, 2, 1), lambda x: TF.max_pool3d(x, 3, 2, 1)),
        "avg_pool3d 3x3x3/2 pad 1": (3, lambda x: avg_pool3d(x, 3, 2, 1), lambda x: avg_pool3d_reference(x, 3, 2, 1)),
        "adaptive_avg_pool3d(1)": (3, lambda x: adaptive_avg_pool3d(x, 1), lambda x: TF.adaptive_avg_pool3d(x, 1)),
    }
    out = []
    for name, (rank, ours, theirs) in pools.items():
        for cl in (False, True):
            def make(d, t, cl=cl, rank=rank):
                x = random_like_case((2, 16) + (7, 13, 11)[3 - rank:], t, d)
                if not cl:
                    return x
                if rank == 1:
                    return x.transpose(1, 2).contiguous().transpose(1, 2)
                return x.contiguous(memory_format=torch.channels_last if rank == 2 else torch.channels_last_3d)
            out.append((f"{name}{' C-last' if cl else ''}", lambda d, t, o=ours, p=theirs, m=make:
                        check_against_torch(o, p, [m(d, t)], name="pool")))
    return out
