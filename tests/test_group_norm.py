"""group_norm family (group_norm, instance_norm) against PyTorch over ranks (1-D to 3-D spatial, and 2-D input),
layouts (contiguous, channels_last, channels_last_3d, non-dense views), dtypes and weight/bias presence, with the
family tester's checks (the error rule, opcheck, gradcheck and gradgradcheck, torch.compile against PyTorch, bad
input, CUDA graphs, past 2^31 elements); statistics; InstanceNorm running statistics; zero variance, NaN and inf;
empty batches; modules, state_dict and convert; CUDA-only plans, poisoned outputs and autocast.
(local_response_norm: tests/test_lrn.py.)"""
import subprocess

import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.testing import compare
from tests.family_tester import Against, BadInput, FamilyTester, GradCase, ModelCase
from tests.utils import (ALL_DTYPES, MIXED_GRAD_LAYOUTS, assert_matches_torch, assert_models_agree,
                         build_emulation_program, devices, raised_first_line, random_like_case, requires_emulation)

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


class TestGroupNorm(FamilyTester):
    variants = ["group_norm", "instance_norm"]

    def against_torch(self, device, dtype, name):
        return _group_norm_cases(device, dtype) if name == "group_norm" else _instance_norm_cases(device, dtype)

    def gradcheck_cases(self, device):
        def inp(shape, layout="contiguous"):
            return _input(shape, torch.float64, device, layout).requires_grad_()

        cases = []
        for shape, G, layout in (((2, 6, 3, 4), 3, "contiguous"), ((2, 6, 3, 4), 2, "channels_last"),
                                 ((3, 4, 5), 2, "contiguous")):
            x, w, b = inp(shape, layout), inp((shape[1],)), inp((shape[1],))
            rm = _input((shape[1],), torch.float64, device)
            rv = _input((shape[1],), torch.float64, device, low=0.5, high=2)
            name = f"{shape} {layout}"
            cases += [
                GradCase(f"group_norm {name}", lambda x, w, b, G=G: F.group_norm(x, G, w, b), (x, w, b)),
                GradCase(f"group_norm bias only {name}", lambda x, b, G=G: F.group_norm(x, G, None, b), (x, b)),
                GradCase(f"instance_norm {name}", lambda x, w, b: F.instance_norm(x, weight=w, bias=b), (x, w, b)),
                GradCase(f"instance_norm running stats {name}",
                         lambda x, w, b, rm=rm, rv=rv: F.instance_norm(x, rm, rv, w, b, use_input_stats=False),
                         (x, w, b)),
            ]
        return cases

    def gradgradcheck_cases(self, device):
        return self.gradcheck_cases(device)

    def opcheck_samples(self, device):
        def inp(shape, dtype=torch.float32, layout="contiguous", grad=False, low=-3.0, high=5.0):
            t = _input(shape, dtype, device, layout, low, high)
            return t.requires_grad_() if grad else t

        samples = [(ops.group_norm, args, {}) for args in (
            (inp((2, 6, 5, 4)), 3, inp((6,)), inp((6,)), 1e-5),
            (inp((2, 6, 5, 4), grad=True), 2, None, None, 1e-5),
            (inp((2, 8, 5, 4), torch.bfloat16, "channels_last", True), 4, inp((8,), torch.bfloat16, grad=True),
             inp((8,), torch.bfloat16, grad=True), 1e-5),
            (inp((3, 4, 7), torch.float64, "strided", True), 2, inp((4,), torch.float64, grad=True), None, 1e-3),
            (inp((2, 4, 3, 2, 3), torch.float16, "channels_last_3d", True), 4, None, inp((4,), torch.float16), 1e-5),
        )]
        x, g = inp((2, 6, 5, 4)), inp((2, 6, 5, 4))
        w6 = inp((6,))
        _, mean, rstd = ops.group_norm(x, 3, w6, None, 1e-5)
        samples += [(ops.group_norm_with_stats, args, {}) for args in (
            (x, 3, mean, rstd, w6, inp((6,))),
            (inp((2, 6, 5, 4), grad=True), 6, inp((2, 6)), inp((2, 6), low=0.5, high=2), inp((6,), grad=True), None),
        )]
        samples += [(ops.group_norm_backward, args, {}) for args in (
            (g, x, mean, rstd, w6, 3, False, [True, True, True]),
            (g, x, mean, rstd, None, 3, False, [True, False, True]),
            (g, x, mean, rstd, w6, 3, True, [False, True, False]),
            (g.contiguous(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last), mean,
             rstd, w6, 3, False, [True, True, True]),
        )]
        return samples

    def compile_cases(self, device):
        x = _input((2, 8, 5, 5), torch.float32, device, "channels_last")
        w, b = _params(8, torch.float32, device)
        yield Against("instance_norm + group_norm", lambda x, w, b: F.instance_norm(x) + F.group_norm(x, 4, w, b),
                      lambda x, w, b: TF.instance_norm(x) + TF.group_norm(x, 4, w, b), [x, w, b])
        # the modules convert() puts into a model, against the model's own (parameters' gradients too), and
        # InstanceNorm's running statistics updated under compile as in eager (a per-channel bias followed by
        # instance_norm has a zero gradient: the order avoids that)
        native = torch.nn.Sequential(torch.nn.InstanceNorm2d(8, track_running_stats=True), torch.nn.GroupNorm(2, 8))
        native = native.to(device)
        with torch.no_grad():
            for p in native.parameters():
                p.uniform_(0.5, 1.5)
        ours = torch_dnn.convert(native)[0]
        yield ModelCase("GroupNorm, InstanceNorm2d modules", ours, native, x)
        torch.testing.assert_close(ours[0].running_mean, native[0].running_mean)
        torch.testing.assert_close(ours[0].running_var, native[0].running_var)

    def bad_inputs(self):
        return [
            BadInput(lambda: F.group_norm(torch.ones(2, 6, 4), 0), "torch_dnn.group_norm", "num_groups"),
            BadInput(lambda: F.group_norm(torch.ones(2, 6, 4, dtype=torch.int32), 3), "torch_dnn.group_norm",
                     "floating point"),
            BadInput(lambda: F.group_norm(torch.ones(2, 6, 4), 3, None, torch.ones(6, 1)), "torch_dnn.group_norm",
                     "bias"),
            BadInput(lambda: F.instance_norm(torch.ones(2, 3, 4), torch.zeros(3), None, use_input_stats=False),
                     "torch_dnn.instance_norm", "running_mean and running_var"),
            BadInput(lambda: ops.group_norm_backward(torch.ones(2, 6, 4), torch.ones(2, 6, 4), torch.ones(2, 2),
                                                     torch.ones(2, 3), None, 3, False, [True, False, False]),
                     "torch_dnn.group_norm_backward", "mean"),
            # PyTorch's own checks in the functional wrappers (same exceptions and messages as torch's)
            BadInput(lambda: F.group_norm(torch.ones(1, 4, 1), 4), None, "Expected more than 1 value per channel",
                     ValueError),
            BadInput(lambda: F.instance_norm(torch.ones(2, 3, 1)), None, "Expected more than 1 spatial element",
                     ValueError),
            BadInput(lambda: F.group_norm(torch.ones(4), 2), None, "Expected at least 2 dimensions"),
        ]

    def cuda_graph_step(self):
        x = _input((4, 32, 28, 28), torch.bfloat16, "cuda", "channels_last").requires_grad_()
        w, b = _params(32, torch.bfloat16, "cuda")
        w.requires_grad_()
        m = torch_dnn.nn.InstanceNorm2d(32, track_running_stats=True).cuda()

        def step():
            y = F.group_norm(x, 8, w, b) + m(x).bfloat16()
            gx, gw = torch.autograd.grad(y.float().square().sum(), [x, w])
            return y, gx, gw

        return step, lambda: x.copy_(_input((4, 32, 28, 28), torch.bfloat16, "cuda", "channels_last"))

    def past_2_31_cases(self):
        return {f"{layout}-{shape[0]}x{shape[1]}x{shape[2]}x{shape[3]}-G{G}":
                lambda shape=shape, G=G, layout=layout: _past_2_31_elements(shape, G, layout)
                for shape, G, layout in PAST_2_31_CASES}


def _group_norm_cases(device, dtype):
    for shape, G, layout in _gn_cases(device):
        x = _input(shape, dtype, device, layout)
        for weight, bias in AFFINE:
            w, b = _params(shape[1], dtype, device, weight, bias)
            yield Against(f"group_norm {shape} G={G} {layout} {dtype} w={weight} b={bias}",
                          lambda x, w, b: F.group_norm(x, G, w, b), lambda x, w, b: _torch_group_norm(x, G, w, b),
                          [x, w, b])


def _instance_norm_cases(device, dtype):
    for shape, layout in IN_CASES:
        c = shape[1]
        x = _input(shape, dtype, device, layout)
        if shape[0] == 0:
            # PyTorch's instance_norm fails on an empty batch (IndexError); ours returns what its group_norm with
            # a group a channel returns
            torch.testing.assert_close(F.instance_norm(x), TF.group_norm(x, c), rtol=0, atol=0)
            continue
        for weight, bias in AFFINE:
            w, b = _params(c, dtype, device, weight, bias)
            yield Against(f"instance_norm {shape} {layout} {dtype} w={weight} b={bias}",
                          lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                          lambda x, w, b: _torch_instance_norm(x, weight=w, bias=b), [x, w, b])
        # with running statistics (eval mode): the affine map
        rm = random_like_case((c,), torch.float32, device, low=-1, high=1)
        rv = random_like_case((c,), torch.float32, device, low=0.5, high=2)
        w, b = _params(c, dtype, device)
        yield Against(f"instance_norm eval {shape} {layout} {dtype}",
                      lambda x, w, b: F.instance_norm(x, rm, rv, w, b, use_input_stats=False),
                      lambda x, w, b: _torch_instance_norm(x, rm, rv, weight=w, bias=b, use_input_stats=False),
                      [x, w, b])


def test_large_groups_cpu():
    # groups far larger than the tests' others: the statistics' summation error shows above the float32 floor
    x = _input((1, 8, 300, 300), torch.float32, "cpu")
    assert_matches_torch(lambda x: F.group_norm(x, 2), lambda x: TF.group_norm(x, 2), [x], grad=False,
                         name="group_norm groups of 360000")


@pytest.mark.parametrize("device", devices())
def test_group_norm_layout_and_statistics(device):
    for layout in ("contiguous", "channels_last"):
        x = _input((2, 8, 5, 6), torch.float32, device, layout)
        y, mean, rstd = ops.group_norm(x, 4, None, None, 1e-5)
        # PyTorch's layout: the input's suggested format on the CPU, contiguous on CUDA
        assert y.stride() == TF.group_norm(x, 4).stride(), "the output takes PyTorch's layout"
        assert mean.shape == rstd.shape == (2, 4) and mean.dtype == torch.float32
        xg = x.reshape(2, 4, -1)
        torch.testing.assert_close(mean, xg.mean(-1))
        torch.testing.assert_close(rstd, torch.rsqrt(xg.var(-1, unbiased=False) + 1e-5))
    x5 = _input((2, 8, 3, 4, 5), torch.float64, device, "channels_last_3d")
    assert F.group_norm(x5, 2).stride() == TF.group_norm(x5, 2).stride()
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
        # the error rule over the finite values, NaN and inf where PyTorch has them
        assert_matches_torch(lambda x, w, b: F.group_norm(x, 2, w, b), lambda x, w, b: TF.group_norm(x, 2, w, b),
                             [x, w, b], grad=False, name=f"group_norm special values {dtype}")
        ours, theirs = F.group_norm(x, 2, w, b), TF.group_norm(x, 2, w, b)
        assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
        # zero-variance groups differentiate too
        assert_matches_torch(lambda x, w, b: F.group_norm(x, 2, w, b), lambda x, w, b: _torch_group_norm(x, 2, w, b),
                             [x[:1], w, b], name=f"group_norm zero variance {dtype}")
        assert_matches_torch(lambda x: F.instance_norm(x), lambda x: TF.instance_norm(x), [x[:1]],
                             name=f"instance_norm zero variance {dtype}")


@pytest.mark.parametrize("device", devices())
def test_grad_layouts(device):
    # grad_output in another layout than the input (channels_last vs NCHW, strided): same gradients as PyTorch's
    for x_layout, g_layout in MIXED_GRAD_LAYOUTS:
        x = _input((2, 8, 5, 6), torch.float64, device, x_layout).requires_grad_()
        g = _input((2, 8, 5, 6), torch.float64, device, g_layout, -1, 1)
        w, b = _params(8, torch.float64, device)
        w.requires_grad_()
        for ours, theirs in ((lambda x: F.group_norm(x, 4, w, b), lambda x: TF.group_norm(x, 4, w, b)),
                             (lambda x: F.instance_norm(x, weight=w), lambda x: TF.instance_norm(x, weight=w))):
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
        y, y_ref = F.group_norm(x, 3, w, b), TF.group_norm(x, 3, w, b)
        torch.testing.assert_close(y, y_ref, rtol=0, atol=0)
        grads = torch.autograd.grad(y.sum(), [x, w, b])
        for g, g_ref in zip(grads, torch.autograd.grad(y_ref.sum(), [x, w, b])):
            torch.testing.assert_close(g, g_ref, rtol=0, atol=0)
        assert torch.equal(grads[1], torch.zeros_like(w)) and torch.equal(grads[2], torch.zeros_like(b))
    # spatial size 0: statistics of nothing are NaN, as PyTorch's mean and variance of an empty group
    x = torch.ones(2, 4, 0, device=device)
    y, mean, rstd = ops.group_norm(x, 2, None, None, 1e-5)
    assert y.shape == x.shape and torch.isnan(mean).all()
    groups = x.view(2, 2, 0)
    torch.testing.assert_close(mean, groups.mean(-1), equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(rstd, torch.rsqrt(groups.square().mean(-1) + 1e-5), equal_nan=True, rtol=0, atol=0)


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
        torch.nn.GroupNorm(4, 8), torch.nn.GroupNorm(2, 8, affine=False),
    ).to(device, torch.float64)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.startswith(("0.", "2.")):
                p.uniform_(0.5, 1.5)
    converted, report = torch_dnn.convert(model)
    assert [type(m).__name__ for m in converted] == ["InstanceNorm2d", "Conv2d", "GroupNorm", "GroupNorm"]
    assert isinstance(converted[2], torch_dnn.nn.GroupNorm) and isinstance(converted[3], torch_dnn.nn.GroupNorm)
    assert isinstance(converted[0], torch_dnn.nn.InstanceNorm2d)
    assert type(converted[1]) is torch.nn.Conv2d  # an opt-in swap
    assert len(report.swapped) == 3, str(report)
    assert converted.state_dict().keys() == model.state_dict().keys()
    assert repr(converted) == repr(model)
    x = _input((2, 3, 7, 6), torch.float64, device, "channels_last")
    # a loss weighted per element: the sum of squares of a group norm without affine is constant (n per group), its
    # gradient zero and what both sides compute of it rounding noise
    weights = _input((2, 8, 7, 6), torch.float64, device, low=-1, high=1)
    assert_models_agree(model, converted, x, name="converted model", loss=lambda y: (y * weights).sum())
    torch.testing.assert_close(converted[0].running_var, model[0].running_var)
    fresh = torch_dnn.nn.GroupNorm(4, 8).to(device, torch.float64)
    fresh.load_state_dict(model[2].state_dict())
    h = _input((2, 8, 5, 5), torch.float64, device)
    torch.testing.assert_close(fresh(h), model[2](h))


class TestErrors(expecttest.TestCase):
    _msg = staticmethod(raised_first_line)

    def test_channels_not_divisible(self):
        self.assertExpectedInline(self._msg(lambda: F.group_norm(torch.ones(2, 6, 4), 4)), """torch_dnn.group_norm: expected the number of channels (6) to be divisible by num_groups (4), but got input of shape [2, 6, 4]""")

    def test_weight_size(self):
        self.assertExpectedInline(self._msg(lambda: F.group_norm(torch.ones(2, 6, 4), 3, torch.ones(4))), """torch_dnn.group_norm: expected weight of shape [6] (the input's channels), but got [4]""")

    def test_running_stats_size(self):
        self.assertExpectedInline(self._msg(lambda: F.instance_norm(torch.ones(2, 3, 4), torch.zeros(4), torch.ones(3))), """torch_dnn.instance_norm: expected running_mean of shape [3] (the input's channels), but got [4]""")


# 64-bit indexing in both layouts: the last group of the last image lies past 2^31 elements. Its reference is the
# group alone (channels_last: the last 2 channels with one group; NCHW: one group a whole image). The last two take
# the cluster plan (items of 8-channel groups: channels-last 128-byte rows, K=16; NCHW groups of 256 KB, K>=2), the
# first two the per-(n, group) and chunked kernels.
PAST_2_31_CASES = [((2, 64, 4097, 4097), 32, "channels_last"), ((8, 2, 16385, 8193), 1, "contiguous"),
                   ((8200, 64, 64, 64), 8, "channels_last"), ((8200, 16, 128, 128), 2, "contiguous")]


def _past_2_31_elements(shape, G, layout):
    x = torch.empty(shape, dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    w, b = _params(shape[1], torch.bfloat16, "cuda")
    d = shape[1] // G
    tail, wt, bt = x[-1:, -d:].contiguous(), w[-d:], b[-d:]
    y = F.group_norm(x, G, w, b)
    v = compare(y[-1:, -d:], TF.group_norm(tail, 1, wt, bt),
                TF.group_norm(tail.double(), 1, wt.double(), bt.double()), name=f"group_norm past 2^31 {layout}")
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
    # the caching allocator hands back a NaN-poisoned block: every element of the output and the gradients must be
    # overwritten with PyTorch's value
    for shape, G, layout in (((3, 24, 37, 41), 6, "contiguous"), ((3, 24, 37, 41), 3, "channels_last"),
                             ((2, 8, 300, 300), 2, "contiguous"), ((2, 8, 300, 300), 4, "channels_last")):
        x = _input(shape, torch.float32, "cuda", layout)
        w, b = _params(shape[1], torch.float32, "cuda")
        g = _input(shape, torch.float32, "cuda", "contiguous", -1, 1)
        for name, ours, theirs in (
                ("group_norm", lambda x, w, b: F.group_norm(x, G, w, b), lambda x, w, b: TF.group_norm(x, G, w, b)),
                ("instance_norm", lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
                 lambda x, w, b: TF.instance_norm(x, weight=w, bias=b))):
            poison = torch.full((4 * x.numel(),), float("nan"), device="cuda")
            del poison
            assert_matches_torch(ours, theirs, [x, w, b], grad_output=g, name=f"{name} {shape} {layout} poisoned")


@pytest.mark.cuda
def test_cuda_autocast_dtypes():
    # the output dtypes PyTorch's ops give under autocast: group_norm float32, instance_norm the input's
    x = _input((2, 8, 5, 5), torch.bfloat16, "cuda")
    w, b = _params(8, torch.float32, "cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for ours, theirs in ((F.group_norm(x, 4, w, b), TF.group_norm(x, 4, w, b)),
                             (F.instance_norm(x, weight=w, bias=b), TF.instance_norm(x, weight=w, bias=b))):
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


def _channels_last_view(shape, dtype, offset=0, low=-3.0, high=5.0):
    """A dense channels-last CUDA tensor of any rank >= 3 ([N][spatial][C] in memory), starting `offset` elements
    into its storage (1: not 16-byte aligned; the allocator's blocks are)."""
    src = random_like_case(shape, dtype, "cuda", low=low, high=high)
    storage = torch.empty(offset + src.numel(), dtype=dtype, device="cuda")
    base = storage[offset:].view(shape[0], *shape[2:], shape[1])
    x = base.permute(0, len(shape) - 1, *range(1, len(shape) - 1))
    x.copy_(src)
    assert x.storage_offset() == offset and x.stride(1) == 1
    return x


# On CUDA a channels-last input (and grad_output) is made contiguous by the tiled layout transpose
# (csrc/common/layout_transpose.cu, 64 x 64 tiles) before the NCHW kernels run. (shape, num_groups, storage offset):
# tiles cut by the sizes, channel or spatial sizes that are not whole 16-byte vectors (element accesses on that
# side: C = 6 or 20 in 16 bits, S = 35, 99 or 4290), 1-D to 3-D spatial, and inputs not 16-byte aligned.
CL_TRANSPOSE_CASES = [
    ((2, 6, 7, 5), 3, 0),        # element accesses on both sides (vector loads for float64)
    ((3, 72, 9, 11), 8, 0),      # vectors along C (two column tiles, the second of 8), elements along S = 99
    ((2, 136, 8, 9), 17, 0),     # vectors on both sides, every tile cut both ways
    ((2, 20, 66, 65), 5, 0),     # 68 row tiles, the last of 2 rows
    ((1, 256, 56, 56), 32, 0),   # the benchmark's layer
    ((2, 3, 65, 67), 3, 0),      # three channels: one column tile of 3
    ((2, 24, 3, 5, 7), 6, 0),    # channels_last_3d
    ((3, 40, 67), 4, 0),         # channels-last 1-D
    ((2, 64, 9, 8), 8, 1),       # not 16-byte aligned: element accesses on the load side
    ((2, 64, 9, 8), 8, 8),       # 16 bytes or more in: aligned again
]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_cuda_channels_last_input(dtype):
    # forward and backward against PyTorch (the error rule) with PyTorch's strides (contiguous results and
    # gradients), grad_output contiguous or channels-last; the input itself is passed (its alignment kept)
    ran = 0
    for shape, G, offset in CL_TRANSPOSE_CASES:
        x = _channels_last_view(shape, dtype, offset)
        w, b = _params(shape[1], dtype, "cuda")
        for g_layout in ("contiguous", "channels_last"):
            g = (_channels_last_view(shape, dtype, offset, -1, 1) if g_layout == "channels_last"
                 else _input(shape, dtype, "cuda", "contiguous", -1, 1))
            name = f"group_norm {shape} G={G} offset={offset} {dtype} grad_output {g_layout}"
            xo, wo, bo = (t.detach().requires_grad_() for t in (x, w, b))  # x's storage, offset and strides
            xp, wp, bp = (t.detach().clone().requires_grad_() for t in (x, w, b))
            xr, wr, br = (t.detach().double().requires_grad_() for t in (x, w, b))
            assert xo.storage_offset() == offset
            y, yp, yr = F.group_norm(xo, G, wo, bo), _torch_group_norm(xp, G, wp, bp), _torch_group_norm(xr, G, wr, br)
            assert y.stride() == yp.stride(), f"{name}: output strides {y.stride()} != PyTorch's {yp.stride()}"
            v = compare(y, yp, yr, name=f"{name} forward")
            assert v, v.message
            ours = torch.autograd.grad(y, [xo, wo, bo], g)
            peer = torch.autograd.grad(yp, [xp, wp, bp], g)
            ref = torch.autograd.grad(yr, [xr, wr, br], g.double())
            for what, a, p, r in zip(("input", "weight", "bias"), ours, peer, ref):
                assert a.stride() == p.stride(), f"{name}: {what} gradient strides {a.stride()} != {p.stride()}"
                v = compare(a, p, r, grad=True, name=f"{name} {what} gradient")
                assert v, v.message
            ran += 1
    assert ran == 2 * len(CL_TRANSPOSE_CASES)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_cuda_layout_transpose_exact(dtype):
    # The transpose alone, bit for bit: group_norm_with_stats with mean 0, rstd 1 and no affine map is the identity,
    # so its result is the channels-last input's contiguous copy; its backward (given statistics, no weight:
    # dx = rstd * dy) is grad_output's. Every access variant of the kernel in every dtype, tiles cut by the sizes.
    stat = torch.float64 if dtype == torch.float64 else torch.float32
    ran = 0
    for shape, _, offset in CL_TRANSPOSE_CASES + [((1, 130, 3, 43), 1, 0), ((3, 64, 8, 8), 1, 0),
                                                  ((2, 128, 129), 1, 0), ((2, 9, 1, 2, 63), 1, 1)]:
        x = _channels_last_view(shape, dtype, offset)
        g = _channels_last_view(shape, dtype, offset, -1, 1)
        mean = torch.zeros(shape[0], 1, dtype=stat, device="cuda")
        rstd = torch.ones(shape[0], 1, dtype=stat, device="cuda")
        y = ops.group_norm_with_stats(x, 1, mean, rstd, None, None)
        assert y.is_contiguous() and torch.equal(y, x), f"{shape} offset={offset} {dtype}: forward copy"
        dx = ops.group_norm_backward(g, x, mean, rstd, None, 1, True, [True, False, False])[0]
        assert dx.is_contiguous() and torch.equal(dx, g), f"{shape} offset={offset} {dtype}: grad_output copy"
        ran += 1
    assert ran == len(CL_TRANSPOSE_CASES) + 4


@pytest.mark.cuda
def test_cuda_channels_last_kernels():
    # the kernels that give a channels-last input its contiguous result (profiler names): on sm_90 the forward
    # writes y from the channels-last cluster plan's tile, no transpose, where that plan applies; a forward it cannot
    # take (S = 99: not whole vectors) and the backward transpose the input first
    from torch.profiler import ProfilerActivity, profile

    def kernels(fn):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]

    w, b = _params(256, torch.bfloat16, "cuda")
    x = _input((4, 256, 16, 16), torch.bfloat16, "cuda", "channels_last")
    names = kernels(lambda: F.group_norm(x, 32, w, b))
    if not names:
        pytest.skip("the profiler names no CUDA kernels here")
    if torch.cuda.get_device_capability() >= (9, 0):
        assert any("gn_cluster_fwd" in n for n in names), names
        assert not any("layout_transpose" in n for n in names), names
    else:
        assert any("layout_transpose" in n for n in names), names
    x99 = _input((4, 256, 9, 11), torch.bfloat16, "cuda", "channels_last")
    assert any("layout_transpose" in n for n in kernels(lambda: F.group_norm(x99, 32, w, b)))
    xg = x.detach().requires_grad_()
    y = F.group_norm(xg, 32, w, b)
    g = torch.randn_like(y)
    assert any("layout_transpose" in n for n in kernels(lambda: torch.autograd.grad(y, [xg], g)))


@requires_emulation
@pytest.mark.parametrize("program", ["gn_cluster_emulation", "layout_transpose_emulation"])
def test_emulated_kernels(tmp_path, program):
    # on the CPU: the cluster plan's kernels (gn_cluster.cuh) against float64, and the layout transpose that makes a
    # channels-last input contiguous (csrc/common/layout_transpose.cu), both directions, every dtype size and access
    # variant, exact (about two minutes and one)
    r = subprocess.run([build_emulation_program(tmp_path, program)], capture_output=True, text=True)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
