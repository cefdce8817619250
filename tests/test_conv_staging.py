"""Convolutions the tensor-core paths take only after staging (csrc/conv/conv_staging.h, from conv_cuda.cpp): NCHW /
NCL / NCDHW operands, strided views, and channel counts that are not multiples of 8 (the 3-channel stem, K = 12),
copied to channels-last buffers with channels zero-padded to a multiple of 8, run on the tensor-core paths, the
result copied back. Against PyTorch under the project's error rule (float64 reference: forward, input and
weight gradients), the results and gradients in PyTorch's memory format, and, from the profiler's kernel names,
that a tensor-core kernel ran and no direct kernel did (on a Hopper build, the CUTLASS conv kernel for the
forward). Grouped convolutions and TORCH_DNN_CONV_STAGE=0 keep the direct kernels. Skipped without CUDA."""
import re

import pytest
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from torch_dnn.testing import compare, random_like_case
from tests.utils import round_tf32, tf32_verdict

pytestmark = pytest.mark.cuda

TENSOR_CORE = r"igemm_kernel|ConvUniversal|gemm_kernel|cutlass|Sm90|sm90|conv_stem_"
DIRECT = r"conv_generic_|conv_wgrad_sum_splits|depthwise"
SM90_KERNEL = "ConvUniversal"


def _sm90_available() -> bool:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        return False
    try:
        from torch_dnn.ops.matmul import gemm_paths
        return "sm90" in gemm_paths()  # the conv kernels are built with the Hopper GEMM
    except Exception:
        return False


def _cuda_kernels(fn):
    """Names of the CUDA kernels fn launched."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def _assert_tensor_cores(names, what, sm90=False):
    assert names, f"{what}: the profiler saw no CUDA kernel"
    ran = sorted(set(names))
    assert any(re.search(TENSOR_CORE, n) for n in names), f"{what}: no tensor-core kernel ran: {ran}"
    assert not any(re.search(DIRECT, n) for n in names), f"{what}: a direct kernel ran: {ran}"
    if sm90:
        assert any(SM90_KERNEL in n for n in names), f"{what}: expected the Hopper conv kernel, ran {ran}"


def _assert_direct(names, what):
    assert names, f"{what}: the profiler saw no CUDA kernel"
    assert any(re.search(DIRECT, n) for n in names), f"{what}: expected the direct kernels, ran {sorted(set(names))}"


def _nchw(t):
    return t.contiguous()


def _channels_last(t):
    return t.contiguous(memory_format=torch.channels_last_3d if t.dim() == 5 else torch.channels_last)


def _strided(t):
    """A view whose last dim steps by 2 (no dense layout): every other column of a tensor twice as wide."""
    wide = torch.stack([t, torch.zeros_like(t)], dim=-1).flatten(-2)
    return wide[..., ::2]


class Case:
    def __init__(self, name, n, c, k, size, ker, stride=1, pad=0, dil=1, layout=_nchw, groups=1):
        self.name, self.n, self.c, self.k, self.groups = name, n, c, k, groups
        self.dims = len(size)
        as_t = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * self.dims  # noqa: E731
        self.size, self.ker, self.stride, self.pad, self.dil = tuple(size), as_t(ker), as_t(stride), as_t(pad), as_t(dil)
        self.layout = layout

    def __repr__(self):
        return self.name

    def conv(self, lib):
        f = getattr(lib, f"conv{self.dims}d")
        return lambda x, w, b: f(x, w, b, self.stride, self.pad, self.dil, self.groups)

    def inputs(self, dtype):
        x = self.layout(random_like_case((self.n, self.c) + self.size, dtype, "cuda", low=-2.0, high=2.0))
        w = self.layout(random_like_case((self.k, self.c // self.groups) + self.ker, dtype, "cuda", low=-1.0,
                                         high=1.0))
        b = random_like_case((self.k,), dtype, "cuda", low=-1.0, high=1.0)
        return x, w, b

    def stem_forward(self):
        """Whether the stem kernel takes the forward (conv_stem.cu: 2-D, C <= 4, kernel <= 8, even stride along W)."""
        return (self.dims == 2 and self.c <= 4 and self.groups == 1 and max(self.ker) <= 8 and self.dil == (1, 1)
                and self.stride[1] in (2, 4))

    def hopper_forward(self, dtype):
        """Whether conv_sm90's forward must take the staged problem: 2-D, not the stem kernel's (16-bit), not a 1x1
        GEMM (which it takes in 16 bits where the GEMM has at most 64 columns); float32 in TF32 (conv_tf32.h)."""
        sixteen = dtype in (torch.float16, torch.bfloat16)
        if sixteen and self.stem_forward():
            return False
        is_1x1 = all(k == 1 for k in self.ker) and all(s == 1 for s in self.stride) and all(p == 0 for p in self.pad)
        if is_1x1 and not (sixteen and -(-self.k // 8) * 8 <= 64):
            return False
        return _sm90_available() and self.dims == 2 and all(s <= 8 for s in self.stride)


CASES = [
    Case("nchw_3x3_64_56", 2, 64, 64, (56, 56), 3, pad=1),
    Case("nchw_3x3s2_128_28", 2, 128, 128, (28, 28), 3, stride=2, pad=1),
    Case("nchw_1x1_256_64_14", 2, 256, 64, (14, 14), 1),
    Case("nchw_stem_c3", 2, 3, 64, (64, 60), 7, stride=2, pad=3),
    Case("channels_last_stem_c3", 2, 3, 64, (64, 60), 7, stride=2, pad=3, layout=_channels_last),
    Case("nchw_c3_k12", 2, 3, 12, (13, 11), 3, pad=1),
    Case("channels_last_k12", 2, 16, 12, (9, 9), 3, pad=1, layout=_channels_last),
    Case("strided_view", 2, 16, 32, (10, 9), 3, pad=1, layout=_strided),
    Case("ncl_1d", 2, 16, 32, (33,), 5, pad=2),
    Case("ncdhw_3d", 2, 16, 16, (5, 6, 7), 3, pad=1),
    Case("ncdhw_3d_c3", 1, 3, 16, (6, 9, 8), 3, stride=2, pad=1),
]


def _check(case, dtype, bias=True):
    x, w, b = case.inputs(dtype)
    b = b if bias else None
    ours, theirs = case.conv(F), case.conv(TF)
    # leaves that keep the case's strides (detach shares them; a clone of a strided view would be contiguous)
    xs = [t.detach().requires_grad_(True) for t in (x, w)]
    xp = [t.detach().requires_grad_(True) for t in (x, w)]
    x64 = [t.detach().double().requires_grad_(True) for t in (x, w)]
    y, yp, y64 = ours(*xs, b), theirs(*xp, b), theirs(*x64, None if b is None else b.double())
    v = compare(y, yp, y64, name=f"{case} {dtype} forward")
    assert v, v.message
    assert y.stride() == yp.stride(), f"{case} {dtype}: output strides {y.stride()}, PyTorch's {yp.stride()}"
    g = random_like_case(tuple(yp.shape), dtype, "cuda", low=-1.0, high=1.0)
    grads = torch.autograd.grad(y, xs, g)
    grads_p = torch.autograd.grad(yp, xp, g)
    grads_64 = torch.autograd.grad(y64, x64, g.double())
    for name, o, p, r in zip(("input", "weight"), grads, grads_p, grads_64):
        v = compare(o, p, r, grad=True, name=f"{case} {dtype} {name} gradient")
        assert v, v.message
        assert o.stride() == p.stride(), f"{case} {dtype}: {name} gradient strides {o.stride()}, PyTorch's {p.stride()}"
    return x, w, b


def _check_paths(case, x, w, b):
    ours = case.conv(F)
    dtype = x.dtype
    hopper = case.hopper_forward(dtype)
    names = _cuda_kernels(lambda: ours(x, w, b))
    _assert_tensor_cores(names, f"{case} {dtype} forward", hopper)
    if case.stem_forward() and dtype in (torch.float16, torch.bfloat16):
        assert any("conv_stem_fprop" in n for n in names), f"{case} {dtype}: the stem kernel did not run: {names}"
    xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    y = ours(xg, w, b)
    g = random_like_case(tuple(y.shape), dtype, "cuda", low=-1.0, high=1.0)
    _assert_tensor_cores(_cuda_kernels(lambda: torch.autograd.grad(y, [xg], g)), f"{case} {dtype} input gradient")
    y = ours(x, wg, b)
    _assert_tensor_cores(_cuda_kernels(lambda: torch.autograd.grad(y, [wg], g)), f"{case} {dtype} weight gradient")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_staged_against_pytorch(case, dtype):
    x, w, b = _check(case, dtype)
    _check_paths(case, x, w, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_nchw_1x1_input_gradient_without_staging(dtype):
    """An NCHW 1x1 convolution whose channel planes are multiples of 8 elements runs its input gradient as one GEMM
    per image on the operands as they are (conv_implicit_gemm.cu's dgrad_planes_as_gemm): right by the error rule,
    in PyTorch's layout, and no layout transpose ran for it."""
    case = Case("nchw_1x1_64_128_16", 3, 64, 128, (16, 16), 1)
    x, w, _ = _check(case, dtype, bias=False)
    ours = case.conv(F)
    xg = x.detach().requires_grad_(True)
    y = ours(xg, w, None)
    names = _cuda_kernels(lambda: torch.autograd.grad(y, [xg], torch.ones_like(y)))
    _assert_tensor_cores(names, f"{case} input gradient")
    assert not any("layout_transpose" in n for n in names), f"{case} input gradient staged: {sorted(set(names))}"


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("nchw_3x3_64_56", "nchw_stem_c3", "ncdhw_3d")],
                         ids=repr)
def test_staged_tf32(case):
    """float32 with cudnn.allow_tf32 is staged too (TF32 tensor cores): within the rule's factor of PyTorch's TF32
    error, or of exact arithmetic on TF32-rounded operands where cuDNN picks a kernel that is not TF32."""
    old = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = True
        x, w, b = case.inputs(torch.float32)
        ours, theirs = case.conv(F), case.conv(TF)
        y, yp = ours(x, w, b), theirs(x, w, b)
        ref = theirs(x.double(), w.double(), b.double())
        ideal = theirs(round_tf32(x).double(), round_tf32(w).double(), b.double())
        v = tf32_verdict(y, yp, ideal, ref, f"{case} tf32 forward")
        assert v, v.message
        assert y.stride() == yp.stride()
        _check_paths(case, x, w, b)
    finally:
        torch.backends.cudnn.allow_tf32 = old


def test_grouped_stays_direct():
    """Grouped convolutions are not staged (the tensor-core paths take one group): the direct kernels, right."""
    case = Case("nchw_grouped", 2, 16, 32, (9, 10), 3, pad=1, groups=2)
    x, w, b = _check(case, torch.bfloat16)
    _assert_direct(_cuda_kernels(lambda: case.conv(F)(x, w, b)), f"{case} forward")


def test_switch_off(monkeypatch):
    """TORCH_DNN_CONV_STAGE=0 turns staging off: an NCHW convolution runs on the direct kernels, still right."""
    monkeypatch.setenv("TORCH_DNN_CONV_STAGE", "0")
    case = CASES[0]
    x, w, b = _check(case, torch.bfloat16)
    _assert_direct(_cuda_kernels(lambda: case.conv(F)(x, w, b)), f"{case} forward with TORCH_DNN_CONV_STAGE=0")


def test_staged_weight_follows_changes():
    """The staged weight is kept between calls (csrc/conv/conv_weight_cache.h): repeated calls stay right, an
    in-place change of the weight (a new version) is seen by the next forward and input gradient, and so is one
    made on another stream after an event; each result against PyTorch's on the same values."""
    case = CASES[3]  # the stem: the input gradient stages the weight (C 3 -> 8)
    x, w, b = case.inputs(torch.bfloat16)
    ours, theirs = case.conv(F), case.conv(TF)

    def check(label):
        y, yp, ref = ours(x, w, b), theirs(x, w, b), theirs(x.double(), w.double(), b.double())
        v = compare(y, yp, ref, name=f"{case} {label}")
        assert v, v.message
        wg = w.detach().requires_grad_(True)
        g = random_like_case(tuple(y.shape), torch.bfloat16, "cuda", low=-1.0, high=1.0)
        xg = x.detach().requires_grad_(True)
        (dx,) = torch.autograd.grad(ours(xg, wg, b), [xg], g)
        xp = x.detach().requires_grad_(True)
        (dxp,) = torch.autograd.grad(theirs(xp, w, b), [xp], g)
        x64 = x.detach().double().requires_grad_(True)
        (dx64,) = torch.autograd.grad(theirs(x64, w.double(), b.double()), [x64], g.double())
        v = compare(dx, dxp, dx64, name=f"{case} {label} input gradient")
        assert v, v.message

    check("first call")
    check("second call")
    with torch.no_grad():
        w.mul_(-1.5)
    check("after an in-place change")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        w.add_(0.25)
    torch.cuda.current_stream().wait_stream(side)
    check("after a change on another stream")


def test_staged_weight_under_graph_capture():
    """Under CUDA graph capture the weight's staged copy is not taken from the cache: the captured graph restages it,
    so a replay after an in-place change of the weight computes with the new values."""
    case = CASES[3]
    x, w, b = case.inputs(torch.bfloat16)
    ours, theirs = case.conv(F), case.conv(TF)
    ours(x, w, b)  # warm-up: the weight's copy is in the cache before the capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ours(x, w, b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = ours(x, w, b)
    with torch.no_grad():
        w.mul_(-0.5)
    graph.replay()
    torch.cuda.synchronize()
    v = compare(y, theirs(x, w, b), theirs(x.double(), w.double(), b.double()), name=f"{case} graph replay")
    assert v, v.message


@pytest.mark.parametrize("case", [CASES[0], CASES[3]], ids=repr)
def test_benchmark_mode_measures_routes(case):
    """torch.backends.cudnn.benchmark = True (csrc/conv/conv_autotune.h): the first call of a problem runs every
    route that takes it (tensor cores, staged, direct), the later calls only the one it kept; every result and
    gradient right by the error rule."""
    old = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True
        # a batch size no other test uses: a signature measured here first
        case = Case(f"{case.name}_n{case.n + 1}", case.n + 1, case.c, case.k, case.size, case.ker, case.stride,
                    case.pad, case.dil, case.layout, case.groups)
        x, w, b = case.inputs(torch.bfloat16)
        first = _cuda_kernels(lambda: case.conv(F)(x, w, b))
        assert any(re.search(TENSOR_CORE, n) for n in first) and any(re.search(DIRECT, n) for n in first), (
            f"{case}: the first call measured {sorted(set(first))}")
        later = _cuda_kernels(lambda: case.conv(F)(x, w, b))
        tc, dr = (any(re.search(p, n) for n in later) for p in (TENSOR_CORE, DIRECT))
        assert tc != dr, f"{case}: a later call ran {sorted(set(later))}"
        for _ in range(2):  # the backward passes' measured calls, then their kept routes
            _check(case, torch.bfloat16)
    finally:
        torch.backends.cudnn.benchmark = old
