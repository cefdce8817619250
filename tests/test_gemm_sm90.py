"""The Hopper GEMM path (csrc/matmul/gemm_sm90.cu: CUTLASS TMA + wgmma kernels with the fused epilogue), run
through the matmul ops with TORCH_DNN_GEMM_PATH=sm90 (which makes the op raise rather than fall back when the
sm90 path cannot take a problem). Skipped unless a cc 9.0 GPU is present and the matmul ops are built.

Every case: random data (never zeros), the caching allocator poisoned with NaN before the call, the result
compared with a float64 reference by the error-ratio rule of torch_dnn.testing (ours against PyTorch's own
error in the same dtype).

Contract assumed with the op layer (branch mm): torch_dnn.functional.mm(a, b), torch.ops.torch_dnn.linear_act(
x, weight, bias, activation, residual, act_a, act_b) with bias_act's activation names ("none", "gelu", ...),
optionally torch_dnn.functional.bmm(a, b); strided views are passed to the kernel as they are (a transposed view
is a column-major operand), and TORCH_DNN_GEMM_PATH=sm90 forces the Hopper path."""
from __future__ import annotations

import os

import pytest
import torch

import torch_dnn.functional  # noqa: F401
import torch.nn.functional as F

import torch_dnn  # noqa: F401  (loads the ops)
from torch_dnn.testing import compare, random_like_case
from tests.utils import HOPPER, sm90_gemm_built


def _has_op(name: str) -> bool:
    try:
        return hasattr(torch.ops.torch_dnn, name)
    except Exception:
        return False


pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not HOPPER, reason="needs a cc 9.0 (Hopper) GPU"),
    pytest.mark.skipif(not (_has_op("mm") and _has_op("linear_act")), reason="matmul ops not built"),
    # a build without CUTLASS or sm_90a (scripts/gpu_check.sh --no-sm90) has no Hopper GEMM to force
    pytest.mark.skipif(HOPPER and not sm90_gemm_built(), reason="this build has no sm90 GEMM"),
]

DTYPES = [torch.bfloat16, torch.float16]


@pytest.fixture(autouse=True)
def force_sm90(monkeypatch):
    monkeypatch.setenv("TORCH_DNN_GEMM_PATH", "sm90")
    yield


def _poison(nbytes: int):
    """Leave a NaN-filled block in the caching allocator, so that an output element never written shows."""
    p = torch.full((max(nbytes // 4, 1) + 1024,), float("nan"), device="cuda")
    del p


def _rand(shape, dtype, low=-2.0, high=2.0):
    return random_like_case(shape, dtype, "cuda", low=low, high=high)


def _operand(rows, cols, dtype, col_major: bool, pad: int | None = None):
    """A rows x cols matrix, row-major or column-major (a transposed view), its leading dimension padded by
    `pad` elements (a view of a wider allocation); by default just enough for a multiple of 8 (TMA's rule)."""
    if pad is None:
        pad = -(rows if col_major else cols) % 8
    if col_major:
        base = _rand((cols, rows + pad), dtype)
        return base[:, :rows].t()
    base = _rand((rows, cols + pad), dtype)
    return base[:, :cols]


def _check(ours, peer, ref64, name):
    v = compare(ours, peer, ref64, name=name)
    assert v, v.message


def _mm(a, b):
    _poison(a.shape[0] * b.shape[1] * a.element_size() * 2)
    return torch_dnn.functional.mm(a, b)


# --- plain GEMM: the three layouts, odd sizes --------------------------------------------------------------

# (M, N, K) for TN and NN: M is free; N and K are multiples of 8 (TMA and CUTLASS: the contiguous extent of each
# operand a multiple of 16 bytes) but not of the tiles. TT (A M-major) swaps the roles of M and K: K is free.
SIZES = [(1, 8, 8), (7, 24, 40), (97, 136, 200), (1023, 1000, 1032), (4097, 264, 4104), (256, 4096, 4096),
         (16, 4096, 8192), (64, 8192, 4096)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,N,K", SIZES)
@pytest.mark.parametrize("layout", ["TN", "NN", "TT"])
def test_mm_layouts(dtype, M, N, K, layout):
    # TN: x @ w.T (A K-major, B K-major); NN: dZ @ W (B N-major); TT: dZ.T @ X (A M-major, B N-major)
    a_cm = layout == "TT"
    b_cm = layout == "TN"
    if a_cm:
        M, K = K, M
    a = _operand(M, K, dtype, a_cm)
    b = _operand(K, N, dtype, b_cm)
    try:
        out = _mm(a, b)
    except RuntimeError as e:  # forced sm90 on a size its TMA rules refuse (e.g. TT with M = 1)
        if "cannot take this problem" in str(e):
            pytest.skip(str(e))
        raise
    _check(out, torch.mm(a, b), torch.mm(a.double(), b.double()), f"mm {layout} {M}x{N}x{K} {dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm_padded_leading_dims(dtype):
    # leading dimensions longer than the rows (views of wider allocations), batch of one
    M, N, K = 129, 72, 96
    a = _operand(M, K, dtype, False, pad=8)
    b = _operand(K, N, dtype, True, pad=24)
    out = _mm(a, b)
    _check(out, torch.mm(a, b), torch.mm(a.double(), b.double()), "mm padded")


@pytest.mark.parametrize("M,N,K", [(8192, 8192, 8192), (333, 512, 1024), (16, 4096, 4096)])
@pytest.mark.parametrize("b_col_major", [True, False], ids=["B_kmajor", "B_nmajor"])
def test_mm_tf32(M, N, K, b_col_major):
    # the forced sm90 path takes float32 with TF32 on operand copies rounded to TF32 (matmul_cuda.cpp:
    # gemm_sm90_tf32_rounded); with both operands truncated by wgmma the error was 2.7x cuBLAS's on the H100, with
    # one of them 2.0x at 16x4096x4096 on the H200
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        a = _operand(M, K, torch.float32, False)
        b = _operand(K, N, torch.float32, b_col_major)
        out = _mm(a, b)
        peer = torch.mm(a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    _check(out, peer, torch.mm(a.double(), b.double()), f"mm tf32 {M}x{N}x{K}")


@pytest.mark.parametrize("a_col_major,b_col_major,pad", [(False, False, None), (True, False, None), (True, True, 4),
                                                           (False, False, 3), (True, True, 5)],
                         ids=["A_kmajor-B_nmajor", "A_mmajor-B_nmajor", "ld_pad4", "ld_pad3", "ld_pad5"])
def test_mm_tf32_rounded_copies(a_col_major, b_col_major, pad, monkeypatch):
    # The operand copies rounded to TF32 (tf32_round.cu) that also make an operand K-major: the 16-byte tile kernel
    # where the source allows (16-byte aligned, ld a multiple of 4 floats: transposed, or a strided copy with lds
    # padded by 4), the scalar tile kernel otherwise (lds padded by 3 or 5) and under TORCH_DNN_TF32_ROUND_VEC=0;
    # M, N, K leave partial 64-tiles at every edge.
    # Both kernels round the same elements the same way, so the products agree bit for bit; and with PyTorch by
    # the error rule.
    M, N, K = 200, 136, 332
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        a = _operand(M, K, torch.float32, a_col_major, pad)
        b = _operand(K, N, torch.float32, b_col_major, pad)
        outs = {}
        for vec in ("1", "0"):
            monkeypatch.setenv("TORCH_DNN_TF32_ROUND_VEC", vec)
            outs[vec] = _mm(a, b)
        peer = torch.mm(a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    assert torch.equal(outs["1"], outs["0"]), "16-byte and scalar rounding kernels differ"
    _check(outs["1"], peer, torch.mm(a.double(), b.double()), f"mm tf32 copies {a_col_major} {b_col_major} {pad}")


@pytest.mark.parametrize("M,N,K", [(64, 1024, 512), (2048, 4096, 512)], ids=["skinny", "big"])
def test_params_cache_repeated_calls(M, N, K, monkeypatch):
    # The launcher reuses a configuration's kernel parameters when a call repeats a problem exactly (sm90_gemm.cuh,
    # ParamsCache): calls of one shape that differ in bias, activation or residual must not run with another
    # call's parameters. Each variant is called twice, the first output freed before the second call so that the
    # caching allocator hands its block back (the same output pointer: a repeat of the problem, a cache hit); the
    # two agree bit for bit, with the cache and without it, and with PyTorch by the error rule.
    dtype = torch.bfloat16
    x = _rand((M, K), dtype)
    w = _rand((N, K), dtype, -0.1, 0.1)
    b1, b2 = _rand((N,), dtype), _rand((N,), dtype)
    r1, r2 = _rand((M, N), dtype), _rand((M, N), dtype)
    variants = [(b1, "gelu", None), (b2, "gelu", None), (b2, "silu", r1), (None, "none", r1), (b1, "gelu", r2),
                (b1, "relu", None)]
    results = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("TORCH_DNN_SM90_PARAMS_CACHE", mode)
        results[mode] = []
        for b, act, r in variants:
            y = torch_dnn.functional.linear_act(x, w, b, act, r)
            first = y.clone()
            del y
            again = torch_dnn.functional.linear_act(x, w, b, act, r)
            assert torch.equal(first, again), f"repeat: {act} bias={b is not None} res={r is not None}"
            results[mode].append(again)
    for (b, act, r), cached, uncached in zip(variants, results["1"], results["0"]):
        assert torch.equal(cached, uncached), f"cache on/off: {act} bias={b is not None} res={r is not None}"
        ref = _linear_ref(x.double(), w.double(), b.double() if b is not None else None, act,
                          r.double() if r is not None else None)
        _check(cached, _linear_ref(x, w, b, act, r), ref, f"params cache {act} {M}x{N}x{K}")


def test_mm_large_square_bf16():
    a = _operand(8192, 8192, torch.bfloat16, False)
    b = _operand(8192, 8192, torch.bfloat16, True)
    out = _mm(a, b)
    _check(out, torch.mm(a, b), torch.mm(a.double(), b.double()), "mm 8192^3")


def test_mm_deterministic():
    # the swap-AB kernel's split-K (skinny M) reduces its partial tiles in a fixed order: bitwise equal run to run
    a = _operand(64, 8192, torch.bfloat16, False)
    b = _operand(8192, 4096, torch.bfloat16, True)
    first = _mm(a, b)
    for _ in range(3):
        assert torch.equal(_mm(a, b), first)


@pytest.mark.parametrize("n_out,n_in", [(128, 512), (512, 512), (512, 1536)])
def test_weight_grad_stream_k(n_out, n_in):
    # dY.T @ X over 8192 tokens with a weight of few output tiles (TtStreamK): K split across the SMs, the partial
    # tiles summed in a fixed order (bitwise equal run to run), as accurate as cuBLAS
    g = _operand(n_out, 8192, torch.bfloat16, True)
    x = _operand(8192, n_in, torch.bfloat16, False)
    first = _mm(g, x)
    _check(first, torch.mm(g, x), torch.mm(g.double(), x.double()), f"weight grad {n_out}x{n_in} over 8192")
    for _ in range(2):
        assert torch.equal(_mm(g, x), first)


# --- batched -----------------------------------------------------------------------------------------------


@pytest.mark.skipif(not _has_op("bmm"), reason="no torch_dnn.bmm op")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("broadcast_b", [False, True])
def test_bmm(dtype, broadcast_b):
    B, M, N, K = 5, 97, 136, 264
    a = _rand((B, M, K), dtype)
    b = _rand((1, K, N), dtype).expand(B, K, N) if broadcast_b else _rand((B, K, N), dtype)
    _poison(B * M * N * 4)
    out = torch_dnn.functional.bmm(a, b)
    _check(out, torch.bmm(a, b), torch.bmm(a.double(), b.double()), f"bmm broadcast={broadcast_b}")


# --- the fused epilogue: bias, activation, residual --------------------------------------------------------

ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]


def _act_ref(pre, act):
    if act == "none":
        return pre
    if act == "relu":
        return F.relu(pre)
    if act == "gelu":
        return F.gelu(pre)
    if act == "gelu_tanh":
        return F.gelu(pre, approximate="tanh")
    if act == "silu":
        return F.silu(pre)
    raise ValueError(act)


def _linear_ref(x, w, b, act, res):
    pre = F.linear(x, w, b)
    y = _act_ref(pre, act)
    return y + res if res is not None else y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("M,N,K", [(97, 136, 200), (1023, 1032, 520), (16, 4096, 4096)])
def test_linear_act(dtype, act, bias, residual, M, N, K):
    x = _rand((M, K), dtype)
    w = _rand((N, K), dtype, -0.1, 0.1)
    b = _rand((N,), dtype) if bias else None
    r = _rand((M, N), dtype) if residual else None
    _poison(M * N * x.element_size() * 4)
    out = torch_dnn.functional.linear_act(x, w, b, act, r)
    peer = _linear_ref(x, w, b, act, r)
    ref = _linear_ref(x.double(), w.double(), b.double() if b is not None else None, act,
                      r.double() if r is not None else None)
    _check(out, peer, ref, f"linear_act {act} bias={bias} res={residual} {M}x{N}x{K} {dtype}")


def _check_skinny_gelu(M, N, K, dtype, name):
    """gelu(x @ w.T + b) + r for fresh random operands against PyTorch's in `dtype` and float64; returns (x, w)."""
    x = _rand((M, K), dtype)
    w = _rand((N, K), dtype, -0.1, 0.1)
    b = _rand((N,), dtype)
    r = _rand((M, N), dtype)
    _poison(M * N * x.element_size() * 4)
    out = torch_dnn.functional.linear_act(x, w, b, "gelu", r)
    ref = _linear_ref(x.double(), w.double(), b.double(), "gelu", r.double())
    _check(out, _linear_ref(x, w, b, "gelu", r), ref, f"linear_act skinny {name}")
    return x, w


# the skinny kernels (x @ w.T, M <= 256 and N >= 4 M; swap-AB 16 / 64 / 256 wide (64 wide also on 64 weight
# rows) and narrow 128x64 and 128x128 tiles, each forced
# as well as chosen): odd M against the tiles, N and K not multiples of the tile, the bias along the swap-AB
# kernel's rows, the residual through a column-major C (one K range) or added by the split-K finishing kernel
# (the K ranges as a batch of float partials)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 33, 100, 256])
@pytest.mark.parametrize("splits", ["auto", "1", "3"])
@pytest.mark.parametrize("kernel", ["auto", "swap16", "swap64", "swap64x64", "mid12", "swap256", "narrow"])
def test_linear_act_skinny(dtype, M, splits, kernel, monkeypatch):
    if splits != "auto":
        monkeypatch.setenv("TORCH_DNN_SM90_SKINNY_SPLITS", splits)
    if kernel != "auto":
        monkeypatch.setenv("TORCH_DNN_SM90_SKINNY_KERNEL", kernel)
    N, K = 1032, 1056  # auto: 4 K ranges of 264; forced 3: 352 (neither a multiple of the 64-wide K tile)
    name = f"M={M} splits={splits} kernel={kernel} {dtype}"
    x, w = _check_skinny_gelu(M, N, K, dtype, name)
    plain = torch_dnn.functional.mm(x, w.t())
    _check(plain, torch.mm(x, w.t()), torch.mm(x.double(), w.double().t()), f"mm skinny {name}")


# every skinny kernel over a weight with more tiles than the GPU has SMs: each CTA of the persistent scheduler
# takes several tiles (on Swap64x64's ping-pong kernel its two consumer warpgroups take turns), which the shapes
# above (one tile a CTA) never reach
@pytest.mark.parametrize("kernel", ["swap16", "swap64", "swap64x64", "mid12", "swap256", "narrow"])
def test_linear_act_skinny_many_tiles(kernel, monkeypatch):
    monkeypatch.setenv("TORCH_DNN_SM90_SKINNY_KERNEL", kernel)
    M, N, K = 40, 20488, 264  # 321 tiles of 64 weight rows, 161 of 128; K ends mid-tile
    _check_skinny_gelu(M, N, K, torch.bfloat16, f"many tiles kernel={kernel}")


# Narrow / Mid12 with 128 < M < 256 run as two 128-row problems over rows [0, 128) and [M - 128, M), Swap64x64
# with 64 < M < 128 as two 64-row ones (no TMA box of x past row M): the rows both compute must come out with the
# same bits, so the output equals, bit for bit, the one of the kernel run over whole row tiles
# (TORCH_DNN_SM90_SKINNY_OVERLAP=0), and matches PyTorch's
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,M", [(k, m) for k in ("narrow", "mid12") for m in (129, 200, 255)] +
                         [("swap64x64", m) for m in (65, 100, 127)])
def test_linear_act_skinny_overlapped_rows(dtype, M, kernel, monkeypatch):
    monkeypatch.setenv("TORCH_DNN_SM90_SKINNY_KERNEL", kernel)
    monkeypatch.setenv("TORCH_DNN_SM90_SKINNY_SPLITS", "1")
    N, K = 1032, 1056
    x, w = _check_skinny_gelu(M, N, K, dtype, f"overlapped rows M={M} kernel={kernel} {dtype}")
    b, r = _rand((N,), dtype), _rand((M, N), dtype)
    outs = [torch_dnn.functional.linear_act(x, w, b, "silu", r) for _ in range(2)]
    monkeypatch.setenv("TORCH_DNN_SM90_SKINNY_OVERLAP", "0")
    whole = torch_dnn.functional.linear_act(x, w, b, "silu", r)
    assert torch.equal(outs[0], outs[1]), "overlapped rows: not deterministic"
    assert torch.equal(outs[0], whole), "overlapped rows: not the bits of the whole-tile run"


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_gelu_big(dtype):
    M, N, K = 4096, 4096, 4096
    x = _rand((M, K), dtype)
    w = _rand((N, K), dtype, -0.05, 0.05)
    b = _rand((N,), dtype)
    _poison(M * N * 4)
    out = torch_dnn.functional.linear_act(x, w, b, "gelu")
    _check(out, F.gelu(F.linear(x, w, b)), F.gelu(F.linear(x.double(), w.double(), b.double())), "linear gelu big")


# --- preact (saved for the backward) and the backward GEMM layouts, through autograd -----------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_linear_act_backward(dtype, act):
    # the forward stores preact for the backward; the backward runs dZ @ W (NN) and dZ.T @ X (TT)
    M, N, K = 1023, 264, 520
    x = _rand((M, K), dtype).requires_grad_()
    w = _rand((N, K), dtype, -0.1, 0.1).requires_grad_()
    b = _rand((N,), dtype).requires_grad_()
    g = _rand((M, N), dtype)
    out = torch_dnn.functional.linear_act(x, w, b, act)
    grads = torch.autograd.grad(out, (x, w, b), g)
    xp, wp, bp = (t.detach().clone().requires_grad_() for t in (x, w, b))
    peer_out = _act_ref(F.linear(xp, wp, bp), act)
    peer = torch.autograd.grad(peer_out, (xp, wp, bp), g)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref_out = _act_ref(F.linear(x64, w64, b64), act)
    ref = torch.autograd.grad(ref_out, (x64, w64, b64), g.double())
    _check(out, peer_out, ref_out, f"linear {act} forward")
    for name, o, p, r in zip(("dx", "dw", "db"), grads, peer, ref):
        v = compare(o, p, r, grad=True, name=f"linear {act} {name}")
        assert v, v.message


# --- the fallback contract ---------------------------------------------------------------------------------


def test_unsupported_raises_when_forced():
    # A leading dimension that is not a multiple of 8 elements breaks TMA's rule: forced, the op must raise
    a = _operand(33, 13, torch.bfloat16, False, pad=0)  # lda = 13
    b = _operand(13, 16, torch.bfloat16, True, pad=0)
    with pytest.raises(RuntimeError):
        torch_dnn.functional.mm(a, b)


def test_unsupported_falls_back_when_not_forced(monkeypatch):
    monkeypatch.delenv("TORCH_DNN_GEMM_PATH", raising=False)
    a = _operand(33, 13, torch.bfloat16, False, pad=0)
    b = _operand(13, 16, torch.bfloat16, True, pad=0)
    out = torch_dnn.functional.mm(a, b)
    _check(out, torch.mm(a, b), torch.mm(a.double(), b.double()), "fallback")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(pytest.main([__file__, "-q", *os.sys.argv[1:]]))
