"""Norm family: layer_norm, rms_norm and the fused pre-norm residual steps add_layer_norm / add_rms_norm.
Fake kernels (mirroring the C++ layout rule), autograd (backward = torch_dnn ops), CUDA autocast to float32
(as PyTorch autocasts layer_norm), and functional wrappers mirroring torch.nn.functional."""
import math

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false, suggest_memory_format

from torch_dnn.ops._layout import contiguous_empty, iter_empty
from torch_dnn.ops._norm_common import stat_dtype, dtype_of, param_grad
from torch_dnn.ops._registry import add_family, ops, register_autograd
from torch_dnn.ops import _checks

_ops = ops  # torch.ops.torch_dnn, below autograd when no gradient is needed


# ---- layout: mirrors rows_dense / stat_strides in csrc/norm/norm_ops.h ----

def _rows_dense(x, k):
    """x when its memory is whole rows (dense, the k trailing dims innermost and row-major), else contiguous."""
    if is_non_overlapping_and_dense_or_false(x):
        expect = 1
        for d in range(x.dim() - 1, x.dim() - k - 1, -1):
            if x.size(d) == 1:
                continue
            if x.stride(d) != expect:
                return x.contiguous()
            expect *= x.size(d)
        return x
    return x.contiguous()


def _empty_stats(xd, k):
    """Per-row statistics: shape = the leading dims, row r (in memory order) at offset r."""
    lead = xd.shape[: xd.dim() - k]
    cols = math.prod(xd.shape[xd.dim() - k:])
    if cols == 0:
        strides, acc = [], 1
        for s in reversed(lead):
            strides.insert(0, acc)
            acc *= max(s, 1)
    else:
        strides = [xd.stride(d) // cols for d in range(len(lead))]
    return torch.empty_strided(lead, strides, dtype=stat_dtype(xd.dtype), device=xd.device)


# The results' layouts: PyTorch's (result_strides / grad_strides in csrc/norm/norm_ops.h).
def _suggests_channels_last(x):
    return suggest_memory_format(x) in (torch.channels_last, torch.channels_last_3d)


def _fake_forward(x, normalized_shape, rms, residual=None):
    xd = _rows_dense(x, len(normalized_shape))
    add = residual is not None
    sum_ = iter_empty(x, residual) if add else None
    normed = sum_ if add else x
    out = [iter_empty(normed) if rms and _suggests_channels_last(normed) else contiguous_empty(normed)]
    if add:
        out.insert(0, sum_)
    if not rms:
        out.append(_empty_stats(xd, len(normalized_shape)))
    out.append(_empty_stats(xd, len(normalized_shape)))
    return tuple(out)


def _fake_backward(grad_out, x, normalized_shape, mask, rms, grad_sum=None):
    if not mask[0]:
        dx = x.new_empty((0,))
    elif grad_sum is not None:
        dx = iter_empty(grad_sum, x)
    elif rms and (_suggests_channels_last(x) or x.device.type == "cpu"):
        dx = iter_empty(grad_out, x)
    else:
        dx = contiguous_empty(x)
    grads = [dx] + [x.new_empty(tuple(normalized_shape)) if m else x.new_empty((0,)) for m in mask[1:]]
    return tuple(grads)


@torch.library.register_fake("torch_dnn::layer_norm")
def _layer_norm_fake(x, normalized_shape, weight, bias, eps):
    _checks.norm("layer_norm", x, None, normalized_shape, weight, bias)
    return _fake_forward(x, normalized_shape, rms=False)


@torch.library.register_fake("torch_dnn::rms_norm")
def _rms_norm_fake(x, normalized_shape, weight, eps):
    _checks.norm("rms_norm", x, None, normalized_shape, weight, None)
    return _fake_forward(x, normalized_shape, rms=True)


@torch.library.register_fake("torch_dnn::add_layer_norm")
def _add_layer_norm_fake(x, residual, normalized_shape, weight, bias, eps):
    _checks.norm("add_layer_norm", x, residual, normalized_shape, weight, bias)
    return _fake_forward(x, normalized_shape, rms=False, residual=residual)


@torch.library.register_fake("torch_dnn::add_rms_norm")
def _add_rms_norm_fake(x, residual, normalized_shape, weight, eps):
    _checks.norm("add_rms_norm", x, residual, normalized_shape, weight, None)
    return _fake_forward(x, normalized_shape, rms=True, residual=residual)


@torch.library.register_fake("torch_dnn::layer_norm_backward")
def _layer_norm_backward_fake(grad_out, x, mean, rstd, weight, normalized_shape, output_mask):
    _checks.norm_backward("layer_norm", grad_out, None, x, mean, rstd, weight, normalized_shape, output_mask)
    return _fake_backward(grad_out, x, normalized_shape, output_mask, rms=False)


@torch.library.register_fake("torch_dnn::add_layer_norm_backward")
def _add_layer_norm_backward_fake(grad_out, grad_sum, sum, mean, rstd, weight, normalized_shape, output_mask):
    _checks.norm_backward("add_layer_norm", grad_out, grad_sum, sum, mean, rstd, weight, normalized_shape, output_mask)
    return _fake_backward(grad_out, sum, normalized_shape, output_mask, rms=False, grad_sum=grad_sum)


@torch.library.register_fake("torch_dnn::rms_norm_backward")
def _rms_norm_backward_fake(grad_out, x, rstd, weight, normalized_shape, output_mask):
    _checks.norm_backward("rms_norm", grad_out, None, x, None, rstd, weight, normalized_shape, output_mask)
    return _fake_backward(grad_out, x, normalized_shape, output_mask, rms=True)


@torch.library.register_fake("torch_dnn::add_rms_norm_backward")
def _add_rms_norm_backward_fake(grad_out, grad_sum, sum, rstd, weight, normalized_shape, output_mask):
    _checks.norm_backward("add_rms_norm", grad_out, grad_sum, sum, None, rstd, weight, normalized_shape, output_mask)
    return _fake_backward(grad_out, sum, normalized_shape, output_mask, rms=True, grad_sum=grad_sum)


# ---- autograd: the backward ops compute in the input's dtype; parameter grads are cast to the parameter's ----

def _layer_norm_setup(ctx, inputs, output):
    x, normalized_shape, weight, bias, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, mean, rstd, weight)
    ctx.normalized_shape, ctx.has_bias, ctx.bias_dtype = normalized_shape, bias is not None, dtype_of(bias)


def _layer_norm_backward(ctx, grad_out, _grad_mean, _grad_rstd):
    x, mean, rstd, weight = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[2],
            ctx.has_bias and ctx.needs_input_grad[3]]
    dx, dw, db = _ops.layer_norm_backward(grad_out, x, mean, rstd, weight, ctx.normalized_shape, mask)
    return ((dx if mask[0] else None), None, param_grad(dw, dtype_of(weight), mask[1]),
            param_grad(db, ctx.bias_dtype, mask[2]), None)


def _rms_norm_setup(ctx, inputs, output):
    x, normalized_shape, weight, _ = inputs
    ctx.save_for_backward(x, output[1], weight)
    ctx.normalized_shape = normalized_shape


def _rms_norm_backward(ctx, grad_out, _grad_rstd):
    x, rstd, weight = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[2]]
    dx, dw = _ops.rms_norm_backward(grad_out, x, rstd, weight, ctx.normalized_shape, mask)
    return (dx if mask[0] else None), None, param_grad(dw, dtype_of(weight), mask[1]), None


def _add_layer_norm_setup(ctx, inputs, output):
    _, _, normalized_shape, weight, bias, _ = inputs
    sum_, _, mean, rstd = output
    ctx.save_for_backward(sum_, mean, rstd, weight)
    ctx.normalized_shape, ctx.has_bias, ctx.bias_dtype = normalized_shape, bias is not None, dtype_of(bias)


def _add_layer_norm_backward(ctx, grad_sum, grad_out, _grad_mean, _grad_rstd):
    sum_, mean, rstd, weight = ctx.saved_tensors
    want_x = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
    mask = [want_x, weight is not None and ctx.needs_input_grad[3], ctx.has_bias and ctx.needs_input_grad[4]]
    dx, dw, db = _ops.add_layer_norm_backward(grad_out, grad_sum, sum_, mean, rstd, weight, ctx.normalized_shape, mask)
    return (dx if ctx.needs_input_grad[0] else None, dx if ctx.needs_input_grad[1] else None, None,
            param_grad(dw, dtype_of(weight), mask[1]), param_grad(db, ctx.bias_dtype, mask[2]), None)


def _add_rms_norm_setup(ctx, inputs, output):
    _, _, normalized_shape, weight, _ = inputs
    sum_, _, rstd = output
    ctx.save_for_backward(sum_, rstd, weight)
    ctx.normalized_shape = normalized_shape


def _add_rms_norm_backward(ctx, grad_sum, grad_out, _grad_rstd):
    sum_, rstd, weight = ctx.saved_tensors
    want_x = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
    mask = [want_x, weight is not None and ctx.needs_input_grad[3]]
    dx, dw = _ops.add_rms_norm_backward(grad_out, grad_sum, sum_, rstd, weight, ctx.normalized_shape, mask)
    return (dx if ctx.needs_input_grad[0] else None, dx if ctx.needs_input_grad[1] else None, None,
            param_grad(dw, dtype_of(weight), mask[1]), None)


for _name, _bwd, _setup in (
    ("layer_norm", _layer_norm_backward, _layer_norm_setup),
    ("rms_norm", _rms_norm_backward, _rms_norm_setup),
    ("add_layer_norm", _add_layer_norm_backward, _add_layer_norm_setup),
    ("add_rms_norm", _add_rms_norm_backward, _add_rms_norm_setup),
):
    register_autograd(f"torch_dnn::{_name}", _bwd, setup_context=_setup, cpp_kernel=True)  # norm_autograd.cpp
    torch.library.register_autocast(f"torch_dnn::{_name}", "cuda", torch.float32)

add_family("norm", [
    "layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm",
    "layer_norm_backward", "rms_norm_backward", "add_layer_norm_backward", "add_rms_norm_backward",
])


# ---- functional wrappers (torch.nn.functional signatures) ----

def _shape(normalized_shape):
    return [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)


def _default_rms_eps(input):
    # PyTorch's rms_norm takes eps=None as the epsilon of its computation type (float32 for 16-bit inputs)
    if not input.is_floating_point():
        return 0.0  # the op reports the dtype
    return torch.finfo(torch.float64 if input.dtype == torch.float64 else torch.float32).eps


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return _ops.layer_norm(input, _shape(normalized_shape), weight, bias, float(eps))[0]


def rms_norm(input, normalized_shape, weight=None, eps=None):
    eps = _default_rms_eps(input) if eps is None else eps
    return _ops.rms_norm(input, _shape(normalized_shape), weight, float(eps))[0]


def add_layer_norm(input, residual, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(sum, layer_norm(sum)) with sum = input + residual: the pre-norm transformer's residual step, one pass."""
    sum_, out, _, _ = _ops.add_layer_norm(input, residual, _shape(normalized_shape), weight, bias, float(eps))
    return sum_, out


def add_rms_norm(input, residual, normalized_shape, weight=None, eps=None):
    """(sum, rms_norm(sum)) with sum = input + residual: the pre-norm transformer's residual step, one pass."""
    eps = _default_rms_eps(input) if eps is None else eps
    sum_, out, _ = _ops.add_rms_norm(input, residual, _shape(normalized_shape), weight, float(eps))
    return sum_, out


FUNCTIONAL = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]


def selfcheck_cases():
    """python -m torch_dnn's rows of this family: (op, callable(device, dtype) -> list of Verdicts)."""
    import torch.nn.functional as TF

    from torch_dnn.reference.norm import add_layer_norm_reference, add_rms_norm_reference
    from torch_dnn.testing import check_against_torch, random_like_case

    pairs = {
        "layer_norm": (lambda x, r, w, b, n: layer_norm(x, [n], w, b), lambda x, r, w, b, n: TF.layer_norm(x, [n], w, b)),
        "rms_norm": (lambda x, r, w, b, n: rms_norm(x, [n], w), lambda x, r, w, b, n: TF.rms_norm(x, [n], w)),
        "add_layer_norm": (lambda x, r, w, b, n: add_layer_norm(x, r, [n], w, b)[1],
                           lambda x, r, w, b, n: add_layer_norm_reference(x, r, [n], w, b)[1]),
        "add_rms_norm": (lambda x, r, w, b, n: add_rms_norm(x, r, [n], w)[1],
                         lambda x, r, w, b, n: add_rms_norm_reference(x, r, [n], w)[1]),
    }
    out = []
    for name, (ours, theirs) in pairs.items():
        for shape in ((33, 100), (4, 3000)):
            n = shape[-1]
            out.append((f"{name}{list(shape)}", lambda d, t, o=ours, p=theirs, s=shape, n=n, nm=name: check_against_torch(
                lambda x, r, w, b: o(x, r, w, b, n), lambda x, r, w, b: p(x, r, w, b, n),
                [random_like_case(s, t, d), random_like_case(s, t, d), random_like_case((n,), t, d, low=0.5, high=1.5),
                 random_like_case((n,), t, d)], name=nm)))
    return out
