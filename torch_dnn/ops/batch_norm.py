"""batch_norm family: batch_norm and batch_norm_add_act (y = act(bn(x) + residual)), forward and backward;
batch_norm_stats (per-channel mean and m2, for SyncBatchNorm). Fake kernels, autograd and functional wrappers."""
import torch

from torch_dnn.ops._registry import add_family

_ops = torch.ops.torch_dnn
ACTS = {None: 0, "identity": 0, "relu": 1, "silu": 2}


def _stat_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _out_like(x):
    return torch.empty_like(x, memory_format=torch._prims_common.suggest_memory_format(x))


def _fake_fwd(x):
    c = x.shape[1]
    return _out_like(x), x.new_empty((c,), dtype=_stat_dtype(x.dtype)), x.new_empty((c,), dtype=_stat_dtype(x.dtype))


@torch.library.register_fake("torch_dnn::batch_norm")
def _bn_fake(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _fake_fwd(x)


@torch.library.register_fake("torch_dnn::batch_norm_add_act")
def _bnaa_fake(x, residual, weight, bias, running_mean, running_var, training, momentum, eps, act):
    return _fake_fwd(x)


def _fake_grads(x, weight, bias, mask, with_res):
    c = x.shape[1]
    e = x.new_empty((0,))
    out = [_out_like(x) if mask[0] else e]
    if with_res:
        out.append(_out_like(x) if mask[1] else e)
    pm = mask[2:] if with_res else mask[1:]
    out.append(x.new_empty((c,), dtype=weight.dtype if weight is not None else x.dtype) if pm[0] else e)
    out.append(x.new_empty((c,), dtype=bias.dtype if bias is not None else x.dtype) if pm[1] else e)
    return tuple(out)


@torch.library.register_fake("torch_dnn::batch_norm_backward")
def _bn_bwd_fake(grad_out, x, weight, running_mean, running_var, save_mean, save_invstd, training, eps, mask):
    return _fake_grads(x, weight, None, mask, False)


@torch.library.register_fake("torch_dnn::batch_norm_add_act_backward")
def _bnaa_bwd_fake(grad_out, x, residual, weight, bias, save_mean, save_invstd, training, act, mask):
    return _fake_grads(x, weight, bias, mask, True)


@torch.library.register_fake("torch_dnn::batch_norm_stats")
def _stats_fake(x):
    c = x.shape[1]
    return x.new_empty((c,), dtype=_stat_dtype(x.dtype)), x.new_empty((c,), dtype=_stat_dtype(x.dtype))


# The forward ops mutate the running stats, and a mutating custom op cannot carry a register_autograd formula,
# so autograd goes through torch.autograd.Function (torch.compile traces it; the backward ops are functional).

class _BatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, rm, rv, training, momentum, eps):
        out, mean, invstd = _ops.batch_norm(x, weight, bias, rm, rv, training, momentum, eps)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.training, ctx.eps, ctx.has_bias = training, eps, bias is not None
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, mean, invstd = ctx.saved_tensors
        n = ctx.needs_input_grad
        mask = [n[0], weight is not None and n[1], ctx.has_bias and n[2]]
        g = grad_out
        dx, dw, db = _ops.batch_norm_backward(g, x, weight, None, None, mean, invstd, ctx.training, ctx.eps, mask)
        return (dx if mask[0] else None, dw if mask[1] else None, db if mask[2] else None, None, None, None, None, None)


class _BatchNormAddActFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, res, weight, bias, rm, rv, training, momentum, eps, act):
        out, mean, invstd = _ops.batch_norm_add_act(x, res, weight, bias, rm, rv, training, momentum, eps, act)
        ctx.save_for_backward(x, res, weight, bias, mean, invstd)
        ctx.training, ctx.act = training, act
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x, res, weight, bias, mean, invstd = ctx.saved_tensors
        n = ctx.needs_input_grad
        mask = [n[0], res is not None and n[1], weight is not None and n[2], bias is not None and n[3]]
        g = grad_out
        dx, dr, dw, db = _ops.batch_norm_add_act_backward(g, x, res, weight, bias, mean, invstd, ctx.training,
                                                          ctx.act, mask)
        return (dx if mask[0] else None, dr if mask[1] else None, dw if mask[2] else None, db if mask[3] else None,
                None, None, None, None, None, None)


add_family("batch_norm", ["batch_norm", "batch_norm_backward", "batch_norm_add_act", "batch_norm_add_act_backward",
                          "batch_norm_stats"])


def _verify_batch_size(input, training):
    # as torch.nn.functional.batch_norm
    if training:
        size = input.size()
        prod = size[0]
        for s in size[2:]:
            prod *= s
        if prod == 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    _verify_batch_size(input, training)
    return _BatchNormFn.apply(input, weight, bias, running_mean, running_var, bool(training), float(momentum),
                              float(eps))


def batch_norm_add_act(input, running_mean, running_var, weight=None, bias=None, residual=None, act="relu",
                       training=False, momentum=0.1, eps=1e-5):
    """act(batch_norm(input) + residual), act in {None/'identity', 'relu', 'silu'}; residual optional."""
    if act not in ACTS:
        raise ValueError(f"batch_norm_add_act: act must be one of None, 'identity', 'relu', 'silu', got {act!r}")
    _verify_batch_size(input, training)
    return _BatchNormAddActFn.apply(input, residual, weight, bias, running_mean, running_var, bool(training),
                                    float(momentum), float(eps), ACTS[act])


FUNCTIONAL = ["batch_norm", "batch_norm_add_act"]
