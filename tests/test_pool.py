"""Pooling family: max_pool2d (values, PyTorch's indices, NaN), avg_pool2d (padding, ceil_mode,
count_include_pad, divisor_override), adaptive_avg_pool2d, over every dtype, NCHW / channels_last / other
layouts, 3-D input and empty batches; opcheck, gradcheck, modules, bad arguments."""
import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.reference import avg_pool2d_reference
from tests.utils import assert_cuda_graph_replays, ALL_DTYPES, assert_matches_torch, devices, first_line, make_input, opcheck_samples

ops = torch.ops.torch_dnn

# (shape, layout, kwargs)
MAX_CASES = [
    ((2, 3, 9, 11), "contiguous", dict(kernel_size=3, stride=2, padding=1)),
    ((2, 3, 9, 11), "channels_last", dict(kernel_size=3, stride=2, padding=1)),
    ((2, 16, 9, 11), "channels_last", dict(kernel_size=3, stride=2, padding=1)),  # 16-byte vectors along C
    ((2, 3, 10, 9), "contiguous", dict(kernel_size=3, stride=2, ceil_mode=True)),
    ((2, 8, 10, 9), "channels_last", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ((1, 2, 13, 12), "contiguous", dict(kernel_size=3, stride=1, padding=1, dilation=2)),
    ((1, 8, 13, 12), "channels_last", dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(2, 3))),
    ((2, 3, 8, 8), "transposed", dict(kernel_size=2)),
    ((2, 3, 8, 8), "strided", dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0))),
    ((3, 7, 10), "contiguous", dict(kernel_size=2)),
    ((5, 7, 10), "contiguous", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ((1, 1, 1, 1), "contiguous", dict(kernel_size=1)),
    ((0, 3, 8, 8), "contiguous", dict(kernel_size=3, stride=2, padding=1)),
    ((0, 3, 8, 8), "channels_last", dict(kernel_size=3, stride=2, padding=1)),
]

AVG_CASES = [
    ((2, 3, 9, 11), "contiguous", dict(kernel_size=3, stride=2, padding=1)),
    ((2, 3, 9, 11), "channels_last", dict(kernel_size=3, stride=2, padding=1)),
    ((2, 16, 9, 11), "channels_last", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ((2, 3, 9, 11), "contiguous", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ((2, 3, 10, 9), "contiguous", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ((2, 8, 10, 9), "channels_last", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ((2, 3, 10, 9), "contiguous", dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), divisor_override=3)),
    ((2, 8, 10, 9), "channels_last", dict(kernel_size=2, ceil_mode=True, divisor_override=5)),
    ((2, 3, 8, 8), "transposed", dict(kernel_size=2)),
    ((3, 7, 10), "contiguous", dict(kernel_size=3, stride=1, padding=1)),
    ((0, 3, 8, 8), "channels_last", dict(kernel_size=3, stride=2)),
]

ADAPTIVE_CASES = [
    ((2, 3, 9, 11), "contiguous", dict(output_size=1)),
    ((2, 16, 7, 7), "channels_last", dict(output_size=1)),
    ((2, 3, 10, 9), "channels_last", dict(output_size=(3, 5))),
    ((2, 3, 10, 9), "contiguous", dict(output_size=(4, None))),
    ((2, 3, 3, 3), "contiguous", dict(output_size=5)),  # larger than the input: windows overlap
    ((3, 13, 6), "contiguous", dict(output_size=(4, 4))),
    ((2, 3, 8, 8), "transposed", dict(output_size=3)),
    ((0, 3, 8, 8), "contiguous", dict(output_size=2)),
]

FNS = {
    "max_pool2d": (F.max_pool2d, TF.max_pool2d, MAX_CASES),
    "avg_pool2d": (F.avg_pool2d, avg_pool2d_reference, AVG_CASES),  # see torch_dnn/reference/pool.py
    "adaptive_avg_pool2d": (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, ADAPTIVE_CASES),
}

# Larger sizes for the GPU's grid-stride loops and both NHWC paths (vector and scalar along C).
CUDA_CASES = [
    ((4, 64, 56, 57), "channels_last", dict(kernel_size=3, stride=2, padding=1)),
    ((4, 64, 56, 57), "contiguous", dict(kernel_size=3, stride=2, padding=1)),
    ((2, 12, 33, 31), "channels_last", dict(kernel_size=3, stride=2, padding=1)),
]


def _input(shape, dtype, device, layout):
    if layout == "transposed":  # NCHW with H and W swapped in memory: neither NCHW nor channels_last
        return make_input(shape[:2] + shape[2:][::-1], dtype, device).transpose(-1, -2)
    return make_input(shape, dtype, device, layout)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(FNS))
def test_against_torch(name, dtype, device):
    ours, theirs, cases = FNS[name]
    extra = [] if device == "cpu" else [c for c in CUDA_CASES if name != "adaptive_avg_pool2d"]
    for shape, layout, kw in cases + extra:
        x = _input(shape, dtype, device, layout)
        assert_matches_torch(lambda x: ours(x, **kw), lambda x: theirs(x, **kw), [x],
                             name=f"{name} {shape} {layout} {kw} {dtype}")
        y, y_ref = ours(x, **kw), theirs(x, **kw)
        # the output's layout follows PyTorch's (channels_last in, channels_last out)
        if y.numel() > 1 and x.dim() == 4 and layout in ("contiguous", "channels_last"):
            assert y.stride() == y_ref.stride(), f"{name} {shape} {layout}: strides {y.stride()} != {y_ref.stride()}"


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_max_pool2d_indices(dtype, device):
    for shape, layout, kw in MAX_CASES:
        x = _input(shape, dtype, device, layout)
        y, i = F.max_pool2d(x, **kw, return_indices=True)
        y_ref, i_ref = TF.max_pool2d(x, **kw, return_indices=True)
        assert i.dtype == torch.int64
        assert torch.equal(i, i_ref), f"{shape} {layout} {kw}"
        assert torch.equal(y, y_ref)
        if x.dim() == 4 and "dilation" not in kw and "ceil_mode" not in kw:
            # the index convention is PyTorch's: max_unpool2d puts every maximum back where it was
            up = TF.max_unpool2d(y, i, kw["kernel_size"], kw.get("stride"), kw.get("padding", 0), output_size=x.shape[-2:])
            assert torch.equal(up, TF.max_unpool2d(y_ref, i_ref, kw["kernel_size"], kw.get("stride"),
                                                   kw.get("padding", 0), output_size=x.shape[-2:]))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_max_pool2d_special_values(layout, device):
    inf, nan = float("inf"), float("nan")
    for dtype in (torch.float32, torch.bfloat16):
        x = make_input((2, 8, 6, 7), dtype, device, layout)
        x[0, 0, 0, 0] = nan            # in the first window (with padding)
        x[0, 1, 2, 2:4] = nan          # two NaNs in one window: PyTorch keeps the last
        x[1, 2, :3, :3] = -inf         # a window of only -inf: the first element's index
        x[1, 3, 4, 4] = inf
        for kw in (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, ceil_mode=True)):
            y, i = F.max_pool2d(x, **kw, return_indices=True)
            y_ref, i_ref = TF.max_pool2d(x, **kw, return_indices=True)
            torch.testing.assert_close(y, y_ref, equal_nan=True, rtol=0, atol=0)
            assert torch.equal(i, i_ref), kw
            assert_matches_torch(lambda x: F.max_pool2d(x, **kw), lambda x: TF.max_pool2d(x, **kw), [x],
                                 name=f"max_pool2d special {layout} {kw}")
        for fn, tfn in ((F.avg_pool2d, TF.avg_pool2d), (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d)):
            torch.testing.assert_close(fn(x, 3), tfn(x, 3), equal_nan=True)


@pytest.mark.parametrize("device", devices())
def test_empty_batch_backward(device):
    for layout in ("contiguous", "channels_last"):
        x = make_input((0, 3, 8, 8), torch.float32, device, layout).requires_grad_()
        for fn in (lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: F.avg_pool2d(x, 3, 2, 1),
                   lambda x: F.adaptive_avg_pool2d(x, 2)):
            fn(x).sum().backward()
            assert x.grad.shape == x.shape
            x.grad = None


@pytest.mark.parametrize("device", devices())
def test_gradcheck(device):
    for layout in ("contiguous", "channels_last"):
        x = make_input((2, 3, 7, 8), torch.float64, device, layout).requires_grad_()
        assert torch.autograd.gradcheck(lambda x: F.max_pool2d(x, 3, 2, 1), (x,))
        assert torch.autograd.gradcheck(lambda x: F.max_pool2d(x, 2, 1, 0, 2, ceil_mode=True), (x,))
        assert torch.autograd.gradcheck(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), (x,))
        assert torch.autograd.gradcheck(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), (x,))
        assert torch.autograd.gradcheck(lambda x: F.avg_pool2d(x, 2, divisor_override=3), (x,))
        assert torch.autograd.gradcheck(lambda x: F.adaptive_avg_pool2d(x, (3, 5)), (x,))
    x3 = make_input((3, 7, 8), torch.float64, device).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: F.max_pool2d(x, 3, 2, 1), (x3,))
    assert torch.autograd.gradcheck(lambda x: F.adaptive_avg_pool2d(x, 2), (x3,))


@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    def x(shape, dtype, layout="contiguous", grad=False):
        t = make_input(shape, dtype, device, layout)
        return t.requires_grad_() if grad else t

    win = ((3, 3), (2, 2), (1, 1))
    opcheck_samples(ops.max_pool2d, [
        ((x((2, 3, 9, 8), torch.float32), *win, (1, 1), False), {}),
        ((x((2, 8, 9, 8), torch.bfloat16, "channels_last", True), *win, (1, 1), True), {}),
        ((x((3, 9, 8), torch.float64, grad=True), (2, 3), (1, 2), (1, 0), (2, 1), False), {}),
        ((x((2, 3, 9, 8), torch.float16, "transposed", True), *win, (1, 1), True), {}),
    ])
    opcheck_samples(ops.avg_pool2d, [
        ((x((2, 3, 9, 8), torch.float32), *win, False, True, None), {}),
        ((x((2, 8, 9, 8), torch.bfloat16, "channels_last", True), *win, True, False, None), {}),
        ((x((3, 9, 8), torch.float64, grad=True), (2, 3), (1, 2), (1, 0), False, True, 5), {}),
    ])
    opcheck_samples(ops.adaptive_avg_pool2d, [
        ((x((2, 3, 9, 8), torch.float32), (1, 1)), {}),
        ((x((2, 8, 9, 8), torch.bfloat16, "channels_last", True), (4, 3)), {}),
        ((x((3, 9, 8), torch.float64, grad=True), (5, 5)), {}),
    ])
    xi = x((2, 8, 9, 8), torch.float32, "channels_last")
    y, idx = ops.max_pool2d(xi, *win, (1, 1), False)
    g = torch.randn_like(y)
    opcheck_samples(ops.max_pool2d_backward, [((g, xi, idx, *win, (1, 1), False), {})])
    opcheck_samples(ops.avg_pool2d_backward, [((g, xi, *win, False, True, None), {})])
    opcheck_samples(ops.adaptive_avg_pool2d_backward, [((g, xi), {})])


@pytest.mark.parametrize("device", devices())
def test_modules_and_convert(device):
    model = torch.nn.Sequential(
        torch.nn.MaxPool2d(3, 2, 1), torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False),
        torch.nn.AdaptiveAvgPool2d((2, 3)),
    ).to(device)
    ours, report = torch_dnn.convert(model)
    assert [type(m) for m in ours] == [torch_dnn.nn.MaxPool2d, torch_dnn.nn.AvgPool2d, torch_dnn.nn.AdaptiveAvgPool2d]
    assert len(report.swapped) == 3
    x = make_input((2, 8, 11, 10), torch.float32, device, "channels_last")
    torch.testing.assert_close(ours(x), model(x))
    m = torch_dnn.nn.MaxPool2d(2, return_indices=True)
    y, i = m(x)
    y_ref, i_ref = torch.nn.MaxPool2d(2, return_indices=True)(x)
    assert torch.equal(y, y_ref) and torch.equal(i, i_ref)


@pytest.mark.parametrize("device", devices())
def test_compile(device):
    x = make_input((2, 8, 11, 10), torch.float32, device, "channels_last")
    fn = torch.compile(lambda x: F.max_pool2d(x, 3, 2, 1) + F.avg_pool2d(x, 3, 2, 1), fullgraph=True)
    torch.testing.assert_close(fn(x), TF.max_pool2d(x, 3, 2, 1) + TF.avg_pool2d(x, 3, 2, 1))


class TestErrors(expecttest.TestCase):
    def _msg(self, fn):
        with self.assertRaises(RuntimeError) as cm:
            fn()
        return first_line(cm.exception)

    def test_padding_over_half_kernel(self):
        self.assertExpectedInline(self._msg(lambda: F.max_pool2d(torch.ones(1, 1, 8, 8), 3, 1, 2)), """torch_dnn.max_pool2d: expected padding to be at most half of kernel_size, but got padding=[2, 2] and kernel_size=[3, 3]""")

    def test_output_too_small(self):
        self.assertExpectedInline(self._msg(lambda: F.avg_pool2d(torch.ones(1, 1, 2, 2), 3)), """torch_dnn.avg_pool2d: output size is too small: input size (2, 2) gives output size (0, 0)""")

    def test_wrong_rank(self):
        self.assertExpectedInline(self._msg(lambda: F.adaptive_avg_pool2d(torch.ones(4, 4), 2)), """torch_dnn.adaptive_avg_pool2d: expected input to be 3-D (C, H, W) or 4-D (N, C, H, W) with non-zero C, H and W, but got [4, 4]""")

    def test_other_bad_arguments(self):
        x = torch.ones(1, 2, 8, 8)
        for fn, words in (
            (lambda: F.max_pool2d(x, 0), "kernel_size"),
            (lambda: F.max_pool2d(x, 2, stride=0), "stride"),
            (lambda: F.max_pool2d(x, 2, padding=-1), "padding"),
            (lambda: F.max_pool2d(x, 2, dilation=0), "dilation"),
            (lambda: F.avg_pool2d(x, 2, divisor_override=0), "divisor_override"),
            (lambda: F.adaptive_avg_pool2d(x, 0), "output_size"),
            (lambda: F.max_pool2d(torch.ones(1, 2, 8, 8, dtype=torch.int32), 2), "input"),
            (lambda: F.max_pool2d(torch.ones(1, 0, 8, 8), 2), "input"),
            (lambda: ops.avg_pool2d_backward(torch.ones(1, 2, 3, 3), x, (2, 2), (2, 2), (0, 0), False, True, None),
             "grad_output"),
        ):
            msg = self._msg(fn)
            assert msg.startswith("torch_dnn.") and words in msg, msg


@pytest.mark.cuda
def test_cuda_past_2_31_elements_and_poison():
    # 64-bit indexing: the last (n, c) planes of a channels_last input past 2^31 elements
    x = torch.empty((2, 64, 4097, 4097), dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    x = x.contiguous(memory_format=torch.channels_last)
    for fn, tfn in ((lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: TF.max_pool2d(x, 3, 2, 1)),
                    (lambda x: F.avg_pool2d(x, 3, 2, 1), lambda x: TF.avg_pool2d(x, 3, 2, 1))):
        y = fn(x)
        tail = x[-1:, -2:].contiguous()
        torch.testing.assert_close(y[-1:, -2:], tfn(tail))
        del y
    del x
    # every element written: the caching allocator hands back a NaN-poisoned block
    for layout in ("contiguous", "channels_last"):
        x = make_input((3, 24, 37, 41), torch.float32, "cuda", layout).requires_grad_()
        for fn in (lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
                   lambda x: F.adaptive_avg_pool2d(x, (5, 7))):
            poison = torch.full((4 * x.numel(),), float("nan"), device="cuda")
            del poison
            y = fn(x)
            (g,) = torch.autograd.grad(y.sum(), [x])
            assert not torch.isnan(y).any() and not torch.isnan(g).any()


@pytest.mark.cuda
def test_cuda_graph_capture():
    x = make_input((4, 16, 28, 28), torch.bfloat16, "cuda", "channels_last").requires_grad_()

    def step():
        y = F.max_pool2d(x, 3, 2, 1) + F.avg_pool2d(x, 3, 2, 1)
        z = F.adaptive_avg_pool2d(y, 1)
        (gx,) = torch.autograd.grad(z.float().square().sum(), [x])
        return z, gx

    assert_cuda_graph_replays(step, lambda: x.copy_(make_input((4, 16, 28, 28), torch.bfloat16, "cuda", "channels_last")))


@pytest.mark.cuda
def test_cuda_deterministic_backward():
    # gather-style backward: bitwise the same on every run
    x = make_input((8, 32, 56, 56), torch.float32, "cuda", "channels_last").requires_grad_()
    g = None
    for _ in range(3):
        y = F.max_pool2d(x, 3, 1, 1) + F.avg_pool2d(x, 3, 1, 1)
        (gx,) = torch.autograd.grad(y, [x], torch.ones_like(y))
        assert g is None or torch.equal(g, gx)
        g = gx


@pytest.mark.parametrize("device", devices())
def test_max_pool2d_window_only_in_padding(device):
    # With dilation a window can hold only padding: PyTorch returns -inf with the index of the element after
    # the padding, which can lie outside the plane (its own CPU backward then writes out of bounds). We return
    # the same values and indices; the gradient of such outputs reaches no input.
    x = make_input((1, 1, 6), torch.float64, device).requires_grad_()
    kw = dict(kernel_size=2, stride=(1, 2), padding=1, dilation=2)
    y, i = F.max_pool2d(x, **kw, return_indices=True)
    y_ref, i_ref = TF.max_pool2d(x.detach(), **kw, return_indices=True)
    assert torch.equal(y, y_ref) and torch.equal(i, i_ref)
    (g,) = torch.autograd.grad(y, [x], torch.ones_like(y))
    assert torch.equal(g, torch.zeros_like(x))


@pytest.mark.parametrize("device", devices())
def test_random_configurations(device):
    # Random sizes, windows, strides, paddings, dilations and flags in float64: same accept/reject decision
    # as PyTorch, same values, indices, strides and gradients.
    import random

    rng = random.Random(0)
    for _ in range(150):
        kh, kw = rng.randint(1, 4), rng.randint(1, 4)
        shape = (rng.choice([1, 2]), rng.choice([1, 3, 8]), rng.randint(1, 12), rng.randint(1, 12))
        x = make_input(shape, torch.float64, device, rng.choice(["contiguous", "channels_last"]))
        x = (x[0] if rng.random() < 0.2 else x).requires_grad_()
        win = dict(kernel_size=(kh, kw), stride=(rng.randint(1, 3), rng.randint(1, 3)),
                   padding=(rng.randint(0, kh // 2), rng.randint(0, kw // 2)), ceil_mode=rng.random() < 0.5)
        for ours, theirs, kw_ in (
            (F.max_pool2d, TF.max_pool2d, dict(win, dilation=(rng.randint(1, 2), rng.randint(1, 2)), return_indices=True)),
            (F.avg_pool2d, avg_pool2d_reference, dict(win, count_include_pad=rng.random() < 0.5,
                                                divisor_override=rng.choice([None, 2]))),
            (F.adaptive_avg_pool2d, TF.adaptive_avg_pool2d, dict(output_size=(rng.randint(1, 8), rng.randint(1, 8)))),
        ):
            try:
                r = theirs(x, **kw_)
            except RuntimeError:
                with pytest.raises(RuntimeError):
                    ours(x, **kw_)
                continue
            o = ours(x, **kw_)
            if isinstance(r, tuple):
                # indices of windows that hold only padding (-inf) differ between PyTorch's own CPU and CUDA
                # kernels: compare the others (see test_max_pool2d_window_only_in_padding)
                finite = torch.isfinite(r[0])
                assert torch.equal(o[1][finite], r[1][finite]), kw_
                o, r = o[0], r[0]
            torch.testing.assert_close(o, r, msg=lambda m: f"{x.shape} {kw_}: {m}")
            if o.dim() == 4 and o.numel() > 1:
                assert o.stride() == r.stride(), kw_
            if torch.isinf(r).any():
                continue  # windows only in padding: see test_max_pool2d_window_only_in_padding
            g = torch.randn_like(r)
            torch.testing.assert_close(torch.autograd.grad(o, x, g)[0], torch.autograd.grad(r, x, g)[0])
