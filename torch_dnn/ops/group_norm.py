"""group_norm family: group_norm and instance_norm (group_norm with one channel per group, plus running
statistics). Fake kernels (mirroring the C++ layout rule in csrc/group_norm/group_norm_ops.h), autograd
(backward = torch_dnn ops), CUDA autocast to float32 (as PyTorch autocasts group_norm), and functional wrappers
mirroring torch.nn.functional."""
import torch
from torch._prims_common import suggest_memory_format

from torch_dnn.ops._norm_common import stat_dtype, dtype_of, param_grad
from torch_dnn.ops._registry import add_family, ops, register_autograd
from torch_dnn.ops import _checks

_ops = ops  # torch.ops.torch_dnn, below autograd when no gradient is needed


# ---- layout: mirrors dense_input in csrc/group_norm/group_norm_ops.h ----

def _dense_input(x):
    """On the CPU: x when NCHW-contiguous or channels_last(_3d)-contiguous, else a copy in the layout PyTorch
    suggests; elsewhere contiguous (PyTorch's native_group_norm on CUDA)."""
    if x.is_contiguous() or x.device.type != "cpu":
        return x.contiguous()
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        return x
    if x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d):
        return x
    return x.contiguous(memory_format=suggest_memory_format(x))


@torch.library.register_fake("torch_dnn::group_norm")
def _group_norm_fake(x, num_groups, weight, bias, eps):
    _checks.group_norm("group_norm", x, num_groups, weight, bias)
    stats = (x.shape[0], num_groups)
    return (torch.empty_like(_dense_input(x)), x.new_empty(stats, dtype=stat_dtype(x.dtype)),
            x.new_empty(stats, dtype=stat_dtype(x.dtype)))


@torch.library.register_fake("torch_dnn::group_norm_with_stats")
def _group_norm_with_stats_fake(x, num_groups, mean, rstd, weight, bias):
    _checks.group_norm("group_norm_with_stats", x, num_groups, weight, bias, mean, rstd)
    return torch.empty_like(_dense_input(x))


@torch.library.register_fake("torch_dnn::group_norm_backward")
def _group_norm_backward_fake(grad_out, x, mean, rstd, weight, num_groups, stats_given, output_mask):
    _checks.group_norm_backward(grad_out, x, mean, rstd, weight, num_groups)
    dx = torch.empty_like(_dense_input(x)) if output_mask[0] else x.new_empty((0,))
    return (dx,) + tuple(x.new_empty((x.shape[1],)) if m else x.new_empty((0,)) for m in output_mask[1:])


# ---- autograd: the backward op computes in the input's dtype; parameter grads are cast to the parameter's ----

def _gn_setup(ctx, inputs, output):
    x, num_groups, weight, bias, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, mean, rstd, weight)
    ctx.num_groups, ctx.has_bias, ctx.bias_dtype = num_groups, bias is not None, dtype_of(bias)


def _gn_backward(ctx, grad_out, _grad_mean, _grad_rstd):
    x, mean, rstd, weight = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[2],
            ctx.has_bias and ctx.needs_input_grad[3]]
    dx, dw, db = _ops.group_norm_backward(grad_out, x, mean, rstd, weight, ctx.num_groups, False, mask)
    return ((dx if mask[0] else None), None, param_grad(dw, dtype_of(weight), mask[1]),
            param_grad(db, ctx.bias_dtype, mask[2]), None)


def _gn_stats_setup(ctx, inputs, output):
    x, num_groups, mean, rstd, weight, bias = inputs
    ctx.save_for_backward(x, mean, rstd, weight)
    ctx.num_groups, ctx.has_bias, ctx.bias_dtype = num_groups, bias is not None, dtype_of(bias)


def _gn_stats_backward(ctx, grad_out):
    # the statistics are constants (running statistics): no gradient reaches them, as in PyTorch's batch_norm
    x, mean, rstd, weight = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[4],
            ctx.has_bias and ctx.needs_input_grad[5]]
    dx, dw, db = _ops.group_norm_backward(grad_out, x, mean, rstd, weight, ctx.num_groups, True, mask)
    return ((dx if mask[0] else None), None, None, None, param_grad(dw, dtype_of(weight), mask[1]),
            param_grad(db, ctx.bias_dtype, mask[2]))


# the same formulas are the C++ kernels of csrc/group_norm/group_norm_autograd.cpp
register_autograd("torch_dnn::group_norm", _gn_backward, setup_context=_gn_setup, cpp_kernel=True)
register_autograd("torch_dnn::group_norm_with_stats", _gn_stats_backward, setup_context=_gn_stats_setup,
                  cpp_kernel=True)
torch.library.register_autocast("torch_dnn::group_norm", "cuda", torch.float32)
torch.library.register_autocast("torch_dnn::group_norm_with_stats", "cuda", torch.float32)

add_family("group_norm", ["group_norm", "group_norm_with_stats", "group_norm_backward"])


# ---- functional wrappers (torch.nn.functional signatures) ----

def _check_running(name, t, channels):
    if t is not None and (t.dim() != 1 or t.shape[0] != channels):
        raise RuntimeError(f"torch_dnn.instance_norm: expected {name} of shape [{channels}] (the input's channels), "
                           f"but got {list(t.shape)}")


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.dim()}")
    if num_groups > 0:  # PyTorch's check (its message); the op reports bad num_groups itself
        torch.nn.functional._verify_batch_size(
            [input.size(0) * input.size(1) // num_groups, num_groups] + list(input.size()[2:]))
    return _ops.group_norm(input, num_groups, weight, bias, float(eps))[0]


def _update_running_stats(running_mean, running_var, mean, rstd, momentum, eps, spatial):
    """PyTorch's instance_norm update: per-instance statistics blended into the running ones as batch_norm does
    (running = (1 - momentum) * running + momentum * stat, the variance unbiased), then averaged over the batch."""
    with torch.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.mean(0).to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            r = rstd.double()
            var = (1.0 / (r * r) - eps).clamp_min(0) * (spatial / max(spatial - 1, 1))
            running_var.mul_(1 - momentum).add_(var.mean(0).to(running_var.dtype), alpha=momentum)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    if use_input_stats:
        torch.nn.functional._verify_spatial_size(input.size())
    if input.dim() < 2:
        raise RuntimeError(f"torch_dnn.instance_norm: expected input of shape (N, C, *), but got {list(input.shape)}")
    # PyTorch's instance_norm normalises input.contiguous(): its result and gradient are contiguous in any layout
    input = input.contiguous()
    channels = input.shape[1]
    _check_running("running_mean", running_mean, channels)
    _check_running("running_var", running_var, channels)
    if use_input_stats:
        # PyTorch's instance_norm runs in the input's dtype under autocast (group_norm autocasts to float32)
        with torch.autocast(device_type=input.device.type, enabled=False):
            out, mean, rstd = _ops.group_norm(input, channels, weight, bias, float(eps))
        if running_mean is not None or running_var is not None:
            spatial = input.numel() // max(input.shape[0] * channels, 1)
            if input.shape[0] > 0:
                _update_running_stats(running_mean, running_var, mean, rstd, momentum, eps, spatial)
        return out
    if running_mean is None or running_var is None:
        raise RuntimeError("torch_dnn.instance_norm: expected running_mean and running_var when use_input_stats "
                           "is False")
    stat = stat_dtype(input.dtype)
    n = input.shape[0]
    mean = running_mean.detach().to(stat).expand(n, channels)
    rstd = torch.rsqrt(running_var.detach().to(stat) + eps).expand(n, channels)
    with torch.autocast(device_type=input.device.type, enabled=False):
        return _ops.group_norm_with_stats(input, channels, mean, rstd, weight, bias)


FUNCTIONAL = ["group_norm", "instance_norm"]


def selfcheck_cases():
    """python -m torch_dnn's rows of this family: (op, callable(device, dtype) -> list of Verdicts)."""
    import torch.nn.functional as TF

    from torch_dnn.testing import check_against_torch, random_like_case

    pairs = {
        "group_norm(4)": (lambda x, w, b: group_norm(x, 4, w, b), lambda x, w, b: TF.group_norm(x, 4, w, b)),
        "instance_norm": (lambda x, w, b: instance_norm(x, weight=w, bias=b),
                          lambda x, w, b: TF.instance_norm(x, weight=w, bias=b)),
    }
    out = []
    for name, (ours, theirs) in pairs.items():
        for cl in (False, True):
            def make(d, t, cl=cl):
                x = random_like_case((2, 16, 13, 11), t, d)
                x = x.contiguous(memory_format=torch.channels_last) if cl else x
                return [x, random_like_case((16,), t, d, low=0.5, high=1.5), random_like_case((16,), t, d)]
            out.append((f"{name}{' NHWC' if cl else ''}", lambda d, t, o=ours, p=theirs, m=make:
                        check_against_torch(o, p, m(d, t), name="group_norm")))
    return out
