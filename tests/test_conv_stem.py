"""The stem kernel (csrc/conv/conv_stem.cu): the forward of a first convolution of few input channels on tensor
cores, x and w read in any layout. On CUDA: the kernel ran (profiler names), results against PyTorch under the
project's error rule (float64 reference), PyTorch's output strides, and the gradients (other routes) still right;
the shapes of ResNet's, MobileNet's and ConvNeXt's stems, a partial row tile, K not a multiple of 64, bias. Its
index arithmetic is also checked on the CPU (tests/test_conv_emulation.py::test_stem). Skipped without CUDA."""
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from torch_dnn.testing import compare, random_like_case

pytestmark = pytest.mark.cuda

# (name, N, C, K, H, W, kernel, stride, padding, bias)
CASES = [
    ("resnet_7x7s2", 4, 3, 64, 224, 224, 7, 2, 3, False),
    ("resnet_7x7s2_bias_odd", 2, 3, 64, 97, 301, 7, 2, 3, True),   # 151 outputs a row: two tiles, one partial
    ("mobilenet_3x3s2", 3, 3, 16, 64, 64, 3, 2, 1, True),
    ("convnext_4x4s4", 2, 3, 96, 64, 64, 4, 4, 0, True),            # two channel tiles, the second partial
    ("gray_5x5s2_k8", 2, 1, 8, 33, 35, 5, 2, 2, False),
]


def _kernels(fn):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def _inputs(case, dtype, channels_last):
    _, n, c, k, h, w, ker, _, _, bias = case
    x = random_like_case((n, c, h, w), dtype, "cuda", low=-2.0, high=2.0)
    wt = random_like_case((k, c, ker, ker), dtype, "cuda", low=-1.0, high=1.0)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
        wt = wt.contiguous(memory_format=torch.channels_last)
    b = random_like_case((k,), dtype, "cuda", low=-1.0, high=1.0) if bias else None
    return x, wt, b


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_stem_against_pytorch(case, dtype, channels_last):
    stride, pad = case[7], case[8]
    x, w, b = _inputs(case, dtype, channels_last)
    ours = lambda x, w, b: F.conv2d(x, w, b, stride, pad)  # noqa: E731
    theirs = lambda x, w, b: TF.conv2d(x, w, b, stride, pad)  # noqa: E731
    names = _kernels(lambda: ours(x, w, b))
    assert any("conv_stem_fprop" in n for n in names), f"{case[0]}: the stem kernel did not run: {sorted(set(names))}"
    y, yp = ours(x, w, b), theirs(x, w, b)
    ref = theirs(x.double(), w.double(), None if b is None else b.double())
    v = compare(y, yp, ref, name=f"{case[0]} {dtype} forward")
    assert v, v.message
    assert y.stride() == yp.stride(), f"{case[0]}: strides {y.stride()}, PyTorch's {yp.stride()}"
    # the backward passes take the other routes; the graph through the stem's forward stays right
    xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    x64, w64 = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    xp, wp = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    g = random_like_case(tuple(yp.shape), dtype, "cuda", low=-1.0, high=1.0)
    names = _kernels(lambda: torch.autograd.grad(ours(x, wg, b), [wg], g))
    if case[6] in (3, 4, 5, 7):
        assert any("conv_stem_wgrad" in n for n in names), f"{case[0]}: the weight gradient ran {sorted(set(names))}"
    grads = torch.autograd.grad(ours(xg, wg, b), [xg, wg], g)
    grads_p = torch.autograd.grad(theirs(xp, wp, b), [xp, wp], g)
    grads_64 = torch.autograd.grad(theirs(x64, w64, None if b is None else b.double()), [x64, w64], g.double())
    for name, o, p, r in zip(("input", "weight"), grads, grads_p, grads_64):
        v = compare(o, p, r, grad=True, name=f"{case[0]} {dtype} {name} gradient")
        assert v, v.message


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("act", ["relu", "silu", "hardswish"])
@pytest.mark.parametrize("residual", [False, True], ids=["bias_act", "bias_add_act"])
def test_stem_fused(act, residual, channels_last):
    """conv_bias_act / conv_bias_add_act on the stem kernel (its epilogue): the kernel ran, values against
    PyTorch's conv + add + activation under the error rule."""
    case = CASES[1]  # a partial row tile, bias
    stride, pad = case[7], case[8]
    x, w, b = _inputs(case, torch.bfloat16, channels_last)
    y_shape = TF.conv2d(x, w, b, stride, pad).shape
    r = random_like_case(tuple(y_shape), torch.bfloat16, "cuda", low=-1.0, high=1.0) if residual else None
    if r is not None and channels_last:
        r = r.contiguous(memory_format=torch.channels_last)
    act_fn = {"relu": TF.relu, "silu": TF.silu, "hardswish": TF.hardswish}[act]
    if residual:
        ours = lambda: F.conv_bias_add_act(x, w, b, r, act, stride, pad)  # noqa: E731
        theirs = lambda x, w, b, r: act_fn(TF.conv2d(x, w, b, stride, pad) + r)  # noqa: E731
    else:
        ours = lambda: F.conv_bias_act(x, w, b, act, stride, pad)  # noqa: E731
        theirs = lambda x, w, b, r: act_fn(TF.conv2d(x, w, b, stride, pad))  # noqa: E731
    names = _kernels(ours)
    assert any("conv_stem_fprop" in n for n in names), f"{act}: the stem kernel did not run: {sorted(set(names))}"
    ref = theirs(x.double(), w.double(), b.double(), None if r is None else r.double())
    v = compare(ours(), theirs(x, w, b, r), ref, name=f"stem {act} residual={residual}")
    assert v, v.message


def test_stem_empty_batch():
    x = torch.empty(0, 3, 32, 32, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 3, 7, 7, device="cuda", dtype=torch.bfloat16)
    y = F.conv2d(x, w, None, 2, 3)
    assert y.shape == TF.conv2d(x, w, None, 2, 3).shape
