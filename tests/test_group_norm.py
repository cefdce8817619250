"""group_norm family (group_norm, instance_norm) and local_response_norm against PyTorch over ranks (1-D to 3-D
spatial, and 2-D input), layouts (contiguous, channels_last, channels_last_3d, non-dense views), dtypes and
weight/bias presence; InstanceNorm running statistics; zero variance, NaN and inf; opcheck; gradcheck; bad
arguments; empty batches; modules, state_dict and convert; torch.compile; CUDA-only cases."""
import os
import subprocess

import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.reference import local_response_norm_reference
from torch_dnn.testing import compare
from tests.utils import assert_models_agree, assert_cuda_graph_replays, ALL_DTYPES, assert_matches_torch, devices, first_line, opcheck_samples, random_like_case

ops = torch.ops.torch_dnn


def _input(shape, dtype, device, layout="contiguous", low=-3.0, high=5.0):
    """contiguous | channels_last (4-D) | channels_last_3d (5-D) | transposed (last two spatial dims swapped in
    memory: neither layout) | strided (every other element along the last dim)."""
    if layout == "contiguous":
        return random_like_case(shape, dtype, device, low=low, high=high)
    if layout == "channels_last":
        return random_like_case(shape, dtype, device, low=low, high=high).contiguous(memory_format=torch.channels_last)
    if layout == "channels_last_3d":
        return random_like_case(shape, dtype, device, low=low, high=high).contiguous(
            memory_format=torch.channels_last_3d)
    if layout == "transposed":
        base = random_like_case(tuple(shape[:-2]) + (shape[-1], shape[-2]), dtype, device, low=low, high=high)
        return base.transpose(-1, -2)
    if layout == "strided":
        big = random_like_case(tuple(shape[:-1]) + (shape[-1] * 2,), dtype, device, low=low, high=high)
        return big[..., ::2]
    raise ValueError(layout)


# (shape, num_groups, layout)
GN_CASES = [
    ((2, 6, 5, 7), 3, "contiguous"),
    ((2, 6, 5, 7), 2, "channels_last"),
    ((2, 16, 5, 7), 2, "channels_last"),   # 8 channels a group: one 16-byte bf16 vector a row
    ((2, 32, 4, 4), 8, "channels_last"),
    ((3, 4, 9), 2, "contiguous"),           # 1-D spatial
    ((3, 4, 9), 4, "strided"),
    ((2, 8), 2, "contiguous"),              # no spatial dims (4 channels a group: a group of 2 elements
                                            # normalizes to +-1 whatever x is, so its input gradient is only the
                                            # eps term, and both sides' errors are rounding noise: 3.5x apart
                                            # in float32 on the H100, once)
    ((2, 8, 3, 4, 5), 4, "contiguous"),     # 3-D spatial
    ((2, 8, 3, 4, 5), 2, "channels_last_3d"),
    ((2, 6, 5, 7), 6, "transposed"),
    ((1, 16, 8, 8), 1, "contiguous"),
    ((2, 64, 16), 32, "contiguous"),
    ((4, 3, 97), 3, "contiguous"),
    ((0, 6, 4, 4), 3, "contiguous"),
    ((0, 6, 4, 4), 3, "channels_last"),
]

# Sizes the GPU runs on its other paths: groups too large for shared memory (chunked), unaligned rows.
CUDA_GN_CASES = [
    ((4, 64, 28, 28), 32, "contiguous"),
    ((4, 64, 28, 28), 32, "channels_last"),
    ((2, 8, 256, 256), 2, "contiguous"),
    ((2, 8, 256, 256), 2, "channels_last"),
    ((2, 6, 131, 129), 3, "channels_last"),
    ((3, 12, 33, 31), 4, "contiguous"),
]

AFFINE = [(True, True), (True, False), (False, True), (False, False)]


def _params(c, dtype, device, weight=True, bias=True):
    w = random_like_case((c,), dtype, device, low=0.5, high=1.5) if weight else None
    b = random_like_case((c,), dtype, device, low=-1.0, high=1.0) if bias else None
    return w, b


def _torch_group_norm(x, G, w, b):
    # PyTorch 2.11's CUDA group_norm backward raises "tensor does not have a device" for float64 with a bias
    # and no weight (seen on the H100 with research/group_norm/probe_gn_peer.py); an explicit weight of ones is the same
    # function and sidesteps it
    if w is None and b is not None and x.is_cuda:
        w = torch.ones_like(b)
    return TF.group_norm(x, G, w, b)


def _torch_instance_norm(x, *args, weight=None, bias=None, **kw):
    if weight is None and bias is not None and x.is_cuda:
        weight = torch.ones_like(bias)
    return TF.instance_norm(x, *args, weight=weight, bias=bias, **kw)


def _gn_cases(device):
    return GN_CASES + (CUDA_GN_CASES if device == "cuda" else [])


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_group_norm_against_torch(dtype, device):
    for shape, G, layout in _gn_cases(device):
        x = _input(shape, dtype, device, layout)
        for weight, bias in AFFINE:
            w, b = _params(shape[1], dtype, device, weight, bias)
            assert_matches_torch(lambda x, w, b: F.group_norm(x, G, w, b), lambda x, w, b: _torch_group_norm(x, G, w, b),
                                 [x, w, b], name=f"group_norm {shape} G={G} {layout} {dtype} w={weight} b={bias}")


@pytest.mark.parametrize("device", devices())
def test_group_norm_layout_and_statistics(device):
    for layout, fmt in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
        x = _input((2, 8, 5, 6), torch.float32, device, layout)
        y, mean, rstd = ops.group_norm(x, 4, None, None, 1e-5)
        assert y.is_contiguous(memory_format=fmt), "the output keeps the input's layout"
        assert mean.shape == rstd.shape == (2, 4) and mean.dtype == torch.float32
        xg = x.reshape(2, 4, -1)
        torch.testing.assert_close(mean, xg.mean(-1))
        torch.testing.assert_close(rstd, torch.rsqrt(xg.var(-1, unbiased=False) + 1e-5))
    x5 = _input((2, 8, 3, 4, 5), torch.float64, device, "channels_last_3d")
    assert F.group_norm(x5, 2).is_contiguous(memory_format=torch.channels_last_3d)
    assert ops.group_norm(x5, 2, None, None, 1e-5)[1].dtype == torch.float64


# (shape, layout) of instance_norm: 1-D, 2-D and 3-D spatial
IN_CASES = [
    ((3, 4, 9), "contiguous"),
    ((2, 5, 6, 7), "contiguous"),
    ((2, 16, 6, 7), "channels_last"),
    ((2, 3, 4, 5, 3), "channels_last_3d"),
    ((2, 3, 6, 5), "transposed"),
    ((0, 3, 4, 4), "contiguous"),
]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_instance_norm_against_torch(dtype, device):
    for shape, layout in IN_CASES:
        c = shape[1]
        x = _input(shape, dtype, device, layout)
        if shape[0] == 0:  # PyTorch's instance_norm fails on an empty batch (IndexError); ours returns it
            assert F.instance_norm(x).shape == x.shape
            continue
        for weight, bias in AFFINE:
            w, b = _params(c, dtype, device, weight, bias)
            assert_matches_torch(lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                                 lambda x, w, b: _torch_instance_norm(x, weight=w, bias=b), [x, w, b],
                                 name=f"instance_norm {shape} {layout} {dtype} w={weight} b={bias}")
        # with running statistics (eval mode): the affine map
        rm = random_like_case((c,), torch.float32, device, low=-1, high=1)
        rv = random_like_case((c,), torch.float32, device, low=0.5, high=2)
        w, b = _params(c, dtype, device)
        assert_matches_torch(lambda x, w, b: F.instance_norm(x, rm, rv, w, b, use_input_stats=False),
                             lambda x, w, b: _torch_instance_norm(x, rm, rv, weight=w, bias=b, use_input_stats=False), [x, w, b],
                             name=f"instance_norm eval {shape} {layout} {dtype}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("cls_shape", [("InstanceNorm1d", (4, 3, 10)), ("InstanceNorm2d", (4, 3, 6, 5)),
                                       ("InstanceNorm3d", (2, 3, 4, 3, 5))], ids=lambda v: v[0])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_instance_norm_running_stats(cls_shape, momentum, device):
    cls, shape = cls_shape
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cls)(3, affine=True, track_running_stats=True, momentum=momentum).to(device)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-1, 1)
    ours, report = torch_dnn.convert(theirs)
    assert type(ours) is getattr(torch_dnn.nn, cls), str(report)
    for step in range(4):
        x = _input(shape, torch.float32, device, low=-2 + step, high=3 + 2 * step)
        torch.testing.assert_close(ours(x), theirs(x))
        torch.testing.assert_close(ours.running_mean, theirs.running_mean, msg=f"running_mean, step {step}")
        torch.testing.assert_close(ours.running_var, theirs.running_var, msg=f"running_var, step {step}")
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked)  # InstanceNorm does not count
    ours.eval()
    theirs.eval()
    x = _input(shape, torch.float32, device)
    torch.testing.assert_close(ours(x), theirs(x))
    # unbatched input, as the torch module accepts it
    torch.testing.assert_close(ours(x[0]), theirs(x[0]))


@pytest.mark.parametrize("device", devices())
def test_zero_variance_and_special_values(device):
    nan, inf = float("nan"), float("inf")
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        x = _input((3, 4, 6), dtype, device)
        x[0, :2] = 1.5              # a group of one value: out = bias
        x[1, 2, 3] = nan            # NaN: its group is NaN
        x[2, 0, 1] = inf            # inf: its group is NaN
        x[2, 3, 0] = -inf
        w, b = _params(4, dtype, device)
        ours, theirs = F.group_norm(x, 2, w, b), TF.group_norm(x, 2, w, b)
        torch.testing.assert_close(ours, theirs, equal_nan=True, atol=1e-2, rtol=1e-2)
        assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
        # zero-variance groups differentiate too
        assert_matches_torch(lambda x, w, b: F.group_norm(x, 2, w, b), lambda x, w, b: _torch_group_norm(x, 2, w, b),
                             [x[:1], w, b], name=f"group_norm zero variance {dtype}")
        assert_matches_torch(lambda x: F.instance_norm(x), lambda x: TF.instance_norm(x), [x[:1]],
                             name=f"instance_norm zero variance {dtype}")
        lx = _input((2, 5, 3, 3), dtype, device)
        lx[0, 1, 1, 1] = nan
        lx[1, 2, 0, 0] = inf
        torch.testing.assert_close(F.local_response_norm(lx, 3), local_response_norm_reference(lx, 3), equal_nan=True)


# local_response_norm: (shape, size, layout)
LRN_CASES = [
    ((2, 7, 5, 6), 3, "contiguous"),
    ((2, 7, 5, 6), 2, "channels_last"),
    ((2, 16, 5, 6), 5, "channels_last"),
    ((2, 6, 9), 4, "contiguous"),          # 3-D input
    ((2, 6, 9), 1, "strided"),
    ((2, 5, 3, 4, 3), 3, "contiguous"),    # 5-D input
    ((2, 5, 3, 4, 3), 2, "channels_last_3d"),
    ((2, 4, 5, 6), 9, "transposed"),       # window wider than the channels
    ((1, 3, 2, 2, 2, 2), 2, "contiguous"),  # 6-D input
]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_local_response_norm_against_torch(dtype, device):
    for shape, size, layout in LRN_CASES:
        x = _input(shape, dtype, device, layout, low=-2, high=2)
        for alpha, beta, k in ((1e-4, 0.75, 1.0), (0.5, 0.6, 2.0), (1.0, 1.5, 0.5)):
            assert_matches_torch(lambda x: F.local_response_norm(x, size, alpha, beta, k),
                                 lambda x: local_response_norm_reference(x, size, alpha, beta, k), [x],
                                 name=f"lrn {shape} size={size} {layout} {dtype} a={alpha} b={beta} k={k}")
    x = _input((0, 3, 4, 4), torch.float32, device)
    assert F.local_response_norm(x, 2) is x  # as PyTorch: the empty input itself


@pytest.mark.parametrize("device", devices())
def test_grad_layouts(device):
    # grad_output in another layout than the input (channels_last vs NCHW, strided): same gradients as PyTorch's
    for x_layout, g_layout in (("contiguous", "channels_last"), ("channels_last", "contiguous"),
                               ("channels_last", "strided"), ("transposed", "channels_last")):
        x = _input((2, 8, 5, 6), torch.float64, device, x_layout).requires_grad_()
        g = _input((2, 8, 5, 6), torch.float64, device, g_layout, -1, 1)
        w, b = _params(8, torch.float64, device)
        w.requires_grad_()
        for ours, theirs in ((lambda x: F.group_norm(x, 4, w, b), lambda x: TF.group_norm(x, 4, w, b)),
                             (lambda x: F.instance_norm(x, weight=w), lambda x: TF.instance_norm(x, weight=w)),
                             (lambda x: F.local_response_norm(x, 3, 0.5), lambda x: TF.local_response_norm(x, 3, 0.5))):
            a = torch.autograd.grad(ours(x), [x, w], g, allow_unused=True)
            r = torch.autograd.grad(theirs(x), [x, w], g, allow_unused=True)
            for u, v in zip(a, r):
                if v is None:
                    assert u is None or not u.any()
                else:
                    torch.testing.assert_close(u, v, msg=lambda m: f"{x_layout} / {g_layout}: {m}")


@pytest.mark.parametrize("device", devices())
def test_empty_batch_backward(device):
    for layout in ("contiguous", "channels_last"):
        x = _input((0, 6, 4, 4), torch.float32, device, layout).requires_grad_()
        w, b = _params(6, torch.float32, device)
        w.requires_grad_()
        b.requires_grad_()
        y = F.group_norm(x, 3, w, b)
        assert y.shape == x.shape
        gx, gw, gb = torch.autograd.grad(y.sum(), [x, w, b])
        assert gx.shape == x.shape and torch.equal(gw, torch.zeros_like(w)) and torch.equal(gb, torch.zeros_like(b))
    # spatial size 0: statistics of nothing are NaN, as PyTorch's
    _, mean, _ = ops.group_norm(torch.ones(2, 4, 0, device=device), 2, None, None, 1e-5)
    assert torch.isnan(mean).all()


@pytest.mark.parametrize("device", devices())
def test_gradcheck(device):
    def inp(shape, layout="contiguous"):
        return _input(shape, torch.float64, device, layout).requires_grad_()

    for shape, G, layout in (((2, 6, 3, 4), 3, "contiguous"), ((2, 6, 3, 4), 2, "channels_last"),
                             ((3, 4, 5), 2, "contiguous")):
        x, w, b = inp(shape, layout), inp((shape[1],)), inp((shape[1],))
        assert torch.autograd.gradcheck(lambda x, w, b: F.group_norm(x, G, w, b), (x, w, b))
        assert torch.autograd.gradcheck(lambda x, b: F.group_norm(x, G, None, b), (x, b))
        assert torch.autograd.gradcheck(lambda x, w, b: F.instance_norm(x, weight=w, bias=b), (x, w, b))
        rm = _input((shape[1],), torch.float64, device)
        rv = _input((shape[1],), torch.float64, device, low=0.5, high=2)
        assert torch.autograd.gradcheck(
            lambda x, w, b: F.instance_norm(x, rm, rv, w, b, use_input_stats=False), (x, w, b))
        assert torch.autograd.gradcheck(lambda x: F.local_response_norm(x, 3, 0.5, 0.75, 1.0), (x,))
        assert torch.autograd.gradcheck(lambda x: F.local_response_norm(x, 2, 1.0, 1.5, 2.0), (x,))


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    def inp(shape, dtype=torch.float32, layout="contiguous", grad=False, low=-3.0, high=5.0):
        t = _input(shape, dtype, device, layout, low, high)
        return t.requires_grad_() if grad else t

    opcheck_samples(ops.group_norm, [
        ((inp((2, 6, 5, 4)), 3, inp((6,)), inp((6,)), 1e-5), {}),
        ((inp((2, 6, 5, 4), grad=True), 2, None, None, 1e-5), {}),
        ((inp((2, 8, 5, 4), torch.bfloat16, "channels_last", True), 4, inp((8,), torch.bfloat16, grad=True),
          inp((8,), torch.bfloat16, grad=True), 1e-5), {}),
        ((inp((3, 4, 7), torch.float64, "strided", True), 2, inp((4,), torch.float64, grad=True), None, 1e-3), {}),
        ((inp((2, 4, 3, 2, 3), torch.float16, "channels_last_3d", True), 4, None, inp((4,), torch.float16), 1e-5), {}),
    ])
    x, g = inp((2, 6, 5, 4)), inp((2, 6, 5, 4))
    w6 = inp((6,))
    _, mean, rstd = ops.group_norm(x, 3, w6, None, 1e-5)
    opcheck_samples(ops.group_norm_with_stats, [
        ((x, 3, mean, rstd, w6, inp((6,))), {}),
        ((inp((2, 6, 5, 4), grad=True), 6, inp((2, 6)), inp((2, 6), low=0.5, high=2), inp((6,), grad=True), None), {}),
    ])
    opcheck_samples(ops.group_norm_backward, [
        ((g, x, mean, rstd, w6, 3, False, [True, True, True]), {}),
        ((g, x, mean, rstd, None, 3, False, [True, False, True]), {}),
        ((g, x, mean, rstd, w6, 3, True, [False, True, False]), {}),
        ((g.contiguous(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last), mean, rstd,
          w6, 3, False, [True, True, True]), {}),
    ])
    opcheck_samples(ops.local_response_norm, [
        ((inp((2, 6, 5, 4)), 3, 1e-4, 0.75, 1.0), {}),
        ((inp((2, 6, 5, 4), torch.bfloat16, "channels_last", True), 2, 0.5, 0.75, 2.0), {}),
        ((inp((2, 6, 7), torch.float64, grad=True), 5, 1.0, 1.5, 1.0), {}),
    ])
    opcheck_samples(ops.local_response_norm_backward, [((g, x, 3, 1e-4, 0.75, 1.0), {})])


@pytest.mark.parametrize("device", devices())
def test_weight_grads_deterministic_and_mixed_dtype(device):
    x = _input((16, 32, 9, 9), torch.float32, device, "channels_last").requires_grad_()
    w, b = _params(32, torch.float32, device)
    w.requires_grad_()
    b.requires_grad_()
    g = _input((16, 32, 9, 9), torch.float32, device)
    grads = [torch.autograd.grad(F.group_norm(x, 8, w, b), [x, w, b], g) for _ in range(2)]
    assert all(torch.equal(a, c) for a, c in zip(*grads)), "gradients must be bitwise reproducible"
    xb = x.detach().bfloat16().requires_grad_()
    y = F.group_norm(xb, 8, w, b)
    assert y.dtype == torch.bfloat16
    dw, db = torch.autograd.grad(y, [w, b], g.bfloat16())
    assert dw.dtype == db.dtype == torch.float32


@pytest.mark.parametrize("device", devices())
def test_modules_state_dict_and_convert(device):
    torch.manual_seed(0)
    # (a per-channel bias followed by instance_norm has a zero gradient: the order avoids that)
    model = torch.nn.Sequential(
        torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True), torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.GroupNorm(4, 8), torch.nn.LocalResponseNorm(3, alpha=1.0), torch.nn.GroupNorm(2, 8, affine=False),
    ).to(device, torch.float64)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.startswith(("0.", "2.")):
                p.uniform_(0.5, 1.5)
    converted, report = torch_dnn.convert(model)
    assert [type(m).__name__ for m in converted] == ["InstanceNorm2d", "Conv2d", "GroupNorm", "LocalResponseNorm",
                                                     "GroupNorm"]
    assert isinstance(converted[2], torch_dnn.nn.GroupNorm) and isinstance(converted[3], torch_dnn.nn.LocalResponseNorm)
    assert isinstance(converted[0], torch_dnn.nn.InstanceNorm2d)
    assert len(report.swapped) == 4, str(report)
    assert converted.state_dict().keys() == model.state_dict().keys()
    assert repr(converted) == repr(model)
    x = _input((2, 3, 7, 6), torch.float64, device, "channels_last")
    assert_models_agree(model, converted, x, name="converted model")
    torch.testing.assert_close(converted[0].running_var, model[0].running_var)
    fresh = torch_dnn.nn.GroupNorm(4, 8).to(device, torch.float64)
    fresh.load_state_dict(model[2].state_dict())
    h = _input((2, 8, 5, 5), torch.float64, device)
    torch.testing.assert_close(fresh(h), model[2](h))


def test_compile_fullgraph_no_graph_break():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch_dnn.nn.GroupNorm(2, 8), torch_dnn.nn.InstanceNorm2d(8, track_running_stats=True),
                                torch_dnn.nn.LocalResponseNorm(3))
    ref = torch.nn.Sequential(torch.nn.GroupNorm(2, 8), torch.nn.InstanceNorm2d(8, track_running_stats=True),
                              torch.nn.LocalResponseNorm(3))
    x = _input((2, 8, 5, 5), torch.float32, "cpu", "channels_last").requires_grad_()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    y = compiled(x)
    torch.testing.assert_close(y, ref(x))
    torch.testing.assert_close(model[1].running_mean, ref[1].running_mean)
    y.sum().backward()
    assert x.grad is not None and model[0].weight.grad is not None
    fn = torch.compile(lambda x: F.instance_norm(x) + F.group_norm(x, 4), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(fn(x), TF.instance_norm(x) + TF.group_norm(x, 4))


class TestErrors(expecttest.TestCase):
    def _msg(self, fn, exc=RuntimeError):
        with self.assertRaises(exc) as cm:
            fn()
        return first_line(cm.exception)

    def test_channels_not_divisible(self):
        self.assertExpectedInline(self._msg(lambda: F.group_norm(torch.ones(2, 6, 4), 4)), """torch_dnn.group_norm: expected the number of channels (6) to be divisible by num_groups (4), but got input of shape [2, 6, 4]""")

    def test_weight_size(self):
        self.assertExpectedInline(self._msg(lambda: F.group_norm(torch.ones(2, 6, 4), 3, torch.ones(4))), """torch_dnn.group_norm: expected weight of shape [6] (the input's channels), but got [4]""")

    def test_running_stats_size(self):
        self.assertExpectedInline(self._msg(lambda: F.instance_norm(torch.ones(2, 3, 4), torch.zeros(4), torch.ones(3))), """torch_dnn.instance_norm: expected running_mean of shape [3] (the input's channels), but got [4]""")

    def test_lrn_rank(self):
        self.assertExpectedInline(self._msg(lambda: F.local_response_norm(torch.ones(2, 3), 2), ValueError), """Expected 3D or higher dimensionality input (got 2 dimensions)""")

    def test_other_errors(self):
        for fn, words in (
            (lambda: F.group_norm(torch.ones(2, 6, 4), 0), "num_groups"),
            (lambda: F.group_norm(torch.ones(2, 6, 4, dtype=torch.int32), 3), "floating point"),
            (lambda: F.group_norm(torch.ones(2, 6, 4), 3, None, torch.ones(6, 1)), "bias"),
            (lambda: F.instance_norm(torch.ones(2, 3, 4), torch.zeros(3), None, use_input_stats=False),
             "running_mean and running_var"),
            (lambda: ops.group_norm_backward(torch.ones(2, 6, 4), torch.ones(2, 6, 4), torch.ones(2, 2),
                                             torch.ones(2, 3), None, 3, False, [True, False, False]), "mean"),
            (lambda: ops.local_response_norm(torch.ones(2, 3, 4), 0, 1e-4, 0.75, 1.0), "size"),
            (lambda: ops.local_response_norm_backward(torch.ones(2, 3, 5), torch.ones(2, 3, 4), 2, 1e-4, 0.75, 1.0),
             "grad_out"),
        ):
            msg = self._msg(fn)
            assert msg.startswith("torch_dnn.") and words in msg, msg
        # PyTorch's own checks in the functional wrappers (same exceptions and messages as torch's)
        with self.assertRaisesRegex(ValueError, "Expected more than 1 value per channel"):
            F.group_norm(torch.ones(1, 4, 1), 4)
        with self.assertRaisesRegex(ValueError, "Expected more than 1 spatial element"):
            F.instance_norm(torch.ones(2, 3, 1))
        with self.assertRaisesRegex(RuntimeError, "Expected at least 2 dimensions"):
            F.group_norm(torch.ones(4), 2)


@pytest.mark.cuda
def test_cuda_past_2_31_elements():
    # 64-bit indexing in both layouts: the last group of the last image lies past 2^31 elements. Its reference
    # is the group alone (channels_last: the last 2 channels with one group; NCHW: one group a whole image).
    # The last two take the cluster plan (items of 8-channel groups: channels-last 128-byte rows, K=16; NCHW
    # groups of 256 KB, K>=2), the first two the per-(n, group) and chunked kernels.
    for shape, G, layout in (((2, 64, 4097, 4097), 32, "channels_last"), ((8, 2, 16385, 8193), 1, "contiguous"),
                             ((8200, 64, 64, 64), 8, "channels_last"), ((8200, 16, 128, 128), 2, "contiguous")):
        x = torch.empty(shape, dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        w, b = _params(shape[1], torch.bfloat16, "cuda")
        d = shape[1] // G
        tail, wt, bt = x[-1:, -d:].contiguous(), w[-d:], b[-d:]
        y = F.group_norm(x, G, w, b)
        v = compare(y[-1:, -d:], TF.group_norm(tail, 1, wt, bt), TF.group_norm(tail.double(), 1, wt.double(), bt.double()),
                    name=f"group_norm past 2^31 {layout}")
        assert v, v.message
        del y
        g = torch.empty_like(x).uniform_(-1, 1)
        dx = ops.group_norm_backward(g, x, *ops.group_norm(x, G, w, b, 1e-5)[1:], w, G, False, [True, False, False])[0]
        t = tail.double().requires_grad_()
        (ref,) = torch.autograd.grad(TF.group_norm(t, 1, wt.double(), bt.double()), [t], g[-1:, -d:].double())
        tb = tail.clone().requires_grad_()
        (peer,) = torch.autograd.grad(TF.group_norm(tb, 1, wt, bt), [tb], g[-1:, -d:].contiguous())
        v = compare(dx[-1:, -d:], peer, ref, grad=True, name=f"group_norm backward past 2^31 {layout}")
        assert v, v.message
        del x, g, dx


# Plans of the CUDA kernels (csrc/group_norm/kernels/gn_cluster.cuh), selected by environment variables read at
# every call: the per-(n, group) kernels; the default choice; the cluster plan wherever it applies, as chosen; with
# clusters of one CTA; with the largest clusters (a 1 KB tile budget: 16 CTAs, trailing ranks with no rows); with
# clusters of at most 2 and small tiles; the NCHW bulk-copy backward's persistent double-buffered form.
GN_PLANS = {"smem": {"TORCH_DNN_GN_PLAN": "smem"}, "default": {}, "cluster": {"TORCH_DNN_GN_PLAN": "cluster"},
            "k1": {"TORCH_DNN_GN_PLAN": "cluster", "TORCH_DNN_GN_CLUSTER_MAX": "1"},
            "k16": {"TORCH_DNN_GN_PLAN": "cluster", "TORCH_DNN_GN_TILE_KB": "1"},
            "k2": {"TORCH_DNN_GN_PLAN": "cluster", "TORCH_DNN_GN_TILE_KB": "4", "TORCH_DNN_GN_CLUSTER_MAX": "2"},
            "bulk2": {"TORCH_DNN_GN_BULK_BUFS": "2"}}
# channels-last: 8 groups of 8 (128-byte bf16 rows), 32 groups of 8, 2 groups of 32 (two groups a row), groups of
# 24 (no power-of-two row: the old kernels); NCHW: 16 and 8 channels a group, a group of 256 KB (bf16), and more
# groups than SMs (the persistent backward walks several a block, the next one's loads in flight)
PLAN_CASES = [((3, 64, 7, 9), 8, "channels_last"), ((2, 256, 13, 11), 32, "channels_last"),
              ((2, 64, 5, 5), 2, "channels_last"), ((2, 96, 9, 9), 4, "channels_last"),
              ((2, 256, 12, 12), 16, "contiguous"), ((3, 24, 16, 20), 3, "contiguous"),
              ((2, 8, 128, 256), 2, "contiguous"), ((5, 32, 3, 17), 4, "channels_last"),
              ((64, 64, 8, 8), 32, "contiguous"), ((16, 256, 28, 28), 32, "contiguous")]


@pytest.mark.cuda
@pytest.mark.parametrize("plan", list(GN_PLANS), ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_cuda_plans(plan, dtype, monkeypatch):
    for k, v in GN_PLANS[plan].items():
        monkeypatch.setenv(k, v)
    for shape, G, layout in PLAN_CASES:
        x = _input(shape, dtype, "cuda", layout)
        for weight, bias in ((True, True), (False, False)):
            w, b = _params(shape[1], dtype, "cuda", weight, bias)
            assert_matches_torch(lambda x, w, b: F.group_norm(x, G, w, b), lambda x, w, b: _torch_group_norm(x, G, w, b),
                                 [x, w, b], name=f"group_norm plan={plan} {shape} G={G} {layout} {dtype} w={weight}")
        # bitwise the same on a second run (fixed-order sums: no atomics)
        w, b = _params(shape[1], dtype, "cuda")
        g = torch.randn_like(x)
        y1, m1, r1 = ops.group_norm(x, G, w, b, 1e-5)
        y2, m2, r2 = ops.group_norm(x, G, w, b, 1e-5)
        d1 = ops.group_norm_backward(g, x, m1, r1, w, G, False, [True, True, True])
        d2 = ops.group_norm_backward(g, x, m1, r1, w, G, False, [True, True, True])
        assert torch.equal(y1, y2) and torch.equal(m1, m2) and torch.equal(r1, r2)
        assert all(torch.equal(a, c) for a, c in zip(d1, d2))
    x = _input((4, 64, 10, 12), dtype, "cuda")
    assert_matches_torch(lambda x: F.instance_norm(x), lambda x: _torch_instance_norm(x), [x],
                         name=f"instance_norm plan={plan} {dtype}")


@pytest.mark.cuda
def test_cuda_poisoned_outputs():
    # the caching allocator hands back a NaN-poisoned block: every element must be overwritten
    for shape, G, layout in (((3, 24, 37, 41), 6, "contiguous"), ((3, 24, 37, 41), 3, "channels_last"),
                             ((2, 8, 300, 300), 2, "contiguous"), ((2, 8, 300, 300), 4, "channels_last")):
        x = _input(shape, torch.float32, "cuda", layout).requires_grad_()
        w, b = _params(shape[1], torch.float32, "cuda")
        w.requires_grad_()
        b.requires_grad_()
        for fn in (lambda x: F.group_norm(x, G, w, b), lambda x: F.instance_norm(x, weight=w, bias=b),
                   lambda x: F.local_response_norm(x, 5)):
            poison = torch.full((4 * x.numel(),), float("nan"), device="cuda")
            del poison
            y = fn(x)
            gs = torch.autograd.grad(y.square().sum(), [x, w, b], allow_unused=True)
            assert not torch.isnan(y).any() and not any(torch.isnan(g).any() for g in gs if g is not None)


@pytest.mark.cuda
def test_cuda_graph_capture():
    x = _input((4, 32, 28, 28), torch.bfloat16, "cuda", "channels_last").requires_grad_()
    w, b = _params(32, torch.bfloat16, "cuda")
    w.requires_grad_()
    m = torch_dnn.nn.InstanceNorm2d(32, track_running_stats=True).cuda()

    def step():
        y = F.group_norm(x, 8, w, b) + F.local_response_norm(x, 5) + m(x).bfloat16()
        gx, gw = torch.autograd.grad(y.float().square().sum(), [x, w])
        return y, gx, gw

    assert_cuda_graph_replays(step, lambda: x.copy_(_input((4, 32, 28, 28), torch.bfloat16, "cuda", "channels_last")))


@pytest.mark.cuda
def test_cuda_autocast_dtypes():
    # the output dtypes PyTorch's ops give under autocast: group_norm float32, instance_norm the input's,
    # local_response_norm float32 (its pow autocasts)
    x = _input((2, 8, 5, 5), torch.bfloat16, "cuda")
    w, b = _params(8, torch.float32, "cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for ours, theirs in ((F.group_norm(x, 4, w, b), TF.group_norm(x, 4, w, b)),
                             (F.instance_norm(x, weight=w, bias=b), TF.instance_norm(x, weight=w, bias=b)),
                             (F.local_response_norm(x, 3), TF.local_response_norm(x, 3))):
            assert ours.dtype == theirs.dtype
            torch.testing.assert_close(ours, theirs, atol=2e-2, rtol=2e-2)


@pytest.mark.cuda
def test_cuda_benchmark_shape():
    # the benchmark's case in both layouts, forward and backward, against PyTorch
    for layout in ("contiguous", "channels_last"):
        x = _input((8, 256, 56, 56), torch.bfloat16, "cuda", layout)
        w, b = _params(256, torch.bfloat16, "cuda")
        assert_matches_torch(lambda x, w, b: F.group_norm(x, 32, w, b), lambda x, w, b: _torch_group_norm(x, 32, w, b),
                             [x, w, b], name=f"group_norm 8x256x56x56 {layout}")


@pytest.mark.skipif(os.environ.get("TORCH_DNN_EMULATE") != "1",
                    reason="set TORCH_DNN_EMULATE=1 to build and run the CUDA-kernel emulation (about two minutes)")
def test_cluster_emulation(tmp_path):
    # the cluster plan's kernels (gn_cluster.cuh) on the CPU against float64: tests/emulation/gn_cluster_emulation.cpp
    from torch.utils import cpp_extension

    here = os.path.dirname(os.path.abspath(__file__))
    homes = [cpp_extension.CUDA_HOME, os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    found = [os.path.join(h, "include") for h in homes if h and os.path.exists(os.path.join(h, "include", "cuda_bf16.h"))]
    if not found:
        pytest.skip("the CUDA headers (cuda_bf16.h) are not installed")
    exe = str(tmp_path / "gn_emu")
    subprocess.run([os.environ.get("CXX", "g++"), "-std=c++20", "-O1", "-pthread", "-DTORCH_DNN_EMULATE_CUDA",
                    "-DTORCH_DNN_WITH_CUDA", "-Wno-attributes", f"-I{os.path.join(os.path.dirname(here), 'csrc')}",
                    f"-I{found[0]}", os.path.join(here, "emulation", "gn_cluster_emulation.cpp"), "-o", exe], check=True)
    r = subprocess.run([exe], capture_output=True, text=True)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
