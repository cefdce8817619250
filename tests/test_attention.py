"""Attention family: scaled_dot_product_attention against PyTorch's (odd lengths, head dims 32..128 and odd ones,
d_qk != d_v, every mask kind and broadcast, causal with Sq != Sk, GQA, leading batch dims and strided views, fully
masked rows), flash_attention's options (bottom-right causal, windows, softcap, ALiBi, variable lengths with empty
sequences) against a float64 composition, dropout (the mask's statistics, reproducibility from torch.manual_seed,
gradients from the regenerated mask), the family tester's checks, MultiheadAttention against PyTorch's, converted
transformer layers and models that call F.scaled_dot_product_attention themselves."""
import copy
import importlib.util
import math

import pytest
import torch
import torch.nn.functional as TF
from torch.utils._python_dispatch import TorchDispatchMode

import torch_dnn
import torch_dnn.functional as F
import torch_dnn.nn as tnn
from torch_dnn.nn.attention import AttentionRouting
from tests.family_tester import Against, BadInput, FamilyTester, GradCase, ModelCase
from tests.utils import (assert_close_to_reference, assert_matches_torch, assert_model_matches_native, devices,
                         make_input)

ops = torch.ops.torch_dnn


def rnd(shape, dtype, device, low=-2.0, high=2.0):
    return make_input(shape, dtype, device, low=low, high=high)


def sdpa_case(name, shapes, dtype, device, mask=None, grad_mask=False, keep_mask_dtype=False, **kw):
    """Against for sdpa on q, k, v of `shapes` (and a float mask as a fourth input when grad_mask). A float mask
    not given as an input follows the inputs' dtype (the float64 reference's too) unless keep_mask_dtype."""
    q, k, v = (rnd(s, dtype, device) for s in shapes)
    if grad_mask:
        return Against(name, lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, **kw),
                       lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, m, **kw), [q, k, v, mask])

    def m(q):
        return mask.to(q.dtype) if mask is not None and mask.is_floating_point() and not keep_mask_dtype else mask

    ref = None
    if keep_mask_dtype:
        # PyTorch 2.14's CPU kernel misreads a float32 mask beside float64 inputs (Sk >= 16): the reference adds
        # the mask in float64
        def ref(q, k, v):
            return TF.scaled_dot_product_attention(q, k, v, mask.to(q.dtype), **kw)
    return Against(name, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, m(q), **kw),
                   lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, m(q), **kw), [q, k, v], ref_fn=ref)


# (B, Hq, Sq, Sk, Dqk, Dv): single query rows, odd lengths, head dims 32..128 and odd ones, d_qk != d_v
SHAPES = [(2, 3, 1, 17, 32, 32), (1, 2, 17, 97, 59, 59), (2, 2, 97, 17, 64, 32), (1, 1, 17, 17, 111, 111),
          (1, 2, 33, 33, 128, 128), (1, 2, 17, 1, 64, 48)]
CUDA_SHAPES = [(1, 2, 113, 1025, 128, 128), (1, 1, 2049, 97, 64, 64), (2, 2, 257, 257, 256, 256),
               (1, 2, 129, 129, 96, 160)]


class TestAttention(FamilyTester):
    variants = ["shapes", "masks", "causal", "gqa", "layouts"]

    def against_torch(self, device, dtype, variant):
        if variant == "shapes":
            for B, H, Sq, Sk, D, Dv in SHAPES + (CUDA_SHAPES if device == "cuda" else []):
                yield sdpa_case(f"{B}x{H} {Sq}x{Sk} d{D}/{Dv}", ((B, H, Sq, D), (B, H, Sk, D), (B, H, Sk, Dv)), dtype,
                                device)
            yield sdpa_case("scale 0.3", ((2, 2, 9, 32), (2, 2, 13, 32), (2, 2, 13, 32)), dtype, device, scale=0.3)
        elif variant == "masks":
            B, H, Sq, Sk, D = 2, 2, 17, 33, 32
            shapes = ((B, H, Sq, D), (B, H, Sk, D), (B, H, Sk, D))
            gen = torch.Generator().manual_seed(0)

            def bool_mask(*shape):
                return (torch.rand(shape, generator=gen) > 0.3).to(device)

            for shape in ((Sq, Sk), (B, 1, Sq, Sk), (1, Sk), (1, H, 1, Sk)):
                yield sdpa_case(f"bool mask {shape}", shapes, dtype, device, mask=bool_mask(*shape))
            for shape in ((B, H, Sq, Sk), (1, H, Sq, Sk), (B, 1, 1, Sk), (Sq, Sk)):
                yield sdpa_case(f"float mask {shape}", shapes, dtype, device, mask=rnd(shape, dtype, device),
                                grad_mask=True)
            yield sdpa_case("float32 mask", shapes, dtype, device, mask=rnd((Sq, Sk), torch.float32, device),
                            keep_mask_dtype=True)
            # fully masked rows: zeros (PyTorch's math backend and ours), gradients zero there
            full = bool_mask(B, 1, Sq, Sk)
            full[:, :, 3] = False
            yield sdpa_case("fully masked rows (bool)", shapes, dtype, device, mask=full)
            neg = rnd((Sq, Sk), dtype, device)
            neg[5] = -math.inf
            yield sdpa_case("fully masked rows (-inf)", shapes, dtype, device, mask=neg)
        elif variant == "causal":
            for Sq, Sk in ((17, 33), (33, 17), (3, 17), (17, 17), (97, 5)):
                yield sdpa_case(f"causal {Sq}x{Sk}", ((2, 2, Sq, 64), (2, 2, Sk, 64), (2, 2, Sk, 64)), dtype, device,
                                is_causal=True)
        elif variant == "gqa":
            for Hkv in (1, 2, 4):
                yield sdpa_case(f"gqa 8/{Hkv}", ((2, 8, 9, 32), (2, Hkv, 13, 32), (2, Hkv, 13, 32)), dtype, device,
                                enable_gqa=True)
            yield sdpa_case("gqa causal 4/2", ((1, 4, 17, 64), (1, 2, 33, 64), (1, 2, 33, 64)), dtype, device,
                            enable_gqa=True, is_causal=True)
            # heads broadcast (no GQA): key / value with one head
            yield sdpa_case("broadcast heads", ((2, 4, 9, 32), (2, 1, 13, 32), (2, 1, 13, 32)), dtype, device)
        elif variant == "layouts":
            yield sdpa_case("5-D, key batch broadcast", ((2, 2, 3, 9, 32), (1, 2, 3, 13, 32), (1, 2, 3, 13, 32)),
                            dtype, device, mask=rnd((2, 1, 1, 9, 13), dtype, device))
            yield sdpa_case("3-D (unbatched)", ((3, 9, 32), (3, 13, 32), (3, 13, 48)), dtype, device)
            yield sdpa_case("2-D", ((9, 32), (13, 32), (13, 32)), dtype, device, is_causal=True)
            # [B, S, H, D] storage seen as [B, H, S, D] (how attention modules call it): read in place
            q, k, v = (rnd((2, S, 3, 32), dtype, device).transpose(1, 2) for S in (9, 13, 13))
            yield Against("bshd views", F.scaled_dot_product_attention, TF.scaled_dot_product_attention, [q, k, v])
            # a head dim whose stride is not 1: copied
            q, k, v = (rnd((2, 3, S, 64), dtype, device)[..., ::2] for S in (9, 13, 13))
            yield Against("strided head dim", F.scaled_dot_product_attention, TF.scaled_dot_product_attention,
                          [q, k, v])

    def opcheck_samples(self, device):
        def t(*shape, grad=True):
            return rnd(shape, torch.float64, device).requires_grad_(grad)

        q, k, v = t(2, 4, 5, 8), t(2, 2, 7, 8), t(2, 2, 7, 6)
        alibi = torch.rand(4, device=device)
        packed = [t(9, 2, 8).transpose(0, 1).unsqueeze(0) for _ in range(3)]
        cu = torch.tensor([0, 4, 4, 9], dtype=torch.int32, device=device)
        fwd = ops.attention_forward.default
        out, lse, rng = ops.attention_forward(q.detach(), k.detach(), v.detach(), None, 0.0, True, None)
        return [
            (fwd, (q, k, v, t(2, 1, 5, 7), 0.0, False, 0.3), {}),
            (fwd, (q, k, v, None, 0.0, True, None), {"bottom_right": True, "window_left": 2, "softcap": 3.0,
                                                     "alibi_slopes": alibi}),
            (fwd, tuple(packed), {"cu_seqlens_q": cu, "cu_seqlens_k": cu, "max_seqlen_q": 5, "max_seqlen_k": 5}),
            (ops.attention_backward.default, (t(*out.shape, grad=False), q.detach(), k.detach(), v.detach(), out, lse,
                                              rng, None, 0.0, True, None, False, -1, -1, 0.0, None, None, None, 0, 0,
                                              False, False), {}),
        ]

    def gradcheck_cases(self, device):
        def t(*shape):
            return rnd(shape, torch.float64, device).requires_grad_()

        def seeded(fn):  # dropout: the same mask at every evaluation
            def call(*x):
                torch.manual_seed(7)
                return fn(*x)
            return call

        cu_q = torch.tensor([0, 3, 3, 7], dtype=torch.int32, device=device)
        cu_k = torch.tensor([0, 5, 6, 6], dtype=torch.int32, device=device)
        return [
            GradCase("sdpa", F.scaled_dot_product_attention, (t(2, 2, 5, 6), t(2, 2, 7, 6), t(2, 2, 7, 4))),
            GradCase("sdpa float mask", F.scaled_dot_product_attention,
                     (t(1, 2, 5, 6), t(1, 2, 7, 6), t(1, 2, 7, 6), t(1, 2, 5, 7))),
            GradCase("sdpa broadcast mask", F.scaled_dot_product_attention,
                     (t(2, 2, 5, 6), t(2, 2, 7, 6), t(2, 2, 7, 6), t(2, 1, 1, 7))),
            GradCase("sdpa causal gqa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                                       enable_gqa=True),
                     (t(1, 4, 7, 6), t(1, 2, 5, 6), t(1, 2, 5, 6))),
            GradCase("flash window softcap alibi", lambda q, k, v: F.flash_attention(
                q, k, v, causal=True, window=(2, 0), softcap=2.0,
                alibi_slopes=torch.tensor([0.3, 0.7], device=device)),
                (t(1, 5, 2, 6), t(1, 7, 2, 6), t(1, 7, 2, 6))),
            GradCase("flash varlen", lambda q, k, v: F.flash_attention(q, k, v, causal=True, cu_seqlens_q=cu_q,
                                                                       cu_seqlens_k=cu_k, max_seqlen_q=4,
                                                                       max_seqlen_k=5),
                     (t(7, 2, 6), t(6, 2, 6), t(6, 2, 6))),
            GradCase("sdpa dropout", seeded(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)),
                     (t(1, 2, 5, 6), t(1, 2, 7, 6), t(1, 2, 7, 6))),
        ]

    def gradgradcheck_cases(self, device):
        return self.gradcheck_cases(device)[:2]

    @pytest.mark.parametrize("device", devices())
    def test_gradgradcheck(self, device):
        """attention_backward has no derivative: a second backward raises an error that names it."""
        n = 0
        for c in self.gradgradcheck_cases(device):
            y = c.fn(*c.inputs)
            gs = torch.autograd.grad(y.square().sum(), c.inputs, create_graph=True)
            with pytest.raises(RuntimeError, match="derivative for torch_dnn::attention_backward is not implemented"):
                torch.autograd.grad(sum(g.sum() for g in gs), c.inputs)
            n += 1
        assert n > 0

    def compile_cases(self, device):
        dtype = torch.float32
        yield sdpa_case("compile float mask", ((2, 2, 9, 32), (2, 2, 13, 32), (2, 2, 13, 32)), dtype, device,
                        mask=rnd((2, 1, 9, 13), dtype, device), grad_mask=True)
        yield sdpa_case("compile gqa 5-D", ((2, 2, 4, 9, 32), (2, 2, 2, 13, 32), (2, 2, 2, 13, 32)), dtype, device,
                        enable_gqa=True)
        native = SdpaBlock(64, 4).to(device)
        ours, _ = torch_dnn.convert(native, include=tnn.ATTENTION)
        yield ModelCase("routed block", ours, native, rnd((2, 9, 64), dtype, device))
        native = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).to(device)
        ours, _ = torch_dnn.convert(native, include=tnn.ATTENTION)
        yield ModelCase("encoder layer", ours, native, rnd((2, 9, 64), dtype, device))

    def bad_inputs(self):
        q, k = torch.randn(2, 8, 9, 32), torch.randn(2, 3, 13, 32)
        sdpa = "torch_dnn.scaled_dot_product_attention"
        x = torch.randn(2, 4, 9, 32)
        return [
            BadInput(lambda: F.scaled_dot_product_attention(q, k, k, enable_gqa=True), sdpa, "multiple"),
            BadInput(lambda: F.scaled_dot_product_attention(q, k, k), sdpa, "broadcast"),
            BadInput(lambda: F.scaled_dot_product_attention(x, x, x, torch.zeros(9, 10)), sdpa, "attn_mask"),
            BadInput(lambda: F.scaled_dot_product_attention(x, x, x, torch.zeros(9, 9, dtype=torch.int32)),
                     "torch_dnn.attention_forward", "attn_mask"),
            BadInput(lambda: F.scaled_dot_product_attention(x, x, x, torch.zeros(9, 9), is_causal=True), sdpa,
                     "is_causal"),
            BadInput(lambda: F.scaled_dot_product_attention(x.int(), x.int(), x.int()), "torch_dnn.attention_forward",
                     "query"),
            BadInput(lambda: F.scaled_dot_product_attention(x, x.double(), x), "torch_dnn.attention_forward", "key"),
            BadInput(lambda: F.scaled_dot_product_attention(x, x[..., :16], x), "torch_dnn.attention_forward",
                     "head dim"),
            BadInput(lambda: F.flash_attention(x[0], x[0], x[0], cu_seqlens_q=torch.tensor([0, 9]),
                                               cu_seqlens_k=torch.tensor([0, 9], dtype=torch.int32)),
                     "torch_dnn.attention_forward", "cu_seqlens_q"),
            BadInput(lambda: F.flash_attention(x, x, x, window=(-2, 0)), "torch_dnn.attention_forward", "window"),
            BadInput(lambda: F.scaled_dot_product_attention(x, x, x, dropout_p=1.5), "torch_dnn.attention_forward",
                     "dropout_p"),
        ]

    def cuda_graph_step(self):
        q, k, v = (rnd((2, 4, S, 64), torch.bfloat16, "cuda").requires_grad_() for S in (33, 97, 97))
        g = rnd((2, 4, 33, 64), torch.bfloat16, "cuda")

        def step():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return (out, *torch.autograd.grad(out, (q, k, v), g))

        def refill():
            for t in (q, k, v, g):
                t.copy_(torch.randn_like(t))
        return step, refill

    def past_2_31_cases(self):
        def rows_check(Sq, Sk, D, mask_past=False):
            def run():
                torch.manual_seed(0)
                q = torch.randn(1, 1, Sq, D, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(1, 1, Sk, D, device="cuda", dtype=torch.bfloat16)
                v = torch.randn(1, 1, Sk, D, device="cuda", dtype=torch.bfloat16)
                mask = None
                if mask_past:
                    mask = torch.ones(Sq, Sk, device="cuda", dtype=torch.bool)
                    mask[-1, : Sk // 2] = False
                q.requires_grad_()
                out = F.scaled_dot_product_attention(q, k, v, mask)
                (dq,) = torch.autograd.grad(out, q, torch.ones_like(out))
                tail = slice(Sq - 3, Sq)  # the last rows: offsets past 2^31 elements
                m = None if mask is None else mask[tail]
                q64 = q.detach()[:, :, tail].double().requires_grad_()
                ref = TF.scaled_dot_product_attention(q64, k.double(), v.double(), m)
                (dq64,) = torch.autograd.grad(ref, q64, torch.ones_like(ref))
                assert_close_to_reference(out[:, :, tail], ref, name="out rows past 2^31")
                assert_close_to_reference(dq[:, :, tail], dq64, grad=True, name="dq rows past 2^31")
            return run
        # q / out / dq past 2^31 elements (16.8M rows of 128); a bool mask past 2^31 elements (46400^2)
        return {"rows": rows_check(2 ** 24 + 5, 16, 128), "mask": rows_check(46400, 46400, 32, mask_past=True)}


# ---- flash_attention's options against a float64 composition ----

def reference_attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, alibi=None, scale=None,
                        bottom_right=True, dropout_mask=None, dropout_p=0.0):
    """[B, S, H, D] attention as a composition of ATen ops (the contract of attention_kernels.h)."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    Hq, Hk = q.shape[1], k.shape[1]
    k, v = k.repeat_interleave(Hq // Hk, 1), v.repeat_interleave(Hq // Hk, 1)
    Sq, Sk = q.shape[2], k.shape[2]
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * q @ k.transpose(-1, -2)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Sq, device=q.device)[:, None] + (Sk - Sq if bottom_right else 0)
    j = torch.arange(Sk, device=q.device)[None, :]
    if alibi is not None:
        s = s - alibi.to(s.dtype).view(-1, Hq, 1, 1) * (i - j).abs()
    wl, wr = window
    if causal:
        wr = 0
    visible = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device)
    if wr >= 0:
        visible &= j - i <= wr
    if wl >= 0:
        visible &= i - j <= wl
    s = s.masked_fill(~visible, -math.inf)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    if dropout_mask is not None:
        p = p * dropout_mask / (1 - dropout_p)
    return (p @ v).transpose(1, 2)


FLASH_CASES = [  # (name, Sq, Sk, Hq, Hk, kwargs)
    ("bottom-right causal Sq<Sk", 9, 33, 2, 2, dict(causal=True)),
    ("bottom-right causal Sq>Sk (rows with no key)", 33, 9, 2, 2, dict(causal=True)),
    ("sliding window", 33, 33, 2, 2, dict(window=(4, 2))),
    ("causal window gqa", 17, 40, 4, 2, dict(causal=True, window=(8, -1))),
    ("softcap", 17, 23, 2, 1, dict(softcap=5.0)),
    ("alibi", 17, 23, 2, 2, dict(alibi=True, causal=True)),
    ("alibi per batch", 9, 13, 2, 2, dict(alibi="batch")),
    ("scale", 9, 13, 2, 2, dict(scale=0.2)),
]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", FLASH_CASES, ids=[c[0] for c in FLASH_CASES])
def test_flash_attention_options(device, dtype, case):
    name, Sq, Sk, Hq, Hk, kw = case
    B, D = 2, 32
    kw = dict(kw)
    alibi = kw.pop("alibi", None)
    slopes = None
    if alibi is not None:
        shape = (B, Hq) if alibi == "batch" else (Hq,)
        slopes = torch.rand(shape, device=device) * 0.5
    q, k, v = rnd((B, Sq, Hq, D), dtype, device), rnd((B, Sk, Hk, D), dtype, device), rnd((B, Sk, Hk, D), dtype,
                                                                                          device)

    def ours(q, k, v):
        return F.flash_attention(q, k, v, alibi_slopes=slopes, **kw)

    def ref(q, k, v):
        return reference_attention(q, k, v, alibi=slopes, **kw)
    assert_matches_torch(ours, ref, [q, k, v], name=name)


@pytest.mark.parametrize("device", devices())
def test_flash_attention_lse(device):
    q, k, v = (rnd((2, S, 2, 32), torch.float64, device) for S in (9, 13, 13))
    out, lse = F.flash_attention(q, k, v, causal=True, return_lse=True)
    s = q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2) / math.sqrt(32)
    i, j = torch.arange(9, device=device)[:, None] + 4, torch.arange(13, device=device)
    ref = s.masked_fill(j > i, -math.inf).logsumexp(-1)
    torch.testing.assert_close(lse, ref)
    assert lse.shape == (2, 2, 9) and lse.dtype == torch.float64
    # a row that sees no key: lse +inf, output 0
    out, lse = F.flash_attention(q[:, :, :, :], k[:, :4], v[:, :4], causal=True, return_lse=True)
    assert torch.isinf(lse[:, :, :5]).all() and (out[:, :5] == 0).all()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flash_attention_varlen(device, dtype):
    """Packed sequences (an empty query sequence, an empty key sequence) against each sequence alone."""
    lens_q, lens_k = [5, 0, 17, 3, 1], [7, 4, 17, 0, 29]
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32, device=device)
    H, Hk, D = 4, 2, 32
    q, k, v = (rnd((n, h, D), dtype, device) for n, h in ((sum(lens_q), H), (sum(lens_k), Hk), (sum(lens_k), Hk)))
    for causal in (False, True):
        def ours(q, k, v):
            return F.flash_attention(q, k, v, causal=causal, window=(6, -1), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)

        def ref(q, k, v):
            outs = []
            for b in range(len(lens_q)):
                sq, sk = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
                outs.append(reference_attention(q[None, sq], k[None, sk], v[None, sk], causal=causal,
                                                window=(6, -1))[0])
            return torch.cat(outs)
        assert_matches_torch(ours, ref, [q, k, v], name=f"varlen causal={causal}")


def test_varlen_offsets_are_checked():
    """On the CPU the offsets themselves are checked (on CUDA that would synchronise)."""
    q = torch.randn(9, 2, 32)
    with pytest.raises(RuntimeError, match="cu_seqlens_q to run from 0 to 9"):
        F.flash_attention(q, q, q, cu_seqlens_q=torch.tensor([0, 8], dtype=torch.int32),
                          cu_seqlens_k=torch.tensor([0, 9], dtype=torch.int32), max_seqlen_q=9, max_seqlen_k=9)


# ---- dropout ----

def _dropout_mask(device, p, B=2, H=3, Sq=33, Sk=64, seed=None):
    """The mask the kernels draw, recovered exactly: q = k = 0 makes P uniform (1 / Sk), value = identity, so
    out[b, h, i, j] = mask[b, h, i, j] / (Sk (1 - p))."""
    q = torch.zeros(B, H, Sq, 8, device=device, dtype=torch.float64)
    k = torch.zeros(B, H, Sk, 8, device=device, dtype=torch.float64)
    v = torch.eye(Sk, device=device, dtype=torch.float64).expand(B, H, Sk, Sk)
    if seed is not None:
        torch.manual_seed(seed)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
    z = out * Sk * (1 - p)
    assert torch.all((z - z.round()).abs() < 1e-9) and set(z.round().unique().tolist()) <= {0.0, 1.0}
    return z.round()


@pytest.mark.parametrize("device", devices())
def test_dropout_mask_statistics(device):
    for p in (0.1, 0.5, 0.9):
        z = _dropout_mask(device, p, seed=0)
        n = z.numel()
        kept = z.mean().item()
        sigma = math.sqrt(p * (1 - p) / n)
        assert abs(kept - (1 - p)) < 5 * sigma, (p, kept)
        # no structure along rows or columns: every row and column keeps about 1 - p
        rows = z.mean(-1).flatten()
        assert (rows - (1 - p)).abs().max() < 6 * math.sqrt(p * (1 - p) / z.shape[-1])
    q = torch.randn(1, 2, 5, 8, device=device)
    assert (F.scaled_dot_product_attention(q, q, q, dropout_p=1.0) == 0).all()


@pytest.mark.parametrize("device", devices())
def test_dropout_reproducible_from_the_seed(device):
    a, b = _dropout_mask(device, 0.3, seed=123), _dropout_mask(device, 0.3, seed=123)
    c = _dropout_mask(device, 0.3, seed=124)
    assert torch.equal(a, b) and not torch.equal(a, c)
    d = _dropout_mask(device, 0.3)  # the generator moved on: a new mask
    assert not torch.equal(a, d)


@pytest.mark.parametrize("device", devices())
def test_dropout_gradients_use_the_same_mask(device):
    """The backward regenerates the forward's mask: gradients equal the float64 composition's with that mask."""
    p, B, H, Sq, Sk, D = 0.4, 2, 2, 9, 64, 16
    z = _dropout_mask(device, p, B, H, Sq, Sk, seed=5)
    q, k, v = (rnd(s, torch.float64, device).requires_grad_() for s in ((B, H, Sq, D), (B, H, Sk, D), (B, H, Sk, D)))
    torch.manual_seed(5)  # the same key as the mask's draw (same shape [B, H, Sq, Sk])
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
    ref = reference_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True,
                              bottom_right=False, dropout_mask=z, dropout_p=p).transpose(1, 2)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b)


# ---- op-level behaviour ----

@pytest.mark.parametrize("device", devices())
def test_outputs_layout_and_lse(device):
    q, k, v = (rnd(s, torch.float32, device) for s in ((2, 3, 9, 32), (2, 3, 13, 32), (2, 3, 13, 16)))
    out, lse, rng = ops.attention_forward(q, k, v)
    assert out.shape == (2, 3, 9, 16) and out.transpose(1, 2).is_contiguous()  # [B, S, H, D] storage
    assert lse.shape == (2, 3, 9) and lse.dtype == torch.float32 and rng.shape == (2,) and rng.device.type == "cpu"
    ref = (q.double() @ k.double().transpose(-1, -2) / math.sqrt(32)).logsumexp(-1)
    torch.testing.assert_close(lse.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", devices())
def test_deterministic_backward(device):
    q, k, v = (rnd((2, 4, S, 64), torch.float32, device).requires_grad_() for S in (65, 130, 130))
    g = torch.randn(2, 4, 65, 64, device=device)
    torch.use_deterministic_algorithms(True)
    try:
        runs = [torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), g)
                for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(False)
    for a, b in zip(*runs):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", devices())
def test_autocast(device):
    q, k, v = (rnd((2, 2, 9, 32), torch.float32, device) for _ in range(3))
    lower = torch.bfloat16
    with torch.autocast(device, dtype=lower):
        out = F.scaled_dot_product_attention(q, k, v, rnd((9, 9), torch.float32, device))
        theirs = TF.scaled_dot_product_attention(q, k, v, rnd((9, 9), torch.float32, device))
    assert out.dtype == theirs.dtype == lower


@pytest.mark.parametrize("device", devices())
def test_empty(device):
    q, k = torch.randn(2, 3, 0, 32, device=device), torch.randn(2, 3, 5, 32, device=device)
    assert F.scaled_dot_product_attention(q, k, k).shape == (2, 3, 0, 32)
    q = torch.randn(2, 3, 4, 32, device=device, requires_grad=True)
    e = torch.randn(2, 3, 0, 32, device=device, requires_grad=True)
    out = F.scaled_dot_product_attention(q, e, e)
    assert out.shape == (2, 3, 4, 32) and (out == 0).all()  # no key: zeros, as PyTorch
    out.sum().backward()
    assert (q.grad == 0).all()


def test_torch_func_grad():
    """torch.func.grad runs the Python formula (the C++ kernel's twin)."""
    q, k, v = (torch.randn(1, 2, 5, 8, dtype=torch.float64) for _ in range(3))
    loss = lambda fn: (lambda q: fn(q, k, v, is_causal=True).square().sum())  # noqa: E731
    torch.testing.assert_close(torch.func.grad(loss(F.scaled_dot_product_attention))(q),
                               torch.func.grad(loss(TF.scaled_dot_product_attention))(q))


# ---- modules ----

class SdpaBlock(torch.nn.Module):
    """An attention block as timm's ViT and Hugging Face models write it: F.scaled_dot_product_attention called
    from the model's own code."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        x = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def _runs_ours(fn) -> bool:
    with _Recorder() as r:
        fn()
    return "torch_dnn.attention_forward" in r.seen


@pytest.mark.parametrize("device", devices())
def test_converted_model_routes_sdpa(device):
    native = torch.nn.Sequential(SdpaBlock(64, 4), torch.nn.GELU(), SdpaBlock(64, 4)).to(device)
    ours, report = torch_dnn.convert(native, include=tnn.ATTENTION)
    assert isinstance(ours[0], SdpaBlock) and type(ours[0]) is not SdpaBlock
    assert sum(1 for _, _, b in report.swapped if b == "AttentionRouting") == 2
    x = rnd((2, 9, 64), torch.float32, device)
    assert _runs_ours(lambda: ours(x)) and not _runs_ours(lambda: native(x))
    assert_model_matches_native(ours, native, x, name="routed")
    assert ours.state_dict().keys() == native.state_dict().keys()
    copy.deepcopy(ours)(x)  # the routed class survives a copy
    # a second convert leaves the routed modules as they are
    again, report = torch_dnn.convert(ours, include=tnn.ATTENTION)
    assert type(again[0]) is type(ours[0]) and not any(b == "AttentionRouting" for _, _, b in report.swapped)


def test_reference_models_are_routed():
    """torch_dnn.reference's models stand for a user's: their attention modules' own sdpa calls are routed like any
    model's (the benchmark's "with attention" rows time this), while torch_dnn's layers are not routed twice."""
    from torch_dnn.reference import models
    native = models.LlamaDecoder(64, 32, depth=2, heads=4, kv_heads=2, max_len=16)
    ours, report = torch_dnn.convert(native, include=tnn.ATTENTION)
    assert [n for n, _, b in report.swapped if b == "AttentionRouting"] == ["layers.0.attn", "layers.1.attn"]
    x = torch.randint(0, 64, (2, 9))
    assert _runs_ours(lambda: ours(x)) and not _runs_ours(lambda: native(x))


@pytest.mark.parametrize("device", devices())
def test_routing_is_opt_in(device):
    """By default convert swaps attention's modules but leaves the models' own sdpa calls to PyTorch
    (docs/attention.md: at long sequences torch_dnn's kernels are slower than cuDNN's)."""
    native = torch.nn.Sequential(SdpaBlock(64, 4), torch.nn.MultiheadAttention(64, 4, batch_first=True)).to(device)
    ours, report = torch_dnn.convert(native)
    assert type(ours[0]) is SdpaBlock and type(ours[1]) is tnn.MultiheadAttention
    assert ("1", "MultiheadAttention", "MultiheadAttention") in report.swapped
    x = rnd((2, 9, 64), torch.float32, device)
    assert not _runs_ours(lambda: ours[0](x))
    assert _runs_ours(lambda: ours[1](x, x, x, need_weights=False))


def test_routing_mode_by_hand():
    q = torch.randn(1, 2, 5, 8)
    with AttentionRouting():
        assert _runs_ours(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))


MHA_CONFIGS = [  # (constructor kwargs, forward kwargs)
    (dict(), dict()),
    (dict(batch_first=True), dict()),
    (dict(bias=False), dict()),
    (dict(add_bias_kv=True), dict()),
    (dict(add_zero_attn=True), dict(mask="kpm")),
    (dict(add_bias_kv=True, add_zero_attn=True, batch_first=True), dict(mask="float")),
    (dict(kdim=24, vdim=40), dict()),
    (dict(kdim=24, vdim=40, batch_first=True), dict(mask="kpm")),
    (dict(), dict(mask="bool3d")),
    (dict(batch_first=True), dict(mask="causal")),
    (dict(), dict(mask="float+kpm")),
]


class _MhaHarness(torch.nn.Module):
    """x -> mha(x, mem, mem) (cross attention when kdim / vdim are given) with the configuration's masks."""

    def __init__(self, mha, mask, L, S, N, device):
        super().__init__()
        self.mha, self.mask = mha, mask
        bf = mha.batch_first
        kd, vd = mha.kdim, mha.vdim
        gen = torch.Generator().manual_seed(1)
        self.register_buffer("mem_k", torch.randn((N, S, kd) if bf else (S, N, kd), generator=gen).to(device))
        self.register_buffer("mem_v", torch.randn((N, S, vd) if bf else (S, N, vd), generator=gen).to(device))
        self.kpm = torch.rand(N, S, generator=gen).to(device) > 0.7
        self.kpm[:, 0] = False
        self.bool3d = torch.rand(N * mha.num_heads, L, S, generator=gen).to(device) > 0.3
        self.bool3d[..., 0] = True
        self.float2d = torch.randn(L, S, generator=gen).to(device)
        self.causal = torch.nn.Transformer.generate_square_subsequent_mask(L, device=device)

    def forward(self, x):
        same = self.mha.kdim == self.mha.embed_dim and self.mha.vdim == self.mha.embed_dim
        k, v = (x, x) if same else (self.mem_k.to(x.dtype), self.mem_v.to(x.dtype))
        kw = {}
        if self.mask in ("kpm", "float+kpm"):
            kw["key_padding_mask"] = self.kpm
        if self.mask == "bool3d":
            kw["attn_mask"] = ~self.bool3d  # MHA's bool masks: True = not allowed
        if self.mask in ("float", "float+kpm"):
            kw["attn_mask"] = self.float2d.to(x.dtype)
        if self.mask == "causal":
            kw["attn_mask"], kw["is_causal"] = self.causal.to(x.dtype), True
        return self.mha(x, k, v, need_weights=False, **kw)[0]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("config", MHA_CONFIGS, ids=[f"{a}-{b}" for a, b in MHA_CONFIGS])
def test_multihead_attention_matches_torch(device, config):
    ctor, fwd = config
    E, H, L, N = 32, 4, 7, 3
    S = L if "kdim" not in ctor else 11
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(E, H, **ctor).to(device)
    native = _MhaHarness(mha, fwd.get("mask"), L, S, N, device)
    ours, report = torch_dnn.convert(native, include=tnn.ATTENTION)
    assert type(ours.mha) is tnn.MultiheadAttention
    x = rnd((N, L, E) if mha.batch_first else (L, N, E), torch.float32, device)
    assert _runs_ours(lambda: ours(x))
    assert_model_matches_native(ours, native, x, name=f"MultiheadAttention {ctor} {fwd}")
    assert ours.state_dict().keys() == native.state_dict().keys()


@pytest.mark.parametrize("device", devices())
def test_multihead_attention_weights_and_unbatched(device):
    torch.manual_seed(0)
    native = torch.nn.MultiheadAttention(32, 4).to(device)
    ours = tnn.MultiheadAttention(32, 4).to(device)
    ours.load_state_dict(native.state_dict())
    x = rnd((7, 2, 32), torch.float32, device)
    (a, wa), (b, wb) = native(x, x, x), ours(x, x, x)  # need_weights=True: PyTorch's math path
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(wa, wb)
    xu = x[:, 0]
    a, _ = native(xu, xu, xu, need_weights=False)
    b, wb = ours(xu, xu, xu, need_weights=False)
    assert wb is None and b.shape == a.shape
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("norm_first", [False, True])
def test_converted_transformer_encoder(device, norm_first):
    """Converted encoder layers run the drop-ins (not the native fast path) in evaluation too, with and without a
    padding mask (not the nested-tensor path), and match PyTorch's."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=norm_first)
    native = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).to(device)
    ours, report = torch_dnn.convert(native, include=tnn.ATTENTION)
    assert type(ours) is tnn.TransformerEncoder and type(ours.layers[0]) is tnn.TransformerEncoderLayer
    assert type(ours.layers[0].self_attn) is tnn.MultiheadAttention
    x = rnd((2, 9, 64), torch.float32, device)
    pad = torch.zeros(2, 9, dtype=torch.bool, device=device)
    pad[1, 6:] = True
    ours.eval()
    native.eval()
    with torch.no_grad():
        assert _runs_ours(lambda: ours(x)) and _runs_ours(lambda: ours(x, src_key_padding_mask=pad))
        torch.backends.mha.set_fastpath_enabled(False)  # the native reference without its fused / nested paths
        try:
            for kw in ({}, {"src_key_padding_mask": pad}, {"mask": torch.nn.Transformer.generate_square_subsequent_mask(
                    9, device=device), "is_causal": True}):
                torch.testing.assert_close(ours(x, **kw), native(x, **kw), rtol=1e-5, atol=1e-5)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
    ours.train()
    native.train()
    assert_model_matches_native(ours, native, x, name="encoder train")


@pytest.mark.parametrize("device", devices())
def test_converted_transformer_decoder_layer(device):
    torch.manual_seed(0)
    native = torch.nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True).to(device)
    memory = rnd((2, 11, 32), torch.float32, device)

    class Harness(torch.nn.Module):
        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(x, memory.to(x.dtype), tgt_is_causal=True,
                              tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=device))

    ours, _ = torch_dnn.convert(Harness(native), include=tnn.ATTENTION)
    assert type(ours.layer.self_attn) is tnn.MultiheadAttention and type(ours.layer.multihead_attn) is \
        tnn.MultiheadAttention
    x = rnd((2, 7, 32), torch.float32, device)
    assert _runs_ours(lambda: ours(x))
    assert_model_matches_native(ours, Harness(native), x, name="decoder layer")


# skipped at setup where timm is absent (a skip inside the test would count as a case that ran nothing)
@pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="timm is not installed")
@pytest.mark.parametrize("device", devices())
def test_converted_timm_vit(device):
    """timm's ViT calls F.scaled_dot_product_attention from its Attention modules: converted, every block's attention
    is routed to torch_dnn's, and the model matches native (outputs and every gradient)."""
    import timm
    torch.manual_seed(0)
    native = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2,
                               num_classes=10).to(device)
    ours, report = torch_dnn.convert(native, include=tnn.ATTENTION)
    assert [n for n, _, b in report.swapped if b == "AttentionRouting"] == ["blocks.0.attn", "blocks.1.attn"]
    x = rnd((2, 3, 32, 32), torch.float32, device)
    assert _runs_ours(lambda: ours(x))
    assert_model_matches_native(ours, native, x, name="vit")
