"""batch_norm family: batch_norm and batch_norm_add_act (y = act(bn(x) + residual)), forward and backward;
batch_norm_stats (per-channel mean and m2), batch_norm_elemt, batch_norm_backward_reduce and
batch_norm_backward_elemt (SyncBatchNorm's pieces; its autograd.Function is in torch_dnn/nn/batch_norm.py).
Fake kernels, autograd and functional wrappers."""
import torch

from torch_dnn.ops._layout import iter_empty
from torch_dnn.ops._norm_common import stat_dtype
from torch_dnn.ops._registry import add_family, needs_autograd, ops
from torch_dnn.ops import _checks

_ops = ops  # torch.ops.torch_dnn, below autograd when no gradient is needed
ACTS = {None: 0, "identity": 0, "relu": 1, "silu": 2}


def _out_like(x):
    return torch.empty_like(x, memory_format=torch._prims_common.suggest_memory_format(x))


# PyTorch's CUDA layouts where they differ from _out_like: dx_like, elemt_out_like and backward_elemt_dx_like in
# csrc/batch_norm/batch_norm_ops.h (the real kernels' rules, with the PyTorch sources behind them).

def _cuda_channels_last_kernels(t):
    return (t.is_contiguous(memory_format=torch.channels_last) or t.is_contiguous(memory_format=torch.channels_last_3d)
            or (t.is_contiguous() and t.stride(1) == 1))


def _fits_32bit_index(t):
    limit = 2**31 - 1
    if t.numel() >= limit:
        return False
    offset, linear = 0, t.numel() - 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        if linear <= 0:
            break
        offset += (linear % size) * stride
        linear //= size
    return offset < limit


def _contiguous(x):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _dx_like(x, training):
    """The input gradient: contiguous in evaluation on CUDA (native_batch_norm_backward's CUDA paths)."""
    return _contiguous(x) if x.device.type == "cuda" and not training else _out_like(x)


def _elemt_out_like(x):
    return torch.empty_like(x) if x.device.type == "cuda" else _out_like(x)


def _backward_elemt_dx_like(grad_out, x):
    if x.device.type != "cuda":
        return _out_like(x)
    if _fits_32bit_index(grad_out) and _cuda_channels_last_kernels(grad_out) and _cuda_channels_last_kernels(x):
        return torch.empty_like(x)
    return _contiguous(x)


def _fake_fwd(x):
    c = x.shape[1]
    return _out_like(x), x.new_empty((c,), dtype=stat_dtype(x.dtype)), x.new_empty((c,), dtype=stat_dtype(x.dtype))


@torch.library.register_fake("torch_dnn::batch_norm")
def _bn_fake(x, weight, bias, running_mean, running_var, training, momentum, eps):
    _checks.batch_norm("batch_norm", x, None, weight, bias, running_mean, running_var, training)
    return _fake_fwd(x)


@torch.library.register_fake("torch_dnn::batch_norm_add_act")
def _bnaa_fake(x, residual, weight, bias, running_mean, running_var, training, momentum, eps, act):
    _checks.batch_norm("batch_norm_add_act", x, residual, weight, bias, running_mean, running_var, training, act)
    return _fake_fwd(x)


def _fake_grads(x, weight, bias, mask, with_res, training, grad_out=None, act=0):
    c = x.shape[1]
    e = x.new_empty((0,))
    out = [_dx_like(x, training) if mask[0] else e]
    if with_res:  # residual_grad_like in csrc/batch_norm/batch_norm_ops.h
        out.append((_out_like(x) if act == 1 else iter_empty(grad_out, x)) if mask[1] else e)
    pm = mask[2:] if with_res else mask[1:]
    out.append(x.new_empty((c,), dtype=weight.dtype if weight is not None else x.dtype) if pm[0] else e)
    # d_bias: the bias's dtype, else the weight's (batch_norm_backward takes no bias), else the input's
    bias_dtype = bias.dtype if bias is not None else weight.dtype if weight is not None else x.dtype
    out.append(x.new_empty((c,), dtype=bias_dtype) if pm[1] else e)
    return tuple(out)


@torch.library.register_fake("torch_dnn::batch_norm_backward")
def _bn_bwd_fake(grad_out, x, weight, running_mean, running_var, save_mean, save_invstd, training, eps, mask):
    _checks.batch_norm_backward(grad_out, x, weight, running_mean, running_var, save_mean, save_invstd)
    return _fake_grads(x, weight, None, mask, False, training)


@torch.library.register_fake("torch_dnn::batch_norm_add_act_backward")
def _bnaa_bwd_fake(grad_out, x, residual, weight, bias, save_mean, save_invstd, training, act, mask):
    _checks.batch_norm_add_act_backward(grad_out, x, residual, weight, bias, save_mean, save_invstd)
    return _fake_grads(x, weight, bias, mask, True, training, grad_out, act)


@torch.library.register_fake("torch_dnn::batch_norm_stats")
def _stats_fake(x):
    _checks.batch_norm_stats(x)
    c = x.shape[1]
    return x.new_empty((c,), dtype=stat_dtype(x.dtype)), x.new_empty((c,), dtype=stat_dtype(x.dtype))


@torch.library.register_fake("torch_dnn::batch_norm_elemt")
def _elemt_fake(x, mean, invstd, weight, bias):
    _checks.batch_norm_elemt(x, mean, invstd, weight, bias)
    return _elemt_out_like(x)


@torch.library.register_fake("torch_dnn::batch_norm_backward_reduce")
def _bwd_reduce_fake(grad_out, x, mean, invstd):
    _checks.batch_norm_backward_reduce(grad_out, x, mean, invstd)
    c = x.shape[1]
    return x.new_empty((c,), dtype=stat_dtype(x.dtype)), x.new_empty((c,), dtype=stat_dtype(x.dtype))


@torch.library.register_fake("torch_dnn::batch_norm_backward_elemt")
def _bwd_elemt_fake(grad_out, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    _checks.batch_norm_backward_elemt(grad_out, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count)
    return _backward_elemt_dx_like(grad_out, x)


# The forward ops mutate the running stats, and a mutating custom op cannot carry a register_autograd formula.
# Eager autograd and torch.compile's tracing run the ops' C++ Autograd kernels (csrc/batch_norm/batch_norm_autograd.cpp:
# no Python on the backward, the host cost of a training step); torch.func's transforms go through the
# torch.autograd.Functions below, the same formula (the backward ops are functional). The Functions take the form
# torch.func's transforms accept (forward without ctx, setup_context): they return the saved statistics as
# non-differentiable outputs, which the wrappers drop.

class _BatchNormFn(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, weight, bias, rm, rv, training, momentum, eps):
        return _ops.batch_norm(x, weight, bias, rm, rv, training, momentum, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias, _, _, training, _, eps = inputs
        _, mean, invstd = output
        ctx.mark_non_differentiable(mean, invstd)
        ctx.set_materialize_grads(False)  # no zero tensors for the statistics' grads (two fills a step)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.training, ctx.eps, ctx.has_bias = training, eps, bias is not None

    @staticmethod
    def backward(ctx, grad_out, _grad_mean, _grad_invstd):
        if grad_out is None:  # the output took no part in what is differentiated
            return (None,) * 8
        x, weight, mean, invstd = ctx.saved_tensors
        n = ctx.needs_input_grad
        mask = [n[0], weight is not None and n[1], ctx.has_bias and n[2]]
        g = grad_out
        dx, dw, db = _ops.batch_norm_backward(g, x, weight, None, None, mean, invstd, ctx.training, ctx.eps, mask)
        return (dx if mask[0] else None, dw if mask[1] else None, db if mask[2] else None, None, None, None, None, None)


class _BatchNormAddActFn(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, res, weight, bias, rm, rv, training, momentum, eps, act):
        return _ops.batch_norm_add_act(x, res, weight, bias, rm, rv, training, momentum, eps, act)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, res, weight, bias, _, _, training, _, _, act = inputs
        _, mean, invstd = output
        ctx.mark_non_differentiable(mean, invstd)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, res, weight, bias, mean, invstd)
        ctx.training, ctx.act = training, act

    @staticmethod
    def backward(ctx, grad_out, _grad_mean, _grad_invstd):
        if grad_out is None:
            return (None,) * 10
        x, res, weight, bias, mean, invstd = ctx.saved_tensors
        n = ctx.needs_input_grad
        mask = [n[0], res is not None and n[1], weight is not None and n[2], bias is not None and n[3]]
        g = grad_out
        dx, dr, dw, db = _ops.batch_norm_add_act_backward(g, x, res, weight, bias, mean, invstd, ctx.training,
                                                          ctx.act, mask)
        return (dx if mask[0] else None, dr if mask[1] else None, dw if mask[2] else None, db if mask[3] else None,
                None, None, None, None, None, None)


def _sync_backend_gathers_list(process_group):
    import torch.distributed as dist
    return dist.get_backend(process_group) == "gloo"  # gloo has no all_gather_into_tensor


def _sync_gather(row, process_group, world_size):
    """(world_size, len(row)): every process's row, in rank order."""
    import torch.distributed as dist
    if _sync_backend_gathers_list(process_group):
        rows = [torch.empty_like(row) for _ in range(world_size)]
        dist.all_gather(rows, row, group=process_group)
        return torch.stack(rows)
    table = row.new_empty((world_size, row.numel()))
    dist.all_gather_into_tensor(table, row, group=process_group)
    return table


def _chan_merge(table, c):
    """Merge rows (count, mean[c], m2[c]) in rank order with Chan's parallel formula: the same order, so the
    same bits, on every process. Rows with count 0 (empty local batches) leave the running result unchanged.
    No host synchronisation (counts stay tensors)."""
    n, mean, m2 = table[0, 0], table[0, 1:c + 1], table[0, c + 1:]
    for r in range(1, table.shape[0]):
        nb, mb, m2b = table[r, 0], table[r, 1:c + 1], table[r, c + 1:]
        tot = n + nb
        frac = torch.where(tot > 0, nb / tot.clamp(min=1), torch.zeros_like(tot))
        delta = mb - mean
        mean = mean + delta * frac
        m2 = m2 + m2b + delta * delta * (n * frac)
        n = tot
    return n, mean, m2


class _SyncBatchNormFn(torch.autograd.Function):
    """SyncBatchNorm in training: local (mean, m2) by batch_norm_stats, all_gather of (count, mean, m2), Chan merge
    in float64, running stats updated as torch.nn.SyncBatchNorm does, batch_norm_elemt. Backward: local
    batch_norm_backward_reduce, all_reduce(sum) of (sum_dy, sum_dy_xmu), batch_norm_backward_elemt over the
    global count. grad_weight / grad_bias are the local sums, as torch.nn.SyncBatchNorm returns them (DDP
    all-reduces parameter gradients)."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_group, world_size):
        c = x.shape[1]
        sd = stat_dtype(x.dtype)
        local = x.numel() // c
        if local > 0:
            mean, m2 = _ops.batch_norm_stats(x)
        else:
            mean = m2 = x.new_zeros((c,), dtype=sd)
        row = torch.cat([x.new_full((1,), float(local), dtype=torch.float64), mean.double(), m2.double()])
        n, gmean, gm2 = _chan_merge(_sync_gather(row, process_group, world_size), c)
        invstd = (gm2 / n + eps).rsqrt()
        if running_mean is not None:
            unbiased = gm2 / (n - 1)  # n == 1: 0/0 = NaN, as PyTorch
            running_mean.mul_(1.0 - momentum).add_(gmean.to(running_mean.dtype), alpha=momentum)
            running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        gmean, invstd = gmean.to(sd), invstd.to(sd)
        out = _ops.batch_norm_elemt(x, gmean, invstd, weight, bias)
        ctx.save_for_backward(x, weight, gmean, invstd, n)
        ctx.process_group, ctx.bias_dtype = process_group, (bias.dtype if bias is not None else None)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        import torch.distributed as dist
        x, weight, mean, invstd, n = ctx.saved_tensors
        need = ctx.needs_input_grad
        dx = dw = db = None
        if x.numel() > 0:
            sum_dy, sum_dy_xmu = _ops.batch_norm_backward_reduce(grad_out, x, mean, invstd)
            if weight is not None and need[1]:
                dw = (sum_dy_xmu * invstd).to(weight.dtype)
            if ctx.bias_dtype is not None and need[2]:
                db = sum_dy.to(ctx.bias_dtype)
            if need[0]:
                both = torch.cat([sum_dy, sum_dy_xmu])
                dist.all_reduce(both, dist.ReduceOp.SUM, group=ctx.process_group)
                sum_dy, sum_dy_xmu = both.split(x.shape[1])
                # the global count divides on the device (a 0-dim tensor keeps the sums' dtype), so the backward
                # needs no host synchronisation; the op then divides by 1, the same arithmetic as by n
                dx = _ops.batch_norm_backward_elemt(grad_out, x, mean, invstd, weight, sum_dy / n, sum_dy_xmu / n, 1)
        elif need[0]:
            # an empty local batch still joins the all_reduce that its peers make; its gradients stay None
            both = x.new_zeros((2 * x.shape[1],), dtype=mean.dtype)
            dist.all_reduce(both, dist.ReduceOp.SUM, group=ctx.process_group)
        return dx, dw, db, None, None, None, None, None, None


def sync_batch_norm(input, running_mean, running_var, weight, bias, momentum, eps, process_group, world_size):
    """SyncBatchNorm's training step over `process_group` (world_size > 1): every process calls it together."""
    return _SyncBatchNormFn.apply(input, weight, bias, running_mean, running_var, float(eps), float(momentum),
                                  process_group, int(world_size))


add_family("batch_norm", ["batch_norm", "batch_norm_backward", "batch_norm_add_act", "batch_norm_add_act_backward",
                          "batch_norm_stats", "batch_norm_elemt", "batch_norm_backward_reduce",
                          "batch_norm_backward_elemt"])


def _verify_batch_size(input, training):
    # as torch.nn.functional.batch_norm
    if training:
        size = input.size()
        prod = size[0]
        for s in size[2:]:
            prod *= s
        if prod == 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")


def _python_autograd(*tensors) -> bool:
    """Whether autograd must go through the Python Function: under a torch.func transform (functorch refuses C++
    autograd Functions). Otherwise, eager or under torch.compile's tracing, the op itself records autograd by its C++
    kernel (AOTAutograd traces it, running-statistics mutation included)."""
    return torch._C._are_functorch_transforms_active() and needs_autograd(*tensors)


def _empty_batch_norm(input, weight, bias):
    """PyTorch's batch_norm of an empty input (of any rank, whatever the statistics and parameters' shapes): a copy
    of it times weight[0] plus bias[0], so that the parameters stay in the graph (their gradients are zeros);
    running statistics untouched."""
    out = input.clone()
    if weight is not None:
        out = out * weight[0]
    if bias is not None:
        out = out + bias[0]
    return out


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    _verify_batch_size(input, training)
    if input.numel() == 0:
        return _empty_batch_norm(input, weight, bias)
    args = (input, weight, bias, running_mean, running_var, bool(training), float(momentum), float(eps))
    if not _python_autograd(input, weight, bias):
        return _ops.batch_norm(*args)[0]
    return _BatchNormFn.apply(*args)[0]


def batch_norm_add_act(input, running_mean, running_var, weight=None, bias=None, residual=None, act="relu",
                       training=False, momentum=0.1, eps=1e-5):
    """act(batch_norm(input) + residual), act in {None/'identity', 'relu', 'silu'}; residual optional."""
    if act not in ACTS:
        raise ValueError(f"batch_norm_add_act: act must be one of None, 'identity', 'relu', 'silu', got {act!r}")
    _verify_batch_size(input, training)
    args = (input, residual, weight, bias, running_mean, running_var, bool(training), float(momentum), float(eps),
            ACTS[act])
    if not _python_autograd(input, residual, weight, bias):
        return _ops.batch_norm_add_act(*args)[0]
    return _BatchNormAddActFn.apply(*args)[0]


FUNCTIONAL = ["batch_norm", "batch_norm_add_act"]


def selfcheck_add_act_relu(inputs):
    """The self-check's batch_norm_add_act(relu) training row on inputs [x, weight, bias, residual]: Verdicts.
    An output whose exact pre-activation lies within rounding of relu's kink has its mask decided by the last bit,
    ours and PyTorch's each their own way (about one draw in a thousand of the row's inputs): a flipped mask moves
    that element's d_input and d_residual by its whole upstream gradient, which such outputs therefore get as zero,
    as the tests do (tests/test_batch_norm.py)."""
    import torch.nn.functional as TF

    from torch_dnn.testing import check_against_torch, grad_off_kinks

    x, w, b, r = inputs
    pre = TF.batch_norm(x.double(), None, None, w.double(), b.double(), True) + r.double()
    return check_against_torch(lambda x, w, b, r: batch_norm_add_act(x, None, None, w, b, r, "relu", True),
                               lambda x, w, b, r: torch.relu(TF.batch_norm(x, None, None, w, b, True) + r),
                               inputs, name="batch_norm_add_act",
                               grad_output=grad_off_kinks(pre, "relu", x.dtype, lambda k: 16 * torch.finfo(x.dtype).eps))


def selfcheck_cases():
    """python -m torch_dnn's rows of this family: (op, callable(device, dtype) -> list of Verdicts)."""
    import torch.nn.functional as TF

    from torch_dnn.testing import check_against_torch, random_like_case

    out = []
    for cl in (False, True):
        def make(d, t, cl=cl):
            x = random_like_case((4, 16, 13, 11), t, d)
            x = x.contiguous(memory_format=torch.channels_last) if cl else x
            return [x, random_like_case((16,), t, d, low=0.5, high=1.5), random_like_case((16,), t, d),
                    random_like_case((4, 16, 13, 11), t, d)]
        out.append((f"batch_norm train{' NHWC' if cl else ''}", lambda d, t, m=make: check_against_torch(
            lambda x, w, b, r: batch_norm(x, None, None, w, b, True), lambda x, w, b, r: TF.batch_norm(x, None, None, w, b, True),
            m(d, t), name="batch_norm")))
        out.append((f"batch_norm_add_act(relu) train{' NHWC' if cl else ''}", lambda d, t, m=make: selfcheck_add_act_relu(m(d, t))))
    return out
