"""Matmul family: mm, bmm, linear_act (act(x @ W.T + bias) + residual in one kernel) and their backward.
Fake kernels, autograd (backward = torch_dnn ops), and functional wrappers: matmul (torch.matmul's semantics,
a Python composite over mm/bmm and views), mm, bmm, linear (F.linear) and linear_act. Autocast is registered
in C++ (csrc/matmul/matmul.cpp) with aten::mm's policy: inputs cast to the autocast dtype.

float32 follows torch.backends.cuda.matmul.allow_tf32 as PyTorch does (allow_tf32 <=>
torch.get_float32_matmul_precision() != "highest"): the wrappers read it and pass the answer to the op."""
import math

import torch

from torch_dnn.ops._registry import _is_compiling, add_family, needs_autograd, ops, register_autograd
from torch_dnn.ops import _checks

_ops = ops  # torch.ops.torch_dnn, below autograd when no gradient is needed
_get_allow_tf32 = getattr(torch._C, "_get_cublas_allow_tf32", lambda: bool(torch.backends.cuda.matmul.allow_tf32))

# bias_act's activation names (torch_dnn.ops.activation.BIAS_ACTS); "identity" is another name of "none"
NO_ACT = ("none", "identity")


def _needs_preact(activation) -> bool:
    return activation not in NO_ACT


# ---- fake kernels: mirror csrc/matmul/matmul_ops.h (outputs are fresh contiguous tensors) ----

@torch.library.register_fake("torch_dnn::mm")
def _mm_fake(a, b, *, allow_tf32=False):
    _checks.mm(a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("torch_dnn::bmm")
def _bmm_fake(a, b, *, allow_tf32=False):
    _checks.bmm(a, b)
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]))


@torch.library.register_fake("torch_dnn::linear")
def _linear_fake(x, w, bias=None, *, allow_tf32=False):
    _checks.linear(x, w, bias)
    return x.new_empty(tuple(x.shape[:-1]) + (w.shape[0],))


@torch.library.register_fake("torch_dnn::linear_act")
def _linear_act_fake(x, w, bias=None, activation="none", residual=None, act_a=None, act_b=None, *,
                     allow_tf32=False, save_preact=False):
    _checks.linear_act(x, w, bias, activation, residual)
    shape = tuple(x.shape[:-1]) + (w.shape[0],)
    pre = x.new_empty(shape) if save_preact and _needs_preact(activation) else x.new_empty((0,))
    return x.new_empty(shape), pre


@torch.library.register_fake("torch_dnn::linear_act_backward")
def _linear_act_backward_fake(grad, x, w, preact, activation, act_a, act_b, grad_preact, output_mask, *,
                              allow_tf32=False):
    _checks.linear_act_backward(grad, x, w, preact, activation, grad_preact)
    # the gradients' layouts: PyTorch's (linear_act_backward in csrc/matmul/matmul_ops.h)
    dx_cols = x.dim() == 2 and _column_major(x)
    dw_cols = not _column_major(w.t())
    return ((x.new_empty(x.shape[::-1]).t() if dx_cols else x.new_empty(x.shape)) if output_mask[0]
            else x.new_empty((0,)),
            (x.new_empty(w.shape[::-1]).t() if dw_cols else x.new_empty(w.shape)) if output_mask[1]
            else x.new_empty((0,)),
            x.new_empty((w.shape[0],)) if output_mask[2] else x.new_empty((0,)))


# ---- autograd ----

def _mm_setup(ctx, inputs, keyword_only_inputs, output):
    ctx.save_for_backward(*inputs)
    ctx.tf32 = keyword_only_inputs.get("allow_tf32", False)


def _column_major(m):
    """PyTorch's test for returning a matrix's gradient column-major (mm_mat1_backward / mm_mat2_backward)."""
    return m.stride(0) == 1 and m.stride(1) == m.shape[0]


def _mm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    da = db = None
    if ctx.needs_input_grad[0]:
        da = (_ops.mm(b, grad.t(), allow_tf32=ctx.tf32).t() if _column_major(a)
              else _ops.mm(grad, b.t(), allow_tf32=ctx.tf32))
    if ctx.needs_input_grad[1]:
        db = (_ops.mm(grad.t(), a, allow_tf32=ctx.tf32).t() if _column_major(b)
              else _ops.mm(a.t(), grad, allow_tf32=ctx.tf32))
    return da, db


def _bmm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    da = _ops.bmm(grad, b.transpose(1, 2), allow_tf32=ctx.tf32) if ctx.needs_input_grad[0] else None
    db = _ops.bmm(a.transpose(1, 2), grad, allow_tf32=ctx.tf32) if ctx.needs_input_grad[1] else None
    return da, db


# the formulas below are also the C++ kernels of csrc/matmul/matmul_autograd.cpp
register_autograd("torch_dnn::mm", _mm_backward, setup_context=_mm_setup, cpp_kernel=True)
register_autograd("torch_dnn::bmm", _bmm_backward, setup_context=_mm_setup, cpp_kernel=True)


def _linear_setup(ctx, inputs, keyword_only_inputs, output):
    x, w, bias = inputs
    ctx.tf32 = keyword_only_inputs.get("allow_tf32", False)
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x, w)


def _linear_backward(ctx, grad):
    x, w = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]]
    dx, dw, db = _ops.linear_act_backward(grad, x, w, None, "none", None, None, None, mask, allow_tf32=ctx.tf32)
    return dx if mask[0] else None, dw if mask[1] else None, db if mask[2] else None


register_autograd("torch_dnn::linear", _linear_backward, setup_context=_linear_setup, cpp_kernel=True)


def _linear_act_setup(ctx, inputs, keyword_only_inputs, output):
    x, w, bias, activation, residual, act_a, act_b = inputs
    _, pre = output
    ctx.activation, ctx.act_a, ctx.act_b = activation, act_a, act_b
    ctx.tf32 = keyword_only_inputs.get("allow_tf32", False)
    ctx.has_bias, ctx.has_residual = bias is not None, residual is not None
    ctx.saved_preact = keyword_only_inputs.get("save_preact", False) and _needs_preact(activation)
    ctx.save_for_backward(x, w, bias, pre if ctx.saved_preact else None)
    ctx.set_materialize_grads(False)


def _linear_act_backward(ctx, grad, grad_preact):
    x, w, bias, pre = ctx.saved_tensors
    mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.has_bias and ctx.needs_input_grad[2]]
    if grad is None:
        grad = x.new_zeros(tuple(x.shape[:-1]) + (w.shape[0],))
    d_res = grad if ctx.has_residual and ctx.needs_input_grad[4] else None
    if not any(mask):
        return None, None, None, None, d_res, None, None
    if _needs_preact(ctx.activation) and pre is None:
        # saved without the pre-activation (the op was called with save_preact=False): recompute it
        pre = _ops.linear_act(x, w, bias, "none", allow_tf32=ctx.tf32)[0]
    if not ctx.saved_preact:
        grad_preact = None
    dx, dw, db = _ops.linear_act_backward(grad, x, w, pre, ctx.activation, ctx.act_a, ctx.act_b, grad_preact, mask,
                                          allow_tf32=ctx.tf32)
    return (dx if mask[0] else None, dw if mask[1] else None, db if mask[2] else None, None, d_res, None, None)


register_autograd("torch_dnn::linear_act", _linear_act_backward, setup_context=_linear_act_setup, cpp_kernel=True)

add_family("matmul", ["mm", "bmm", "linear", "linear_act", "linear_act_backward"])


# ---- functional wrappers ----

def allow_tf32() -> bool:
    """Whether float32 GEMMs may use TF32 tensor cores: PyTorch's own switch,
    torch.backends.cuda.matmul.allow_tf32 (<=> torch.get_float32_matmul_precision() != "highest"). Read through
    the backends flag because torch.compile traces it (a guarded constant) where it cannot trace the string."""
    if _is_compiling():
        return bool(torch.backends.cuda.matmul.allow_tf32)
    return _get_allow_tf32()  # the flag's own getter, without the module's __getattr__ (host time of small GEMMs)


def gemm_paths(device=None) -> list:
    """The CUDA GEMM paths usable on `device` (default: the current CUDA device): "sm80" (mma.sync, any sm_80+
    GPU) and "sm90" (wgmma + TMA) when this build has it and the device is a Hopper GPU. [] without CUDA.
    TORCH_DNN_GEMM_PATH=auto|sm80|sm90 picks one (for tests and benchmarks; auto: sm90 where it can)."""
    built = list(_ops.gemm_paths())
    if not built or not torch.cuda.is_available():
        return []
    major, minor = torch.cuda.get_device_capability(device)
    out = []
    if "sm80" in built and major >= 8:
        out.append("sm80")
    if "sm90" in built and (major, minor) == (9, 0):
        out.append("sm90")
    return out


def mm(input, mat2):
    return _ops.mm(input, mat2, allow_tf32=allow_tf32())


def bmm(input, mat2):
    return _ops.bmm(input, mat2, allow_tf32=allow_tf32())


def _rows_foldable(t) -> bool:
    """Whether the leading dims of t [..., M, K] merge into one by a view (t.reshape(-1, K) copies nothing)."""
    expected = None
    for d in range(t.dim() - 2, -1, -1):
        if t.shape[d] == 1:
            continue
        if expected is not None and t.stride(d) != expected:
            return False
        expected = t.stride(d) * t.shape[d]
    return True


def matmul(input, other):
    """torch.matmul: 1-D (dot, matrix-vector), 2-D and batched with broadcasting, over torch_dnn's mm and bmm.
    Transposed and strided operands are passed by their strides (views, no copies); a batch broadcast against
    a matrix is a stride-0 batch, not a copy."""
    da, db = input.dim(), other.dim()
    if da == 0 or db == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {da}D and {db}D")
    tf32 = allow_tf32()
    if da <= 2 and db <= 2:
        a = input.unsqueeze(0) if da == 1 else input
        b = other.unsqueeze(1) if db == 1 else other
        # allow_tf32 passed only where it is not the op's default (a keyword costs host time on small GEMMs)
        out = _ops.mm(a, b, allow_tf32=True) if tf32 else _ops.mm(a, b)
        if da == 1:
            out = out.squeeze(0)
        if db == 1:
            out = out.squeeze(-1)
        return out
    # Folding the batch into one GEMM, as PyTorch does: where it is a view, and (with a copy) where the broadcast
    # operand needs a gradient, whose batch sum then happens inside one GEMM's float accumulation instead of a
    # batched GEMM's rounded outputs summed again (2-3x PyTorch's error in bf16).
    if db <= 2 and (_rows_foldable(input) or needs_autograd(other)):
        # [..., M, K] @ [K, N]: the leading dims fold into M (the x @ W case)
        b = other.unsqueeze(1) if db == 1 else other
        rows = math.prod(input.shape[:-1])
        out = _ops.mm(input.reshape(rows, input.shape[-1]), b, allow_tf32=tf32)
        return out.view(tuple(input.shape[:-1]) + ((b.shape[1],) if db == 2 else ()))
    if da <= 2 and (_rows_foldable(other.mT) or needs_autograd(input)):
        # [M, K] @ [..., K, N] = ([..., N, K] @ [K, M]).mT: other's leading dims fold into its N
        a = input.unsqueeze(0) if da == 1 else input
        bt = other.mT
        rows = math.prod(bt.shape[:-1])
        out = _ops.mm(bt.reshape(rows, bt.shape[-1]), a.mT, allow_tf32=tf32)
        out = out.view(tuple(bt.shape[:-1]) + (a.shape[0],)).mT.contiguous()  # contiguous, as PyTorch's
        return out.squeeze(-2) if da == 1 else out
    a = input.unsqueeze(0) if da == 1 else input
    b = other.unsqueeze(-1) if db == 1 else other
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    nb = math.prod(batch)
    a3 = a.expand(tuple(batch) + (m, k)).reshape(nb, m, k)
    b3 = b.expand(tuple(batch) + (k2, n)).reshape(nb, k2, n)
    out = _ops.bmm(a3, b3, allow_tf32=tf32).view(tuple(batch) + (m, n))
    if da == 1:
        out = out.squeeze(-2)
    if db == 1:
        out = out.squeeze(-1)
    return out


def linear_act(input, weight, bias=None, activation="relu", residual=None, act_a=None, act_b=None):
    """act(input @ weight.T + bias) + residual in one kernel (torch_dnn's own).

    activation: one of torch_dnn.ops.activation.BIAS_ACTS ("none", "relu", "gelu", "gelu_tanh", "silu", ...).
    act_a / act_b: the parameters of leaky_relu (negative_slope), elu (alpha) and softplus (beta, threshold);
    None takes PyTorch's defaults. residual: of the output's shape, added after the activation.
    """
    save = _needs_preact(activation) and needs_autograd(input, weight, bias)
    return _ops.linear_act(input, weight, bias, activation, residual, act_a, act_b, allow_tf32=allow_tf32(),
                           save_preact=save)[0]


def linear(input, weight, bias=None):
    """torch.nn.functional.linear."""
    # allow_tf32 passed only where it is not the op's default (as matmul's)
    return _ops.linear(input, weight, bias, allow_tf32=True) if allow_tf32() else _ops.linear(input, weight, bias)


FUNCTIONAL = ["matmul", "mm", "bmm", "linear", "linear_act"]


def selfcheck_cases():
    """python -m torch_dnn's rows of this family: (op, callable(device, dtype) -> list of Verdicts)."""
    from torch_dnn.reference.matmul import linear_act_reference
    from torch_dnn.testing import check_against_torch, random_like_case

    pairs = {
        "mm 97x65 @ 65x33": (mm, torch.mm, ((97, 65), (65, 33))),
        "matmul 2x1x9x65 @ 3x65x33": (matmul, torch.matmul, ((2, 1, 9, 65), (3, 65, 33))),
        "bmm 4x9x65 @ 4x65x33": (bmm, torch.bmm, ((4, 9, 65), (4, 65, 33))),
        "linear 3x9x65 -> 33": (linear, torch.nn.functional.linear, ((3, 9, 65), (33, 65), (33,))),
    }
    out = [(name, lambda d, t, o=ours, p=theirs, ss=shapes, n=name: check_against_torch(
        o, p, [random_like_case(s, t, d, low=-2, high=2) for s in ss], name=n))
        for name, (ours, theirs, shapes) in pairs.items()]
    for act in ("gelu", "silu", "relu"):
        out.append((f"linear_act[{act}] + residual", lambda d, t, a=act: check_against_torch(
            lambda x, w, b, r: linear_act(x, w, b, a, r), lambda x, w, b, r: linear_act_reference(x, w, b, a, r),
            [random_like_case((37, 65), t, d, low=-2, high=2), random_like_case((33, 65), t, d, low=-1, high=1),
             random_like_case((33,), t, d), random_like_case((37, 33), t, d)], name=f"linear_act {a}")))
    return out
