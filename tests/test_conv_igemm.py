"""Convolution's implicit-GEMM tensor-core path (csrc/conv/conv_implicit_gemm.cu) on CUDA: shapes that reach each
of its kernels (fprop with its fused epilogue, stride-1 dgrad, split-K wgrad, 1x1 convolutions as GEMMs; ResNet-50
layers at a small batch, odd sizes, pads, dilations, strides, C = K = 8, tiles cut by the edges of M, N and K) in
float16 and bfloat16 with channels-last operands, against PyTorch with the project's error rule (a float64
reference), TF32 semantics for float32, and wgrad's fixed-order split reduction. Which kernel ran is read from the
profiler's kernel names (no knob): a layout or dtype this path takes must not fall back to the direct kernels."""
import inspect
import re

import pytest
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from torch_dnn.testing import check_against_torch, compare, random_like_case
from tests.utils import round_tf32, tf32_verdict

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def _portable_path(monkeypatch):
    """The Hopper implicit GEMM (conv_sm90.cu, tests/test_conv_sm90.py) takes most of these problems on an sm_90
    build with CUTLASS; turned off (read at every call) so that this file tests the portable path on every GPU."""
    monkeypatch.setenv("TORCH_DNN_CONV_SM90", "0")


def _channels_inner(t):
    """t with its channels (dim 1) innermost in memory: channels_last / channels_last_3d, or (N, L, C) for 3-D."""
    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _rand(shape, dtype, low=-1.0, high=1.0):
    return _channels_inner(random_like_case(shape, dtype, "cuda", low=low, high=high))


def _cuda_kernels(fn):
    """Names of the CUDA kernels fn launched, as the profiler saw them (empty when it sees none)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


# the kernels of each path, as the profiler names them
PATTERNS = {
    "fprop": r"igemm_kernel.*GatherProblem<[^<>]*, false, \d+>",
    "dgrad": r"igemm_kernel.*GatherProblem<[^<>]*, true, \d+>",
    "wgrad": r"igemm_kernel.*WgradProblem",
    # a 1x1 convolution is a matmul: the matmul family's kernels, whichever its plan picks (the skinny GEMM for few
    # rows; the CUTLASS Hopper GEMM only in builds with CUTLASS)
    "gemm": r"gemm_kernel|cutlass|Sm90|sm90|torch_dnn::matmul::",
    "hopper": r"ConvUniversal",  # conv_sm90.cu's CUTLASS kernels (sm_90 builds with CUTLASS)
}


def _assert_ran(names, expect, what):
    if expect is None:
        return  # not this path's problem
    # no kernel names means the profiler saw no CUDA kernels (no CUPTI, or the op launched nothing): the check could
    # not be made, which must not pass as if the kernel had run
    assert names, f"{what}: the profiler reported no CUDA kernels, so which kernel ran cannot be checked"
    pats = [PATTERNS[e] for e in expect.split("|")]
    assert any(re.search(p, n) for p in pats for n in names), (
        f"{what}: expected the {expect} kernel of the implicit-GEMM path, ran {sorted(set(names))}")


class Case:
    def __init__(self, name, n, c, k, size, ker, stride=1, pad=0, dil=1):
        self.name, self.n, self.c, self.k = name, n, c, k
        self.dims = len(size)
        as_t = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * self.dims  # noqa: E731
        self.size, self.ker, self.stride, self.pad, self.dil = tuple(size), as_t(ker), as_t(stride), as_t(pad), as_t(dil)

    def __repr__(self):
        return self.name

    @property
    def is_1x1(self):
        return all(k == 1 for k in self.ker) and all(s == 1 for s in self.stride) and all(p == 0 for p in self.pad)

    def expect(self):
        """(fprop, dgrad, wgrad) kernels this path runs; None where the layout is not a PyTorch memory format
        (1-D: the op layer may copy it)."""
        if self.dims == 1:
            return None, None, None
        fwd = "gemm" if self.is_1x1 else "fprop"
        bwd_in = "gemm" if self.is_1x1 else "dgrad"
        bwd_w = "wgrad|gemm" if self.is_1x1 else "wgrad"
        return fwd, bwd_in, bwd_w

    def conv(self, lib):
        f = getattr(lib, f"conv{self.dims}d")
        return lambda x, w, b: f(x, w, b, self.stride, self.pad, self.dil)

    def inputs(self, dtype):
        x = _rand((self.n, self.c) + self.size, dtype, -2.0, 2.0)
        w = _rand((self.k, self.c) + self.ker, dtype, -1.0, 1.0)
        b = random_like_case((self.k,), dtype, "cuda", low=-1.0, high=1.0)
        return x, w, b


CASES = [
    # ResNet-50's layers at batch 2
    Case("r50_3x3_64_56", 2, 64, 64, (56, 56), 3, pad=1),
    Case("r50_1x1_64_256_56", 2, 64, 256, (56, 56), 1),
    Case("r50_1x1_256_64_56", 2, 256, 64, (56, 56), 1),
    Case("r50_3x3s2_128_56", 2, 128, 128, (56, 56), 3, stride=2, pad=1),
    Case("r50_1x1s2_256_512_56", 2, 256, 512, (56, 56), 1, stride=2),
    Case("r50_3x3_256_14", 2, 256, 256, (14, 14), 3, pad=1),
    Case("r50_3x3_512_7", 2, 512, 512, (7, 7), 3, pad=1),
    Case("r50_1x1_2048_512_7", 2, 2048, 512, (7, 7), 1),
    # edges: M, N and K tiles cut (M = 507, N = 136, C blocks 32 + 32 + 8), the smallest channel counts
    Case("tail_13x13", 3, 72, 136, (13, 13), 3, pad=1),
    Case("min_c8_k8", 1, 8, 8, (5, 5), 3, pad=1),
    Case("c8_k8_1x1", 1, 8, 8, (7, 5), 1),
    # pads, dilations, strides, asymmetric kernels, stride > kernel
    Case("dil2_5x5", 2, 16, 24, (7, 5), 5, pad=4, dil=2),
    Case("valid_3x3", 2, 32, 32, (9, 9), 3),
    Case("pad_only_1x1", 2, 16, 16, (6, 6), 1, pad=1),
    Case("asym_3x1_s21", 2, 24, 16, (13, 7), (3, 1), stride=(2, 1), pad=(1, 0)),
    Case("stride3_ker2", 2, 16, 32, (11, 13), 2, stride=3),
    Case("dil3_pad2_s1", 2, 16, 16, (7, 7), 3, pad=2, dil=3),
    # strided dgrad's residue classes: taps that reach only some classes, classes no tap reaches (1x1 / 2),
    # stride and dilation with a common factor
    Case("s2_dil2_3x3", 2, 16, 24, (11, 10), 3, stride=2, pad=2, dil=2),
    Case("s3_dil2_3x3", 2, 24, 16, (13, 11), 3, stride=3, pad=1, dil=2),
    Case("s2_1x1_odd", 2, 16, 32, (9, 7), 1, stride=2),
    # 3-D and 1-D
    Case("3d_3x3x3", 2, 16, 24, (5, 6, 7), 3, pad=1),
    Case("3d_s2", 2, 16, 16, (5, 6, 7), 3, stride=2, pad=1),
    Case("3d_1x1x1", 2, 32, 16, (3, 4, 5), 1),
    Case("1d_k5_dil3", 2, 16, 32, (33,), 5, pad=2, dil=3),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_conv_against_pytorch(case, dtype):
    x, w, b = case.inputs(dtype)
    with torch.no_grad():
        y = case.conv(TF)(x, w, b)
    g = _rand(tuple(y.shape), dtype)
    for v in check_against_torch(case.conv(F), case.conv(TF), [x, w, b], name=f"{case} {dtype}", grad_output=g):
        assert v, v.message


@pytest.mark.parametrize("dtype", [torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_path_taken(case, dtype):
    """Each pass of a channels-last 16-bit problem runs this path's kernel, not the direct fallback."""
    fwd, bwd_in, bwd_w = case.expect()
    x, w, b = case.inputs(dtype)
    conv = case.conv(F)
    _assert_ran(_cuda_kernels(lambda: conv(x, w, b)), fwd, f"{case} forward")
    xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    y = conv(xg, w, b)
    g = _rand(tuple(y.shape), dtype)
    _assert_ran(_cuda_kernels(lambda: torch.autograd.grad(y, [xg], g)), bwd_in, f"{case} backward (input)")
    y = conv(x, wg, b)
    _assert_ran(_cuda_kernels(lambda: torch.autograd.grad(y, [wg], g)), bwd_w, f"{case} backward (weight)")


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("r50_3x3_64_56", "r50_3x3_512_7", "tail_13x13",
                                                                  "3d_3x3x3", "r50_1x1_64_256_56")], ids=repr)
def test_split_reductions_are_reproducible(case):
    """K splits (wgrad's long pixel reduction; fprop and dgrad where few output tiles fill the GPU, as at 7x7) are
    summed in a fixed order: two runs are bitwise equal (always, not only under torch.use_deterministic_algorithms)."""
    x, w, b = case.inputs(torch.bfloat16)
    xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    conv = case.conv(F)
    y1, y2 = conv(xg, wg, b), conv(xg, wg, b)
    assert torch.equal(y1, y2)
    g = _rand(tuple(y1.shape), torch.bfloat16)
    d1 = torch.autograd.grad(y1, [xg, wg], g)
    d2 = torch.autograd.grad(y2, [xg, wg], g)
    assert torch.equal(d1[0], d2[0]) and torch.equal(d1[1], d2[1])


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("r50_3x3_64_56", "r50_3x3_256_14", "tail_13x13",
                                                                  "r50_1x1_64_256_56", "r50_3x3_512_7")], ids=repr)
def test_tf32_semantics(case):
    """float32 with cudnn.allow_tf32 runs TF32 tensor cores (forward, input and weight gradients: TF32's error);
    without it, float32 accuracy."""
    x, w, b = case.inputs(torch.float32)
    ours, theirs = case.conv(F), case.conv(TF)
    x64, w64 = x.double().requires_grad_(True), w.double().requires_grad_(True)
    ref = theirs(x64, w64, b.double())
    g = _rand(tuple(ref.shape), torch.float32)
    dx_ref, dw_ref = torch.autograd.grad(ref, [x64, w64], g.double())
    ref = ref.detach()
    old = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        y = ours(x, w, b)
        err = float((y.double() - ref).abs().max() / ref.abs().max())
        assert err < 1e-5, f"{case}: TF32 off must give float32 accuracy, got {err:.3g}"
        torch.backends.cudnn.allow_tf32 = True
        xr, wr, gr = (round_tf32(t).double() for t in (x, w, g))
        xr.requires_grad_(True), wr.requires_grad_(True)
        ideal = theirs(xr, wr, b.double())
        dx_ideal, dw_ideal = torch.autograd.grad(ideal, [xr, wr], gr)  # from rounded dy and w / dy and x
        xo, wo = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        xp, wp = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
        yo, yp = ours(xo, wo, b), theirs(xp, wp, b)
        v = tf32_verdict(yo, yp, ideal.detach(), ref, f"{case} tf32 forward")
        assert v, v.message
        dxo, dwo = torch.autograd.grad(yo, [xo, wo], g)
        dxp, dwp = torch.autograd.grad(yp, [xp, wp], g)
        for name, o, p, i, r in (("input", dxo, dxp, dx_ideal, dx_ref), ("weight", dwo, dwp, dw_ideal, dw_ref)):
            v = tf32_verdict(o, p, i, r, f"{case} tf32 {name} gradient", grad=True)
            assert v, v.message
        fwd, _, _ = case.expect()
        _assert_ran(_cuda_kernels(lambda: ours(x, w, b)), fwd, f"{case} tf32 forward")
    finally:
        torch.backends.cudnn.allow_tf32 = old


ACT_REF = {"none": lambda t: t, "relu": torch.relu, "silu": TF.silu, "gelu": TF.gelu}


def _geometry_kwargs(fn, case):
    """stride / padding / dilation keywords for fn, which must take every one the case sets to a non-default."""
    params = inspect.signature(fn).parameters
    kw = {"stride": case.stride, "padding": case.pad, "dilation": case.dil}
    defaults = {"stride": 1, "padding": 0, "dilation": 1}
    missing = [k for k, v in kw.items() if k not in params and any(e != defaults[k] for e in v)]
    assert not missing, f"{getattr(fn, '__name__', fn)} takes no {missing}"
    return {k: v for k, v in kw.items() if k in params}


@pytest.mark.skipif(not hasattr(F, "conv_bias_add_act"), reason="torch_dnn has no conv_bias_add_act yet")
@pytest.mark.parametrize("act", ["none", "relu", "silu", "gelu"])
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("r50_3x3_64_56", "r50_1x1_256_64_56", "tail_13x13",
                                                                  "3d_3x3x3")], ids=repr)
def test_fused_epilogue(case, act):
    """conv_bias_add_act: act(conv + bias + residual) in float before one rounding (the gather kernel's epilogue;
    a 1x1 convolution with the identity as a GEMM with its residual)."""
    fused = F.conv_bias_add_act
    dtype = torch.bfloat16
    x, w, b = case.inputs(dtype)
    kw = _geometry_kwargs(fused, case)
    with torch.no_grad():
        y_shape = tuple(case.conv(TF)(x, w, b).shape)
    r = _rand(y_shape, dtype, -2.0, 2.0)
    ours = lambda x, w, b, r: fused(x, w, b, r, act, **kw)  # noqa: E731
    peer = lambda x, w, b, r: ACT_REF[act](case.conv(TF)(x, w, b) + r)  # noqa: E731
    g = _rand(y_shape, dtype)
    for v in check_against_torch(ours, peer, [x, w, b, r], name=f"{case} {act}", grad_output=g):
        assert v, v.message
    fwd, _, _ = case.expect()
    if fwd == "gemm" and act != "none":
        fwd = "fprop"  # GemmArgs adds the residual after the activation: the gather kernel takes it
    # on an sm_90 build with CUTLASS the Hopper path takes the 2-D fused forwards first (its epilogue has them too)
    _assert_ran(_cuda_kernels(lambda: ours(x, w, b, r)), f"{fwd}|hopper", f"{case} {act} fused forward")


TRANSPOSED = [
    # (name, N, in channels, out channels, size, kernel, stride, padding, output_padding, dilation)
    ("t_3x3_s2_op1", 2, 32, 16, (7, 9), 3, 2, 1, 1, 1),
    ("t_4x4_s2", 2, 16, 24, (6, 5), 4, 2, 1, 0, 1),
    ("t_3x3_s1_op1_dil2", 2, 16, 16, (5, 6), 3, 1, 1, 1, 2),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("spec", TRANSPOSED, ids=lambda s: s[0])
def test_conv_transpose(spec, dtype):
    """A transposed convolution reaches this path as dgrad (forward), fprop (its input's gradient) and wgrad
    (its weight's), output_padding making dx larger than the convolution's output rule implies."""
    name, n, cin, cout, size, ker, stride, pad, opad, dil = spec
    x = _rand((n, cin) + size, dtype, -2.0, 2.0)
    w = _rand((cin, cout, ker, ker), dtype, -1.0, 1.0)
    b = random_like_case((cout,), dtype, "cuda", low=-1.0, high=1.0)
    ours = lambda x, w, b: F.conv_transpose2d(x, w, b, stride, pad, opad, 1, dil)  # noqa: E731
    peer = lambda x, w, b: TF.conv_transpose2d(x, w, b, stride, pad, opad, 1, dil)  # noqa: E731
    with torch.no_grad():
        y_shape = tuple(peer(x, w, b).shape)
    g = _rand(y_shape, dtype)
    for v in check_against_torch(ours, peer, [x, w, b], name=f"{name} {dtype}", grad_output=g):
        assert v, v.message
    _assert_ran(_cuda_kernels(lambda: ours(x, w, b)), "dgrad", f"{name} forward")
    xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    y = ours(xg, w, b)
    _assert_ran(_cuda_kernels(lambda: torch.autograd.grad(y, [xg], g)), "fprop", f"{name} backward (input)")
    y = ours(x, wg, b)
    _assert_ran(_cuda_kernels(lambda: torch.autograd.grad(y, [wg], g)), "wgrad", f"{name} backward (weight)")


def test_past_2_31_elements():
    """x and y of more than 2^31 elements (8 channels of 16400 x 16400, bfloat16): the kernels' offsets are 64-bit.
    The last rows, which lie past 2^31 elements, are checked against a float64 convolution of a crop, forward and
    input gradient."""
    n_rows = 16400
    need = 5 * 8 * n_rows * n_rows * 2  # x, y, grad_output, dx and slack, bfloat16
    if torch.cuda.get_device_properties(0).total_memory < 2 * need:
        pytest.skip("needs a GPU with room for 4 tensors of 4.3 GB")
    dtype = torch.bfloat16
    x = _rand((1, 8, n_rows, n_rows), dtype, -2.0, 2.0)
    assert x.numel() > 2**31
    w = _rand((8, 8, 3, 3), dtype)
    b = random_like_case((8,), dtype, "cuda", low=-1.0, high=1.0)
    xg = x.detach().requires_grad_(True)
    y = F.conv2d(xg, w, b, 1, 1)
    crop = 6  # the crop's first output rows see its zero padding; the last `crop - 2` do not
    xc = x[:, :, -crop:, :]
    ref = TF.conv2d(xc.double(), w.double(), b.double(), 1, 1)[:, :, 2:, :]
    peer = TF.conv2d(xc, w, b, 1, 1)[:, :, 2:, :]
    v = compare(y[:, :, -(crop - 2):, :], peer, ref, name="forward past 2^31")
    assert v, v.message
    g = _rand(tuple(y.shape), dtype)
    dx = torch.autograd.grad(y, [xg], g)[0]
    del y
    gc = g[:, :, -crop:, :]
    # dx's last rows from dy's last rows: through the crop's own convolution (the rows it cuts off reach only its
    # first two rows)
    x64 = xc.double().requires_grad_(True)
    ref_dx = torch.autograd.grad(TF.conv2d(x64, w.double(), None, 1, 1), [x64], gc.double())[0][:, :, 2:, :]
    xp = xc.detach().requires_grad_(True)
    peer_dx = torch.autograd.grad(TF.conv2d(xp, w, None, 1, 1), [xp], gc)[0][:, :, 2:, :]
    v = compare(dx[:, :, -(crop - 2):, :], peer_dx, ref_dx, grad=True, name="input gradient past 2^31")
    assert v, v.message
