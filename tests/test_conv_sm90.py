"""Convolution's Hopper implicit-GEMM path (csrc/conv/conv_sm90.cu: CUTLASS's sm_90a conv kernels, TMA im2col +
wgmma) on a cc 9.0 GPU: forward, input gradient and weight gradient through torch.ops.torch_dnn.convolution /
conv_backward_input / conv_backward_weight, float16 and bfloat16 with channels-last operands, against PyTorch with
the project's error rule (a float64 reference): ResNet-50 layers at a small batch, tiles cut by the edges of M, N
and K, pads, strides, dilations, asymmetric kernels, 1-D as 2-D, 3-D with an unconvolved depth, strided views.
Which kernel ran is read from the profiler's kernel names: where the path takes a pass, a CUTLASS conv kernel
(cutlass::conv::kernel::ConvUniversal) must have run; where it refuses one (strided dgrad, weight gradients whose
output tiles cannot fill the GPU, 1x1 convolutions, 3-D convolutions over the depth), none may have run, and
the result is still right (the sm_80 path takes it). Skipped unless a cc 9.0 GPU is present and the build has the Hopper path
(CUTLASS headers and sm_90a)."""
import pytest
import torch
import torch.nn.functional as TF

from torch_dnn.testing import compare, random_like_case
from tests.utils import HOPPER, round_tf32, sm90_gemm_built, tf32_verdict


pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not HOPPER, reason="needs a cc 9.0 (Hopper) GPU"),
    pytest.mark.skipif(HOPPER and not sm90_gemm_built(), reason="this build has no sm_90a CUTLASS kernels"),
]

SM90_KERNEL = "ConvUniversal"  # cutlass::device_kernel<cutlass::conv::kernel::ConvUniversal<...>>
DTYPES = [torch.float16, torch.bfloat16]


def _cuda_kernels(fn):
    """Names of the CUDA kernels fn launched, and fn's result."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA], out


def _channels_inner(t):
    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    return t.transpose(1, 2).contiguous().transpose(1, 2)  # (N, C, L) with C innermost


def _rand(shape, dtype, low=-1.0, high=1.0, layout=_channels_inner):
    return layout(random_like_case(shape, dtype, "cuda", low=low, high=high))


def _sm_count():
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


class Case:
    def __init__(self, name, n, c, k, size, ker, stride=1, pad=0, dil=1, layout=_channels_inner, strided=False):
        self.name, self.n, self.c, self.k = name, n, c, k
        self.dims = len(size)
        as_t = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * self.dims  # noqa: E731
        self.size, self.ker = tuple(size), as_t(ker)
        self.stride, self.pad, self.dil = as_t(stride), as_t(pad), as_t(dil)
        # strided: x is columns 1 .. W of a channels-last tensor 2 wider (a W stride past the packed one)
        self.layout, self.strided = layout, strided

    def __repr__(self):
        return self.name

    def geo(self):
        return list(self.stride), list(self.pad), list(self.dil), False, [0] * self.dims, 1

    def out_size(self):
        return tuple((i + 2 * p - d * (k - 1) - 1) // s + 1
                     for i, k, s, p, d in zip(self.size, self.ker, self.stride, self.pad, self.dil))

    def inputs(self, dtype):
        if self.strided:
            x = _rand((self.n, self.c) + self.size[:-1] + (self.size[-1] + 2,), dtype, -2.0, 2.0, self.layout)
            x = x[..., 1:-1]
        else:
            x = _rand((self.n, self.c) + self.size, dtype, -2.0, 2.0, self.layout)
        w = _rand((self.k, self.c) + self.ker, dtype, -1.0, 1.0, self.layout)
        b = random_like_case((self.k,), dtype, "cuda", low=-1.0, high=1.0)
        g = _rand((self.n, self.k) + self.out_size(), dtype, -1.0, 1.0, self.layout)
        return x, w, b, g

    # Which passes the path takes (conv_sm90.cu's rules, for the layouts of inputs()).
    def _spatial_2d(self):
        """The 2-D problem the kernels see: 1-D as H = 1; 3-D only with an unconvolved depth."""
        if self.dims == 1:
            return True
        if self.dims == 2:
            return True
        return self.ker[0] == 1 and self.stride[0] == 1 and self.pad[0] == 0

    def _common(self):
        return (self.layout is _channels_inner and self.c % 8 == 0 and self.k % 8 == 0 and self._spatial_2d()
                and all(s <= 8 for s in self.stride))

    def _is_1x1(self):
        return all(k == 1 for k in self.ker) and all(s == 1 for s in self.stride) and all(p == 0 for p in self.pad)

    def _unasserted(self):
        """1-D and NCHW problems: the op layer may change their layout (to channels-last) before the kernels; and
        a 1 x 1 image, whose gradients' layout (contiguous or channels-last: the same strides but one) is ambiguous."""
        return self.dims == 1 or self.layout is not _channels_inner or all(v == 1 for v in self.size)

    # 1x1 problems go to the GEMM route, but for a 16-bit fprop whose GEMM is at most 64 columns wide
    def takes_fprop(self):
        if self._unasserted():
            return None
        return self._common() and (not self._is_1x1() or self.k <= 64)

    def takes_dgrad(self):
        if self._unasserted():
            return None
        return self._common() and not self._is_1x1() and all(s == 1 for s in self.stride)

    def takes_wgrad(self):
        if self._unasserted():
            return None
        if not self._common() or self._is_1x1():
            return False
        taps = 1
        for k in self.ker[-2:]:
            taps *= k
        tiles = -(-self.k // 128) * -(-self.c // 128) * taps
        return tiles >= _sm_count()

    # float32 with TF32 (csrc/conv/conv_tf32.h): fprop; dgrad of stride 1 as an fprop over the flipped weight,
    # whose padding dil (k - 1) - pad must not be negative; wgrad never
    def takes_fprop_tf32(self):
        return None if self._unasserted() else self._common() and not self._is_1x1()

    def takes_dgrad_tf32(self):
        if self._unasserted():
            return None
        return self._common() and not self._is_1x1() and all(s == 1 for s in self.stride) and all(
            p <= d * (k - 1) for p, d, k in zip(self.pad, self.dil, self.ker))


CASES = [
    # ResNet-50's 3x3 layers at batch 2, and its 1x1 of 64 channels (a 16-bit fprop of 64 output channels here, the
    # rest on the GEMM route)
    Case("r50_3x3_64_56", 2, 64, 64, (56, 56), 3, pad=1),
    Case("r50_3x3s2_128_56", 2, 128, 128, (56, 56), 3, stride=2, pad=1),
    Case("r50_3x3_128_28", 2, 128, 128, (28, 28), 3, pad=1),
    Case("r50_3x3_256_14", 2, 256, 256, (14, 14), 3, pad=1),
    Case("r50_3x3_512_7", 4, 512, 512, (7, 7), 3, pad=1),  # weight gradient: 4 x 4 x 9 = 144 output tiles
    Case("r50_1x1_256_64_56", 2, 256, 64, (56, 56), 1),
    Case("r50_1x1_64_256_56", 2, 64, 256, (56, 56), 1),
    # edges: M, N and K tiles cut (M = 507, N = 136, channel blocks 64 + 8), the smallest channel counts
    Case("tail_13x13", 3, 72, 136, (13, 13), 3, pad=1),
    Case("min_c8_k8", 1, 8, 8, (5, 5), 3, pad=1),
    Case("one_pixel", 2, 16, 16, (1, 1), 3, pad=1),
    # pads, dilations, strides, asymmetric kernels, stride > kernel, no padding
    Case("dil2_5x5", 2, 16, 24, (7, 5), 5, pad=4, dil=2),
    Case("valid_3x3", 2, 32, 32, (9, 9), 3),
    Case("pad_only_1x1", 2, 16, 16, (6, 6), 1, pad=1),
    Case("asym_3x1_s21", 2, 24, 16, (13, 7), (3, 1), stride=(2, 1), pad=(1, 0)),
    Case("stride3_ker2", 2, 16, 32, (11, 13), 2, stride=3),
    Case("dil3_pad2", 2, 16, 16, (7, 7), 3, pad=2, dil=3),
    Case("7x7_s2_c16", 2, 16, 64, (31, 29), 7, stride=2, pad=3),
    # 1-D (as 2-D with H = 1), 3-D with an unconvolved depth (folded into the batch), 3-D proper (refused)
    Case("1d_k5_dil3", 2, 16, 32, (33,), 5, pad=2, dil=3),
    Case("3d_depth1_kernel", 2, 16, 24, (3, 9, 8), (1, 3, 3), pad=(0, 1, 1)),
    Case("3d_3x3x3", 2, 16, 24, (5, 6, 7), 3, pad=1),
    # layouts: a strided channels-last view (TMA reads it in place), NCHW (correct whichever path takes it)
    Case("strided_view", 2, 32, 32, (10, 10), 3, pad=1, strided=True),
    Case("nchw", 2, 32, 32, (10, 10), 3, pad=1, layout=lambda t: t.contiguous()),
]


def _torch_fprop(case, x, w, b):
    return getattr(TF, f"conv{case.dims}d")(x, w, b, case.stride, case.pad, case.dil)


def _torch_dgrad(case, x_shape, w, g):
    return getattr(torch.nn.grad, f"conv{case.dims}d_input")(x_shape, w, g, case.stride, case.pad, case.dil)


def _torch_wgrad(case, x, w_shape, g):
    return getattr(torch.nn.grad, f"conv{case.dims}d_weight")(x, w_shape, g, case.stride, case.pad, case.dil)


def _assert_path(names, taken, what):
    """taken: whether the Hopper kernel must run (True), must not (False), or either (None: 1-D, whose layout the
    op layer may change)."""
    assert names, f"{what}: the profiler saw no CUDA kernel"
    if taken is None:
        return
    ran = any(SM90_KERNEL in n for n in names)
    if taken:
        assert ran, f"{what}: expected the Hopper conv kernel, ran {sorted(set(names))}"
    else:
        assert not ran, f"{what}: the Hopper conv kernel ran where the path refuses the problem"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_fprop(case, dtype):
    x, w, b, _ = case.inputs(dtype)
    names, y = _cuda_kernels(lambda: torch.ops.torch_dnn.convolution(x, w, b, *case.geo()))
    _assert_path(names, case.takes_fprop(), f"{case} {dtype} forward")
    with torch.no_grad():
        peer = _torch_fprop(case, x, w, b)
        ref = _torch_fprop(case, x.double(), w.double(), b.double())
    v = compare(y, peer, ref, name=f"{case} {dtype} forward")
    assert v, v.message


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_dgrad(case, dtype):
    x, w, _, g = case.inputs(dtype)
    shape = list(x.shape)
    _check_backward(torch.ops.torch_dnn.conv_backward_input, case, dtype, "input", g, w, shape, case.takes_dgrad(),
                    lambda w_, g_: _torch_dgrad(case, shape, w_, g_))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_wgrad(case, dtype):
    x, w, _, g = case.inputs(dtype)
    shape = list(w.shape)
    _check_backward(torch.ops.torch_dnn.conv_backward_weight, case, dtype, "weight", g, x, shape, case.takes_wgrad(),
                    lambda x_, g_: _torch_wgrad(case, x_, shape, g_))


def _check_backward(op, case, dtype, what, g, other, shape, takes, torch_grad):
    """The backward op `op` on (g, other): whether the Hopper kernel ran as `takes` says, and the gradient against
    PyTorch's, torch_grad(other, g), in the dtype and in float64."""
    names, got = _cuda_kernels(lambda: op(g, other, shape, *case.geo()))
    _assert_path(names, takes, f"{case} {dtype} {what} gradient")
    peer = torch_grad(other, g)
    ref = torch_grad(other.double(), g.double())
    v = compare(got, peer, ref, grad=True, name=f"{case} {dtype} {what} gradient")
    assert v, v.message


def test_cases_reach_every_pass():
    """The case list makes the path take each pass and refuse each (so that the tests above check both)."""
    for taken in (True, False):
        assert any(c.takes_fprop() == taken for c in CASES)
        assert any(c.takes_dgrad() == taken for c in CASES)
        assert any(c.takes_wgrad() == taken for c in CASES)
        assert any(c.takes_fprop_tf32() == taken for c in CASES)
        assert any(c.takes_dgrad_tf32() == taken for c in CASES)


@pytest.fixture
def tf32_on():
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True
    yield
    torch.backends.cudnn.allow_tf32 = old


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_fprop_tf32(case, tf32_on):
    """float32 with cudnn.allow_tf32: the TF32 forward (operands rounded to nearest first), with the bias."""
    x, w, b, _ = case.inputs(torch.float32)
    names, y = _cuda_kernels(lambda: torch.ops.torch_dnn.convolution(x, w, b, *case.geo()))
    _assert_path(names, case.takes_fprop_tf32(), f"{case} tf32 forward")
    with torch.no_grad():
        peer = _torch_fprop(case, x, w, b)
        ref = _torch_fprop(case, x.double(), w.double(), b.double())
        ideal = _torch_fprop(case, round_tf32(x).double(), round_tf32(w).double(), b.double())
    v = tf32_verdict(y, peer, ideal, ref, f"{case} tf32 forward")
    assert v, v.message


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_dgrad_tf32(case, tf32_on):
    """float32 with cudnn.allow_tf32: the TF32 input gradient, on the Hopper path where the stride is 1."""
    x, w, _, g = case.inputs(torch.float32)
    shape = list(x.shape)
    names, dx = _cuda_kernels(lambda: torch.ops.torch_dnn.conv_backward_input(g, w, shape, *case.geo()))
    _assert_path(names, case.takes_dgrad_tf32(), f"{case} tf32 input gradient")
    peer = _torch_dgrad(case, shape, w, g)
    ref = _torch_dgrad(case, shape, w.double(), g.double())
    ideal = _torch_dgrad(case, shape, round_tf32(w).double(), round_tf32(g).double())
    v = tf32_verdict(dx, peer, ideal, ref, f"{case} tf32 input gradient", grad=True)
    assert v, v.message


def test_tf32_weight_copies_kept(tf32_on):
    """The rounded weight (forward) and its flipped copy (input gradient) are kept per weight and version: after an
    in-place change of the weight both passes follow its new values."""
    case = CASES[0]
    x, w, b, g = case.inputs(torch.float32)
    w = w.detach().requires_grad_(True)  # a weight with a version counter, as a parameter
    for step in range(2):
        with torch.no_grad():
            y = torch.ops.torch_dnn.convolution(x, w, b, *case.geo())
            dx = torch.ops.torch_dnn.conv_backward_input(g, w, list(x.shape), *case.geo())
            ref_y = _torch_fprop(case, x.double(), w.double(), b.double())
            ref_dx = _torch_dgrad(case, list(x.shape), w.double(), g.double())
            peer_y, peer_dx = _torch_fprop(case, x, w, b), _torch_dgrad(case, list(x.shape), w, g)
            for got, peer, ref, name in ((y, peer_y, ref_y, "forward"), (dx, peer_dx, ref_dx, "input gradient")):
                v = compare(got, peer, ref, grad=name != "forward", name=f"step {step} tf32 {name}")
                assert v, v.message
            w.mul_(-0.5)  # an optimizer-like in-place step: the kept copies must not be reused


def test_switch_off(monkeypatch):
    """TORCH_DNN_CONV_SM90=0 turns the path off: the same forward runs without the CUTLASS conv kernel, and gives
    a result within the error rule too."""
    case = CASES[0]
    x, w, b, _ = case.inputs(torch.bfloat16)
    monkeypatch.setenv("TORCH_DNN_CONV_SM90", "0")
    names, y = _cuda_kernels(lambda: torch.ops.torch_dnn.convolution(x, w, b, *case.geo()))
    _assert_path(names, False, f"{case} with TORCH_DNN_CONV_SM90=0")
    with torch.no_grad():
        v = compare(y, _torch_fprop(case, x, w, b), _torch_fprop(case, x.double(), w.double(), b.double()),
                    name=f"{case} with TORCH_DNN_CONV_SM90=0")
    assert v, v.message
