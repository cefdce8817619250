"""Benchmark cases of the attention family (TFLOP/s), bf16, issue 37's shapes: B4 H16 S4096 D128 forward and
backward, plain and causal, and B8 H16 S2048 D64, against F.scaled_dot_product_attention with its cuDNN and flash
backends (torch.nn.attention.sdpa_kernel), and our mma.sync kernels (the Hopper route off) and the Hopper forward's
and backward's other schedules as rows of their own. FLOPs as FlashAttention counts them: 4 B H Sq Sk D forward,
2.5x that backward, half of each when causal. A backward row times torch.autograd.grad through a forward made once
per implementation (each backend's own backward kernel, picked by its forward). Decode: flash_decode at B8 Hq32
Hkv8 S16k D128, contiguous and paged (block 256, scattered blocks), in GB/s of K and V read (the minimum traffic),
against SDPA on the same keys and values as contiguous [B, Hkv, S, D] tensors (enable_gqa), each backend."""

import torch
import torch.nn.functional as TF
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_dnn.functional as F
from benchmarks.harness import Case, with_env

_TAKE_TURNS = {"rounds": 4, "warmup_ms": 150.0}  # compute-bound at the power cap (see cases_matmul.py)
_BACKENDS = {"cuDNN (sdpa)": SDPBackend.CUDNN_ATTENTION, "FA2 (sdpa flash)": SDPBackend.FLASH_ATTENTION}


def _inputs(B, H, S, D, grad=False):
    def make():
        q, k, v = (torch.empty(B, H, S, D, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1).requires_grad_(grad)
                   for _ in range(3))
        if not grad:
            return q, k, v
        return q, k, v, torch.empty(B, H, S, D, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    return make


def _on(backend, fn):
    def run(*args):
        with sdpa_kernel(backend):
            return fn(*args)
    return run


# "mma.sync": our FlashAttention-2 kernels with the Hopper (wgmma) route turned off (the same kernels on other GPUs).
_MMA_SYNC = {"TORCH_DNN_ATTENTION_SM90": "0"}
# The Hopper forward's other schedules (docs/attention.md; the default: a copy warpgroup's tensor copies feeding MMA
# warpgroups that take turns at the tensor cores): "ws", the MMA warpgroups drifting freely; "cp.async", no copy
# warpgroup, every MMA thread copying its share of each tile.
_FWD_SCHEDULES = {"torch_dnn ws": {"TORCH_DNN_ATTENTION_SM90_FWD": "ws"},
                  "torch_dnn cp.async": {"TORCH_DNN_ATTENTION_SM90_FWD": "cp.async"}}
# The Hopper backward's other schedule (the default: a copy warpgroup's tensor copies feeding the MMA warpgroups of
# the dK / dV and dQ passes): "bwd cp.async", every MMA thread copying its share of each tile.
_BWD_SCHEDULES = {"torch_dnn bwd cp.async": {"TORCH_DNN_ATTENTION_SM90_BWD": "cp.async"}}


def _forward_impls(causal):
    ours = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    theirs = lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    impls = {"torch_dnn": ours, **{n: with_env(ours, **env) for n, env in _FWD_SCHEDULES.items()},
             "torch_dnn mma.sync": with_env(ours, **_MMA_SYNC)}
    impls.update({name: _on(b, theirs) for name, b in _BACKENDS.items()})
    return impls


def _backward_impls(causal):
    """The backward rows: each forward's graph, the knob held through torch.autograd.grad too (the backward kernels
    are chosen when it runs, not when the forward recorded it)."""
    fwd = _forward_impls(causal)
    for name in _FWD_SCHEDULES:  # forward-only choices
        del fwd[name]
    impls = {n: _backward(f) for n, f in fwd.items()}
    impls["torch_dnn mma.sync"] = with_env(impls["torch_dnn mma.sync"], **_MMA_SYNC)
    schedules = {n: with_env(_backward(fwd["torch_dnn"]), **env) for n, env in _BWD_SCHEDULES.items()}
    first = list(impls)[:1]  # the default's row, then the other schedules', then the rest
    return {**{n: impls[n] for n in first}, **schedules, **{n: f for n, f in impls.items() if n not in first}}


def _backward(forward):
    """The backward of forward(q, k, v): the graph made on the first call for these inputs, then only
    torch.autograd.grad."""
    state = {}

    def run(q, k, v, g):
        key = (q.data_ptr(), k.data_ptr(), v.data_ptr())
        if state.get("key") != key:
            state.clear()
            state.update(key=key, out=forward(q, k, v))
        return torch.autograd.grad(state["out"], (q, k, v), g, retain_graph=True)
    return run


def _cases(B, H, S, D, causal, group):
    flops = 4 * B * H * S * S * D // (2 if causal else 1)
    name = f"B{B} H{H} S{S} D{D}{' causal' if causal else ''}"
    fwd = _forward_impls(causal)
    return [
        Case("attention", f"fwd {name}", _inputs(B, H, S, D), fwd, flops=flops, group=group,
             target=">= cuDNN", **_TAKE_TURNS),
        Case("attention", f"bwd {name}", _inputs(B, H, S, D, grad=True),
             _backward_impls(causal), flops=int(2.5 * flops), group=group, target=">= cuDNN",
             **_TAKE_TURNS),
    ]


# ---- decode: flash_decode against a KV cache, GB/s of K and V read ----

_DECODE = dict(B=8, Hq=32, Hkv=8, S=16384, D=128)


def _decode_inputs(paged, block=256):
    """q [B, 1, Hq, D], the cache full (cache_seqlens = S) as [B, S, Hkv, D] or as scattered blocks [B * S / block,
    block, Hkv, D] with a permuted block table, and the same keys / values as contiguous [B, Hkv, S, D] for SDPA."""
    B, Hq, Hkv, S, D = (_DECODE[k] for k in ("B", "Hq", "Hkv", "S", "D"))

    def make():
        q = torch.empty(B, 1, Hq, D, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
        k = torch.empty(B, Hkv, S, D, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
        v = torch.empty(B, Hkv, S, D, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
        lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
        kc, vc = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()  # [B, S, Hkv, D]
        table = None
        if paged:
            per_row = S // block
            perm = torch.randperm(B * per_row, device="cuda")
            table = perm.view(B, per_row).to(torch.int32)
            pk = torch.empty(B * per_row, block, Hkv, D, dtype=torch.bfloat16, device="cuda")
            pv = torch.empty_like(pk)
            pk[perm] = kc.view(B * per_row, block, Hkv, D)
            pv[perm] = vc.view(B * per_row, block, Hkv, D)
            kc, vc = pk, pv
        return q, kc, vc, lens, table, k, v
    return make


def _decode_impls():
    def ours(q, kc, vc, lens, table, k, v):
        return F.flash_decode(q, kc, vc, lens, block_table=table)

    def sdpa(q, kc, vc, lens, table, k, v):
        return TF.scaled_dot_product_attention(q.transpose(1, 2), k, v, enable_gqa=True)

    impls = {"torch_dnn": ours, "torch_dnn registers": with_env(ours, TORCH_DNN_DECODE_KERNEL="registers"),
             "sdpa (auto)": sdpa}
    impls.update({name: _on(b, sdpa) for name, b in
                  {"sdpa flash": SDPBackend.FLASH_ATTENTION, "sdpa cuDNN": SDPBackend.CUDNN_ATTENTION,
                   "sdpa efficient": SDPBackend.EFFICIENT_ATTENTION}.items()})
    return impls


def _decode_cases():
    B, Hq, Hkv, S, D = (_DECODE[k] for k in ("B", "Hq", "Hkv", "S", "D"))
    kv_bytes = 2 * B * S * Hkv * D * 2
    name = f"decode B{B} Hq{Hq} Hkv{Hkv} S{S // 1024}k D{D}"
    return [Case("attention", f"{name} contiguous", _decode_inputs(False), _decode_impls(), bytes=kv_bytes,
                 group="decode bf16 (GB/s of KV read)", target=">= 2800 GB/s"),
            Case("attention", f"{name} paged (block 256)", _decode_inputs(True), _decode_impls(), bytes=kv_bytes,
                 group="decode bf16 (GB/s of KV read)", target="within 5% of contiguous")]


def cases(quick: bool = False):
    out = _decode_cases()
    for causal in (False, True):
        out += _cases(4, 16, 4096, 128, causal, "SDPA bf16 D128")
    if not quick:
        out += _cases(8, 16, 2048, 64, False, "SDPA bf16 D64")
    return out
