"""flash_decode (torch.ops.torch_dnn.flash_decode, torch_dnn.functional.flash_decode): a few query rows against a
KV cache, contiguous or paged (scattered blocks), with the in-place append of k_new / v_new, causal alignment to
the cache's end and GQA, under the project's error rule (torch_dnn/testing.py): the float64 reference is the
composition below (the cache rows gathered per batch row, softmax(q k^T scale) v with the causal mask), the peer
PyTorch's F.scaled_dot_product_attention in the inputs' dtype on the same gathered rows. Unused cache rows and
blocks hold NaN, so a kernel that reads past a row's length fails. Also: the caches' contents after the append,
opcheck, torch.compile, CUDA graph capture, inference-only errors, bad input. The CUDA cases poison the caching
allocator's blocks with NaN before each call, so an output element the kernels leave unwritten shows."""
import math

import pytest
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from torch_dnn.testing import compare

ops = torch.ops.torch_dnn
NAN = float("nan")
INF = float("inf")


# ---- problems ----

class Problem:
    """q [B, Sq, Hq, D]; caches of `capacity` keys a batch row, contiguous or paged in blocks of `block` (the blocks
    of all rows permuted, a few spare ones), NaN past each row's length; k_new / v_new of Snew rows."""

    def __init__(self, B, Sq, Hq, Hkv, D, capacity, lens, dtype, device, block=0, Snew=0, seed=0):
        gen = torch.Generator().manual_seed(seed)

        def rand(*shape, low=-1.0, high=1.0):
            return (torch.rand(shape, generator=gen, dtype=torch.float64) * (high - low) + low).to(device, dtype)

        self.B, self.Sq, self.Hq, self.Hkv, self.D, self.Snew = B, Sq, Hq, Hkv, D, Snew
        self.block = block
        self.lens = torch.tensor(lens, dtype=torch.int32, device=device)
        self.q = rand(B, Sq, Hq, D, low=-2.0, high=2.0)
        self.k_new = rand(B, Snew, Hkv, D) if Snew else None
        self.v_new = rand(B, Snew, Hkv, D) if Snew else None
        if block:
            per_row = -(-capacity // block)
            self.capacity = per_row * block
            num_blocks = B * per_row + 3
            perm = torch.randperm(num_blocks, generator=gen)[:B * per_row]
            self.block_table = perm.view(B, per_row).to(torch.int32).to(device)
            shape = (num_blocks, block, Hkv, D)
        else:
            self.capacity = capacity
            self.block_table = None
            shape = (B, capacity, Hkv, D)
        self.k_cache = torch.full(shape, NAN, dtype=dtype, device=device)
        self.v_cache = torch.full(shape, NAN, dtype=dtype, device=device)
        for b, n in enumerate(lens):
            idx = self.rows(b, n)
            self.k_cache.view(-1, Hkv, D)[idx] = rand(n, Hkv, D)
            self.v_cache.view(-1, Hkv, D)[idx] = rand(n, Hkv, D)

    def rows(self, b, n):
        """The flat cache rows ([rows, Hkv, D] view) of batch row b's first n keys."""
        j = torch.arange(n)
        if self.block_table is None:
            return b * self.capacity + j
        table = self.block_table[b].cpu().long()
        return table[j // self.block] * self.block + j % self.block

    def args(self):
        return (self.q, self.k_cache, self.v_cache, self.lens, self.k_new, self.v_new, self.block_table)

    def expected_caches(self):
        """The caches after the append."""
        kc, vc = self.k_cache.clone(), self.v_cache.clone()
        for b in range(self.B):
            if self.Snew:
                n0 = int(self.lens[b])
                idx = self.rows(b, n0 + self.Snew)[n0:]
                kc.view(-1, self.Hkv, self.D)[idx] = self.k_new[b]
                vc.view(-1, self.Hkv, self.D)[idx] = self.v_new[b]
        return kc, vc


def attention_rows(q, k, v, scale, causal):
    """One batch row: q [Sq, Hq, D], k / v [L, Hkv, D] -> (out [Sq, Hq, D], lse [Hq, Sq]) in q's dtype (float64:
    the reference), queries aligned to the end of the keys; a row that sees no key gives 0 and lse +inf."""
    Sq, Hq, _ = q.shape
    L, Hkv = k.shape[0], k.shape[1]
    k = k.repeat_interleave(Hq // Hkv, dim=1)
    v = v.repeat_interleave(Hq // Hkv, dim=1)
    s = torch.einsum("ihd,jhd->hij", q, k) * scale
    if causal:
        i = torch.arange(Sq, device=q.device)[:, None]
        j = torch.arange(L, device=q.device)[None, :]
        s = s.masked_fill(j > i + L - Sq, -INF)
    lse = torch.logsumexp(s, dim=-1)
    seen = torch.isfinite(lse)
    p = torch.where(seen[..., None], torch.softmax(s, dim=-1), torch.zeros_like(s))
    out = torch.einsum("hij,jhd->ihd", p, v)
    return out, torch.where(seen, lse, torch.full_like(lse, INF))


def sdpa_rows(q, k, v, scale, causal):
    """The peer: PyTorch's SDPA in q's dtype on one batch row (GQA through enable_gqa)."""
    Sq, L = q.shape[0], k.shape[0]
    mask = None
    if causal:
        mask = torch.arange(L, device=q.device)[None, :] <= torch.arange(Sq, device=q.device)[:, None] + L - Sq
    out = TF.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                          v.transpose(0, 1)[None], attn_mask=mask, scale=scale,
                                          enable_gqa=True)
    return out[0].transpose(0, 1)


def references(p, scale, causal):
    """(reference out, reference lse) in float64 and (peer out, peer lse) in the inputs' dtype (the lse's peer:
    the composition in float32) from the caches after the append."""
    kc, vc = p.expected_caches()
    ref_o, ref_l, peer_o, peer_l = [], [], [], []
    for b in range(p.B):
        idx = p.rows(b, int(p.lens[b]) + p.Snew)
        k = kc.view(-1, p.Hkv, p.D)[idx.to(kc.device)]
        v = vc.view(-1, p.Hkv, p.D)[idx.to(vc.device)]
        o, l = attention_rows(p.q[b].double(), k.double(), v.double(), scale, causal)
        ref_o.append(o)
        ref_l.append(l)
        peer_o.append(sdpa_rows(p.q[b], k, v, scale, causal))
        peer_l.append(attention_rows(p.q[b].float(), k.float(), v.float(), scale, causal)[1])
    return torch.stack(ref_o), torch.stack(ref_l), torch.stack(peer_o), torch.stack(peer_l)


def poison_allocator(device, *nbytes):
    """Hand the caching allocator free blocks of exactly these sizes filled with 0xff bytes (NaN in every float
    dtype): the op's outputs of those sizes are then carved from them (best fit), and an element the kernels
    leave unwritten reads NaN."""
    if device != "cuda":
        return
    held = [torch.full((n,), 0xFF, dtype=torch.uint8, device=device) for n in nbytes for _ in range(4)]
    del held


def check_decode(p, scale=None, causal=False, poison=False):
    D = p.D
    s = 1.0 / math.sqrt(D) if scale is None else scale
    kc_exp, vc_exp = p.expected_caches()
    ref_o, ref_l, peer_o, peer_l = references(p, s, causal)
    if poison:
        lse_bytes = p.B * p.Hq * p.Sq * (8 if p.q.dtype == torch.float64 else 4)
        poison_allocator(p.q.device.type, p.q.numel() * p.q.element_size(), lse_bytes)
    out, lse = F.flash_decode(p.q, p.k_cache, p.v_cache, p.lens, p.k_new, p.v_new, p.block_table,
                              softmax_scale=scale, causal=causal, return_lse=True)
    # the caches: exactly the expected ones (NaN where unused)
    assert torch.equal(torch.isnan(p.k_cache), torch.isnan(kc_exp)) and torch.equal(
        torch.nan_to_num(p.k_cache), torch.nan_to_num(kc_exp)), "k_cache after the append"
    assert torch.equal(torch.isnan(p.v_cache), torch.isnan(vc_exp)) and torch.equal(
        torch.nan_to_num(p.v_cache), torch.nan_to_num(vc_exp)), "v_cache after the append"
    assert out.shape == (p.B, p.Sq, p.Hq, D) and out.dtype == p.q.dtype and out.is_contiguous()
    v = compare(out, peer_o, ref_o, name="out")
    assert v, v.message
    assert lse.shape == (p.B, p.Hq, p.Sq)
    assert lse.dtype == (torch.float64 if p.q.dtype == torch.float64 else torch.float32)
    v = compare(lse, peer_l.to(lse.dtype), ref_l, name="lse")
    assert v, v.message
    return out, lse


# ---- CPU (and CUDA) against the float64 composition ----

B, HKV, D_CPU, CAP = 4, 2, 64, 96


def _lens(capacity, Snew):
    return [1, capacity - Snew, 37, 50]  # ragged: 1 and the full length among them


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("Sq", [1, 4])
@pytest.mark.parametrize("ratio", [1, 4])
@pytest.mark.parametrize("layout", ["contiguous", "paged"])
@pytest.mark.parametrize("append", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_decode_cpu(dtype, Sq, ratio, layout, append, causal):
    block = 16 if layout == "paged" else 0
    Snew = Sq if append else 0
    p = Problem(B, Sq, HKV * ratio, HKV, D_CPU, CAP, _lens(CAP, Snew), dtype, "cpu", block=block, Snew=Snew,
                seed=Sq * 100 + ratio)
    check_decode(p, causal=causal)


def test_decode_scale_and_strided_inputs():
    """An explicit scale; q and k_new as strided views, and a cache whose head dim is not contiguous (computed on a
    copy, the append written back)."""
    p = Problem(2, 4, 4, 2, 64, 40, [5, 30], torch.float32, "cpu", Snew=3, seed=7)
    p.q = p.q.transpose(1, 2).contiguous().transpose(1, 2)
    p.k_new = p.k_new.transpose(0, 1).contiguous().transpose(0, 1)
    check_decode(p, scale=0.3, causal=True)
    q = Problem(2, 1, 2, 2, 64, 40, [5, 30], torch.float32, "cpu", Snew=1, seed=8)
    q.k_cache = q.k_cache.permute(0, 1, 3, 2).contiguous().permute(0, 1, 3, 2)
    assert q.k_cache.stride(3) != 1
    check_decode(q)


def test_paged_matches_contiguous_cpu():
    """The same values in a contiguous and a scattered paged cache give the same result."""
    pc = Problem(3, 2, 8, 2, 64, 64, [1, 64, 20], torch.float32, "cpu", seed=3)
    pp = Problem(3, 2, 8, 2, 64, 64, [1, 64, 20], torch.float32, "cpu", block=16, seed=4)
    for b in range(3):
        n = int(pc.lens[b])
        pp.k_cache.view(-1, 2, 64)[pp.rows(b, n)] = pc.k_cache[b, :n]
        pp.v_cache.view(-1, 2, 64)[pp.rows(b, n)] = pc.v_cache[b, :n]
    pp.q = pc.q
    oc = F.flash_decode(*pc.args(), causal=True)
    op = F.flash_decode(*pp.args(), causal=True)
    assert torch.equal(oc, op)


def test_append_bumps_the_version_and_returns_fresh_outputs():
    p = Problem(2, 1, 4, 2, 64, 32, [3, 7], torch.float32, "cpu", Snew=1)
    kv0, vv0 = p.k_cache._version, p.v_cache._version
    out, lse = ops.flash_decode(*p.args())
    assert p.k_cache._version > kv0 and p.v_cache._version > vv0
    assert out.untyped_storage().data_ptr() != p.q.untyped_storage().data_ptr()


# ---- the op's contract: opcheck, compile, errors ----

def _opcheck_samples(device, dtype):
    plain = Problem(2, 1, 4, 2, 64, 48, [5, 48], dtype, device, seed=1)
    paged = Problem(2, 4, 8, 2, 64, 48, [1, 40], dtype, device, block=16, Snew=4, seed=2)
    for p in (plain, paged):  # opcheck compares results: caches without NaN
        p.k_cache.nan_to_num_(0.5)
        p.v_cache.nan_to_num_(-0.5)
    return [(plain.args(), {}), (paged.args(), {"causal": True, "scale": 0.2})]


@pytest.mark.parametrize("device,dtype", [("cpu", torch.float32), ("cpu", torch.bfloat16),
                                          pytest.param("cuda", torch.bfloat16, marks=pytest.mark.cuda)])
def test_opcheck(device, dtype):
    ran = 0
    for args, kwargs in _opcheck_samples(device, dtype):
        torch.library.opcheck(ops.flash_decode, args, kwargs)
        ran += 1
    assert ran == 2


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_compile_mutates_the_caches(device):
    """torch.compile(fullgraph) of a decode step with an append: the same output as eager, the caches written."""
    dtype = torch.float32 if device == "cpu" else torch.bfloat16

    def step(q, kc, vc, lens, kn, vn, table):
        return F.flash_decode(q, kc, vc, lens, kn, vn, table, causal=True) * 2

    eager = Problem(2, 2, 4, 2, 64, 48, [3, 40], dtype, device, block=16, Snew=2, seed=5)
    comp = Problem(2, 2, 4, 2, 64, 48, [3, 40], dtype, device, block=16, Snew=2, seed=5)
    want = step(*eager.args())
    got = torch.compile(step, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")(*comp.args())
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert torch.equal(torch.nan_to_num(comp.k_cache), torch.nan_to_num(eager.k_cache))
    assert torch.equal(torch.nan_to_num(comp.v_cache), torch.nan_to_num(eager.v_cache))


def test_inference_only():
    p = Problem(1, 1, 2, 2, 64, 16, [4], torch.float32, "cpu")
    p.q.requires_grad_()
    with pytest.raises(RuntimeError, match=r"torch_dnn\.flash_decode: q requires grad, but the op is inference only"):
        F.flash_decode(*p.args())
    with torch.no_grad():
        F.flash_decode(*p.args())


def _bad(**change):
    base = dict(B=2, Sq=1, Hq=4, Hkv=2, D=64, capacity=32, lens=[3, 7], dtype=torch.float32, device="cpu")
    base.update(change)
    return Problem(**base)


@pytest.mark.parametrize("case", ["head ratio", "head dim", "block_table dtype", "seqlens past capacity",
                                  "append past capacity", "block outside the cache", "seqlens dtype",
                                  "k_new alone", "cache dtype", "cache batch"])
def test_bad_input(case):
    if case == "head ratio":
        p = _bad(Hq=6, Hkv=4)
    elif case == "head dim":
        p = _bad(D=80)
    elif case in ("block_table dtype", "block outside the cache"):
        p = _bad(block=8)
    else:
        p = _bad()
    q, kc, vc, lens, kn, vn, table = p.args()
    expect = {
        "head ratio": r"query heads of q \(6\) to be a multiple of the kv heads of k_cache \(4\)",
        "head dim": r"head dim of q \(q.size\(3\)\) to be 64, 128 or 256, but got 80",
        "block_table dtype": r"expected block_table to be an int32 tensor",
        "seqlens past capacity": r"cache_seqlens\[1\] \+ the new length \(33 \+ 0\) to be within the cache's capacity",
        "append past capacity": r"cache_seqlens\[1\] \+ the new length \(31 \+ 2\) to be within the cache's capacity",
        "block outside the cache": r"block_table\[0, 0\] to be a block of the cache",
        "seqlens dtype": r"expected cache_seqlens to be an int32 tensor",
        "k_new alone": r"expected k_new and v_new to be given together",
        "cache dtype": r"expected k_cache to have the same dtype as q",
        "cache batch": r"expected k_cache to have the batch size of q \(2\)",
    }[case]
    if case == "block_table dtype":
        table = table.long()
    elif case == "seqlens past capacity":
        lens = torch.tensor([3, 33], dtype=torch.int32)
    elif case == "append past capacity":
        lens = torch.tensor([3, 31], dtype=torch.int32)
        kn, vn = torch.zeros(2, 2, 2, 64), torch.zeros(2, 2, 2, 64)
    elif case == "block outside the cache":
        table = table.clone()
        table[0, 0] = kc.shape[0]
    elif case == "seqlens dtype":
        lens = lens.long()
    elif case == "k_new alone":
        kn = torch.zeros(2, 1, 2, 64)
    elif case == "cache dtype":
        kc = kc.double()
    elif case == "cache batch":
        kc, vc = kc[:1], vc[:1]
    with pytest.raises(RuntimeError, match=r"^torch_dnn\.flash_decode: " + ".*" + expect):
        ops.flash_decode(q, kc, vc, lens, kn, vn, table)
    # the fake kernel raises the same for what it can see (not the values)
    if case not in ("seqlens past capacity", "append past capacity", "block outside the cache"):
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode() as mode:
            fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in (q, kc, vc, lens, kn, vn, table)]
            with pytest.raises(RuntimeError, match=expect):
                ops.flash_decode(*fake)


# ---- CUDA ----

CUDA_CASES = [
    # (name, B, Sq, Hq, Hkv, D, capacity, lens, block, Snew, causal)
    ("Sq1 GQA4 d128 contiguous", 4, 1, 16, 4, 128, 3000, [1, 3000, 1234, 17], 0, 0, False),
    ("Sq1 GQA4 d128 paged 256 append", 4, 1, 16, 4, 128, 3072, [0, 3071, 1234, 255], 256, 1, False),
    ("Sq4 GQA4 d128 paged 16 append causal", 3, 4, 8, 2, 128, 1000, [1, 996, 300], 16, 4, True),
    ("Sq4 MHA d64 causal (rows that see nothing)", 2, 4, 4, 4, 64, 500, [1, 500], 0, 0, True),
    ("Sq1 GQA8 d256 paged 64", 2, 1, 16, 2, 256, 2048, [2048, 999], 64, 0, False),
    ("Sq16 GQA4 d64 append causal (row chunks)", 2, 16, 8, 2, 64, 700, [0, 684], 0, 16, True),
    ("Sq2 MQA d128 paged 48 (block not a power of two)", 2, 2, 8, 1, 128, 960, [100, 900], 48, 2, True),
    ("Sq1 GQA4 d128 long (many splits)", 1, 1, 32, 8, 128, 16384, [16384], 0, 0, False),
]


@pytest.mark.cuda
@pytest.mark.parametrize("kernel", ["staged", "registers"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("case", CUDA_CASES, ids=[c[0] for c in CUDA_CASES])
def test_decode_cuda(dtype, case, kernel, monkeypatch):
    """Each variant of the split kernel (TORCH_DNN_DECODE_KERNEL)."""
    monkeypatch.setenv("TORCH_DNN_DECODE_KERNEL", kernel)
    name, B_, Sq, Hq, Hkv, D, cap, lens, block, Snew, causal = case
    p = Problem(B_, Sq, Hq, Hkv, D, cap, lens, dtype, "cuda", block=block, Snew=Snew, seed=len(name))
    check_decode(p, causal=causal, poison=True)


@pytest.mark.cuda
@pytest.mark.parametrize("kernel", ["staged", "registers"])
def test_decode_cuda_float64(kernel, monkeypatch):
    monkeypatch.setenv("TORCH_DNN_DECODE_KERNEL", kernel)
    p = Problem(2, 4, 8, 2, 128, 300, [1, 296], torch.float64, "cuda", block=16, Snew=4, seed=9)
    check_decode(p, causal=True, poison=True)


@pytest.mark.cuda
def test_bad_kernel_knob(monkeypatch):
    monkeypatch.setenv("TORCH_DNN_DECODE_KERNEL", "fast")
    p = Problem(1, 1, 2, 2, 64, 16, [4], torch.bfloat16, "cuda")
    with pytest.raises(RuntimeError, match="TORCH_DNN_DECODE_KERNEL must be staged or registers"):
        F.flash_decode(*p.args())


@pytest.mark.cuda
def test_paged_matches_contiguous_cuda():
    """Equal capacities: one plan, the same keys in the same order: the same bits."""
    pc = Problem(4, 1, 32, 8, 128, 4096, [4096, 1, 2000, 3333], torch.bfloat16, "cuda", seed=3)
    pp = Problem(4, 1, 32, 8, 128, 4096, [4096, 1, 2000, 3333], torch.bfloat16, "cuda", block=256, seed=4)
    for b in range(4):
        n = int(pc.lens[b])
        pp.k_cache.view(-1, 8, 128)[pp.rows(b, n).cuda()] = pc.k_cache[b, :n]
        pp.v_cache.view(-1, 8, 128)[pp.rows(b, n).cuda()] = pc.v_cache[b, :n]
    pp.q = pc.q
    assert torch.equal(F.flash_decode(*pc.args()), F.flash_decode(*pp.args()))


@pytest.mark.cuda
def test_cuda_graph_capture():
    """A decode step with an append captured in a CUDA graph and replayed: the eager step's output and caches."""
    eager = Problem(4, 1, 32, 8, 128, 2048, [5, 2047, 1000, 64], torch.bfloat16, "cuda", block=256, Snew=1, seed=6)
    graphed = Problem(4, 1, 32, 8, 128, 2048, [5, 2047, 1000, 64], torch.bfloat16, "cuda", block=256, Snew=1, seed=6)
    want = F.flash_decode(*eager.args(), causal=True)
    args = graphed.args()
    kc0, vc0 = graphed.k_cache.clone(), graphed.v_cache.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        F.flash_decode(*args, causal=True)  # warm-up (plans, occupancy queries)
    torch.cuda.current_stream().wait_stream(s)
    graphed.k_cache.copy_(kc0)
    graphed.v_cache.copy_(vc0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = F.flash_decode(*args, causal=True)
    graphed.k_cache.copy_(kc0)
    graphed.v_cache.copy_(vc0)
    out.fill_(NAN)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want)
    assert torch.equal(torch.nan_to_num(graphed.k_cache), torch.nan_to_num(eager.k_cache))
