"""Convolution family: convolution (aten::convolution's semantics: 1-D, 2-D and 3-D, strided, padded, dilated, grouped,
transposed) and its three backward ops, each differentiable. Fake kernels (the real kernels' checks and layouts,
csrc/conv/conv_ops.h), the autograd formulas for torch.func (twins of csrc/conv/conv_autograd.cpp), and the
functional wrappers conv1d/2d/3d and conv_transpose1d/2d/3d (torch.nn.functional's arguments: padding 'same' and
'valid', unbatched inputs). Autocast is registered in C++ (csrc/conv/conv.cpp) with aten::convolution's policy.

float32 on CUDA follows torch.backends.cudnn.allow_tf32 as PyTorch's convolutions do (the CUDA launcher reads it
at each call)."""
import torch

from torch_dnn.ops import _checks
from torch_dnn.ops._checks import check, sizes
from torch_dnn.ops._registry import add_family, ops, register_autograd

_ops = ops  # torch.ops.torch_dnn, below autograd when no gradient is needed


# ---- the kernels' checks (csrc/conv/conv_ops.h), same messages in the same order ----

def _expand(op, v, rank, arg):
    v = list(v)
    check(len(v) == rank or len(v) == 1, op, ": expected ", arg, " to have 1 or ", rank, " elements, but got ", v)
    return v * rank if len(v) == 1 else v


def _params(op, rank, stride, padding, dilation, transposed, output_padding, groups):
    """(stride, padding, dilation, output_padding) expanded to the spatial rank, checked."""
    st = _expand(op, stride, rank, "stride")
    pad = _expand(op, padding, rank, "padding")
    dil = _expand(op, dilation, rank, "dilation")
    opad = _expand(op, output_padding, rank, "output_padding") if transposed else [0] * rank
    for i in range(rank):
        check(st[i] > 0, op, ": expected stride to be positive, but got ", list(stride))
        check(pad[i] >= 0, op, ": expected padding to be non-negative, but got ", list(padding))
        check(dil[i] > 0, op, ": expected dilation to be positive, but got ", list(dilation))
        check(opad[i] >= 0, op, ": expected output_padding to be non-negative, but got ", list(output_padding))
        check(opad[i] < st[i] or opad[i] < dil[i], op,
              ": expected output_padding to be smaller than either stride or dilation, but got output_padding=",
              list(output_padding), ", stride=", list(stride), " and dilation=", list(dilation))
    check(groups > 0, op, ": expected groups to be positive, but got ", groups)
    return st, pad, dil, opad


def _result_size(p, transposed, i, x, k):
    st, pad, dil, opad = p
    span = dil[i] * (k - 1)
    return ((x - 1) * st[i] - 2 * pad[i] + span + opad[i] + 1 if transposed
            else (x + 2 * pad[i] - span - 1) // st[i] + 1)


def _shapes(op, in_sizes, ws, p, transposed, groups, input_arg):
    """The input's and weight's agreement (channels, groups, sizes) and the result's shape."""
    in_sizes, ws = list(in_sizes), list(ws)
    check(ws[0] > 0, op, ": expected weight to have at least one ", "input" if transposed else "output",
          " channel (dimension 0), but got weight of size ", ws)
    check(ws[0] % groups == 0, op, ": expected weight's dimension 0 to be divisible by groups=", groups,
          ", but got weight of size ", ws)
    channels = ws[0] if transposed else ws[1] * groups
    check(in_sizes[1] == channels, op, ": expected ", input_arg, " to have ", channels, " channels (weight of size ",
          ws, ", groups=", groups, ", transposed=", "true" if transposed else "false", "), but got ", input_arg,
          " of size ", in_sizes)
    out = [in_sizes[0], ws[1] * groups if transposed else (0 if ws[1] == 0 else ws[0])]
    st, pad, dil, _ = p
    for i in range(len(in_sizes) - 2):
        k, x = ws[2 + i], in_sizes[2 + i]
        if not transposed:
            check(x + 2 * pad[i] >= dil[i] * (k - 1) + 1, op, ": expected the padded ", input_arg, " (size ",
                  in_sizes[2:], " plus padding ", pad, ") to be at least as large as the dilated kernel (weight of size ",
                  ws, ", dilation ", dil, ")")
        out.append(_result_size(p, transposed, i, x, k))
        check(out[-1] > 0, op, ": expected a positive output size, but ", input_arg, " of size ", in_sizes,
              " and weight of size ", ws, " give ", out)
    return out


def _first(op, t, arg):
    _checks.floating(t, op, arg)
    check(3 <= t.dim() <= 5, op, ": expected ", arg, " to be 3-D, 4-D or 5-D (N, C, *spatial), but got ", arg,
          " of size ", sizes(t))


def _tensor(op, t, arg, rank):
    _checks.floating(t, op, arg)
    check(t.dim() == rank, op, ": expected ", arg, " to have ", rank, " dimensions, but got ", arg, " of size ",
          sizes(t))


def _like(op, first, t, arg0, arg):
    _checks.same_dtype(first, t, op, arg0, arg)
    _checks.same_device(first, t, op, arg0, arg)


def _operands(op, first, arg0, second, arg):
    """check_operands: the first tensor (input or grad_output), then the second of its rank, dtype and device."""
    _first(op, first, arg0)
    _tensor(op, second, arg, first.dim())
    _like(op, first, second, arg0, arg)


def _bias(op, input, bias):
    """check_bias: a given bias's dtype and device against the input (its size once the channels are known)."""
    if bias is not None:
        _checks.floating(bias, op, "bias")
        _like(op, input, bias, "input", "bias")


def _size_arg(op, arg, size, grad):
    """check_size_arg: a backward op's input_size / weight_size, one element per dim of grad_output, none negative."""
    check(len(size) == grad.dim(), op, ": expected ", arg, " to have ", grad.dim(), " elements, but got ", list(size))
    for s in size:
        check(s >= 0, op, ": expected ", arg, " to be non-negative, but got ", list(size))


def _grad_output_shape(op, grad, out):
    check(list(grad.shape) == out, op, ": expected grad_output to have the shape of the output ", out, ", but got ",
          sizes(grad))


# ---- layouts (csrc/conv/conv_ops.h) ----

def _channels_last_strides(shape):
    shape = list(shape)
    st = [0] * len(shape)
    nxt = 1
    st[1] = nxt
    nxt *= max(shape[1], 1)
    for d in range(len(shape) - 1, 1, -1):
        st[d] = nxt
        nxt *= max(shape[d], 1)
    st[0] = nxt
    return st


def _row_major_strides(shape):
    st, nxt = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        st[d] = nxt
        nxt *= max(shape[d], 1)
    return st


def _empty_in(shape, like, channels_last):
    shape = list(shape)
    strides = _channels_last_strides(shape) if channels_last else _row_major_strides(shape)
    return torch.empty_strided(shape, strides, dtype=like.dtype, device=like.device)


def _strides_channels_last(t):
    """The backward ops' rule: channels-last results for a grad_output whose strides are exactly channels-last's."""
    st = list(t.stride())
    return st == _channels_last_strides(t.shape) and st != _row_major_strides(t.shape)


def _exactly_in_layout(t, channels_last):
    want = _channels_last_strides(t.shape) if channels_last else _row_major_strides(t.shape)
    if list(t.stride()) == want:
        return t
    return torch.empty_strided(t.shape, want, dtype=t.dtype, device=t.device).copy_(t)


def _channels_last(input, weight, p, transposed, groups):
    """Whether PyTorch's convolution of this input and weight computes in and returns a channels-last layout: its own
    backend choice asked, 1-D problems as PyTorch asks them (conv_channels_last in csrc/conv/conv_ops.h)."""
    st, pad, dil, opad = p
    x, w = input, weight
    if input.dim() == 3:
        x = (input if input.is_contiguous() else input.new_empty(input.shape)).unsqueeze(2)
        w = weight.unsqueeze(2)
        st, pad, dil, opad = [1] + st, [0] + pad, [1] + dil, [0] + opad
    backend = torch._C._select_conv_backend(x, w, None, st, pad, dil, transposed, opad, groups)
    fmt = torch._C._conv_determine_backend_memory_format(x, w, backend)
    return fmt in (torch.channels_last, torch.channels_last_3d)


# ---- fake kernels ----

@torch.library.register_fake("torch_dnn::convolution")
def _convolution_fake(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    op = "torch_dnn.convolution"
    _operands(op, input, "input", weight, "weight")
    _bias(op, input, bias)
    p = _params(op, input.dim() - 2, stride, padding, dilation, transposed, output_padding, groups)
    out = _shapes(op, input.shape, weight.shape, p, transposed, groups, "input")
    if bias is not None:
        channels = weight.shape[1] * groups if transposed else weight.shape[0]
        check(bias.dim() == 1 and bias.shape[0] == channels, op, ": expected bias to be 1-D with ", channels,
              " elements, but got bias of size ", sizes(bias))
    return _empty_in(out, input, _channels_last(input, weight, p, transposed, groups))


def _backward_fake(op, grad, other, other_arg, size_arg, size, in_sizes, ws, stride, padding, dilation, transposed,
                   output_padding, groups):
    """A backward op's checks (conv_ops.h's start_backward) and its result, of `size`, in grad's layout."""
    _operands(op, grad, "grad_output", other, other_arg)
    p = _params(op, grad.dim() - 2, stride, padding, dilation, transposed, output_padding, groups)
    _size_arg(op, size_arg, size, grad)
    _grad_output_shape(op, grad, _shapes(op, in_sizes, ws, p, transposed, groups, "input"))
    return _empty_in(size, grad, _strides_channels_last(grad))


@torch.library.register_fake("torch_dnn::conv_backward_input")
def _conv_backward_input_fake(grad, weight, input_size, stride, padding, dilation, transposed, output_padding,
                              groups):
    return _backward_fake("torch_dnn.conv_backward_input", grad, weight, "weight", "input_size", input_size,
                          input_size, weight.shape, stride, padding, dilation, transposed, output_padding, groups)


@torch.library.register_fake("torch_dnn::conv_backward_weight")
def _conv_backward_weight_fake(grad, input, weight_size, stride, padding, dilation, transposed, output_padding,
                               groups):
    return _backward_fake("torch_dnn.conv_backward_weight", grad, input, "input", "weight_size", weight_size,
                          input.shape, weight_size, stride, padding, dilation, transposed, output_padding, groups)


@torch.library.register_fake("torch_dnn::conv_backward_bias")
def _conv_backward_bias_fake(grad):
    _first("torch_dnn.conv_backward_bias", grad, "grad_output")
    return grad.new_empty((grad.shape[1],))


# ---- autograd (the C++ kernels' twins, for torch.func's transforms) ----

def _conv_setup(ctx, inputs, output):
    x, w, bias, stride, padding, dilation, transposed, output_padding, groups = inputs
    ctx.geo = (stride, padding, dilation, transposed, output_padding, groups)
    ctx.bias_size = bias.shape[0] if bias is not None else -1
    p = _params("torch_dnn.convolution", x.dim() - 2, stride, padding, dilation, transposed, output_padding, groups)
    ctx.channels_last = _channels_last(x, w, p, transposed, groups)
    ctx.save_for_backward(x, w)


def _conv_backward(ctx, grad):
    x, w = ctx.saved_tensors
    g = _exactly_in_layout(grad, ctx.channels_last)
    dx = _ops.conv_backward_input(g, w, list(x.shape), *ctx.geo) if ctx.needs_input_grad[0] else None
    dw = _ops.conv_backward_weight(g, x, list(w.shape), *ctx.geo) if ctx.needs_input_grad[1] else None
    db = None
    if ctx.bias_size >= 0 and ctx.needs_input_grad[2]:
        db = _ops.conv_backward_bias(g) if g.shape[1] == ctx.bias_size else g.new_zeros((ctx.bias_size,))
    return (dx, dw, db) + (None,) * 6


def _backward_op_setup(ctx, inputs, output):
    g, other, _size, *geo = inputs
    ctx.geo = tuple(geo)
    ctx.save_for_backward(g, other)


def _backward_input_backward(ctx, ggx):
    g, w = ctx.saved_tensors
    dg = _ops.convolution(ggx, w, None, *ctx.geo) if ctx.needs_input_grad[0] else None
    dw = _ops.conv_backward_weight(g, ggx, list(w.shape), *ctx.geo) if ctx.needs_input_grad[1] else None
    return (dg, dw) + (None,) * 7


def _backward_weight_backward(ctx, ggw):
    g, x = ctx.saved_tensors
    dg = _ops.convolution(x, ggw, None, *ctx.geo) if ctx.needs_input_grad[0] else None
    dx = _ops.conv_backward_input(g, ggw, list(x.shape), *ctx.geo) if ctx.needs_input_grad[1] else None
    return (dg, dx) + (None,) * 7


def _bias_setup(ctx, inputs, output):
    ctx.shape = tuple(inputs[0].shape)


def _bias_backward(ctx, ggb):
    view = [1] * len(ctx.shape)
    view[1] = ctx.shape[1]
    return ggb.view(view).expand(ctx.shape)


# csrc/conv/conv_autograd.cpp takes every call that reaches the Autograd key; these serve torch.func's transforms
register_autograd("torch_dnn::convolution", _conv_backward, setup_context=_conv_setup, cpp_kernel=True)
register_autograd("torch_dnn::conv_backward_input", _backward_input_backward, setup_context=_backward_op_setup,
                  cpp_kernel=True)
register_autograd("torch_dnn::conv_backward_weight", _backward_weight_backward, setup_context=_backward_op_setup,
                  cpp_kernel=True)
register_autograd("torch_dnn::conv_backward_bias", _bias_backward, setup_context=_bias_setup, cpp_kernel=True)


# ---- the fused forward ops: conv_bias_act, conv_bias_add_act (csrc/conv/conv_fused_ops.h) ----

# bias_act's activation names (torch_dnn.ops.activation.BIAS_ACTS)
_FUSED_ACTS = ("none", "identity", "relu", "relu6", "leaky_relu", "elu", "gelu", "gelu_tanh", "silu", "sigmoid",
               "tanh", "softplus", "mish", "hardswish", "hardsigmoid")
# their default parameters (a, b), overridden by act_a / act_b
_ACT_DEFAULTS = {"leaky_relu": (0.01, 0.0), "elu": (1.0, 0.0), "softplus": (1.0, 20.0)}
# activations whose derivative their result determines exactly: the backward reads it (csrc/conv/conv_fused_autograd.cpp)
_FROM_RESULT = ("none", "identity", "relu", "relu6", "sigmoid", "tanh")


def _fused_fake(op, input, weight, bias, residual, stride, padding, dilation, groups, activation):
    _operands(op, input, "input", weight, "weight")
    _bias(op, input, bias)
    check(activation in _FUSED_ACTS, op, ": unknown activation '", activation, "' (expected one of bias_act's: none, "
          "relu, relu6, leaky_relu, elu, gelu, gelu_tanh, silu, sigmoid, tanh, softplus, mish, hardswish, hardsigmoid)")
    p = _params(op, input.dim() - 2, stride, padding, dilation, False, [0], groups)
    out = _shapes(op, input.shape, weight.shape, p, False, groups, "input")
    if bias is not None:
        check(bias.dim() == 1 and bias.shape[0] == weight.shape[0], op, ": expected bias to be 1-D with ",
              weight.shape[0], " elements, but got bias of size ", sizes(bias))
    if residual is not None:
        _checks.floating(residual, op, "residual")
        _like(op, input, residual, "input", "residual")
        check(list(residual.shape) == out, op, ": expected residual to have the shape of the output ", out,
              ", but got residual of size ", sizes(residual))
    return _empty_in(out, input, _channels_last(input, weight, p, False, groups))


@torch.library.register_fake("torch_dnn::conv_bias_act")
def _conv_bias_act_fake(input, weight, bias, stride, padding, dilation, groups, activation="relu", act_a=None,
                        act_b=None):
    return _fused_fake("torch_dnn.conv_bias_act", input, weight, bias, None, stride, padding, dilation, groups,
                       activation)


@torch.library.register_fake("torch_dnn::conv_bias_add_act")
def _conv_bias_add_act_fake(input, weight, bias, residual, stride, padding, dilation, groups, activation="relu",
                            act_a=None, act_b=None):
    return _fused_fake("torch_dnn.conv_bias_add_act", input, weight, bias, residual, stride, padding, dilation,
                       groups, activation)


def _act_backward(grad, saved, activation, act_a, act_b):
    """grad * act'(at saved) through the activation family's backward op (saved: the input, or the result for
    the activations of _FROM_RESULT)."""
    a, b = _ACT_DEFAULTS.get(activation, (0.0, 0.0))
    a = a if act_a is None else act_a
    b = b if act_b is None else act_b
    if activation in ("none", "identity"):
        return grad
    if activation in ("gelu", "gelu_tanh"):
        return _ops.gelu_backward(grad, saved, approximate="none" if activation == "gelu" else "tanh")
    if activation in ("leaky_relu", "elu"):
        return getattr(_ops, f"{activation}_backward")(grad, saved, a)
    if activation == "softplus":
        return _ops.softplus_backward(grad, saved, a, b)
    return getattr(_ops, f"{activation}_backward")(grad, saved)


def _fused_setup(ctx, inputs, output):
    if len(inputs) == 11:  # conv_bias_add_act
        x, w, bias, res, stride, padding, dilation, groups, act, act_a, act_b = inputs
    else:
        (x, w, bias, stride, padding, dilation, groups, act, act_a, act_b), res = inputs, None
    ctx.call = (stride, padding, dilation, groups)
    ctx.act = (act, act_a, act_b)
    ctx.bias_size = bias.shape[0] if bias is not None else -1
    ctx.has_res = res is not None
    p = _params("torch_dnn.conv_bias_act", x.dim() - 2, stride, padding, dilation, False, [0], groups)
    ctx.channels_last = _channels_last(x, w, p, False, groups)
    ctx.save_for_backward(x, w, bias, res, output if act in _FROM_RESULT else None)


def _fused_backward(ctx, grad):
    x, w, bias, res, y = ctx.saved_tensors
    act, act_a, act_b = ctx.act
    if y is None:  # the pre-activation, recomputed by the same op without the activation
        y = (_ops.conv_bias_add_act(x, w, bias, res, *ctx.call, "none") if ctx.has_res
             else _ops.conv_bias_act(x, w, bias, *ctx.call, "none"))
    d_act = _act_backward(grad, y, act, act_a, act_b)  # the residual's gradient as is (PyTorch's add passes it on)
    d_pre = _exactly_in_layout(d_act, ctx.channels_last)
    stride, padding, dilation, groups = ctx.call
    geo = (stride, padding, dilation, False, [0], groups)
    need = ctx.needs_input_grad
    dx = _ops.conv_backward_input(d_pre, w, list(x.shape), *geo) if need[0] else None
    dw = _ops.conv_backward_weight(d_pre, x, list(w.shape), *geo) if need[1] else None
    db = None
    if ctx.bias_size >= 0 and need[2]:
        db = _ops.conv_backward_bias(d_pre) if d_pre.shape[1] == ctx.bias_size else d_pre.new_zeros((ctx.bias_size,))
    if ctx.has_res:
        return (dx, dw, db, d_act if need[3] else None) + (None,) * 7
    return (dx, dw, db) + (None,) * 7


# csrc/conv/conv_fused_autograd.cpp takes every call that reaches the Autograd key; this serves torch.func's transforms
register_autograd("torch_dnn::conv_bias_act", _fused_backward, setup_context=_fused_setup, cpp_kernel=True)
register_autograd("torch_dnn::conv_bias_add_act", _fused_backward, setup_context=_fused_setup, cpp_kernel=True)

add_family("conv", ["convolution", "conv_backward_input", "conv_backward_weight", "conv_backward_bias",
                    "conv_bias_act", "conv_bias_add_act"])


# ---- functional wrappers ----

def _ntuple(v, r, arg, fn):
    if isinstance(v, int):
        return (v,) * r
    if isinstance(v, (tuple, list)) and all(isinstance(e, int) for e in v):
        return tuple(v)
    raise TypeError(f"{fn}(): argument '{arg}' must be tuple of ints, not {type(v).__name__}")


def _batched(input, r, fn):
    """input with a batch dim (added for an unbatched input), and whether one was added: PyTorch's rule and message."""
    if input.dim() not in (r + 1, r + 2):
        raise RuntimeError(f"Expected {r + 1}D (unbatched) or {r + 2}D (batched) input to {fn}, but got input of "
                           f"size: {list(input.shape)}")
    return (input.unsqueeze(0), True) if input.dim() == r + 1 else (input, False)


def _same_padding(input, weight, r, stride, dilation):
    """padding='same' as PyTorch's _convolution_same: the symmetric part as the op's padding, and where the total
    is odd (an even kernel with odd dilation) the input padded by one more on the right first."""
    if any(s != 1 for s in stride):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
    left = [t // 2 for t in total]
    if any(t % 2 for t in total):
        pad_nd = []
        for i in reversed(range(r)):
            pad_nd += [0, total[i] - 2 * left[i]]
        input = torch.nn.functional.pad(input, pad_nd)
    return input, tuple(left)


def _geometry(fn, r, x, weight, stride, padding, dilation):
    """(x, stride, padding, dilation) as the op takes them: r-tuples, 'valid' as zeros, 'same' as the left padding
    with x padded on the right where the total is odd (F.conv*d's rules)."""
    stride, dilation = _ntuple(stride, r, "stride", fn), _ntuple(dilation, r, "dilation", fn)
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * r
        elif padding == "same":
            x, padding = _same_padding(x, weight, r, stride, dilation)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        padding = _ntuple(padding, r, "padding", fn)
    return x, stride, padding, dilation


def _int_tuples(r, *values) -> bool:
    """Whether every value is a tuple of r ints (not bools), as nn.Conv*d keeps its geometry: the op takes them as
    they are."""
    for v in values:
        if type(v) is not tuple or len(v) != r:
            return False
        for e in v:
            if type(e) is not int:
                return False
    return True


_NO_OUTPUT_PADDING = {r: (0,) * r for r in (1, 2, 3)}


def _conv(r, input, weight, bias, stride, padding, dilation, groups):
    # the common calls (a batched input; ints, as F.conv*d's defaults, or r-tuples of ints, as the modules pass
    # them) go straight to the op; the rest is normalised and checked below (host time of small convolutions)
    if input.dim() == r + 2:
        if type(stride) is int and type(padding) is int and type(dilation) is int:
            return _ops.convolution(input, weight, bias, (stride,) * r, (padding,) * r, (dilation,) * r, False,
                                    _NO_OUTPUT_PADDING[r], groups)
        if _int_tuples(r, stride, padding, dilation):
            return _ops.convolution(input, weight, bias, stride, padding, dilation, False, _NO_OUTPUT_PADDING[r],
                                    groups)
    fn = f"conv{r}d"
    x, added = _batched(input, r, fn)
    x, stride, padding, dilation = _geometry(fn, r, x, weight, stride, padding, dilation)
    y = _ops.convolution(x, weight, bias, stride, padding, dilation, False, (0,) * r, groups)
    return y.squeeze(0) if added else y


def _conv_transpose(r, input, weight, bias, stride, padding, output_padding, groups, dilation):
    fn = f"conv_transpose{r}d"
    x, added = _batched(input, r, fn)
    y = _ops.convolution(x, weight, bias, _ntuple(stride, r, "stride", fn), _ntuple(padding, r, "padding", fn),
                         _ntuple(dilation, r, "dilation", fn), True, _ntuple(output_padding, r, "output_padding", fn),
                         groups)
    return y.squeeze(0) if added else y


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv(3, input, weight, bias, stride, padding, dilation, groups)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups, dilation)


def _conv_act(fn, input, weight, bias, residual, activation, stride, padding, dilation, groups, act_a, act_b):
    r = weight.dim() - 2
    if r not in (1, 2, 3):
        raise RuntimeError(f"{fn}(): expected weight to be 3-D, 4-D or 5-D (out_channels, in_channels / groups, "
                           f"*kernel), but got weight of size {list(weight.shape)}")
    x, added = _batched(input, r, fn)
    if residual is not None and added:
        residual = residual.unsqueeze(0)
    x, stride, padding, dilation = _geometry(fn, r, x, weight, stride, padding, dilation)
    if residual is None:
        y = _ops.conv_bias_act(x, weight, bias, stride, padding, dilation, groups, activation, act_a, act_b)
    else:
        y = _ops.conv_bias_add_act(x, weight, bias, residual, stride, padding, dilation, groups, activation, act_a,
                                   act_b)
    return y.squeeze(0) if added else y


def conv_bias_act(input, weight, bias=None, activation="relu", stride=1, padding=0, dilation=1, groups=1, act_a=None,
                  act_b=None):
    """act(conv(input, weight, bias)) in one pass, the bias and the activation in the convolution's epilogue
    (torch_dnn's own). conv1d, conv2d or conv3d by the weight's rank; input, weight, bias, stride, padding ('same',
    'valid' too), dilation and groups as torch.nn.functional.conv*d's, unbatched inputs too.

    activation: one of torch_dnn.ops.activation.BIAS_ACTS ("none", "relu", "relu6", "gelu", "gelu_tanh", "silu",
    ...); act_a / act_b: the parameters of leaky_relu (negative_slope), elu (alpha) and softplus (beta, threshold),
    None for PyTorch's defaults (as linear_act's)."""
    return _conv_act("conv_bias_act", input, weight, bias, None, activation, stride, padding, dilation, groups, act_a,
                     act_b)


def conv_bias_add_act(input, weight, bias, residual, activation="relu", stride=1, padding=0, dilation=1, groups=1,
                      act_a=None, act_b=None):
    """act(conv(input, weight, bias) + residual) in one pass: the end of a ResNet block. residual has the output's
    shape and is added BEFORE the activation (linear_act's residual is added after it). Other arguments as
    conv_bias_act's."""
    return _conv_act("conv_bias_add_act", input, weight, bias, residual, activation, stride, padding, dilation,
                     groups, act_a, act_b)


FUNCTIONAL = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
              "conv_bias_act", "conv_bias_add_act"]


def selfcheck_cases():
    """python -m torch_dnn's rows of this family: (op, callable(device, dtype) -> list of Verdicts)."""
    from torch_dnn.testing import check_against_torch, random_like_case

    F = torch.nn.functional
    cases = {
        # label: (ours, theirs, (input, weight, bias) shapes, channels_last input)
        "conv2d 3x3 pad 1, 7->12 @13x11": (lambda x, w, b: conv2d(x, w, b, padding=1),
                                           lambda x, w, b: F.conv2d(x, w, b, padding=1),
                                           ((2, 7, 13, 11), (12, 7, 3, 3), (12,)), False),
        "conv2d 3x3/2 NHWC": (lambda x, w, b: conv2d(x, w, b, stride=2, padding=1),
                              lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
                              ((2, 8, 13, 11), (16, 8, 3, 3), (16,)), True),
        "conv2d depthwise 5x5 x2": (lambda x, w, b: conv2d(x, w, b, padding=2, groups=6),
                                    lambda x, w, b: F.conv2d(x, w, b, padding=2, groups=6),
                                    ((2, 6, 9, 9), (12, 1, 5, 5), (12,)), False),
        "conv1d dilation 2 'same'": (lambda x, w, b: conv1d(x, w, b, padding="same", dilation=2),
                                     lambda x, w, b: F.conv1d(x, w, b, padding="same", dilation=2),
                                     ((3, 5, 17), (7, 5, 3), (7,)), False),
        "conv3d 3x3x3 groups 2": (lambda x, w, b: conv3d(x, w, b, padding=1, groups=2),
                                  lambda x, w, b: F.conv3d(x, w, b, padding=1, groups=2),
                                  ((2, 4, 5, 6, 7), (6, 2, 3, 3, 3), (6,)), False),
        "conv_transpose2d 3x3/2 output_padding 1": (
            lambda x, w, b: conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
            lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
            ((2, 6, 7, 5), (6, 4, 3, 3), (4,)), False),
    }

    def make(shapes, cl, d, t):
        x, w, b, *r = (random_like_case(s, t, d, low=-1, high=1) for s in shapes)
        return [x.contiguous(memory_format=torch.channels_last) if cl else x, w, b, *r]

    rows = [(label, lambda d, t, o=ours, p=theirs, s=shapes, cl=cl, n=label: check_against_torch(
        o, p, make(s, cl, d, t), name=n)) for label, (ours, theirs, shapes, cl) in cases.items()]
    from torch_dnn.reference.conv import conv_act_reference

    # the fused ops: (input, weight, bias, residual) shapes, the residual in the output's shape
    for label, act, cl in (("conv_bias_add_act[relu] 3x3 NHWC", "relu", True),
                           ("conv_bias_add_act[silu] 3x3", "silu", False)):
        rows.append((label, lambda d, t, a=act, cl=cl, n=label: check_against_torch(
            lambda x, w, b, r: conv_bias_add_act(x, w, b, r, a, padding=1),
            lambda x, w, b, r: conv_act_reference(x, w, b, padding=1, activation=a, residual=r),
            make(((2, 8, 9, 7), (16, 8, 3, 3), (16,), (2, 16, 9, 7)), cl, d, t), name=n)))
    return rows
