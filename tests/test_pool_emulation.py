"""The pooling family's CUDA kernels run on the CPU (tests/emulation/: the kernel sources compiled by g++ with a
shim that runs each block's threads on host threads) against the CPU reference: every op and its backward,
ranks 1-3, both layouts (channels-last with 16-byte vectors and with one channel a thread, NCDHW rows), the
unrolled-tap and covering specialisations, the global-average reductions, grid-stride loops. This checks the
kernels' index arithmetic and dispatch without a GPU; it says nothing of their speed or of device-only
behaviour. Opt in with TORCH_DNN_EMULATE=1 (the first run builds the emulation: about two minutes)."""
import os
import random

import pytest
import torch

import torch_dnn  # noqa: F401
from tests.utils import POOL_VARIANTS, load_kernel_emulation, requires_emulation, set_variant

pytestmark = requires_emulation
# TORCH_DNN_EMULATE=1 (CI) runs each old path's variant on the cases its knobs concern (test_fixed_cases_old_paths);
# TORCH_DNN_EMULATE=full on every case.
FULL = os.environ.get("TORCH_DNN_EMULATE") == "full"

ref = torch.ops.torch_dnn


@pytest.fixture(scope="module")
def emu():
    load_kernel_emulation("torch_dnn_pool_emulation", "pool_emulation.cpp")
    return torch.ops.torch_dnn_emu


def _to_layout(x, layout):
    r = x.dim() - 2
    if layout == "channels_last":
        if r == 1:
            return x.transpose(1, 2).contiguous().transpose(1, 2)
        return x.contiguous(memory_format=torch.channels_last if r == 2 else torch.channels_last_3d)
    return x.contiguous()


def _input(shape, dtype, layout, gen):
    return _to_layout(torch.rand(shape, generator=gen, dtype=torch.float64).mul(8).sub(4).to(dtype), layout)


def _args(kind, r, kw):
    t = lambda v: (v,) * r if isinstance(v, int) else tuple(v)  # noqa: E731
    if kind == "max_pool":
        return (t(kw["k"]), t(kw["s"]), t(kw["p"]), t(kw.get("d", 1)), kw.get("ceil", False))
    if kind == "avg_pool":
        return (t(kw["k"]), t(kw["s"]), t(kw["p"]), kw.get("ceil", False), kw.get("cip", True), kw.get("div"))
    if kind == "lp_pool":
        return (float(kw["norm"]), t(kw["k"]), t(kw["s"]), kw.get("ceil", False))
    return (t(kw["out"]),)


def _compare(kind, r, x, kw, emu, gen):
    name = f"{kind}{r}d"
    args = _args(kind, r, kw)
    y_ref, y = getattr(ref, name)(x, *args), getattr(emu, name)(x, *args)
    msg = f"{name} {tuple(x.shape)} {x.stride()} {x.dtype} {kw}"
    if isinstance(y_ref, tuple):
        assert torch.equal(y[1], y_ref[1]), f"{msg}: indices"
        y, y_ref, indices = y[0], y_ref[0], y_ref[1]
    assert y.stride() == y_ref.stride(), msg
    torch.testing.assert_close(y, y_ref, equal_nan=True, msg=lambda m: f"{msg}: {m}")
    if y.numel() == 0:
        return
    g = torch.rand(y.shape, generator=gen, dtype=torch.float64).sub(0.5).to(x.dtype)
    back = getattr(ref, f"{name}_backward"), getattr(emu, f"{name}_backward")
    if kind == "max_pool":
        extra, tail = (indices,), args
    elif kind == "adaptive_max_pool":
        extra, tail = (indices,), ()
    elif kind == "lp_pool":
        extra, tail = (y_ref,), args
    elif kind == "adaptive_avg_pool":
        extra, tail = (), ()
    else:
        extra, tail = (), args
    dx_ref, dx = back[0](g, x, *extra, *tail), back[1](g, x, *extra, *tail)
    assert dx.stride() == dx_ref.stride(), msg
    torch.testing.assert_close(dx, dx_ref, equal_nan=True, msg=lambda m: f"{msg} backward: {m}")


# (kind, rank, shape, layout, kwargs): the specialised paths and the reductions, by name
FIXED = [
    ("max_pool", 2, (2, 16, 13, 11), "channels_last", dict(k=3, s=2, p=1)),        # taps 3x3, vectors
    ("max_pool", 2, (2, 5, 13, 11), "contiguous", dict(k=3, s=2, p=1)),            # taps 3x3, NCDHW rows
    ("max_pool", 2, (2, 5, 13, 11), "channels_last", dict(k=3, s=2, p=1)),         # one channel a thread
    ("avg_pool", 2, (2, 16, 12, 9), "channels_last", dict(k=2, s=2, p=1, ceil=True, cip=False)),  # taps 2x2
    ("avg_pool", 2, (2, 3, 12, 9), "contiguous", dict(k=3, s=2, p=1, ceil=True)),
    ("avg_pool", 1, (2, 3, 40), "contiguous", dict(k=3, s=2, p=1)),                # taps 1x3
    ("max_pool", 1, (2, 8, 40), "channels_last", dict(k=3, s=2, p=1)),             # taps 1x3, (N, L, C)
    ("max_pool", 3, (2, 8, 5, 9, 7), "channels_last", dict(k=3, s=2, p=1, d=(2, 1, 1))),  # depth dilation, taps
    ("avg_pool", 3, (2, 3, 6, 9, 7), "contiguous", dict(k=(2, 3, 3), s=(1, 2, 2), p=1, div=5)),
    ("max_pool", 2, (2, 4, 9, 10), "contiguous", dict(k=3, s=1, p=1, d=2)),        # dilation: loops
    ("lp_pool", 2, (2, 16, 9, 10), "channels_last", dict(norm=2, k=3, s=2, ceil=True)),
    ("lp_pool", 3, (2, 3, 5, 6, 7), "contiguous", dict(norm=1, k=2, s=2)),
    ("adaptive_avg_pool", 2, (4, 64, 7, 7), "channels_last", dict(out=1)),         # global, vectors
    ("adaptive_avg_pool", 2, (1, 64, 30, 30), "channels_last", dict(out=1)),       # global, row lanes, groups cut to 4
    ("adaptive_avg_pool", 2, (4, 6, 7, 7), "channels_last", dict(out=1)),          # global, one channel a thread
    ("adaptive_avg_pool", 2, (3, 5, 7, 7), "contiguous", dict(out=1)),             # global, warp per plane
    ("adaptive_avg_pool", 2, (2, 4, 16, 16), "contiguous", dict(out=1)),           # global, vectors per plane
    ("adaptive_avg_pool", 2, (1, 3, 70, 70), "contiguous", dict(out=1)),           # global, block per plane
    ("adaptive_avg_pool", 3, (2, 40, 3, 4, 5), "channels_last", dict(out=1)),
    ("adaptive_avg_pool", 3, (2, 3, 5, 6, 7), "channels_last", dict(out=(2, 4, 3))),
    ("adaptive_max_pool", 1, (2, 16, 30), "channels_last", dict(out=7)),
    ("adaptive_max_pool", 3, (2, 3, 5, 6, 7), "contiguous", dict(out=(3, 8, 2))),
    ("max_pool", 2, (4, 64, 40, 40), "channels_last", dict(k=3, s=2, p=1)),        # grid-stride loops
    ("avg_pool", 2, (4, 16, 40, 40), "contiguous", dict(k=3, s=2, p=1)),
    # NCDHW plane tiles (pool_tile.cuh): 16-byte row staging (W = 16), several bands per plane (rows of
    # 8 * 300 bytes: 13 fit the 32 KB tile), dilated and ceil-mode windows, a trivial depth window in 3-D
    ("max_pool", 2, (2, 3, 20, 16), "contiguous", dict(k=3, s=2, p=1)),
    ("avg_pool", 2, (2, 3, 20, 16), "contiguous", dict(k=3, s=2, p=0)),
    ("max_pool", 2, (1, 2, 61, 300), "contiguous", dict(k=3, s=2, p=1)),
    # padded 3x3 tiles with vectors: ceil-mode windows past the padding, stride 1, a divisor override
    ("max_pool", 2, (2, 3, 17, 24), "contiguous", dict(k=3, s=2, p=1, ceil=True)),
    ("avg_pool", 2, (2, 3, 17, 24), "contiguous", dict(k=3, s=2, p=1, ceil=True, cip=False)),
    ("avg_pool", 2, (2, 3, 17, 24), "contiguous", dict(k=3, s=2, p=0, ceil=True)),
    ("avg_pool", 2, (2, 3, 10, 16), "contiguous", dict(k=3, s=1, p=1, div=7)),
    ("max_pool", 2, (2, 3, 10, 16), "contiguous", dict(k=3, s=1, p=0)),
    ("avg_pool", 2, (1, 2, 61, 300), "contiguous", dict(k=(3, 2), s=(2, 1), p=1, cip=False)),
    ("max_pool", 2, (1, 2, 45, 300), "contiguous", dict(k=(2, 3), s=(1, 3), p=(1, 0), d=(3, 2), ceil=True)),
    ("avg_pool", 2, (2, 3, 11, 13), "contiguous", dict(k=4, s=3, p=2, ceil=True, cip=False, div=None)),
    # edge divisors (count_include_pad=False) with several staging rounds, W and OW walks of different steps
    ("avg_pool", 2, (2, 3, 40, 40), "contiguous", dict(k=3, s=2, p=1, cip=False)),
    ("avg_pool", 2, (2, 3, 45, 20), "contiguous", dict(k=3, s=2, p=1, ceil=True, cip=False)),
    ("avg_pool", 2, (1, 2, 37, 150), "contiguous", dict(k=3, s=1, p=1, cip=False)),             # per-input gather
    ("max_pool", 2, (1, 2, 37, 150), "contiguous", dict(k=(3, 4), s=(3, 1), p=1, d=(1, 2))),  # per-input gather
    ("max_pool", 3, (2, 3, 4, 9, 8), "contiguous", dict(k=(1, 3, 3), s=(1, 2, 2), p=(0, 1, 1))),
    ("avg_pool", 3, (2, 3, 4, 9, 8), "contiguous", dict(k=(1, 3, 2), s=(1, 1, 2), p=(0, 1, 1), div=7)),
    ("max_pool", 1, (2, 5, 70), "contiguous", dict(k=4, s=1, p=2, d=3)),
    # channels-last backward by owner blocks: vectors and one channel a thread, padding, ceil mode, dilated
    # max (span 3 <= 2 * stride 2), strides 3 and 1, a trivial depth window in 3-D, 1-D (N, L, C)
    ("max_pool", 2, (2, 16, 14, 13), "channels_last", dict(k=3, s=2, p=1, ceil=True)),
    ("avg_pool", 2, (2, 16, 14, 13), "channels_last", dict(k=3, s=2, p=1, ceil=True, cip=False)),
    ("avg_pool", 2, (2, 5, 11, 12), "channels_last", dict(k=(3, 2), s=(2, 1), p=1, div=4)),
    ("max_pool", 2, (2, 8, 11, 12), "channels_last", dict(k=2, s=(2, 1), p=1, d=(2, 1))),
    ("avg_pool", 2, (2, 8, 17, 10), "channels_last", dict(k=(5, 4), s=3, p=2, ceil=True)),
    ("max_pool", 3, (2, 8, 3, 9, 8), "channels_last", dict(k=(1, 3, 3), s=(1, 2, 2), p=(0, 1, 1))),
    ("avg_pool", 1, (2, 8, 33), "channels_last", dict(k=3, s=2, p=1)),
    # NCDHW 3x3/2 column strips: several bands a plane (bulk-staged for avg, padding rows at both ends), and
    # more output columns than threads (a thread walks two columns)
    ("avg_pool", 2, (1, 2, 200, 160), "contiguous", dict(k=3, s=2, p=1)),
    ("max_pool", 2, (1, 2, 200, 160), "contiguous", dict(k=3, s=2, p=1, ceil=True)),
    ("max_pool", 2, (1, 2, 9, 540), "contiguous", dict(k=3, s=2, p=1)),
    ("avg_pool", 2, (1, 2, 9, 540), "contiguous", dict(k=3, s=2, p=0, ceil=True, cip=False)),
    # windows of one divisor (no clipped window): raw grads staged / summed, one multiply an output or input
    ("avg_pool", 2, (2, 16, 13, 11), "channels_last", dict(k=3, s=2, p=0)),
    ("avg_pool", 2, (2, 16, 14, 13), "channels_last", dict(k=3, s=2, p=1)),
    ("avg_pool", 2, (2, 3, 15, 24), "contiguous", dict(k=3, s=2, p=1)),
    ("adaptive_avg_pool", 2, (3, 40, 7, 7), "contiguous", dict(out=1)),            # global, 128 planes a block
    ("adaptive_avg_pool", 2, (2, 9, 11, 15), "contiguous", dict(out=1)),           # 16 planes a block
    ("adaptive_avg_pool", 2, (131, 127, 2, 2), "contiguous", dict(out=1)),         # blocks take several chunks
    ("adaptive_avg_pool", 2, (3, 37, 5, 5), "contiguous", dict(out=1)),            # a short last chunk, tail
    ("adaptive_avg_pool", 2, (8, 512, 3, 3), "channels_last", dict(out=1)),        # a thread a column (vectors)
    ("adaptive_avg_pool", 2, (3, 130, 5, 5), "channels_last", dict(out=1)),        # a thread a column (scalars)
    ("adaptive_avg_pool", 2, (8, 512, 7, 7), "channels_last", dict(out=1)),        # a column, 7x7 compiled in
    ("adaptive_avg_pool", 2, (3, 200, 7, 7), "contiguous", dict(out=1)),           # 128 planes a block, 7x7 compiled in
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_fixed_cases(emu, dtype):
    gen = torch.Generator().manual_seed(0)
    for kind, r, shape, layout, kw in FIXED:
        _compare(kind, r, _input(shape, dtype, layout, gen), kw, emu, gen)


def _concerns(variant, kind, kw):
    """Whether a FIXED case is one the variant's knobs choose a kernel for: the TORCH_DNN_POOL_GLOBAL_* knobs the
    global average (adaptive_avg_pool to 1x1), the others the windowed kernels."""
    global_case = kind == "adaptive_avg_pool" and kw.get("out") == 1
    return global_case == ("TORCH_DNN_POOL_GLOBAL_" in variant)


@pytest.mark.parametrize("variant", POOL_VARIANTS)
def test_fixed_cases_old_paths(emu, variant, monkeypatch):
    # the kernels the plane tiles and the new global-average kernels replaced stay selectable: keep them right
    set_variant(monkeypatch, variant)
    gen = torch.Generator().manual_seed(2)
    ran = 0
    for kind, r, shape, layout, kw in FIXED:
        if FULL or _concerns(variant, kind, kw):
            _compare(kind, r, _input(shape, torch.float32, layout, gen), kw, emu, gen)
            ran += 1
    assert ran > 0, f"{variant}: no case ran"


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("variant", ["", "TORCH_DNN_POOL_PAD_STRIP=0"])
def test_special_values(emu, layout, variant, monkeypatch):
    # NaN wins (the last one), -inf windows keep their first index, inf propagates: taps and loops alike
    if variant:
        set_variant(monkeypatch, variant)
    gen = torch.Generator().manual_seed(1)
    for r, shape in ((1, (2, 16, 12)), (2, (2, 16, 9, 8)), (3, (2, 8, 5, 6, 7))):
        for dtype in (torch.float32, torch.bfloat16):
            x = _input(shape, dtype, "contiguous", gen)
            idx = torch.randint(0, x.numel(), (12,), generator=gen)
            x.view(-1)[idx] = torch.tensor([float("nan"), float("inf"), -float("inf")] * 4, dtype=dtype)
            x[1, 2] = -float("inf")
            x = _to_layout(x, layout)
            for kind, kw in (("max_pool", dict(k=3, s=2, p=1)), ("max_pool", dict(k=2, s=1, p=1, d=2)),
                             ("adaptive_max_pool", dict(out=3)), ("avg_pool", dict(k=2, s=2, p=0)),
                             ("adaptive_avg_pool", dict(out=1))):
                _compare(kind, r, x, kw, emu, gen)


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_random_cases(emu, rank):
    rng = random.Random(10 + rank)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(60):
        ks = [rng.randint(1, 4) for _ in range(rank)]
        kind = rng.choice(["max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "lp_pool"])
        shape = (rng.choice([1, 2]), rng.choice([1, 3, 8, 16])) + tuple(rng.randint(4, 12) for _ in range(rank))
        kw = dict(k=ks, s=[rng.randint(1, 3) for _ in range(rank)], ceil=rng.random() < 0.5,
                  p=[0] * rank if kind == "lp_pool" else [rng.randint(0, k // 2) for k in ks],
                  d=[rng.randint(1, 2) if kind == "max_pool" else 1 for _ in range(rank)],
                  cip=rng.random() < 0.5, div=rng.choice([None, 3]) if kind == "avg_pool" else None,
                  norm=rng.choice([1, 2]), out=[rng.randint(1, 6) for _ in range(rank)])
        x = _input(shape, rng.choice([torch.float32, torch.float64]), rng.choice(["contiguous", "channels_last"]), gen)
        try:
            getattr(ref, f"{kind}{rank}d")(x, *_args(kind, rank, kw))
        except RuntimeError:
            continue  # a configuration the op rejects
        _compare(kind, rank, x, kw, emu, gen)
