"""local_response_norm against its reference (PyTorch's composite, torch_dnn/reference) over ranks 3 to 6,
layouts (contiguous, channels_last, channels_last_3d, non-dense views), dtypes and (size, alpha, beta, k), with the
family tester's checks (the error rule, opcheck, gradcheck and gradgradcheck, torch.compile against PyTorch, bad
input, CUDA graphs, past 2^31 elements); NaN and inf; gradients for a grad_output in another layout; empty batches;
the module and convert; error messages; on CUDA, outputs fully written and autocast."""
import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.reference import local_response_norm_reference
from torch_dnn.testing import compare
from tests.family_tester import Against, BadInput, FamilyTester, GradCase
from tests.utils import MIXED_GRAD_LAYOUTS, assert_models_agree, devices, first_line, make_input

ops = torch.ops.torch_dnn

# (shape, size, layout)
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


def _input(shape, dtype, device, layout="contiguous", low=-3.0, high=5.0):
    return make_input(shape, dtype, device, layout, low, high)


class TestLocalResponseNorm(FamilyTester):
    def against_torch(self, device, dtype, variant):
        for shape, size, layout in LRN_CASES:
            x = _input(shape, dtype, device, layout, low=-2, high=2)
            for alpha, beta, k in ((1e-4, 0.75, 1.0), (0.5, 0.6, 2.0), (1.0, 1.5, 0.5)):
                yield Against(f"lrn {shape} size={size} {layout} {dtype} a={alpha} b={beta} k={k}",
                              lambda x: F.local_response_norm(x, size, alpha, beta, k),
                              lambda x: local_response_norm_reference(x, size, alpha, beta, k), [x])

    def gradcheck_cases(self, device):
        cases = []
        for shape, layout in (((2, 6, 3, 4), "contiguous"), ((2, 6, 3, 4), "channels_last"), ((3, 4, 5), "contiguous")):
            x = _input(shape, torch.float64, device, layout).requires_grad_()
            cases += [GradCase(f"lrn {shape} {layout} size 3", lambda x: F.local_response_norm(x, 3, 0.5, 0.75, 1.0),
                               (x,)),
                      GradCase(f"lrn {shape} {layout} size 2", lambda x: F.local_response_norm(x, 2, 1.0, 1.5, 2.0),
                               (x,))]
        return cases

    def gradgradcheck_cases(self, device):
        return self.gradcheck_cases(device)

    def opcheck_samples(self, device):
        def inp(shape, dtype=torch.float32, layout="contiguous", grad=False):
            t = _input(shape, dtype, device, layout)
            return t.requires_grad_() if grad else t

        x, g = inp((2, 6, 5, 4)), inp((2, 6, 5, 4))
        return [(ops.local_response_norm, args, {}) for args in (
            (inp((2, 6, 5, 4)), 3, 1e-4, 0.75, 1.0),
            (inp((2, 6, 5, 4), torch.bfloat16, "channels_last", True), 2, 0.5, 0.75, 2.0),
            (inp((2, 6, 7), torch.float64, grad=True), 5, 1.0, 1.5, 1.0),
        )] + [(ops.local_response_norm_backward, (g, x, 3, 1e-4, 0.75, 1.0), {})]

    def compile_cases(self, device):
        x = _input((2, 8, 5, 5), torch.float32, device, "channels_last")
        yield Against("LocalResponseNorm module", torch_dnn.nn.LocalResponseNorm(3), torch.nn.LocalResponseNorm(3),
                      [x])
        yield Against("local_response_norm", lambda x: F.local_response_norm(x, 4, 0.5, 0.75, 2.0),
                      lambda x: TF.local_response_norm(x, 4, 0.5, 0.75, 2.0), [_input((2, 6, 9), torch.float32, device)])

    def bad_inputs(self):
        return [
            BadInput(lambda: ops.local_response_norm(torch.ones(2, 3, 4), 0, 1e-4, 0.75, 1.0),
                     "torch_dnn.local_response_norm", "size"),
            BadInput(lambda: ops.local_response_norm_backward(torch.ones(2, 3, 5), torch.ones(2, 3, 4), 2, 1e-4, 0.75,
                                                              1.0), "torch_dnn.local_response_norm_backward", "grad_out"),
        ]

    def cuda_graph_step(self):
        x = _input((4, 32, 28, 28), torch.bfloat16, "cuda", "channels_last").requires_grad_()

        def step():
            y = F.local_response_norm(x, 5)
            (gx,) = torch.autograd.grad(y.float().square().sum(), [x])
            return y, gx

        return step, lambda: x.copy_(_input((4, 32, 28, 28), torch.bfloat16, "cuda", "channels_last"))

    def past_2_31_cases(self):
        return {layout: lambda layout=layout: _past_2_31_elements(layout) for layout in ("contiguous", "channels_last")}


def _past_2_31_elements(layout):
    # 64-bit offsets: rows of the last image past 2^31 elements. The window runs across channels only, so the last
    # rows (all channels) are a problem of their own: their reference is the op on them alone.
    x = torch.empty((1, 5, 20727, 20727), dtype=torch.bfloat16, device="cuda").uniform_(-2, 2)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    assert x.numel() > 2**31
    tail = x[:, :, -3:].contiguous()
    y = F.local_response_norm(x, 3, 0.5, 0.75, 1.0)
    v = compare(y[:, :, -3:], local_response_norm_reference(tail, 3, 0.5, 0.75, 1.0),
                local_response_norm_reference(tail.double(), 3, 0.5, 0.75, 1.0), name=f"lrn past 2^31 {layout}")
    assert v, v.message
    del y
    g = torch.empty_like(x).uniform_(-1, 1)
    dx = ops.local_response_norm_backward(g, x, 3, 0.5, 0.75, 1.0)
    grads = []
    for t in (tail, tail.double()):
        t = t.clone().requires_grad_()
        (d,) = torch.autograd.grad(local_response_norm_reference(t, 3, 0.5, 0.75, 1.0), [t],
                                   g[:, :, -3:].to(t.dtype))
        grads.append(d)
    v = compare(dx[:, :, -3:], *grads, grad=True, name=f"lrn backward past 2^31 {layout}")
    assert v, v.message


@pytest.mark.parametrize("device", devices())
def test_empty_batch(device):
    x = _input((0, 3, 4, 4), torch.float32, device)
    assert F.local_response_norm(x, 2) is x  # as PyTorch: the empty input itself


@pytest.mark.parametrize("device", devices())
def test_special_values(device):
    nan, inf = float("nan"), float("inf")
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        lx = _input((2, 5, 3, 3), dtype, device)
        lx[0, 1, 1, 1] = nan
        lx[1, 2, 0, 0] = inf
        torch.testing.assert_close(F.local_response_norm(lx, 3), local_response_norm_reference(lx, 3), equal_nan=True)


@pytest.mark.parametrize("device", devices())
def test_grad_layouts(device):
    # grad_output in another layout than the input (channels_last vs NCHW, strided): same gradients as PyTorch's
    for x_layout, g_layout in MIXED_GRAD_LAYOUTS:
        x = _input((2, 8, 5, 6), torch.float64, device, x_layout).requires_grad_()
        g = _input((2, 8, 5, 6), torch.float64, device, g_layout, -1, 1)
        (a,) = torch.autograd.grad(F.local_response_norm(x, 3, 0.5), [x], g)
        (r,) = torch.autograd.grad(TF.local_response_norm(x, 3, 0.5), [x], g)
        torch.testing.assert_close(a, r, msg=lambda m: f"{x_layout} / {g_layout}: {m}")


@pytest.mark.parametrize("device", devices())
def test_module_and_convert(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.LocalResponseNorm(3, alpha=1.0),
                                torch.nn.Conv2d(8, 4, 1)).to(device, torch.float64)
    converted, report = torch_dnn.convert(model)
    assert isinstance(converted[1], torch_dnn.nn.LocalResponseNorm) and len(report.swapped) == 1, str(report)
    assert repr(converted) == repr(model)
    assert converted.state_dict().keys() == model.state_dict().keys()
    x = _input((2, 3, 7, 6), torch.float64, device, "channels_last")
    assert_models_agree(model, converted, x, name="converted model")


class TestErrors(expecttest.TestCase):
    def test_lrn_rank(self):
        with self.assertRaises(ValueError) as cm:
            F.local_response_norm(torch.ones(2, 3), 2)
        self.assertExpectedInline(first_line(cm.exception), """Expected 3D or higher dimensionality input (got 2 dimensions)""")


@pytest.mark.cuda
def test_cuda_outputs_fully_written():
    # the caching allocator hands back a NaN-poisoned block: every element must be overwritten with PyTorch's value
    for shape, layout in (((3, 24, 37, 41), "contiguous"), ((3, 24, 37, 41), "channels_last"),
                          ((2, 8, 300, 300), "contiguous"), ((2, 8, 300, 300), "channels_last")):
        x = _input(shape, torch.float32, "cuda", layout)
        g = _input(shape, torch.float32, "cuda", "contiguous", -1, 1)
        poison = torch.full((4 * x.numel(),), float("nan"), device="cuda")
        del poison
        xs = x.clone().requires_grad_()
        y = F.local_response_norm(xs, 5)
        (dx,) = torch.autograd.grad(y, [xs], g)
        peer_in, ref_in = x.clone().requires_grad_(), x.double().requires_grad_()
        peer, ref = TF.local_response_norm(peer_in, 5), TF.local_response_norm(ref_in, 5)
        v = compare(y, peer, ref, name=f"lrn {shape} {layout} poisoned")
        assert v, v.message
        v = compare(dx, torch.autograd.grad(peer, [peer_in], g)[0], torch.autograd.grad(ref, [ref_in], g.double())[0],
                    grad=True, name=f"lrn {shape} {layout} poisoned, backward")
        assert v, v.message


@pytest.mark.cuda
def test_cuda_autocast_dtypes():
    # the output dtype PyTorch's op gives under autocast: float32 (its pow autocasts)
    x = _input((2, 8, 5, 5), torch.bfloat16, "cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ours, theirs = F.local_response_norm(x, 3), TF.local_response_norm(x, 3)
    assert ours.dtype == theirs.dtype
    torch.testing.assert_close(ours, theirs, atol=2e-2, rtol=2e-2)
