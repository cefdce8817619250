"""The real kernels' argument checks, for the fake kernels: each function here raises what the op's C++ kernel raises
for the same arguments (RuntimeError, the same message), in the same order, so that a bad call fails the same way
under FakeTensorMode / torch.compile and on a `meta` tensor as it does eagerly. A fake kernel also runs for a
CPU input whose weight (or any other tensor argument) is a `meta` tensor, the dispatcher's choice for mixed devices:
the device checks here are what stops it returning uninitialised memory.

Mirrors csrc/common/tensor_utils.h and each family's csrc/<family>/<family>_ops.h; tests/test_fake_checks.py compares
the two on bad inputs of every op."""
import torch

from torch_dnn.ops._norm_common import stat_dtype

# c10's names of the dtypes (the C++ messages print a ScalarType so)
_TYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex32: "ComplexHalf", torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}
KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def type_name(dtype) -> str:
    if dtype in _TYPE_NAMES:
        return _TYPE_NAMES[dtype]
    name = str(dtype).split(".")[-1]  # float8_e4m3fn -> Float8_e4m3fn, uint16 -> UInt16
    return "UInt" + name[4:] if name.startswith("uint") else name[0].upper() + name[1:]


def num(v) -> str:
    """A double as std::ostream prints it (6 significant digits)."""
    return f"{v:g}"


def sizes(t) -> list:
    return list(t.shape)


def check(cond, *parts) -> None:
    torch._check(cond, lambda: "".join(str(p) for p in parts))


def given(t) -> bool:
    return t is not None


# ---- csrc/common/tensor_utils.h ----

def floating(t, op, arg):
    check(t.dtype in KERNEL_DTYPES, op, ": expected ", arg,
          " to be a floating point tensor (float32, float16, bfloat16 or float64), but got ", type_name(t.dtype))


def same_dtype(a, b, op, arg_a, arg_b):
    check(a.dtype == b.dtype, op, ": expected ", arg_b, " to have the same dtype as ", arg_a, " (",
          type_name(a.dtype), "), but got ", type_name(b.dtype))


def same_device(a, b, op, arg_a, arg_b):
    check(a.device == b.device, op, ": expected ", arg_b, " to be on the same device as ", arg_a, " (", a.device,
          "), but got ", b.device)


def same_shape(a, b, op, arg_a, arg_b):
    check(a.shape == b.shape, op, ": expected ", arg_b, " to have the shape of ", arg_a, " ", sizes(a), ", but got ",
          sizes(b))


def like(a, b, op, arg_a, arg_b):
    """dtype, device and shape of a (the C++ kernels' usual three checks of a gradient against its input)."""
    same_dtype(a, b, op, arg_a, arg_b)
    same_device(a, b, op, arg_a, arg_b)
    same_shape(a, b, op, arg_a, arg_b)


def wrap_dim(dim, ndim, op):
    n = max(ndim, 1)
    check(-n <= dim < n, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
          " dimensions (expected to be in [", -n, ", ", n - 1, "])")
    return dim + n if dim < 0 else dim


# ---- activation (csrc/activation/activation_ops.h) ----

BIAS_ACT_NAMES = ("none", "identity", "relu", "relu6", "leaky_relu", "elu", "gelu", "gelu_tanh", "silu", "sigmoid",
                  "tanh", "softplus", "mish", "hardswish", "hardsigmoid")


def bias_act_kind(act):
    check(act in BIAS_ACT_NAMES, "torch_dnn.bias_act: unknown act '", act,
          "' (expected one of none, relu, relu6, leaky_relu, elu, gelu, gelu_tanh, silu, sigmoid, tanh, softplus, "
          "mish, hardswish, hardsigmoid)")


def _gelu_approximate(approximate, op):
    check(approximate in ("none", "tanh"), op, ": approximate argument must be either 'none' or 'tanh', but got '",
          approximate, "'")


def _hardtanh_bounds(op, lo, hi):
    check(lo <= hi, op, ": min_val (", num(lo), ") cannot be greater than max_val (", num(hi), ")")


def activation(name, x, *args, **kwargs):
    """relu, ..., hardsigmoid and their in-place forms (name ends with '_')."""
    op = f"torch_dnn.{name}"
    if name.rstrip("_") == "hardtanh":
        _hardtanh_bounds(op, *(args + (-1.0, 1.0)[len(args):]))
    if name == "gelu":
        _gelu_approximate(kwargs.get("approximate", "none"), op)
    floating(x, op, "input")


def activation_backward(name, grad, saved, *args, **kwargs):
    op = f"torch_dnn.{name}_backward"
    if name == "gelu":
        _gelu_approximate(kwargs.get("approximate", "none"), op)
    floating(saved, op, "result" if name in ("sigmoid", "tanh") else "self")
    like(saved, grad, op, "self", "grad_output")


def _bias(x, bias, dim, op):
    if not given(bias):
        return
    check(bias.dim() == 1 and bias.shape[0] == x.shape[dim], op, ": expected bias of shape [", x.shape[dim],
          "] (the size of input dim ", dim, "), but got ", sizes(bias))
    same_dtype(x, bias, op, "input", "bias")
    same_device(x, bias, op, "input", "bias")


def bias_act(x, bias, dim, act):
    op = "torch_dnn.bias_act"
    floating(x, op, "input")
    check(x.dim() >= 1, op, ": expected input with at least 1 dimension, but got a 0-dim tensor")
    _bias(x, bias, wrap_dim(dim, x.dim(), op), op)
    bias_act_kind(act)


def bias_act_backward(grad, x, bias, dim, act, bias_grad):
    op = "torch_dnn.bias_act_backward"
    floating(x, op, "input")
    like(x, grad, op, "input", "grad_output")
    check(x.dim() >= 1, op, ": expected input with at least 1 dimension")
    _bias(x, bias, wrap_dim(dim, x.dim(), op), op)
    check(not bias_grad or given(bias), op, ": bias_grad=True needs a bias")
    bias_act_kind(act)


# ---- softmax (csrc/softmax/softmax_ops.h) ----

def softmax(name, x, dim, dtype=None):
    op = f"torch_dnn.{name}"
    floating(x, op, "input")
    wrap_dim(dim, x.dim(), op)
    out_t = x.dtype if dtype is None else dtype
    check(out_t in KERNEL_DTYPES, op, ": expected dtype to be a floating point type, but got ", type_name(out_t))


def softmax_backward(name, grad, output, dim, input_dtype):
    op = f"torch_dnn.{name}_backward"
    floating(output, op, "output")
    like(output, grad, op, "output", "grad_output")
    check(input_dtype in KERNEL_DTYPES, op, ": expected input_dtype to be a floating point type, but got ",
          type_name(input_dtype))
    wrap_dim(dim, output.dim(), op)


# ---- norm (csrc/norm/norm_ops.h) ----

def _norm_input(op, x, ns):
    floating(x, op, "input")
    check(len(ns) > 0, op, ": expected normalized_shape to have at least one dimension, but got []")
    k = len(ns)
    check(x.dim() >= k and list(x.shape[x.dim() - k:]) == list(ns), op, ": given normalized_shape=", list(ns),
          ", expected input with shape [*", "".join(f", {v}" for v in ns), "], but got input of size ", sizes(x))


def _norm_param(op, arg, x, p, ns):
    if not given(p):
        return
    floating(p, op, arg)
    same_device(x, p, op, "input", arg)
    check(list(p.shape) == list(ns), op, ": expected ", arg, " of shape ", list(ns), " (normalized_shape), but got ",
          sizes(p))


def norm(name, x, residual, ns, weight, bias):
    """layer_norm, rms_norm, add_layer_norm, add_rms_norm (residual and bias None where the op has none)."""
    op = f"torch_dnn.{name}"
    _norm_input(op, x, ns)
    if given(residual):
        like(x, residual, op, "input", "residual")
    _norm_param(op, "weight", x, weight, ns)
    _norm_param(op, "bias", x, bias, ns)


def _norm_stats(op, arg, t, x, ns):
    lead = list(x.shape[:x.dim() - len(ns)])
    check(list(t.shape) == lead, op, ": expected ", arg, " of shape ", lead, " (the input's leading dims), but got ",
          sizes(t))
    same_device(x, t, op, "input", arg)


def norm_backward(name, grad, grad_sum, x, mean, rstd, weight, ns, mask):
    """The four backward ops; x is the sum for the add_ forms, mean None for the rms ones."""
    op = f"torch_dnn.{name}_backward"
    _norm_input(op, x, ns)
    like(x, grad, op, "input", "grad_out")
    if given(grad_sum):
        like(x, grad_sum, op, "input", "grad_sum")
    _norm_param(op, "weight", x, weight, ns)
    check(not mask[1] or given(weight), op, ": output_mask asks for the weight gradient, but weight is None")
    if given(mean):
        _norm_stats(op, "mean", mean, x, ns)
    _norm_stats(op, "rstd", rstd, x, ns)


# ---- group_norm (csrc/group_norm/group_norm_ops.h) ----

def _gn_input(op, x, groups):
    floating(x, op, "input")
    check(x.dim() >= 2, op, ": expected input of shape (N, C, *) with at least 2 dimensions, but got ", sizes(x))
    check(groups > 0, op, ": expected num_groups to be positive, but got ", groups)
    check(x.shape[1] % groups == 0, op, ": expected the number of channels (", x.shape[1],
          ") to be divisible by num_groups (", groups, "), but got input of shape ", sizes(x))


def _gn_param(op, arg, x, p):
    if not given(p):
        return
    floating(p, op, arg)
    same_device(x, p, op, "input", arg)
    check(p.dim() == 1 and p.shape[0] == x.shape[1], op, ": expected ", arg, " of shape [", x.shape[1],
          "] (the input's channels), but got ", sizes(p))


def _gn_stats(op, arg, t, x, groups):
    want = [x.shape[0], groups]
    check(list(t.shape) == want, op, ": expected ", arg, " of shape ", want, " (N, num_groups), but got ", sizes(t))
    same_device(x, t, op, "input", arg)


def group_norm(name, x, groups, weight, bias, mean=None, rstd=None):
    """group_norm, and group_norm_with_stats (mean and rstd given)."""
    op = f"torch_dnn.{name}"
    _gn_input(op, x, groups)
    _gn_param(op, "weight", x, weight)
    _gn_param(op, "bias", x, bias)
    if given(mean):
        _gn_stats(op, "mean", mean, x, groups)
        _gn_stats(op, "rstd", rstd, x, groups)


def group_norm_backward(grad, x, mean, rstd, weight, groups):
    op = "torch_dnn.group_norm_backward"
    _gn_input(op, x, groups)
    like(x, grad, op, "input", "grad_out")
    _gn_param(op, "weight", x, weight)
    _gn_stats(op, "mean", mean, x, groups)
    _gn_stats(op, "rstd", rstd, x, groups)


# ---- local_response_norm (csrc/lrn/lrn_ops.h) ----

def lrn(x, size, grad=None):
    op = "torch_dnn.local_response_norm" + ("_backward" if given(grad) else "")
    floating(x, op, "input")
    check(x.dim() >= 3, op, ": expected input of shape (N, C, *) with at least 3 dimensions, but got ", sizes(x))
    check(size > 0, op, ": expected size to be positive, but got ", size)
    if given(grad):
        like(x, grad, op, "input", "grad_out")


# ---- batch_norm (csrc/batch_norm/batch_norm_ops.h) ----

def _bn_input(op, x):
    floating(x, op, "input")
    check(x.dim() >= 2, op, ": expected input of shape (N, C, *) with at least 2 dimensions, but got input of size ",
          sizes(x))


def _bn_channel(op, arg, x, p):
    if not given(p):
        return
    floating(p, op, arg)
    same_device(x, p, op, "input", arg)
    check(p.dim() == 1 and p.numel() == x.shape[1], op, ": expected ", arg, " of shape [", x.shape[1],
          "] (the input's channel count, dim 1), but got ", sizes(p))


def batch_norm(name, x, residual, weight, bias, running_mean, running_var, training, act=0):
    """batch_norm and batch_norm_add_act."""
    op = f"torch_dnn.{name}"
    _bn_input(op, x)
    check(0 <= act <= 2, op, ": act must be 0 (identity), 1 (relu) or 2 (silu), but got ", act)
    if given(residual):
        like(x, residual, op, "input", "residual")
    for arg, p in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
        _bn_channel(op, arg, x, p)
    check(given(running_mean) == given(running_var), op,
          ": running_mean and running_var must both be given or both be None")
    check(training or given(running_mean), op, ": running_mean and running_var must be defined in evaluation mode")


def _bn_backward(op, grad, x, residual, weight, bias, save_mean, save_invstd, stats_from_running=False):
    """stats_from_running: the statistics are batch_norm_backward's running ones, which the kernel converts to the
    statistics dtype before these checks (no dtype to check)."""
    _bn_input(op, x)
    like(x, grad, op, "input", "grad_out")
    _bn_channel(op, "weight", x, weight)
    _bn_channel(op, "bias", x, bias)
    for arg, t in (("save_mean", save_mean), ("save_invstd", save_invstd)):
        if stats_from_running:
            t = t.to(stat_dtype(x.dtype))
        _bn_channel(op, arg, x, t)
    if given(residual):
        like(x, residual, op, "input", "residual")


def batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_invstd):
    op = "torch_dnn.batch_norm_backward"
    for arg, t in (("running_mean", running_mean), ("running_var", running_var)):
        if given(t):
            same_device(x, t, op, "input", arg)
    if not (given(save_mean) and given(save_invstd) and save_mean.numel() > 0):
        check(given(running_mean) and given(running_var), op,
              ": needs save_mean/save_invstd or running_mean/running_var")
        _bn_backward(op, grad, x, None, weight, None, running_mean, running_var, stats_from_running=True)
    else:
        _bn_backward(op, grad, x, None, weight, None, save_mean, save_invstd)


def batch_norm_add_act_backward(grad, x, residual, weight, bias, save_mean, save_invstd):
    _bn_backward("torch_dnn.batch_norm_add_act_backward", grad, x, residual, weight, bias, save_mean, save_invstd)


def batch_norm_stats(x):
    _bn_input("torch_dnn.batch_norm_stats", x)


def batch_norm_elemt(x, mean, invstd, weight, bias):
    op = "torch_dnn.batch_norm_elemt"
    _bn_input(op, x)
    for arg, p in (("mean", mean), ("invstd", invstd), ("weight", weight), ("bias", bias)):
        _bn_channel(op, arg, x, p)


def batch_norm_backward_reduce(grad, x, mean, invstd):
    op = "torch_dnn.batch_norm_backward_reduce"
    _bn_input(op, x)
    like(x, grad, op, "input", "grad_out")
    _bn_channel(op, "mean", x, mean)
    _bn_channel(op, "invstd", x, invstd)


def batch_norm_backward_elemt(grad, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    op = "torch_dnn.batch_norm_backward_elemt"
    _bn_input(op, x)
    like(x, grad, op, "input", "grad_out")
    for arg, p in (("mean", mean), ("invstd", invstd), ("weight", weight), ("sum_dy", sum_dy),
                   ("sum_dy_xmu", sum_dy_xmu)):
        _bn_channel(op, arg, x, p)
    check(count > 0, op, ": expected count (the number of elements per channel over all processes) > 0, but got ",
          count)


# ---- pooling (csrc/pool/pool_ops.h): <kind>(r, *the op's arguments), <kind>_backward(r, *the op's arguments) ----

_INPUT_RANKS = {1: "2-D (C, L) or 3-D (N, C, L)", 2: "3-D (C, H, W) or 4-D (N, C, H, W)",
                3: "4-D (C, D, H, W) or 5-D (N, C, D, H, W)"}


def pool_output_size(size, k, pad, stride, dil, ceil_mode):
    """PyTorch's pooling_output_shape (floor, or ceil with the last window starting inside the input or padding)."""
    num_ = size + 2 * pad - dil * (k - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = num_ // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _pool_input(r, x, op):
    floating(x, op, "input")
    ok = x.dim() in (r + 1, r + 2) and all(x.shape[d] > 0 for d in range(x.dim() - r - 1, x.dim()))
    check(ok, op, ": expected input to be ", _INPUT_RANKS[r], " with non-zero channels and spatial sizes, but got ",
          sizes(x))


def _pool_list(v, r, op, arg, min_value):
    check(len(v) == r, op, ": expected ", arg, " to have ", r, " element", "s" if r > 1 else "", ", but got ", len(v))
    for e in v:
        check(e >= min_value, op, ": expected ", arg, " to be ", "non-negative" if min_value == 0 else "positive",
              ", but got ", list(v))


def _window(r, op, x, k, st, pad, dil, ceil_mode, input_at_least_kernel=False):
    """window_shape: the checks, and the output's spatial sizes."""
    _pool_input(r, x, op)
    _pool_list(k, r, op, "kernel_size", 1)
    _pool_list(st, r, op, "stride", 1)
    _pool_list(pad, r, op, "padding", 0)
    _pool_list(dil, r, op, "dilation", 1)
    for i in range(r):
        check(pad[i] <= k[i] // 2, op, ": expected padding to be at most half of kernel_size, but got padding=",
              list(pad), " and kernel_size=", list(k))
    spatial = list(x.shape[x.dim() - r:])
    if input_at_least_kernel:
        check(all(spatial[i] >= k[i] for i in range(r)), op, ": input size ", spatial, " is smaller than kernel_size ",
              list(k))
    out = [pool_output_size(spatial[i], k[i], pad[i], st[i], dil[i], ceil_mode) for i in range(r)]
    check(all(o > 0 for o in out), op, ": output size is too small: input size ", spatial, " gives output size ", out)
    return out


def _like_output(r, op, t, x, out, arg):
    want = list(x.shape[:x.dim() - r]) + list(out)
    check(list(t.shape) == want, op, ": expected ", arg, " to have shape ", want, ", but got ", sizes(t))
    same_device(x, t, op, "input", arg)


def _pool_grad(op, grad, x):
    same_dtype(x, grad, op, "input", "grad_output")
    same_device(x, grad, op, "input", "grad_output")


def _pool_indices(op, indices):
    check(indices.dtype == torch.int64, op, ": expected indices to be int64, but got ", type_name(indices.dtype))


def max_pool(r, x, k, st, pad, dil, ceil_mode):
    _window(r, f"torch_dnn.max_pool{r}d", x, k, st, pad, dil, ceil_mode)


def max_pool_backward(r, grad, x, indices, k, st, pad, dil, ceil_mode):
    op = f"torch_dnn.max_pool{r}d_backward"
    out = _window(r, op, x, k, st, pad, dil, ceil_mode)
    _pool_grad(op, grad, x)
    _pool_indices(op, indices)
    _like_output(r, op, grad, x, out, "grad_output")
    _like_output(r, op, indices, x, out, "indices")


def _avg(r, op, x, k, st, pad, ceil_mode, divisor_override):
    out = _window(r, op, x, k, st, pad, [1] * r, ceil_mode, r == 3)
    check(divisor_override is None or divisor_override != 0, op, ": expected divisor_override to be non-zero")
    return out


def avg_pool(r, x, k, st, pad, ceil_mode, count_include_pad, divisor_override):
    _avg(r, f"torch_dnn.avg_pool{r}d", x, k, st, pad, ceil_mode, divisor_override)


def avg_pool_backward(r, grad, x, k, st, pad, ceil_mode, count_include_pad, divisor_override):
    op = f"torch_dnn.avg_pool{r}d_backward"
    out = _avg(r, op, x, k, st, pad, ceil_mode, divisor_override)
    _pool_grad(op, grad, x)
    _like_output(r, op, grad, x, out, "grad_output")


def _adaptive(r, op, x, out):
    _pool_input(r, x, op)
    _pool_list(out, r, op, "output_size", 0)


def adaptive_avg_pool(r, x, out):
    _adaptive(r, f"torch_dnn.adaptive_avg_pool{r}d", x, out)


def adaptive_max_pool(r, x, out):
    _adaptive(r, f"torch_dnn.adaptive_max_pool{r}d", x, out)


def adaptive_avg_pool_backward(r, grad, x):
    _adaptive_backward("adaptive_avg_pool", r, grad, x)


def adaptive_max_pool_backward(r, grad, x, indices):
    _adaptive_backward("adaptive_max_pool", r, grad, x, indices)


def _adaptive_backward(kind, r, grad, x, indices=None):
    op = f"torch_dnn.{kind}{r}d_backward"
    check(grad.dim() == x.dim(), op, ": expected grad_output to have the rank of input (", x.dim(), "), but got ",
          grad.dim())
    out = list(grad.shape[grad.dim() - r:])
    _adaptive(r, op, x, out)
    _pool_grad(op, grad, x)
    if given(indices):
        _pool_indices(op, indices)
    _like_output(r, op, grad, x, out, "grad_output")
    if given(indices):
        _like_output(r, op, indices, x, out, "indices")


def _lp(r, op, x, norm_type, k, st, ceil_mode):
    check(abs(norm_type) != float("inf") and norm_type == norm_type and norm_type != 0, op,
          ": expected norm_type to be finite and non-zero, but got ", num(norm_type))
    return _window(r, op, x, k, st, [0] * r, [1] * r, ceil_mode, r == 3)


def lp_pool(r, x, norm_type, k, st, ceil_mode):
    _lp(r, f"torch_dnn.lp_pool{r}d", x, norm_type, k, st, ceil_mode)


def lp_pool_backward(r, grad, x, output, norm_type, k, st, ceil_mode):
    op = f"torch_dnn.lp_pool{r}d_backward"
    out = _lp(r, op, x, norm_type, k, st, ceil_mode)
    _pool_grad(op, grad, x)
    same_dtype(x, output, op, "input", "output")
    _like_output(r, op, grad, x, out, "grad_output")
    _like_output(r, op, output, x, out, "output")


# ---- matmul (csrc/matmul/matmul_ops.h) ----

def _dims(t, want, op, arg):
    check(t.dim() == want, op, ": expected ", arg, " to be a ", want, "-D tensor, but got a ", t.dim(), "-D tensor")


def _pair(a, b, op, na, nb):
    floating(a, op, na)
    floating(b, op, nb)
    same_dtype(a, b, op, na, nb)
    same_device(a, b, op, na, nb)


def mm(a, b):
    op = "torch_dnn.mm"
    _dims(a, 2, op, "self")
    _dims(b, 2, op, "mat2")
    _pair(a, b, op, "self", "mat2")
    check(a.shape[1] == b.shape[0], op, ": self and mat2 shapes cannot be multiplied (", a.shape[0], "x", a.shape[1],
          " and ", b.shape[0], "x", b.shape[1], ")")


def bmm(a, b):
    op = "torch_dnn.bmm"
    _dims(a, 3, op, "self")
    _dims(b, 3, op, "mat2")
    _pair(a, b, op, "self", "mat2")
    check(a.shape[0] == b.shape[0], op, ": expected self and mat2 to have the same batch size, but got ", a.shape[0],
          " and ", b.shape[0])
    check(a.shape[2] == b.shape[1], op, ": self and mat2 shapes cannot be multiplied (", "x".join(map(str, a.shape)),
          " and ", "x".join(map(str, b.shape)), ")")


def _linear(x, w, op):
    floating(x, op, "input")
    check(x.dim() >= 1, op, ": expected input to have at least 1 dimension, but got a 0-D tensor")
    _dims(w, 2, op, "weight")
    _pair(x, w, op, "input", "weight")
    rows = 1
    for s in x.shape[:-1]:
        rows *= s
    check(x.shape[-1] == w.shape[1], op, ": input and weight.T shapes cannot be multiplied (", rows, "x", x.shape[-1],
          " and ", w.shape[1], "x", w.shape[0], ")")
    return list(x.shape[:-1]) + [w.shape[0]]


def _optional(t, x, shape, op, arg):
    if not given(t):
        return
    check(list(t.shape) == list(shape), op, ": expected ", arg, " of shape ", list(shape), ", but got ", sizes(t))
    same_dtype(x, t, op, "input", arg)
    same_device(x, t, op, "input", arg)


def linear(x, w, bias):
    op = "torch_dnn.linear"
    _linear(x, w, op)
    _optional(bias, x, [w.shape[0]], op, "bias")


def linear_act(x, w, bias, activation, residual):
    op = "torch_dnn.linear_act"
    shape = _linear(x, w, op)
    _optional(bias, x, [w.shape[0]], op, "bias")
    _optional(residual, x, shape, op, "residual")
    bias_act_kind(activation)


def linear_act_backward(grad, x, w, preact, activation, grad_preact):
    op = "torch_dnn.linear_act_backward"
    shape = _linear(x, w, op)
    _optional(grad, x, shape, op, "grad_output")
    _optional(grad_preact, x, shape, op, "grad_preact")
    bias_act_kind(activation)
    if activation not in ("none", "identity"):
        check(given(preact), op, ": activation '", activation,
              "' needs the pre-activation (preact), but none was given")
        _optional(preact, x, shape, op, "preact")
