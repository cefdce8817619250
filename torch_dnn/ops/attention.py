"""Attention family: attention_forward (softmax(scale q k^T + mask) v over [B][H][S][D] tensors with causal / window
masks aligned top-left or bottom-right, softcap, ALiBi, GQA, dropout and variable lengths; it returns the
log-sum-exp and the dropout key for the backward) and attention_backward. Fake kernels, the autograd formula (the
twin of csrc/attention/attention_autograd.cpp, for torch.func's transforms), and the functional wrappers:
scaled_dot_product_attention (F.scaled_dot_product_attention's semantics: any leading batch dims, masks that
broadcast, GQA) and flash_attention (flash-attn's interface: [B][S][H][D] tensors or packed variable-length ones).
Autocast is registered in C++ (csrc/attention/attention.cpp) with aten::scaled_dot_product_attention's policy."""
import math
from dataclasses import dataclass

import torch

from torch_dnn.ops import _checks
from torch_dnn.ops._checks import check, floating, same_device, same_dtype, type_name
from torch_dnn.ops._registry import add_family, ops, register_autograd

_ops = ops


# ---- the C++ checks (csrc/attention/attention_ops.h), for the fake kernels ----

@dataclass
class _Problem:
    B: int
    Hq: int
    Hkv: int
    Sq: int
    Sk: int
    Dqk: int
    Dv: int
    varlen: bool


def _check_4d(t, op, arg):
    check(t.dim() == 4, op, ": expected ", arg, " to be a 4-D tensor [batch, heads, length, head_dim], but got a ",
          t.dim(), "-D tensor")


def _check_cu_seqlens(c, q, op, arg):
    check(c.dtype == torch.int32, op, ": expected ", arg, " to be an int32 tensor, but got ", type_name(c.dtype))
    same_device(q, c, op, "query", arg)
    check(c.dim() == 1 and c.shape[0] >= 1, op, ": expected ", arg,
          " to be a 1-D tensor of batch + 1 offsets, but got shape ", list(c.shape))


def _lse_dtype(q):
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def check_problem(op, q, k, v, mask, alibi, cu_q, cu_k, dropout_p, window_left, window_right, softcap,
                  max_seqlen_q, max_seqlen_k):
    """check_problem of attention_ops.h (the offsets' values, which the CPU kernel also checks, are not seen)."""
    floating(q, op, "query")
    same_dtype(q, k, op, "query", "key")
    same_dtype(q, v, op, "query", "value")
    same_device(q, k, op, "query", "key")
    same_device(q, v, op, "query", "value")
    _check_4d(q, op, "query")
    _check_4d(k, op, "key")
    _check_4d(v, op, "value")
    check(k.shape[0] == q.shape[0] and v.shape[0] == q.shape[0], op,
          ": expected key and value to have the batch size of query (", q.shape[0], "), but got ", k.shape[0],
          " and ", v.shape[0])
    check(k.shape[1] == v.shape[1] and k.shape[2] == v.shape[2], op,
          ": expected key and value to have the same heads and length, but got key ", list(k.shape), " and value ",
          list(v.shape))
    check(k.shape[3] == q.shape[3], op, ": expected key to have the head dim of query (", q.shape[3], "), but got ",
          k.shape[3])
    check(k.shape[1] >= 1 and q.shape[1] % k.shape[1] == 0, op, ": expected the query heads (", q.shape[1],
          ") to be a multiple of the key/value heads (", k.shape[1], ")")
    check(0.0 <= dropout_p <= 1.0, op, ": expected dropout_p in [0, 1], but got ", _checks.num(dropout_p))
    check(window_left >= -1 and window_right >= -1, op,
          ": expected window sizes to be -1 (unbounded) or non-negative, but got (", window_left, ", ", window_right,
          ")")
    check(softcap >= 0.0, op, ": expected softcap to be non-negative, but got ", _checks.num(softcap))
    check((cu_q is not None) == (cu_k is not None), op,
          ": expected cu_seqlens_q and cu_seqlens_k to be given together")
    varlen = cu_q is not None
    if varlen:
        _check_cu_seqlens(cu_q, q, op, "cu_seqlens_q")
        _check_cu_seqlens(cu_k, q, op, "cu_seqlens_k")
        check(cu_q.shape[0] == cu_k.shape[0], op,
              ": expected cu_seqlens_q and cu_seqlens_k to have the same size, but got ", cu_q.shape[0], " and ",
              cu_k.shape[0])
        check(q.shape[0] == 1, op, ": expected packed (variable-length) tensors as [1, heads, total, head_dim], but "
              "got query of batch size ", q.shape[0])
        check(max_seqlen_q >= 0 and max_seqlen_k >= 0, op,
              ": expected max_seqlen_q and max_seqlen_k to be non-negative, but got ", max_seqlen_q, " and ",
              max_seqlen_k)
        check(mask is None, op, ": attn_mask is not supported with variable lengths (cu_seqlens)")
        p = _Problem(cu_q.shape[0] - 1, q.shape[1], k.shape[1], max_seqlen_q, max_seqlen_k, q.shape[3], v.shape[3],
                     True)
    else:
        p = _Problem(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3], False)
    if mask is not None:
        check(mask.dtype in (torch.bool, q.dtype, torch.float32), op,
              ": expected attn_mask to be bool, float32 or the dtype of query (", type_name(q.dtype), "), but got ",
              type_name(mask.dtype))
        same_device(q, mask, op, "query", "attn_mask")
        full = [p.B, p.Hq, p.Sq, p.Sk]
        ok = mask.dim() == 4 and all(mask.shape[d] == 1 or mask.shape[d] == full[d] for d in range(4))
        check(ok, op, ": expected attn_mask to be 4-D and broadcastable to ", full, ", but got ", list(mask.shape))
    if alibi is not None:
        check(alibi.dtype == torch.float32, op, ": expected alibi_slopes to be float32, but got ",
              type_name(alibi.dtype))
        same_device(q, alibi, op, "query", "alibi_slopes")
        check((alibi.dim() == 1 and alibi.shape[0] == p.Hq)
              or (alibi.dim() == 2 and alibi.shape[0] == p.B and alibi.shape[1] == p.Hq), op,
              ": expected alibi_slopes of shape [", p.Hq, "] or [", p.B, ", ", p.Hq, "], but got ",
              list(alibi.shape))
    return p


def _bshd_empty(like, B, H, S, D, dtype=None):
    """[B][H][S][D] laid out as [B][S][H][D] (the layout of the op's outputs and gradients)."""
    return like.new_empty((B, S, H, D), dtype=dtype).transpose(1, 2)


# ---- fake kernels: mirror csrc/attention/attention_ops.h ----

@torch.library.register_fake("torch_dnn::attention_forward")
def _attention_forward_fake(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, *,
                            bottom_right=False, window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
                            cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0,
                            deterministic=False):
    p = check_problem("torch_dnn.attention_forward", query, key, value, attn_mask, alibi_slopes, cu_seqlens_q,
                      cu_seqlens_k, dropout_p, window_left, window_right, softcap, max_seqlen_q, max_seqlen_k)
    out = _bshd_empty(query, query.shape[0], p.Hq, query.shape[2], p.Dv)
    lse = query.new_empty((p.B, p.Hq, p.Sq), dtype=_lse_dtype(query))
    return out, lse, torch.empty((2,), dtype=torch.int64, device="cpu")


@torch.library.register_fake("torch_dnn::attention_backward")
def _attention_backward_fake(grad_out, query, key, value, out, lse, philox_seed_offset, attn_mask, dropout_p,
                             is_causal, scale, bottom_right, window_left, window_right, softcap, alibi_slopes,
                             cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, deterministic, attn_mask_grad):
    op = "torch_dnn.attention_backward"
    p = check_problem(op, query, key, value, attn_mask, alibi_slopes, cu_seqlens_q, cu_seqlens_k, dropout_p,
                      window_left, window_right, softcap, max_seqlen_q, max_seqlen_k)
    out_shape = [query.shape[0], p.Hq, query.shape[2], p.Dv]
    check(list(out.shape) == out_shape, op, ": expected out of shape ", out_shape, ", but got ", list(out.shape))
    same_dtype(query, out, op, "query", "out")
    same_device(query, out, op, "query", "out")
    _checks.same_shape(out, grad_out, op, "out", "grad_out")
    same_dtype(query, grad_out, op, "query", "grad_out")
    same_device(query, grad_out, op, "query", "grad_out")
    lse_shape = [p.B, p.Hq, p.Sq]
    check(list(lse.shape) == lse_shape and lse.dtype == _lse_dtype(query), op, ": expected lse of shape ", lse_shape,
          " and dtype ", type_name(_lse_dtype(query)), ", but got ", list(lse.shape), " and ", type_name(lse.dtype))
    same_device(query, lse, op, "query", "lse")
    check(philox_seed_offset.device.type == "cpu" and philox_seed_offset.dtype == torch.int64
          and philox_seed_offset.numel() == 2, op,
          ": expected philox_seed_offset to be the forward's int64 [2] CPU tensor")
    check(not attn_mask_grad or (attn_mask is not None and attn_mask.is_floating_point()), op,
          ": the gradient of attn_mask needs a floating-point attn_mask")
    dq, dk, dv = (_bshd_empty(query, *t.shape) for t in (query, key, value))
    dmask = attn_mask.new_empty(attn_mask.shape) if attn_mask_grad else query.new_empty((0,))
    return dq, dk, dv, dmask


# ---- flash_decode: the checks of csrc/attention/decode_ops.h, and its fake kernel (inference only: no autograd
# formula; the C++ Autograd kernel refuses arguments that require grad) ----

_DECODE = "torch_dnn.flash_decode"


def _check_decode_4d(t, arg, dims):
    check(t.dim() == 4, _DECODE, ": expected ", arg, " to be a 4-D tensor ", dims, ", but got a ", t.dim(),
          "-D tensor")


def check_decode(q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table):
    """check_decode of decode_ops.h (the values of cache_seqlens and block_table, which the CPU kernel also checks,
    are not seen)."""
    op = _DECODE
    floating(q, op, "q")
    same_dtype(q, k_cache, op, "q", "k_cache")
    same_dtype(q, v_cache, op, "q", "v_cache")
    same_device(q, k_cache, op, "q", "k_cache")
    same_device(q, v_cache, op, "q", "v_cache")
    check(cache_seqlens.dtype == torch.int32, op, ": expected cache_seqlens to be an int32 tensor, but got ",
          type_name(cache_seqlens.dtype))
    same_device(q, cache_seqlens, op, "q", "cache_seqlens")
    _check_decode_4d(q, "q", "[batch, query length, query heads, head_dim]")
    paged = block_table is not None
    dims = ("[num_blocks, block_size, kv heads, head_dim] (paged)" if paged
            else "[batch, max length, kv heads, head_dim]")
    _check_decode_4d(k_cache, "k_cache", dims)
    _check_decode_4d(v_cache, "v_cache", dims)
    check(k_cache.shape == v_cache.shape, op, ": expected k_cache and v_cache to have the same shape, but got ",
          list(k_cache.shape), " and ", list(v_cache.shape))
    B, Sq, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    check(k_cache.shape[3] == D, op, ": expected k_cache to have the head dim of q (", D, "), but got ",
          k_cache.shape[3])
    check(D in (64, 128, 256), op, ": expected the head dim of q (q.size(3)) to be 64, 128 or 256, but got ", D)
    check(Hkv >= 1 and Hq % Hkv == 0, op, ": expected the query heads of q (", Hq,
          ") to be a multiple of the kv heads of k_cache (", Hkv, ")")
    check(cache_seqlens.dim() == 1 and cache_seqlens.shape[0] == B, op,
          ": expected cache_seqlens to be a 1-D tensor of the batch size (", B, "), but got shape ",
          list(cache_seqlens.shape))
    if paged:
        check(block_table.dtype == torch.int32, op, ": expected block_table to be an int32 tensor, but got ",
              type_name(block_table.dtype))
        same_device(q, block_table, op, "q", "block_table")
        check(block_table.dim() == 2 and block_table.shape[0] == B, op, ": expected block_table to be a 2-D tensor "
              "[batch (", B, "), max_blocks], but got shape ", list(block_table.shape))
    else:
        check(k_cache.shape[0] == B, op, ": expected k_cache to have the batch size of q (", B, "), but got ",
              k_cache.shape[0])
    check((k_new is None) == (v_new is None), op, ": expected k_new and v_new to be given together")
    if k_new is not None:
        same_dtype(q, k_new, op, "q", "k_new")
        same_dtype(q, v_new, op, "q", "v_new")
        same_device(q, k_new, op, "q", "k_new")
        same_device(q, v_new, op, "q", "v_new")
        _check_decode_4d(k_new, "k_new", "[batch, new length, kv heads, head_dim]")
        _check_decode_4d(v_new, "v_new", "[batch, new length, kv heads, head_dim]")
        check(k_new.shape == v_new.shape, op, ": expected k_new and v_new to have the same shape, but got ",
              list(k_new.shape), " and ", list(v_new.shape))
        check(k_new.shape[0] == B and k_new.shape[2] == Hkv and k_new.shape[3] == D, op, ": expected k_new of shape "
              "[", B, ", new length, ", Hkv, ", ", D, "], but got ", list(k_new.shape))


@torch.library.register_fake("torch_dnn::flash_decode")
def _flash_decode_fake(q, k_cache, v_cache, cache_seqlens, k_new=None, v_new=None, block_table=None, scale=None,
                       causal=False):
    check_decode(q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table)
    B, Sq, Hq, D = q.shape
    return q.new_empty((B, Sq, Hq, D)), q.new_empty((B, Hq, Sq), dtype=_lse_dtype(q))


# ---- autograd (the C++ kernel's twin: csrc/attention/attention_autograd.cpp) ----

_KW = ("bottom_right", "window_left", "window_right", "softcap", "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k",
       "max_seqlen_q", "max_seqlen_k", "deterministic")
_KW_DEFAULTS = dict(bottom_right=False, window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
                    cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, deterministic=False)


def _attention_setup(ctx, inputs, keyword_only_inputs, output):
    q, k, v, mask, dropout_p, is_causal, scale = inputs
    kw = dict(_KW_DEFAULTS, **keyword_only_inputs)
    out, lse, rng = output
    ctx.save_for_backward(q, k, v, out, lse, rng, mask, kw["alibi_slopes"], kw["cu_seqlens_q"], kw["cu_seqlens_k"])
    ctx.scalars = (dropout_p, is_causal, scale, kw["bottom_right"], kw["window_left"], kw["window_right"],
                   kw["softcap"])
    ctx.lengths = (kw["max_seqlen_q"], kw["max_seqlen_k"], kw["deterministic"])
    ctx.mark_non_differentiable(lse, rng)
    ctx.set_materialize_grads(False)


def _attention_backward(ctx, grad, grad_lse, grad_rng):
    if grad is None:
        return (None,) * 7
    q, k, v, out, lse, rng, mask, alibi, cu_q, cu_k = ctx.saved_tensors
    mask_grad = mask is not None and mask.is_floating_point() and ctx.needs_input_grad[3]
    dq, dk, dv, dmask = _ops.attention_backward(grad, q, k, v, out, lse, rng, mask, *ctx.scalars, alibi, cu_q, cu_k,
                                                *ctx.lengths, mask_grad)
    need = ctx.needs_input_grad
    return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None, dmask if mask_grad else None,
            None, None, None)


register_autograd("torch_dnn::attention_forward", _attention_backward, setup_context=_attention_setup,
                  cpp_kernel=True)

add_family("attention", ["attention_forward", "attention_backward", "flash_decode"])


# ---- functional wrappers ----

_SDPA = "torch_dnn.scaled_dot_product_attention"


def _flatten_mask(mask, lead, Hq, Sq, Sk):
    """F.scaled_dot_product_attention's attn_mask (broadcastable to [*lead, Hq, Sq, Sk]) as a 4-D
    [B or 1, Hq or 1, Sq or 1, Sk or 1] view where the broadcast allows one (else an expanded copy)."""
    full = (*lead, Hq, Sq, Sk)
    if mask.dim() > len(full):
        raise RuntimeError(f"{_SDPA}: expected attn_mask of at most {len(full)} dims (broadcastable to "
                           f"{list(full)}), but got shape {list(mask.shape)}")
    m = mask.reshape((1,) * (len(full) - mask.dim()) + tuple(mask.shape))
    if any(s != 1 and s != f for s, f in zip(m.shape, full)):
        raise RuntimeError(f"{_SDPA}: expected attn_mask to broadcast to {list(full)}, but got shape "
                           f"{list(mask.shape)}")
    outer = m.shape[:len(lead)]
    B = math.prod(lead)
    tail = tuple(m.shape[len(lead):])
    if all(s == 1 for s in outer):
        return m.reshape((1,) + tail)
    if tuple(outer) == tuple(lead):
        return m.reshape((B,) + tail)
    return m.expand(tuple(lead) + tail).reshape((B,) + tail)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention: query [..., Hq, L, E], key [..., Hkv, S, E], value
    [..., Hkv, S, Ev] (key / value's leading dims broadcast against query's; Hkv a divisor of Hq with
    enable_gqa); attn_mask bool (True: take part) or additive, broadcastable to [..., Hq, L, S]; is_causal aligned
    top-left. Rows that see no key give zeros, as PyTorch. The leading dims are flattened into views (no copies
    where the strides allow), the head dimension read in place when its stride is 1."""
    if attn_mask is not None and is_causal:
        raise RuntimeError(f"{_SDPA}: attn_mask should not be given when is_causal=True")
    nd = query.dim()
    if nd == 4 and key.dim() == 4 and value.dim() == 4:
        # [B, H, S, E] with key / value of the query's batch and of its heads (or, with enable_gqa, of a divisor):
        # the op's own layout, no views to make (a transformer's every call)
        B, Hq = query.shape[0], query.shape[1]
        Hk = key.shape[1]
        if (key.shape[0] == B and value.shape[0] == B and value.shape[1] == Hk
                and (Hk == Hq or (enable_gqa and Hk >= 1 and Hq % Hk == 0))):
            m = None if attn_mask is None else _flatten_mask(attn_mask, [B], Hq, query.shape[2], key.shape[2])
            return _ops.attention_forward(query, key, value, m, dropout_p, is_causal, scale)[0]
    if nd < 2 or key.dim() != nd or value.dim() != nd:
        raise RuntimeError(f"{_SDPA}: expected query, key and value to have the same number of dims (at least 2), "
                           f"but got {query.dim()}, {key.dim()} and {value.dim()}")
    if nd == 2:
        query, key, value = query[None], key[None], value[None]
        if attn_mask is not None and attn_mask.dim() > 2:
            raise RuntimeError(f"{_SDPA}: expected attn_mask of at most 2 dims for 2-D inputs, but got shape "
                               f"{list(attn_mask.shape)}")
    *lead, Hq, Sq, E = query.shape
    Hk, Sk = key.shape[-3], key.shape[-2]
    if enable_gqa and Hk != Hq:
        if Hk < 1 or Hq % Hk != 0 or value.shape[-3] != Hk:
            raise RuntimeError(f"{_SDPA}: with enable_gqa, expected the query heads ({Hq}) to be a multiple of the "
                               f"key and value heads ({Hk} and {value.shape[-3]})")
        heads = Hk
    else:
        heads = Hq
    want = (*lead, heads)
    for name, t in (("key", key), ("value", value)):
        if any(g != w and g != 1 for g, w in zip(t.shape[:-2], want)):
            raise RuntimeError(f"{_SDPA}: expected the leading dims of {name} {list(t.shape[:-2])} to broadcast "
                               f"against {list(want)} (query's{', with the key/value heads' if heads != Hq else ''})")
    B = math.prod(lead)
    k = key.expand(*lead, heads, Sk, key.shape[-1]).reshape(B, heads, Sk, key.shape[-1])
    v = value.expand(*lead, heads, value.shape[-2], value.shape[-1]).reshape(B, heads, value.shape[-2],
                                                                            value.shape[-1])
    q = query.reshape(B, Hq, Sq, E)
    m = None if attn_mask is None else _flatten_mask(attn_mask, lead, Hq, Sq, Sk)
    out = _ops.attention_forward(q, k, v, m, dropout_p, is_causal, scale)[0]
    out = out.reshape(*lead, Hq, Sq, v.shape[-1])
    return out[0] if nd == 2 else out


def flash_attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, alibi_slopes=None, dropout_p=0.0,
                    scale=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                    return_lse=False, deterministic=False):
    """flash-attn's interface (flash_attn_func / flash_attn_varlen_func in one): q [B, Sq, Hq, D], k / v
    [B, Sk, Hkv, D] (GQA: Hkv a divisor of Hq), or packed [total, H, D] with cu_seqlens_q / cu_seqlens_k (int32,
    batch + 1 offsets; max_seqlen_* are computed from them when not given, which synchronises a CUDA device).
    causal and window = (left, right) (-1: unbounded) align bottom-right when the lengths differ; softcap:
    softcap * tanh(s / softcap); alibi_slopes (float32 [H] or [B, H]): s -= slope * |i + Sk - Sq - j|.
    Returns out (as q, Dv last), and with return_lse the log-sum-exp [B, H, Sq] (float32; for packed inputs
    [batch, H, max_seqlen_q], padded rows 0; +inf where a row sees no key)."""
    wl, wr = window
    common = dict(bottom_right=True, window_left=wl, window_right=wr, softcap=softcap, alibi_slopes=alibi_slopes,
                  deterministic=deterministic)
    if cu_seqlens_q is None:
        if cu_seqlens_k is not None:
            raise RuntimeError("torch_dnn.flash_attention: cu_seqlens_q and cu_seqlens_k must be given together")
        out, lse, _ = _ops.attention_forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None,
                                             dropout_p, causal, scale, **common)
        out = out.transpose(1, 2)
    else:
        if cu_seqlens_k is None:
            raise RuntimeError("torch_dnn.flash_attention: cu_seqlens_q and cu_seqlens_k must be given together")

        def longest(cu):
            return int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0

        mq = longest(cu_seqlens_q) if max_seqlen_q is None else int(max_seqlen_q)
        mk = longest(cu_seqlens_k) if max_seqlen_k is None else int(max_seqlen_k)
        packed = [t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)]  # [1, H, total, D] views
        out, lse, _ = _ops.attention_forward(*packed, None, dropout_p, causal, scale, cu_seqlens_q=cu_seqlens_q,
                                             cu_seqlens_k=cu_seqlens_k, max_seqlen_q=mq, max_seqlen_k=mk, **common)
        out = out[0].transpose(0, 1)
    return (out, lse) if return_lse else out


def flash_decode(q, k_cache, v_cache, cache_seqlens, k=None, v=None, block_table=None, softmax_scale=None,
                 causal=False, return_lse=False):
    """Attention of a few new query rows against a KV cache, flash_attn_with_kvcache's interface (inference only:
    the op records no gradient, and an argument that requires grad is an error).

    q: [batch, seqlen_q, nheads, headdim] (seqlen_q 1 to 16 is what the CUDA kernel is shaped for; any works).
    k_cache, v_cache: [batch, seqlen_cache, nheads_k, headdim], or with block_table a paged cache
        [num_blocks, page_block_size, nheads_k, headdim]. nheads a multiple of nheads_k (GQA / MQA); headdim 64, 128
        or 256.
    cache_seqlens: [batch] int32, the valid length of each batch row's cache (before k / v are appended).
    k, v: optional [batch, seqlen_new, nheads_k, headdim]: written IN PLACE into the caches at positions
        cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1, then attended to with the rest (cache_seqlens itself
        is not updated: add seqlen_new to it for the next step). On the CPU a length past the cache's capacity is
        an error; on CUDA it is clamped (checking it would synchronise).
    block_table: optional [batch, max_num_blocks_per_seq] int32, the cache blocks of each batch row in order.
    softmax_scale: default 1 / sqrt(headdim). causal: query row i sees the keys up to cache_seqlens[b] + seqlen_new
        - seqlen_q + i (the queries are the last rows of the sequence: bottom-right alignment); a row that sees no
        key gives zeros (lse +inf).
    Returns out [batch, seqlen_q, nheads, headdim], and with return_lse also the log-sum-exp [batch, nheads,
    seqlen_q] (float32)."""
    out, lse = _ops.flash_decode(q, k_cache, v_cache, cache_seqlens, k, v, block_table, softmax_scale, causal)
    return (out, lse) if return_lse else out


FUNCTIONAL = ["scaled_dot_product_attention", "flash_attention", "flash_decode"]


def selfcheck_cases():
    """python -m torch_dnn's rows of this family: (op, callable(device, dtype) -> list of Verdicts)."""
    import torch.nn.functional as TF

    from torch_dnn.testing import check_against_torch, random_like_case

    def case(name, shapes, ours, theirs):
        return (name, lambda d, t: check_against_torch(
            ours, theirs, [random_like_case(s, t, d, low=-2, high=2) for s in shapes], name=name))

    return [
        case("sdpa 2x3x17x64, 97 keys", ((2, 3, 17, 64), (2, 3, 97, 64), (2, 3, 97, 64)),
             scaled_dot_product_attention, TF.scaled_dot_product_attention),
        case("sdpa causal 2x4x33x59", ((2, 4, 33, 59),) * 3,
             lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True),
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True)),
        case("sdpa additive mask 2x2x9x32", ((2, 2, 9, 32), (2, 2, 13, 32), (2, 2, 13, 32), (2, 1, 9, 13)),
             scaled_dot_product_attention, TF.scaled_dot_product_attention),
        ("flash_decode GQA 4:2, ragged cache", _decode_selfcheck),
    ]


def _decode_selfcheck(device, dtype):
    """flash_decode (inference only: no gradient rows) against sdpa over each batch row's valid cache rows. The
    lengths live in the closures: the self-check casts its inputs to float64, which int32 lengths must not be."""
    import torch.nn.functional as TF

    from torch_dnn.testing import check_against_torch, random_like_case

    lens = torch.tensor([5, 33, 64], dtype=torch.int32, device=device)

    def ours(q, k, v):
        return flash_decode(q, k, v, lens)

    def theirs(q, k, v):  # [B, S, H, D] -> sdpa's [B, H, S, D], keys past each row's length masked
        valid = torch.arange(k.shape[1], device=k.device)[None, :] < lens.to(k.device)[:, None]
        y = TF.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                            attn_mask=valid[:, None, None, :], enable_gqa=True)
        return y.transpose(1, 2)

    shapes = ((3, 2, 4, 64), (3, 64, 2, 64), (3, 64, 2, 64))
    return check_against_torch(ours, theirs, [random_like_case(s, dtype, device, low=-2, high=2) for s in shapes],
                               grad=False, name="flash_decode GQA 4:2, ragged cache")
