"""The CUDA attention kernels through torch.ops.torch_dnn.attention_forward / attention_backward, each path forced
with TORCH_DNN_ATTENTION_PATH (flash: csrc/attention/flash_*.cu on tensor cores; reference: the CUDA-core kernels
of attention_reference.cu), under the project's error rule (torch_dnn/testing.py: float64 reference, ours within
2x the peer's error forward, 3x backward). The float64 reference and, for options PyTorch's SDPA lacks (windows,
bottom-right alignment, softcap, ALiBi, variable lengths), the peer are the math composite below; where SDPA has
the problem (no mask / causal top-left, GQA) the peer is PyTorch's own CUDA SDPA (flash or cuDNN). Odd lengths,
causal with Sq != Sk in both alignments, GQA, windows, softcap, ALiBi, fully masked rows (zeros, not NaN),
variable lengths with an empty sequence, dropout on both paths (the mask regenerated here from the same Philox
key), bitwise reproducible backward, the kernels each path runs (profiler names), and the problems flash refuses
going to the reference kernels. Skipped without CUDA."""
import math

import pytest
import torch
import torch.nn.functional as F

import torch_dnn  # noqa: F401
from torch_dnn.testing import compare

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

ops = torch.ops.torch_dnn
INF = float("inf")


def _rand(shape, dtype, gen, low=-1.0, high=1.0):
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * (high - low) + low).to("cuda", dtype)


# ---- the math composite (any dtype; float64 is the reference) ----

def visible(Sq, Sk, causal, bottom_right, window, device):
    i = torch.arange(Sq, device=device)[:, None]
    j = torch.arange(Sk, device=device)[None, :]
    shift = Sk - Sq if bottom_right else 0
    left, right = window
    if causal:
        right = 0
    vis = torch.ones(Sq, Sk, dtype=torch.bool, device=device)
    if right >= 0:
        vis &= j <= i + shift + right
    if left >= 0:
        vis &= j >= i + shift - left
    return vis, (i + shift - j).abs()


def attention_math(q, k, v, *, scale=None, causal=False, bottom_right=False, window=(-1, -1), softcap=0.0,
                   alibi=None, mask=None, keep=None, dropout_p=0.0):
    """softmax(scale q k^T (softcapped) + mask - ALiBi, causal/window) @ v over [B][H][S][D]; fully masked rows give
    o = 0 and lse = +inf. keep: the dropout mask ([B][Hq][Sq][Sk] bool). Returns (o, lse)."""
    Hq, Hkv = q.shape[1], k.shape[1]
    if Hq != Hkv:
        k = k.repeat_interleave(Hq // Hkv, dim=1)
        v = v.repeat_interleave(Hq // Hkv, dim=1)
    Sq, Sk = q.shape[2], k.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    vis, dist = visible(Sq, Sk, causal, bottom_right, window, q.device)
    vis = vis.expand(s.shape)
    if mask is not None:
        if mask.dtype == torch.bool:
            vis = vis & mask
        else:
            s = s + mask
    if alibi is not None:
        s = s - alibi.to(s.dtype).view(-1, Hq, 1, 1) * dist.to(s.dtype)
    s = s.masked_fill(~vis, -INF)
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    p = e / torch.where(l == 0, torch.ones_like(l), l)
    lse = torch.where(l == 0, torch.full_like(l, INF), m + torch.log(l)).squeeze(-1)
    if keep is not None:
        p = p * keep.to(p.dtype) / (1 - dropout_p)
    return p @ v, lse


# ---- running our op ----

# flash_mma: the flash path with the Hopper route off, so that the mma.sync kernels stay tested on an sm_90 GPU
# (elsewhere they are what flash runs). Used by the tests of problems the Hopper forward takes.
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
PATHS = ["flash", "reference"] + (["flash_mma"] if HOPPER else [])


def run_ours(q, k, v, path, monkeypatch, *, mask=None, dropout_p=0.0, causal=False, scale=None, bottom_right=False,
             window=(-1, -1), softcap=0.0, alibi=None, cu_q=None, cu_k=None, max_q=0, max_k=0, grad_out=None,
             mask_grad=False):
    monkeypatch.setenv("TORCH_DNN_ATTENTION_PATH", "flash" if path == "flash_mma" else path)
    monkeypatch.setenv("TORCH_DNN_ATTENTION_SM90", "0" if path == "flash_mma" else "1")
    out, lse, rng = ops.attention_forward(q, k, v, mask, dropout_p, causal, scale, bottom_right=bottom_right,
                                          window_left=window[0], window_right=window[1], softcap=softcap,
                                          alibi_slopes=alibi, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                          max_seqlen_q=max_q, max_seqlen_k=max_k)
    grads = None
    if grad_out is not None:
        grads = ops.attention_backward(grad_out, q, k, v, out, lse, rng, mask, dropout_p, causal, scale,
                                       bottom_right, window[0], window[1], softcap, alibi, cu_q, cu_k, max_q, max_k,
                                       False, mask_grad)
    return out, lse, rng, grads


def math_with_grads(q, k, v, g, **kw):
    xs = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    o, lse = attention_math(*xs, **kw)
    return (o.detach(), lse.detach()) + tuple(torch.autograd.grad(o, xs, g))


def check(name, ours, peer, ref, grad=False):
    v = compare(ours, peer, ref, grad=grad, name=name)
    assert v, v.message


def check_problem(label, path, monkeypatch, B, Hq, Hkv, Sq, Sk, D, dtype, *, sdpa_peer=False, seed=0, **kw):
    """Forward, lse and the three gradients of our op on `path` against the float64 math (the peer: PyTorch's SDPA
    where sdpa_peer, else the math composite in dtype)."""
    gen = torch.Generator().manual_seed(seed)
    q = _rand((B, Hq, Sq, D), dtype, gen)
    k = _rand((B, Hkv, Sk, D), dtype, gen)
    v = _rand((B, Hkv, Sk, D), dtype, gen)
    g = _rand((B, Hq, Sq, D), dtype, gen)
    out, lse, _, grads = run_ours(q, k, v, path, monkeypatch, grad_out=g, **kw)
    r_o, r_lse, r_dq, r_dk, r_dv = math_with_grads(q.double(), k.double(), v.double(), g.double(), **kw)
    if sdpa_peer:
        xs = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
        p_o = F.scaled_dot_product_attention(*xs, is_causal=kw.get("causal", False), scale=kw.get("scale"),
                                             enable_gqa=Hq != Hkv)
        p_dq, p_dk, p_dv = torch.autograd.grad(p_o, xs, g)
        p_o = p_o.detach()
    else:
        p_o, _, p_dq, p_dk, p_dv = math_with_grads(q, k, v, g, **kw)
    check(f"{label} out", out, p_o, r_o)
    fin = torch.isfinite(r_lse)
    assert torch.equal(torch.isfinite(lse), fin), f"{label}: lse is +inf exactly where a row sees no key"
    assert torch.all(lse[~fin] == INF), f"{label}: masked rows' lse"
    torch.testing.assert_close(lse[fin].double(), r_lse[fin], rtol=2e-5, atol=2e-5, msg=f"{label}: lse")
    assert not out.isnan().any(), f"{label}: NaN in out"
    for name, ours, peer, ref in (("dq", grads[0], p_dq, r_dq), ("dk", grads[1], p_dk, r_dk),
                                  ("dv", grads[2], p_dv, r_dv)):
        check(f"{label} {name}", ours, peer, ref, grad=True)


LENGTHS = [(1, 1), (17, 17), (97, 113), (113, 97), (1, 1025), (1025, 1025)]
HALF = [torch.bfloat16, torch.float16]


@needs_cuda
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("D", [32, 64, 96, 128])
@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda L: f"{L[0]}x{L[1]}")
def test_plain_and_causal(path, dtype, D, lengths, monkeypatch):
    Sq, Sk = lengths
    for causal in (False, True):
        check_problem(f"{path} {dtype} D{D} {Sq}x{Sk} causal={causal}", path, monkeypatch, 2, 3, 3, Sq, Sk, D, dtype,
                      causal=causal, sdpa_peer=True)


@needs_cuda
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("lengths", [(17, 97), (97, 17), (113, 1025)], ids=lambda L: f"{L[0]}x{L[1]}")
def test_causal_bottom_right(path, dtype, lengths, monkeypatch):
    # Sq > Sk leaves the first Sq - Sk rows with no visible key: o = 0, lse = +inf, no NaN in any gradient
    Sq, Sk = lengths
    check_problem(f"{path} bottom-right {Sq}x{Sk}", path, monkeypatch, 2, 2, 2, Sq, Sk, 64, dtype, causal=True,
                  bottom_right=True)


@needs_cuda
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("heads", [(8, 2), (6, 1)], ids=lambda h: f"{h[0]}q{h[1]}kv")
def test_gqa(path, heads, monkeypatch):
    Hq, Hkv = heads
    check_problem(f"{path} gqa {Hq}:{Hkv}", path, monkeypatch, 2, Hq, Hkv, 97, 113, 128, torch.bfloat16, causal=True,
                  sdpa_peer=True)
    check_problem(f"{path} gqa {Hq}:{Hkv} D64", path, monkeypatch, 1, Hq, Hkv, 200, 200, 64, torch.float16)


@needs_cuda
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("window", [(16, 0), (32, 8), (0, 0), (-1, 5)], ids=str)
@pytest.mark.parametrize("bottom_right", [False, True], ids=["top_left", "bottom_right"])
def test_windows(path, window, bottom_right, monkeypatch):
    check_problem(f"{path} window {window}", path, monkeypatch, 1, 2, 2, 113, 250, 64, torch.bfloat16, window=window,
                  bottom_right=bottom_right)


@needs_cuda
@pytest.mark.parametrize("path", ["flash", "reference"])
@pytest.mark.parametrize("D", [64, 128])
def test_softcap_and_alibi(path, D, monkeypatch):
    check_problem(f"{path} softcap", path, monkeypatch, 2, 2, 2, 97, 130, D, torch.bfloat16, softcap=3.0, causal=True)
    alibi = torch.tensor([0.5, 0.125, 0.03125, 0.25], device="cuda", dtype=torch.float32)
    check_problem(f"{path} alibi", path, monkeypatch, 1, 4, 2, 70, 90, D, torch.float16, alibi=alibi, causal=True,
                  bottom_right=True)


@needs_cuda
def test_head_dim_256(monkeypatch):
    # flash forward takes 256; its backward refuses it (the reference kernels take it under auto)
    check_problem("auto D256", "auto", monkeypatch, 1, 2, 2, 97, 113, 256, torch.bfloat16, causal=True)
    gen = torch.Generator().manual_seed(1)
    q, k, v = (_rand((1, 2, 65, 256), torch.bfloat16, gen) for _ in range(3))
    out, _, _, _ = run_ours(q, k, v, "flash", monkeypatch)
    ref, _ = attention_math(q.double(), k.double(), v.double())
    check("flash D256 out", out, F.scaled_dot_product_attention(q, k, v), ref)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_reference_wide_dtypes(dtype, monkeypatch):
    # float32 / float64 run only on the reference kernels (auto picks them)
    for Sq, Sk, D, causal in ((17, 97, 64, True), (113, 113, 59, False), (1, 1025, 111, False)):
        check_problem(f"auto {dtype} {Sq}x{Sk} D{D}", "auto", monkeypatch, 2, 2, 1, Sq, Sk, D, dtype, causal=causal)


@needs_cuda
@pytest.mark.parametrize("path", PATHS)
def test_varlen(path, monkeypatch):
    # packed sequences (one of them empty) against each sequence's math
    lens_q, lens_k = [17, 0, 97, 1], [30, 5, 113, 64]
    H, D, dtype = 2, 64, torch.bfloat16
    gen = torch.Generator().manual_seed(3)
    tq, tk = sum(lens_q), sum(lens_k)
    qp = _rand((tq, H, D), dtype, gen)
    kp = _rand((tk, H, D), dtype, gen)
    vp = _rand((tk, H, D), dtype, gen)
    gp = _rand((tq, H, D), dtype, gen)
    as4 = lambda t: t.unsqueeze(0).transpose(1, 2)  # noqa: E731  [1][H][total][D]
    cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), dtype=torch.int32, device="cuda")
    kw = dict(causal=True, bottom_right=True)
    out, lse, _, grads = run_ours(as4(qp), as4(kp), as4(vp), path, monkeypatch, cu_q=cu_q, cu_k=cu_k,
                                  max_q=max(lens_q), max_k=max(lens_k), grad_out=as4(gp), **kw)
    q0 = k0 = 0
    checked = 0
    for b, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        if lq > 0:
            sl_q, sl_k = slice(q0, q0 + lq), slice(k0, k0 + lk)
            seq = lambda t, s: t[s].transpose(0, 1).unsqueeze(0)  # noqa: E731  [1][H][len][D]
            q, k, v, g = seq(qp, sl_q), seq(kp, sl_k), seq(vp, sl_k), seq(gp, sl_q)
            r = math_with_grads(q.double(), k.double(), v.double(), g.double(), **kw)
            p = math_with_grads(q, k, v, g, **kw)
            o_b = out[0, :, sl_q]
            check(f"{path} varlen seq {b} out", o_b.unsqueeze(0), p[0], r[0])
            fin = torch.isfinite(r[1][0])
            torch.testing.assert_close(lse[b, :, :lq][fin].double(), r[1][0][fin], rtol=2e-5, atol=2e-5)
            check(f"{path} varlen seq {b} dq", grads[0][0, :, sl_q].unsqueeze(0), p[2], r[2], grad=True)
            check(f"{path} varlen seq {b} dk", grads[1][0, :, sl_k].unsqueeze(0), p[3], r[3], grad=True)
            check(f"{path} varlen seq {b} dv", grads[2][0, :, sl_k].unsqueeze(0), p[4], r[4], grad=True)
            checked += 1
        else:  # an empty query sequence: its keys get zero gradients
            assert torch.all(grads[1][0, :, k0:k0 + lk] == 0) and torch.all(grads[2][0, :, k0:k0 + lk] == 0)
        q0, k0 = q0 + lq, k0 + lk
    assert checked == 3


@needs_cuda
@pytest.mark.parametrize("dtype", HALF + [torch.float32], ids=str)
def test_masks_on_reference(dtype, monkeypatch):
    # bool and additive masks (broadcast over batch and query rows), a fully masked row, the additive mask's
    # gradient: the reference kernels' problems (flash refuses masks; auto falls back)
    B, H, Sq, Sk, D = 2, 3, 33, 97, 64
    gen = torch.Generator().manual_seed(5)
    q, k, v, g = (_rand(s, dtype, gen) for s in ((B, H, Sq, D), (B, H, Sk, D), (B, H, Sk, D), (B, H, Sq, D)))
    bmask = torch.rand((B, H, Sq, Sk), generator=gen) < 0.7
    bmask[1, 2, 5] = False  # a row that sees nothing
    bmask = bmask.cuda()
    out, lse, _, grads = run_ours(q, k, v, "auto", monkeypatch, mask=bmask, grad_out=g)
    assert torch.all(out[1, 2, 5] == 0) and lse[1, 2, 5] == INF
    r = math_with_grads(q.double(), k.double(), v.double(), g.double(), mask=bmask)
    p = math_with_grads(q, k, v, g, mask=bmask)
    for i, name in enumerate(("out", None, "dq", "dk", "dv")):
        if name:
            check(f"bool mask {dtype} {name}", out if i == 0 else grads[i - 2], p[i], r[i], grad=i > 0)

    amask = _rand((1, H, 1, Sk), dtype, gen, -2, 2).requires_grad_(False)
    out, _, _, grads = run_ours(q, k, v, "auto", monkeypatch, mask=amask, grad_out=g, mask_grad=True)
    xs = [t.detach().clone().requires_grad_(True) for t in (q.double(), k.double(), v.double(), amask.double())]
    o64, _ = attention_math(*xs[:3], mask=xs[3])
    r = (o64,) + torch.autograd.grad(o64, xs, g.double())
    xs = [t.detach().clone().requires_grad_(True) for t in (q, k, v, amask)]
    o, _ = attention_math(*xs[:3], mask=xs[3])
    p = (o,) + torch.autograd.grad(o, xs, g)
    check(f"additive mask {dtype} out", out, p[0].detach(), r[0].detach())
    for i, name in enumerate(("dq", "dk", "dv", "dmask")):
        check(f"additive mask {dtype} {name}", grads[i], p[i + 1], r[i + 1], grad=True)


# ---- dropout: Philox4x32-10 in torch (int64 arithmetic on 32-bit words) ----

_M32 = 0xFFFFFFFF


def _mulhilo(a, b):
    b_lo, b_hi = b & 0xFFFF, b >> 16
    p1, p2 = a * b_lo, a * b_hi  # < 2^48 each
    t = (p1 >> 16) + p2
    return t >> 16, ((t & 0xFFFF) << 16) | (p1 & 0xFFFF)


def philox_first_word(c0, c1, seed, offset):
    """The first output word of Philox4x32-10 for counters (c0, c1, offset lo, offset hi) (int64 tensors of 32-bit
    words), key (seed lo, seed hi): csrc/attention/philox.h's dropout draw with (c0, c1) = (n lo, n hi)."""
    n = c0
    c2 = torch.full_like(n, offset & _M32)
    c3 = torch.full_like(n, (offset >> 32) & _M32)
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    for _ in range(10):
        hi0, lo0 = _mulhilo(torch.full_like(n, 0xD2511F53), c0)
        hi1, lo1 = _mulhilo(torch.full_like(n, 0xCD9E8D57), c2)
        c0, c1, c2, c3 = (hi1 ^ c1 ^ k0) & _M32, lo1, (hi0 ^ c3 ^ k1) & _M32, lo0
        k0, k1 = (k0 + 0x9E3779B9) & _M32, (k1 + 0xBB67AE85) & _M32
    return c0


def test_philox_known_answers():
    # Random123's known answers (first word): counter = key = 0, all ones, and the digits of pi
    zero, ones = torch.zeros(1, dtype=torch.int64), torch.full((1,), _M32, dtype=torch.int64)
    assert philox_first_word(zero, zero, 0, 0).item() == 0x6627E8D5
    assert philox_first_word(ones, ones, 0xFFFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF).item() == 0x408F276D
    pi = philox_first_word(torch.tensor([0x243F6A88]), torch.tensor([0x85A308D3]), 0x299F31D0A4093822,
                           0x0370734413198A2E)
    assert pi.item() == 0xD16CFE09


def dropout_keep(B, H, Sq, Sk, p, seed, offset):
    n = torch.arange(B * H * Sq * Sk, dtype=torch.int64)
    thr = min(int(p * 2.0 ** 32), _M32)
    return (philox_first_word(n & _M32, n >> 32, seed, offset) >= thr).view(B, H, Sq, Sk)


@needs_cuda
@pytest.mark.parametrize("path,dtype", [("flash", torch.bfloat16), ("reference", torch.bfloat16),
                                        ("auto", torch.float32)], ids=str)
def test_dropout(path, dtype, monkeypatch):
    B, H, Sq, Sk, D, p = 2, 2, 37, 53, 32, 0.3
    gen = torch.Generator().manual_seed(7)
    q, k, v, g = (_rand(s, dtype, gen) for s in ((B, H, Sq, D), (B, H, Sk, D), (B, H, Sk, D), (B, H, Sq, D)))
    out, _, rng, grads = run_ours(q, k, v, path, monkeypatch, dropout_p=p, causal=True, grad_out=g)
    seed, offset = (int(x) & 0xFFFFFFFFFFFFFFFF for x in rng.tolist())
    keep = dropout_keep(B, H, Sq, Sk, p, seed, offset).cuda()
    assert abs(keep.float().mean().item() - (1 - p)) < 0.02
    kw = dict(causal=True, keep=keep, dropout_p=p)
    r = math_with_grads(q.double(), k.double(), v.double(), g.double(), **kw)
    pe = math_with_grads(q, k, v, g, **kw)
    check(f"dropout {dtype} out", out, pe[0], r[0])
    for i, name in enumerate(("dq", "dk", "dv")):
        check(f"dropout {dtype} {name}", grads[i], pe[i + 2], r[i + 2], grad=True)


# ---- determinism, and which kernels run ----

@needs_cuda
@pytest.mark.parametrize("path", ["flash", "reference"])
def test_backward_reproducible(path, monkeypatch):
    gen = torch.Generator().manual_seed(11)
    q = _rand((2, 8, 300, 64), torch.bfloat16, gen)
    k, v = _rand((2, 2, 300, 64), torch.bfloat16, gen), _rand((2, 2, 300, 64), torch.bfloat16, gen)
    g = _rand((2, 8, 300, 64), torch.bfloat16, gen)
    first = run_ours(q, k, v, path, monkeypatch, causal=True, grad_out=g)[3]
    for _ in range(2):
        again = run_ours(q, k, v, path, monkeypatch, causal=True, grad_out=g)[3]
        for a, b in zip(first[:3], again[:3]):
            assert torch.equal(a, b)


def _kernel_names(fn):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@needs_cuda
@pytest.mark.parametrize("case", ["flash", "reference", "auto_half", "auto_mask", "auto_float32"])
def test_kernel_choice(case, monkeypatch):
    gen = torch.Generator().manual_seed(13)
    dtype = torch.float32 if case == "auto_float32" else torch.bfloat16
    q, k, v, g = (_rand((1, 2, 130, 64), dtype, gen) for _ in range(4))
    mask = (torch.rand((1, 1, 130, 130), generator=gen) < 0.8).cuda() if case == "auto_mask" else None
    path = case if case in ("flash", "reference") else "auto"
    names = _kernel_names(lambda: run_ours(q, k, v, path, monkeypatch, mask=mask, grad_out=g))
    flash = [n for n in names if "flash_forward_" in n or "flash_bwd_" in n]
    ref = [n for n in names if "attention::reference::" in n]
    if case in ("flash", "auto_half"):
        # on Hopper the wgmma kernels take this problem (bf16, D 64, no mask), elsewhere the mma.sync ones
        sfx = "_sm90_kernel" if HOPPER else "_kernel"
        assert any(f"flash_forward{sfx}" in n for n in flash), names
        assert any(f"flash_bwd_dq{sfx}" in n for n in flash) and any(f"flash_bwd_dkdv{sfx}" in n for n in flash), names
        assert not ref, names
    else:
        assert not flash, names
        assert any("forward_kernel" in n for n in ref) and any("dkdv_kernel" in n for n in ref), names


@needs_cuda
@pytest.mark.skipif(not HOPPER, reason="the Hopper forward's schedules need an sm_90 GPU and sm_90a code")
@pytest.mark.parametrize("D, causal, pingpong_tile", [(128, False, "176, 2>"), (128, True, "128, 2>"),
                                                      (64, False, "128, 3>")])
def test_sm90_forward_schedules_are_taken(D, causal, pingpong_tile, monkeypatch):
    """TORCH_DNN_ATTENTION_SM90_FWD picks the Hopper forward's kernel (one instantiation a schedule and tile; the
    default is ping-pong, whose tiles are 128 x 176 at head dim 128 without causality, 192 x 128 on three MMA
    warpgroups at head dim 64, else 128 x 128), each computing the output within the error rule; ws and cp.async
    share their tiles, so their outputs are bitwise equal. The rest of this file runs under the default; the GPU
    runs repeat it with the knob set to each other schedule."""
    gen = torch.Generator().manual_seed(19)
    q, k, v = (_rand((2, 2, 300, D), torch.bfloat16, gen) for _ in range(3))
    names, outs = {}, {}
    for schedule in ("", "ws", "pingpong", "cp.async"):
        if schedule:
            monkeypatch.setenv("TORCH_DNN_ATTENTION_SM90_FWD", schedule)
        else:
            monkeypatch.delenv("TORCH_DNN_ATTENTION_SM90_FWD", raising=False)
        ran = _kernel_names(lambda: outs.__setitem__(schedule, run_ours(q, k, v, "flash", monkeypatch,
                                                                         causal=causal)[0]))
        names[schedule] = sorted({n for n in ran if "flash_forward_sm90_kernel" in n})
        assert len(names[schedule]) == 1, (schedule, ran)
    assert names[""] == names["pingpong"], names
    assert len({names[s][0] for s in ("ws", "pingpong", "cp.async")}) == 3, names
    assert f"Sm90Fwd)2, {pingpong_tile}" in names["pingpong"][0], names
    assert torch.equal(outs["cp.async"], outs["ws"])  # the same MMAs and softmax in the same order
    ref, _ = attention_math(q.double(), k.double(), v.double(), causal=causal)
    peer = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for schedule in ("pingpong", "ws"):
        check(f"{schedule} D{D} out", outs[schedule], peer, ref)


@needs_cuda
@pytest.mark.skipif(not HOPPER, reason="the Hopper backward's schedules need an sm_90 GPU and sm_90a code")
@pytest.mark.parametrize("D, causal, varlen", [(128, False, False), (64, True, False), (128, True, True)])
def test_sm90_backward_schedules_are_taken(D, causal, varlen, monkeypatch):
    """TORCH_DNN_ATTENTION_SM90_BWD picks the Hopper backward's dK / dV and dQ kernels (ws, the default: a copy
    warpgroup's tensor copies, or cp.async from the MMA threads), each computing the gradients within the error rule; both compute the same
    products in the same order over the same tiles, so their gradients are bitwise equal. Several key and query
    tiles, GQA (the query heads of a group summed by one CTA), and a packed batch whose tiles reach into the next
    sequence."""
    gen = torch.Generator().manual_seed(23)
    if varlen:
        lens_q, lens_k = [130, 0, 201], [70, 30, 260]
        tq, tk = sum(lens_q), sum(lens_k)
        as4 = lambda t: t.unsqueeze(0).transpose(1, 2)  # noqa: E731  [1][H][total][D]
        q, g = (as4(_rand((tq, 4, D), torch.bfloat16, gen)) for _ in range(2))
        k, v = (as4(_rand((tk, 2, D), torch.bfloat16, gen)) for _ in range(2))
        cu = lambda lens: torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32,  # noqa: E731
                                       device="cuda")
        kw = dict(cu_q=cu(lens_q), cu_k=cu(lens_k), max_q=max(lens_q), max_k=max(lens_k))
    else:
        q, g = (_rand((2, 4, 300, D), torch.bfloat16, gen) for _ in range(2))
        k, v = (_rand((2, 2, 290, D), torch.bfloat16, gen) for _ in range(2))
        kw = {}
    names, grads = {}, {}
    for schedule in ("", "ws", "cp.async"):
        if schedule:
            monkeypatch.setenv("TORCH_DNN_ATTENTION_SM90_BWD", schedule)
        else:
            monkeypatch.delenv("TORCH_DNN_ATTENTION_SM90_BWD", raising=False)
        ran = _kernel_names(lambda: grads.__setitem__(schedule, run_ours(q, k, v, "flash", monkeypatch, causal=causal,
                                                                         grad_out=g, **kw)[3]))
        names[schedule] = sorted({n for n in ran if "flash_bwd_dkdv_sm90_" in n or "flash_bwd_dq_sm90_" in n})
        assert len(names[schedule]) == 2, (schedule, ran)  # dq, dkdv
    assert names[""] == names["ws"], names
    assert all("Sm90Bwd)1" in n for n in names["ws"]) and all("Sm90Bwd)0" in n for n in names["cp.async"]), names
    for ws, cp in zip(grads["ws"][:3], grads["cp.async"][:3]):
        assert torch.equal(ws, cp)  # the same MMAs in the same order
    if not varlen:  # test_varlen checks packed batches against each sequence's math
        r = math_with_grads(q.double(), k.double(), v.double(), g.double(), causal=causal)
        p = math_with_grads(q, k, v, g, causal=causal)
        for i, name in enumerate(("dq", "dk", "dv")):
            check(f"ws D{D} {name}", grads["ws"][i], p[2 + i], r[2 + i], grad=True)


@needs_cuda
def test_flash_refuses_what_it_cannot_take(monkeypatch):
    gen = torch.Generator().manual_seed(17)
    q, k, v = (_rand((1, 2, 33, 64), torch.float32, gen) for _ in range(3))
    with pytest.raises(RuntimeError, match="flash"):
        run_ours(q, k, v, "flash", monkeypatch)
    q, k, v = (_rand((1, 2, 33, 72), torch.bfloat16, gen) for _ in range(3))  # head dim 72: no flash kernel
    with pytest.raises(RuntimeError, match="flash"):
        run_ours(q, k, v, "flash", monkeypatch)
    out, _, _, _ = run_ours(q, k, v, "auto", monkeypatch)
    ref, _ = attention_math(q.double(), k.double(), v.double())
    check("auto D72 out", out, F.scaled_dot_product_attention(q, k, v), ref)
