"""The direct convolution kernels (csrc/conv/conv_direct*.cu: the generic kernels, the depthwise kernels, the bias
gradient) run on the CPU (tests/emulation/: the kernel sources compiled by g++ with a shim that runs each block's
threads on host threads), called through the kernel contract (conv_kernels.h) on 5-D operands of any strides,
against PyTorch's convolution in float64. This checks the kernels' index arithmetic, layouts and dispatch without
a GPU; it says nothing of their speed or of device-only behaviour. Opt in with TORCH_DNN_EMULATE=1 (the first run
builds the emulation: a few minutes)."""
import os

import pytest
import torch
import torch.nn.functional as F

from tests.utils import load_kernel_emulation, requires_emulation

pytestmark = requires_emulation
# TORCH_DNN_EMULATE=1 (CI) runs the first cases of each list in one layout: the whole set takes 15-50 minutes on
# the 2-core CI machine; TORCH_DNN_EMULATE=full runs every case.
FULL = os.environ.get("TORCH_DNN_EMULATE") == "full"


def _some(cases, n=2):
    return cases if FULL else cases[:n]

HERE = os.path.dirname(os.path.abspath(__file__))

# the contract's Act values (csrc/activation/activation_math.h) with their float64 references
ACTS = {"identity": (0, lambda v: v), "relu": (1, F.relu), "silu": (8, F.silu), "gelu": (6, F.gelu),
        "hardswish": (13, F.hardswish)}
# max |ours - ref| / max(1, max |ref|): the kernels accumulate in float (double), one rounding on store
TOL = {torch.float64: 1e-11, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@pytest.fixture(scope="module")
def emu():
    load_kernel_emulation("torch_dnn_conv_emulation", "conv_direct_emulation.cpp")
    return torch.ops.torch_dnn_conv_emu


# Layouts of a 5-D tensor, as the order of its dims in memory (outermost first), optionally with every other
# element of the innermost memory dim (a sliced view).
LAYOUTS = {
    "ncdhw": ((0, 1, 2, 3, 4), False),
    "ndhwc": ((0, 2, 3, 4, 1), False),
    "odd": ((2, 0, 4, 1, 3), False),
    "ndhwc_sliced": ((0, 2, 3, 4, 1), True),
    "ncdhw_sliced": ((0, 1, 2, 3, 4), True),
}


def make(shape, dtype, layout, gen, fill=None):
    order, sliced = LAYOUTS[layout]
    mem_shape = [shape[d] for d in order]
    if sliced:
        mem_shape[-1] *= 2
    if fill is None:
        base = (torch.rand(mem_shape, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
    else:
        base = torch.full(mem_shape, fill, dtype=dtype)
    if sliced:
        base = base[..., ::2]
    inverse = [order.index(d) for d in range(5)]
    t = base.permute(inverse)
    assert tuple(t.shape) == tuple(shape)
    return t


def out_size(i, k, s, p, d):
    return (i + 2 * p - d * (k - 1) - 1) // s + 1


def check_close(name, out, ref, dtype):
    assert not torch.isnan(out).any(), f"{name}: elements left unwritten (NaN poison)"
    scale = max(1.0, float(ref.abs().max())) if ref.numel() else 1.0
    err = float((out.to(torch.float64) - ref).abs().max()) / scale if ref.numel() else 0.0
    assert err <= TOL[dtype], f"{name}: error {err:.3g} > {TOL[dtype]:.3g}"


def run_case(emu, N, C, K, G, spatial, ker, stride, pad, dil, dtype, layout, *, bias=False, residual=False,
             act="identity", out_layout=None, passes=("fprop", "dgrad", "wgrad", "bias")):
    gen = torch.Generator().manual_seed(hash((N, C, K, G, spatial, ker, stride, str(dtype), layout)) % 2**31)
    out_layout = out_layout or layout
    outs = tuple(out_size(spatial[i], ker[i], stride[i], pad[i], dil[i]) for i in range(3))
    x = make((N, C) + spatial, dtype, layout, gen)
    w = make((K, C // G) + ker, dtype, "ncdhw", gen)
    dy = make((N, K) + outs, dtype, out_layout, gen)
    x64, w64, dy64 = x.to(torch.float64), w.to(torch.float64), dy.to(torch.float64)
    label = f"N{N} C{C} K{K} G{G} {spatial} k{ker} s{stride} p{pad} d{dil} {dtype} {layout}"
    if "fprop" in passes:
        y = make((N, K) + outs, dtype, out_layout, gen, fill=float("nan"))
        b = (torch.rand(K, generator=gen, dtype=torch.float64) - 0.5).to(dtype) if bias else None
        r = make((N, K) + outs, dtype, out_layout, gen) if residual else None
        code, fn = ACTS[act]
        emu.fprop(x, w, y, b, r, stride, pad, dil, G, code, 0.0, 0.0)
        ref = F.conv3d(x64, w64, None, stride, pad, dil, G) if C else torch.zeros((N, K) + outs, dtype=torch.float64)
        if b is not None:
            ref = ref + b.to(torch.float64).view(1, K, 1, 1, 1)
        if r is not None:
            ref = ref + r.to(torch.float64)
        check_close(f"fprop {label} {act}", y, fn(ref), dtype)
    if "dgrad" in passes:
        dx = make((N, C) + spatial, dtype, layout, gen, fill=float("nan"))
        emu.dgrad(dy, w, dx, stride, pad, dil, G)
        ref = torch.nn.grad.conv3d_input(x.shape, w64, dy64, stride, pad, dil, G)
        check_close(f"dgrad {label}", dx, ref, dtype)
    if "wgrad" in passes:
        ref = torch.nn.grad.conv3d_weight(x64, w.shape, dy64, stride, pad, dil, G)
        runs = []
        for ws in (True, False):
            dw = make(tuple(w.shape), dtype, "ncdhw", gen, fill=float("nan"))
            emu.wgrad(dy, x, dw, stride, pad, dil, G, ws)
            check_close(f"wgrad {label} workspace={ws}", dw, ref, dtype)
            runs.append(dw)
        dw2 = torch.full_like(runs[0], float("nan"))
        emu.wgrad(dy, x, dw2, stride, pad, dil, G, True)
        assert torch.equal(dw2, runs[0]), f"wgrad {label}: two runs differ"
    if "bias" in passes:
        ref = dy64.sum((0, 2, 3, 4))
        for ws in (True, False):
            db = torch.full((K,), float("nan"), dtype=dtype)
            emu.bias_grad(dy, db, ws)
            check_close(f"bias_grad {label} workspace={ws}", db, ref, dtype)


# The stem kernel: (N, C, K, H, W, kernel, stride, pad, bias); 2-D problems, run on bfloat16 and float16
STEM = [
    # ResNet's stem: rows of 150 outputs (two tiles, one partial); 7 output rows, still several tiles a CTA (the
    # emulated device has 2 SMs)
    (2, 3, 64, 13, 300, (7, 7), (2, 2), (3, 3), False),
    (1, 3, 24, 13, 17, (3, 3), (2, 2), (1, 1), True),     # MobileNet-style 3x3/2, K < 64, bias
    (2, 4, 70, 12, 16, (4, 4), (4, 4), (0, 0), False),    # ConvNeXt patchify 4x4/4, two channel tiles
    (1, 1, 8, 9, 11, (5, 8), (1, 2), (2, 0), True),       # one channel, stride 1 down the rows, 8 taps
]


@pytest.mark.parametrize("case", _some(STEM, 3), ids=lambda c: f"C{c[1]}K{c[2]}_k{c[5]}s{c[6]}")
@pytest.mark.parametrize("layout", _some(["ndhwc", "ncdhw", "odd"], 2))
def test_stem(emu, case, layout):
    N, C, K, H, W, ker, stride, pad, bias = case
    for dtype in (torch.bfloat16, torch.float16):
        gen = torch.Generator().manual_seed(hash(case) % 2**31)
        x = make((N, C, 1, H, W), dtype, layout, gen)
        w = make((K, C, 1) + ker, dtype, "odd" if layout == "ncdhw" else "ncdhw", gen)
        b = (torch.rand(K, generator=gen, dtype=torch.float64) - 0.5).to(dtype) if bias else None
        outs = tuple(out_size(s, k, st, p, 1) for s, k, st, p in zip((H, W), ker, stride, pad))
        y = make((N, K, 1) + outs, dtype, layout, gen, fill=float("nan"))
        assert emu.stem_fprop(x, w, y, b, None, (1,) + stride, (0,) + pad, 0, 0.0, 0.0), "the stem kernel declined"
        ref = F.conv3d(x.double(), w.double(), None if b is None else b.double(), (1,) + stride, (0,) + pad)
        check_close(f"stem {case} {dtype} {layout}", y, ref, dtype)


# each activation once and each layout at least once; every pair with TORCH_DNN_EMULATE=full
STEM_EPILOGUES = [("relu", "ndhwc"), ("silu", "ncdhw"), ("hardswish", "ndhwc"), ("relu", "ncdhw"), ("silu", "ndhwc"),
                  ("hardswish", "ncdhw")]


@pytest.mark.parametrize("act, layout", _some(STEM_EPILOGUES, 3))
def test_stem_epilogue(emu, act, layout):
    """conv_bias_act / conv_bias_add_act on the stem kernel: act(conv + bias (+ residual)), a row of 38 output pixels
    (a partial tile) and 70 channels (a partial second tile of 64), against float64."""
    N, C, K, H, W = 2, 3, 70, 9, 75
    for dtype, residual in ((torch.bfloat16, False), (torch.float16, True)):
        gen = torch.Generator().manual_seed(len(act) + 7 * residual)
        x = make((N, C, 1, H, W), dtype, layout, gen)
        w = make((K, C, 1, 7, 7), dtype, "ncdhw", gen)
        b = (torch.rand(K, generator=gen, dtype=torch.float64) - 0.5).to(dtype)
        outs = tuple(out_size(s, 7, 2, 3, 1) for s in (H, W))
        r = make((N, K, 1) + outs, dtype, layout, gen) if residual else None
        y = make((N, K, 1) + outs, dtype, layout, gen, fill=float("nan"))
        code, fn = ACTS[act]
        assert emu.stem_fprop(x, w, y, b, r, (1, 2, 2), (0, 3, 3), code, 0.0, 0.0), "the stem kernel declined"
        ref = F.conv3d(x.double(), w.double(), b.double(), (1, 2, 2), (0, 3, 3))
        if residual:
            ref = ref + r.double()
        check_close(f"stem {act} residual={residual} {dtype} {layout}", y, fn(ref), dtype)


@pytest.mark.parametrize("case", _some([c for c in STEM if c[5][0] in (3, 4, 5, 7)], 3),
                         ids=lambda c: f"C{c[1]}K{c[2]}_k{c[5]}s{c[6]}")
@pytest.mark.parametrize("layout", _some(["ndhwc", "ncdhw", "odd"], 2))
def test_stem_wgrad(emu, case, layout):
    """The stem kernel's weight gradient against float64, twice (the split partials summed in a fixed order: the
    same bits)."""
    N, C, K, H, W, ker, stride, pad, _ = case
    for dtype in (torch.bfloat16, torch.float16):
        gen = torch.Generator().manual_seed(hash(case) % 2**31 + 1)
        x = make((N, C, 1, H, W), dtype, layout, gen)
        outs = tuple(out_size(s, k, st, p, 1) for s, k, st, p in zip((H, W), ker, stride, pad))
        dy = make((N, K, 1) + outs, dtype, layout, gen)
        runs = []
        for _ in range(2 if dtype == torch.bfloat16 else 1):
            dw = make((K, C, 1) + ker, dtype, "odd" if layout == "ncdhw" else "ncdhw", gen, fill=float("nan"))
            assert emu.stem_wgrad(dy, x, dw, (1,) + stride, (0,) + pad), "the stem kernel declined"
            runs.append(dw)
        ref = torch.nn.grad.conv3d_weight(x.double(), (K, C, 1) + ker, dy.double(), (1,) + stride, (0,) + pad)
        check_close(f"stem wgrad {case} {dtype} {layout}", runs[0], ref, dtype)
        assert all(torch.equal(runs[0], r) for r in runs[1:]), f"stem wgrad {case}: two runs differ"


def test_stem_declines(emu):
    """What the stem kernel does not take it says so (the other routes run), writing nothing: 5 input channels, an
    odd horizontal stride, a 9-wide kernel, float32."""
    def declined(C, ker, stride, dtype=torch.bfloat16):
        x = torch.randn(1, C, 1, 12, 12).to(dtype)
        w = torch.randn(8, C, 1, *ker).to(dtype)
        outs = tuple(out_size(12, k, st, 0, 1) for k, st in zip(ker, stride))
        y = torch.full((1, 8, 1) + outs, float("nan"), dtype=dtype)
        took = emu.stem_fprop(x, w, y, None, None, (1,) + stride, (0, 0, 0), 0, 0.0, 0.0)
        return not took and bool(torch.isnan(y).all())
    assert declined(5, (3, 3), (2, 2))
    assert declined(3, (3, 3), (1, 1))
    assert declined(3, (3, 9), (2, 2))
    assert declined(3, (3, 3), (2, 2), torch.float32)


# (N, C, K, G, spatial, kernel, stride, pad, dil)
GENERIC = [
    (2, 4, 6, 2, (3, 5, 6), (2, 3, 3), (1, 2, 1), (1, 1, 0), (1, 1, 2)),   # 3-D, groups, mixed stride/dilation
    (2, 5, 7, 1, (1, 7, 6), (1, 3, 3), (1, 2, 2), (0, 1, 1), (1, 1, 1)),   # 2-D, stride 2
    (3, 3, 5, 1, (1, 1, 17), (1, 1, 5), (1, 1, 3), (0, 0, 2), (1, 1, 2)),  # 1-D, stride 3, dilation 2
    (2, 6, 9, 3, (1, 5, 5), (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1)),   # 1x1 grouped
    (1, 2, 3, 1, (1, 4, 5), (1, 2, 2), (1, 5, 4), (0, 2, 3), (1, 1, 1)),   # stride > kernel, padding > kernel
    (2, 4, 4, 4, (3, 6, 5), (3, 3, 3), (2, 1, 1), (1, 1, 1), (1, 1, 1)),   # 3-D depthwise (generic kernels)
    (2, 3, 6, 3, (2, 6, 7), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 2, 1)),   # depthwise x2, dilated (generic)
    # staged weights in several chunks: 40 input channels (32 + 8), 45 taps (32 + 13), a partial tile of 8
    (1, 40, 12, 1, (3, 5, 6), (3, 3, 5), (1, 1, 1), (1, 1, 2), (1, 1, 1)),
    (1, 12, 40, 1, (3, 5, 6), (3, 3, 5), (1, 2, 1), (1, 1, 2), (1, 1, 1)),  # dgrad's 40 output channels
]


@pytest.mark.parametrize("case", _some(GENERIC), ids=lambda c: "x".join(map(str, c[:4])) + f"_k{c[5]}")
@pytest.mark.parametrize("layout", _some(["ndhwc", "ncdhw", "odd", "ndhwc_sliced"], 1))
def test_generic(emu, case, layout):
    for dtype in (torch.float32, torch.bfloat16) + ((torch.float64,) if layout == "odd" else ()):
        run_case(emu, *case, dtype, layout, out_layout="ncdhw" if layout == "odd" else None)


def test_generic_epilogue(emu):
    for act in ("relu", "silu", "gelu", "hardswish"):
        run_case(emu, 2, 5, 7, 1, (1, 6, 5), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), torch.float32, "ndhwc",
                 bias=True, residual=True, act=act, passes=("fprop",))
    run_case(emu, 2, 4, 4, 2, (1, 5, 5), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), torch.float16, "ncdhw",
             bias=True, residual=True, act="relu", passes=("fprop",))


def test_generic_edges(emu):
    # no input channels: y = bias; no positions in the reduction: dw = 0, db = 0
    run_case(emu, 2, 0, 3, 1, (1, 4, 4), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), torch.float32, "ncdhw",
             bias=True, passes=("fprop",))
    run_case(emu, 0, 3, 4, 1, (1, 4, 4), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), torch.float32, "ncdhw",
             passes=("fprop", "dgrad", "wgrad", "bias"))
    # a long reduction against few weights: wgrad's and the bias gradient's slices
    run_case(emu, 4, 2, 3, 1, (1, 40, 40), (1, 1, 3), (1, 1, 1), (0, 0, 1), (1, 1, 1), torch.float32, "ndhwc",
             passes=("wgrad", "bias"))


# Depthwise (G == C, K = m C), 2-D: the dedicated kernels. (N, C, m, H, W, kernel, stride, pad, dil)
DEPTHWISE = [
    (2, 16, 1, 7, 9, 3, 1, 1, 1),     # 3x3/1: the unrolled taps, 16-byte vectors in channels-last bf16
    (2, 16, 1, 9, 10, 3, 2, 1, 1),    # 3x3/2: dgrad's stride-aligned strips
    (1, 24, 1, 11, 13, 5, 1, 2, 1),
    (2, 8, 1, 10, 11, 5, 2, 2, 1),
    (1, 16, 1, 9, 14, 7, 1, 3, 1),
    (2, 8, 1, 13, 12, 7, 2, 3, 1),
    (2, 8, 2, 7, 9, 3, 1, 1, 1),      # multiplier 2: gathered input channels
    (1, 4, 2, 9, 8, 5, 2, 1, 1),
    (2, 5, 1, 6, 7, 3, 1, 0, 1),      # odd channels: one channel a thread
    (1, 8, 1, 9, 11, 3, 1, 2, 2),     # dilation: run-time taps
    (2, 8, 1, 8, 9, (3, 1), (2, 1), (1, 0), 1),  # non-square, run-time taps
    (2, 16, 1, 1, 19, (1, 5), (1, 2), (0, 2), 1),  # 1-D
    (1, 8, 3, 6, 7, 3, 1, 4, 1),      # padding past the kernel, multiplier 3
    (2, 8, 1, 5, 6, 4, 3, 2, 1),      # even kernel, stride 3: run-time taps
]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("case", _some(DEPTHWISE), ids=lambda c: "_".join(str(v) for v in c))
@pytest.mark.parametrize("layout", _some(["ndhwc", "ncdhw", "ndhwc_sliced"], 1))
def test_depthwise(emu, case, layout):
    N, C, m, H, W, k, s, p, d = case
    k, s, p, d = _pair(k), _pair(s), _pair(p), _pair(d)
    dtypes = (torch.bfloat16, torch.float32, torch.float16) + ((torch.float64,) if layout == "ndhwc" else ())
    for dtype in dtypes:
        run_case(emu, N, C, C * m, C, (1, H, W), (1,) + k, (1,) + s, (0,) + p, (1,) + d, dtype, layout)


def test_depthwise_epilogue(emu):
    for act in ("relu", "silu"):
        for layout in ("ndhwc", "ncdhw"):
            run_case(emu, 2, 16, 16, 16, (1, 6, 9), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), torch.bfloat16,
                     layout, bias=True, residual=True, act=act, passes=("fprop",))
    run_case(emu, 2, 8, 16, 8, (1, 6, 9), (1, 5, 5), (1, 2, 2), (0, 2, 2), (1, 1, 1), torch.float32, "ndhwc",
             bias=True, residual=True, act="gelu", passes=("fprop",))


def test_depthwise_mixed_layouts(emu):
    # x channels-last, y / dy NCHW and the other way round: the vector path only where both sides allow it
    for layout, out_layout in (("ndhwc", "ncdhw"), ("ncdhw", "ndhwc")):
        run_case(emu, 2, 16, 16, 16, (1, 7, 9), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), torch.bfloat16, layout,
                 out_layout=out_layout)


def test_depthwise_grid_loops(emu):
    # more items than the (two-SM) emulated grid: the item and slice loops go round
    run_case(emu, 3, 8, 8, 8, (1, 30, 29), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), torch.float32, "ndhwc")
    run_case(emu, 2, 3, 3, 3, (1, 30, 29), (1, 5, 5), (1, 2, 2), (0, 2, 2), (1, 1, 1), torch.float32, "ncdhw")


def test_depthwise_wgrad_slices(emu):
    # items enough for two slices of the 3 (filter row, channel chunk) pairs on the emulated 2 SMs x 2 blocks: the
    # float partial sums and their fixed-order sum (conv_wgrad_sum_splits), against the one-slice run
    gen = torch.Generator().manual_seed(5)
    x = make((4, 8, 1, 32, 64), torch.bfloat16, "ndhwc", gen)
    dy = make((4, 8, 1, 32, 64), torch.bfloat16, "ndhwc", gen)
    ref = torch.nn.grad.conv3d_weight(x.double(), (8, 1, 1, 3, 3), dy.double(), (1, 1, 1), (0, 1, 1), (1, 1, 1), 8)
    got = {}
    for ws in (True, False):
        dw = make((8, 1, 1, 3, 3), torch.bfloat16, "ncdhw", gen, fill=float("nan"))
        got[ws] = emu.wgrad(dy, x, dw, (1, 1, 1), (0, 1, 1), (1, 1, 1), 8, ws)
        check_close(f"wgrad slices workspace={ws}", dw, ref, torch.bfloat16)
    assert got[True] > 0 and got[False] == 0, f"workspace bytes asked for: {got}"


def test_depthwise_empty_batch(emu):
    # nothing to sum: the weight and bias gradients are zeros
    for layout in ("ndhwc", "ncdhw"):
        run_case(emu, 0, 8, 8, 8, (1, 6, 7), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), torch.bfloat16, layout)


# ---- staging for the tensor-core paths (csrc/conv/conv_staging.h) ----
# The CUDA launcher's route for operands the tensor-core paths refuse (NCHW and other layouts, channel counts
# that are not multiples of 8): conv_staging.h run on the CPU with a stand-in for those paths that takes a
# problem only under their operand rules and computes it in float64 (tests/emulation/conv_staging_emulation.cpp).
# A staged case must run on the stand-in and give PyTorch's result in the caller's layout; a declined one must
# leave the written operand untouched (the direct kernels then take it).


@pytest.fixture(scope="module")
def stage():
    from torch.utils import cpp_extension

    cpp_extension.load(
        name="torch_dnn_conv_staging_emulation",
        sources=[os.path.join(HERE, "emulation", "conv_staging_emulation.cpp")],
        extra_include_paths=[os.path.join(os.path.dirname(HERE), "csrc")],
        extra_cflags=["-O1", "-std=c++20", "-Wno-attributes"], is_python_module=False, verbose=False)
    return torch.ops.torch_dnn_conv_stage


def stage_case(stage, N, C, K, spatial, ker, stride, pad, dil, dtype, layout, *, groups=1, tf32=True, bias=False,
               residual=False, act="identity", staged=True):
    gen = torch.Generator().manual_seed(hash((N, C, K, spatial, ker, str(dtype), layout)) % 2**31)
    outs = tuple(out_size(spatial[i], ker[i], stride[i], pad[i], dil[i]) for i in range(3))
    x = make((N, C) + spatial, dtype, layout, gen)
    w = make((K, C // groups) + ker, dtype, layout, gen)
    dy = make((N, K) + outs, dtype, layout, gen)
    x64, w64, dy64 = x.to(torch.float64), w.to(torch.float64), dy.to(torch.float64)
    label = f"N{N} C{C} K{K} G{groups} {spatial} k{ker} s{stride} p{pad} d{dil} {dtype} {layout} tf32={tf32}"
    geo = (list(stride), list(pad), list(dil), groups, tf32)
    b = (torch.rand(K, generator=gen, dtype=torch.float64) - 0.5).to(dtype) if bias else None
    r = make((N, K) + outs, dtype, layout, gen) if residual else None
    code, fn = ACTS[act]

    y = make((N, K) + outs, dtype, layout, gen, fill=float("nan"))
    ran = stage.run(0, x, w, y, b, r, *geo, code)
    ref = F.conv3d(x64, w64, None if b is None else b.to(torch.float64), stride, pad, dil, groups)
    if r is not None:
        ref = ref + r.to(torch.float64)
    dx = make((N, C) + spatial, dtype, layout, gen, fill=float("nan"))
    ran_dgrad = stage.run(1, dx, w, dy, None, None, *geo, 0)
    dw = make(tuple(w.shape), dtype, layout, gen, fill=float("nan"))
    ran_wgrad = stage.run(2, x, dw, dy, None, None, *geo, 0)
    assert (ran, ran_dgrad, ran_wgrad) == (staged,) * 3, f"{label}: staged {ran, ran_dgrad, ran_wgrad}"
    if not staged:
        for name, t in (("y", y), ("dx", dx), ("dw", dw)):
            assert torch.isnan(t).all(), f"{label}: {name} written where staging declined"
        return
    check_close(f"staged fprop {label} {act}", y, fn(ref), dtype)
    check_close(f"staged dgrad {label}", dx, torch.nn.grad.conv3d_input(x.shape, w64, dy64, stride, pad, dil, groups),
                dtype)
    check_close(f"staged wgrad {label}", dw, torch.nn.grad.conv3d_weight(x64, w.shape, dy64, stride, pad, dil, groups),
                dtype)


# (N, C, K, spatial, kernel, stride, pad, dil, layout): problems the tensor-core paths take after staging
STAGED = [
    (2, 16, 24, (1, 9, 10), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), "ncdhw"),        # NCHW
    (2, 3, 16, (1, 19, 17), (1, 7, 7), (1, 2, 2), (0, 3, 3), (1, 1, 1), "ndhwc"),        # the stem, channels-last
    (2, 3, 16, (1, 19, 17), (1, 7, 7), (1, 2, 2), (0, 3, 3), (1, 1, 1), "ncdhw"),        # the stem, NCHW
    (2, 16, 12, (1, 7, 6), (1, 3, 3), (1, 2, 1), (0, 1, 1), (1, 2, 1), "ndhwc"),         # K = 12 (dgrad's C side)
    (1, 5, 7, (1, 1, 23), (1, 1, 5), (1, 1, 3), (0, 0, 2), (1, 1, 2), "ncdhw"),          # 1-D, both padded
    (2, 8, 16, (3, 5, 6), (3, 3, 3), (1, 2, 1), (1, 1, 1), (1, 1, 1), "ncdhw"),          # NCDHW
    (2, 16, 16, (1, 6, 7), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), "odd"),           # permuted strides
    (2, 16, 8, (1, 6, 7), (1, 1, 1), (1, 1, 1), (0, 0, 0), (1, 1, 1), "ndhwc_sliced"),   # a strided view, 1x1
]


@pytest.mark.parametrize("case", _some(STAGED, 4), ids=lambda c: f"C{c[1]}_K{c[2]}_k{c[4]}_{c[8]}")
def test_staged(stage, case):
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        stage_case(stage, *case[:8], dtype, case[8])


def test_staged_epilogue(stage):
    # bias and residual padded with the output channels; the activation on the staged output
    for act in ("identity", "relu"):
        stage_case(stage, 2, 3, 12, (1, 6, 7), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), torch.bfloat16, "ncdhw",
                   bias=True, residual=True, act=act)
    stage_case(stage, 2, 16, 16, (1, 6, 7), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1), torch.float16, "ncdhw",
               bias=True, residual=True, act="relu")
    # only the residual laid out otherwise
    gen = torch.Generator().manual_seed(5)
    x, w = make((2, 16, 1, 6, 7), torch.bfloat16, "ndhwc", gen), make((16, 16, 1, 3, 3), torch.bfloat16, "ndhwc", gen)
    r = make((2, 16, 1, 6, 7), torch.bfloat16, "ncdhw", gen)
    y = make((2, 16, 1, 6, 7), torch.bfloat16, "ndhwc", gen, fill=float("nan"))
    assert stage.run(0, x, w, y, None, r, [1, 1, 1], [0, 1, 1], [1, 1, 1], 1, True, 0) == 1
    ref = F.conv3d(x.double(), w.double(), None, 1, (0, 1, 1)) + r.double()
    check_close("staged fprop, residual only", y, ref, torch.bfloat16)


def test_staging_declines(stage, monkeypatch):
    geo = ((1, 6, 7), (1, 3, 3), (1, 1, 1), (0, 1, 1), (1, 1, 1))
    # grouped (the direct kernels' problem), dtypes without tensor cores, padding that multiplies the work by
    # more than 8 (C = K = 1: 64 times), operands already as the paths take them (nothing to stage)
    stage_case(stage, 2, 16, 16, *geo, torch.bfloat16, "ncdhw", groups=2, staged=False)
    stage_case(stage, 2, 16, 16, *geo, torch.float64, "ncdhw", staged=False)
    stage_case(stage, 2, 16, 16, *geo, torch.float32, "ncdhw", tf32=False, staged=False)
    stage_case(stage, 2, 1, 1, *geo, torch.bfloat16, "ncdhw", staged=False)
    stage_case(stage, 2, 16, 16, *geo, torch.bfloat16, "ndhwc", staged=False)
    monkeypatch.setenv("TORCH_DNN_CONV_STAGE", "0")
    stage_case(stage, 2, 16, 16, *geo, torch.bfloat16, "ncdhw", staged=False)


def test_staged_weight_cache(stage, monkeypatch):
    """A read weight's staged copy is kept while the weight is unchanged (csrc/conv/conv_weight_cache.h): reused by
    the next forward and input-gradient pass of the same tensor, remade after an in-place change (its version), not
    shared with another tensor, dropped with its weight; never for the weight gradient, inference tensors, or with
    TORCH_DNN_CONV_WEIGHT_CACHE=0. Every result against PyTorch's in float64."""
    N, C, K, spatial, ker = 2, 16, 24, (1, 9, 10), (1, 3, 3)
    geo = ([1, 1, 1], [0, 1, 1], [1, 1, 1], 1, True)
    gen = torch.Generator().manual_seed(11)
    x = make((N, C) + spatial, torch.bfloat16, "ncdhw", gen)
    dy = make((N, K) + spatial, torch.bfloat16, "ncdhw", gen)

    def fprop(w):
        y = make((N, K) + spatial, torch.bfloat16, "ncdhw", gen, fill=float("nan"))
        assert stage.run(0, x, w, y, None, None, *geo, 0) == 1
        check_close("cached-weight fprop", y, F.conv3d(x.double(), w.double(), None, 1, (0, 1, 1)), torch.bfloat16)

    def dgrad(w):
        dx = make((N, C) + spatial, torch.bfloat16, "ncdhw", gen, fill=float("nan"))
        assert stage.run(1, dx, w, dy, None, None, *geo, 0) == 1
        ref = torch.nn.grad.conv3d_input(x.shape, w.double(), dy.double(), 1, (0, 1, 1))
        check_close("cached-weight dgrad", dx, ref, torch.bfloat16)

    def stats():
        return tuple(stage.weight_cache_stats())  # (hits, misses, entries)

    stage.clear_weight_cache()
    w = make((K, C) + ker, torch.bfloat16, "ncdhw", gen)
    fprop(w)
    assert stats() == (0, 1, 1)
    fprop(w)
    dgrad(w)
    assert stats() == (2, 1, 1)
    with torch.no_grad():
        w.mul_(-0.5)  # a new version: the copy is remade, and the result follows the new values
    fprop(w)
    assert stats() == (2, 2, 1)
    dw = make(tuple(w.shape), torch.bfloat16, "ncdhw", gen, fill=float("nan"))
    assert stage.run(2, x, dw, dy, None, None, *geo, 0) == 1
    assert stats() == (2, 2, 1)
    other = make((K, C) + ker, torch.bfloat16, "ncdhw", gen)
    fprop(other)
    assert stats() == (2, 3, 2)
    del other
    fprop(w)  # a hit; the dead weight's entry is dropped when the next copy is kept
    w2 = make((K, C) + ker, torch.bfloat16, "ncdhw", gen)
    fprop(w2)
    assert stats() == (3, 4, 2)
    with torch.inference_mode():
        wi = make((K, C) + ker, torch.bfloat16, "ncdhw", gen)
    fprop(wi)
    fprop(wi)
    assert stats() == (3, 4, 2)
    monkeypatch.setenv("TORCH_DNN_CONV_WEIGHT_CACHE", "0")
    fprop(w)
    assert stats() == (3, 4, 2)
