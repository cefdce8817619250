"""Convolutions (conv1d/2d/3d, conv_transpose1d/2d/3d) against torch.nn.functional's over odd sizes, every padding
kind, stride larger than the kernel, dilation, groups and depthwise with channel multipliers, empty batches,
non-contiguous and channels-last inputs and grad_outputs, with the family tester's checks (the error rule,
opcheck, gradcheck and gradgradcheck of input, weight and bias, torch.compile against PyTorch, bad input, CUDA
graphs, past 2^31 elements); then the modules (padding modes, output_size), convert, layouts and errors."""
import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from tests.family_tester import Against, BadInput, FamilyTester, GradCase, ModelCase
from tests.utils import assert_models_agree, devices, first_line, in_layout, random_in_layout
from torch_dnn.testing import compare

# convert swaps convolutions on request only (docs/conv.md)
CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d,
         torch.nn.ConvTranspose3d)

ops = torch.ops.torch_dnn


# (label, functional name, input shape, weight shape, bias, keyword arguments, input layout, grad_output layout)
CASES = [
    ("3->7 3x3 pad 1", "conv2d", (2, 3, 5, 5), (7, 3, 3, 3), True, dict(padding=1), "contiguous", None),
    ("7->3 3x3/2 NHWC", "conv2d", (2, 7, 13, 13), (3, 7, 3, 3), True, dict(stride=2), "channels_last",
     "channels_last"),
    ("H=1 (1,3) kernel", "conv2d", (3, 3, 1, 5), (7, 3, 1, 3), True, dict(padding=(0, 1)), "contiguous", None),
    ("stride 3 > kernel 2", "conv2d", (2, 7, 13, 13), (3, 7, 2, 2), False, dict(stride=3), "contiguous", None),
    ("dilation 2 pad 2", "conv2d", (2, 3, 13, 13), (7, 3, 3, 3), True, dict(padding=2, dilation=2), "transposed",
     "transposed"),
    ("groups 3", "conv2d", (2, 6, 5, 13), (9, 2, 3, 3), True, dict(padding=1, groups=3), "contiguous",
     "channels_last"),
    ("depthwise x2", "conv2d", (2, 7, 13, 13), (14, 1, 3, 3), True, dict(padding=1, groups=7), "channels_last", None),
    ("depthwise 5x5/2", "conv2d", (2, 7, 13, 5), (7, 1, 5, 5), False, dict(stride=2, padding=2, groups=7),
     "contiguous", None),
    ("'same' even kernel", "conv2d", (2, 3, 5, 13), (7, 3, 4, 2), True, dict(padding="same"), "contiguous", None),
    ("'same' dilation 2", "conv2d", (2, 3, 13, 5), (3, 3, 3, 3), True, dict(padding="same", dilation=2),
     "channels_last", None),
    ("'valid'", "conv2d", (2, 3, 13, 13), (7, 3, 5, 5), True, dict(padding="valid"), "strided", None),
    ("unbatched", "conv2d", (3, 5, 5), (7, 3, 3, 3), True, dict(padding=1), "contiguous", None),
    ("1x1", "conv2d", (2, 7, 5, 5), (3, 7, 1, 1), True, {}, "channels_last", "contiguous"),
    ("empty batch", "conv2d", (0, 3, 5, 5), (7, 3, 3, 3), True, dict(padding=1), "contiguous", None),
    ("1-D stride 2", "conv1d", (2, 3, 13), (7, 3, 3), True, dict(stride=2, padding=1), "contiguous", None),
    ("1-D 'same' even", "conv1d", (2, 7, 13), (3, 7, 4), True, dict(padding="same", dilation=1), "nlc", None),
    ("1-D depthwise", "conv1d", (2, 7, 5), (7, 1, 3), False, dict(padding=1, groups=7), "contiguous", None),
    ("3-D", "conv3d", (2, 3, 5, 5, 5), (7, 3, 3, 3, 3), True, dict(padding=1), "contiguous", None),
    ("3-D NDHWC /2 groups", "conv3d", (2, 6, 5, 7, 5), (4, 3, 3, 2, 3), True, dict(stride=2, groups=2),
     "channels_last", None),
    ("T 3x3/2 output_padding 1", "conv_transpose2d", (2, 7, 5, 5), (7, 3, 3, 3), True,
     dict(stride=2, padding=1, output_padding=1), "contiguous", None),
    ("T groups dilation", "conv_transpose2d", (2, 6, 5, 13), (6, 2, 3, 3), True,
     dict(stride=2, padding=2, groups=3, dilation=2, output_padding=1), "channels_last", "channels_last"),
    ("T stride 3 > kernel", "conv_transpose2d", (2, 3, 5, 1), (3, 7, 2, 1), False, dict(stride=3), "contiguous",
     None),
    ("T 1-D", "conv_transpose1d", (2, 3, 13), (3, 7, 4), True, dict(stride=2, padding=1, output_padding=1),
     "contiguous", None),
    ("T 3-D", "conv_transpose3d", (2, 3, 5, 5, 5), (3, 4, 3, 3, 3), True, dict(stride=2, padding=1),
     "contiguous", None),
    ("T empty batch", "conv_transpose2d", (0, 3, 5, 5), (3, 7, 3, 3), True, dict(stride=2), "contiguous", None),
]


def _case_inputs(case, dtype, device):
    _, name, xs, ws, bias, _, x_layout, _ = case
    x = random_in_layout(xs, dtype, device, x_layout)
    w = random_in_layout(ws, dtype, device, low=-0.5, high=0.5)
    channels = ws[1] * _groups(case) if name.startswith("conv_transpose") else ws[0]
    b = random_in_layout((channels,), dtype, device) if bias else None
    return x, w, b


def _groups(case):
    return case[5].get("groups", 1)


def _fns(case):
    _, name, _, _, _, kw, _, _ = case
    ours, theirs = getattr(F, name), getattr(TF, name)
    return (lambda x, w, b=None: ours(x, w, b, **kw)), (lambda x, w, b=None: theirs(x, w, b, **kw))


class TestConv(FamilyTester):
    def against_torch(self, device, dtype, variant):
        for case in CASES:
            x, w, b = _case_inputs(case, dtype, device)
            ours, theirs = _fns(case)
            inputs = [x, w] + ([b] if b is not None else [])
            g_layout = case[7]
            g = None
            if g_layout is not None:
                with torch.no_grad():
                    shape = theirs(*[t.double() for t in inputs]).shape
                g = random_in_layout(shape, dtype, device, g_layout)
            yield Against(f"{case[1]} {case[0]} {dtype}", ours, theirs, inputs, grad=x.numel() > 0, grad_output=g)

    def gradcheck_cases(self, device):
        out = []
        for label in ("3->7 3x3 pad 1", "groups 3", "depthwise 5x5/2", "1-D stride 2", "3-D", "T groups dilation",
                      "T 1-D"):
            case = next(c for c in CASES if c[0] == label)
            x, w, b = _case_inputs(case, torch.float64, device)
            x = x[:1] if x.dim() == 4 and x.shape[0] > 1 else x  # small: gradcheck is O(elements^2)
            ours, _ = _fns(case)
            inputs = tuple(t.detach().requires_grad_() for t in (x, w, b) if t is not None)
            out.append(GradCase(f"{case[1]} {label}", ours, inputs))
        return out

    def gradgradcheck_cases(self, device):
        keep = ("3->7 3x3 pad 1", "T groups dilation")
        return [c for c in self.gradcheck_cases(device) if any(c.name.endswith(k) for k in keep)]

    def opcheck_samples(self, device):
        def t(shape, dtype=torch.float32, layout="contiguous", grad=False):
            r = random_in_layout(shape, dtype, device, layout)
            return r.requires_grad_() if grad else r

        x, w = t((2, 3, 5, 5)), t((4, 3, 3, 3))
        g = t((2, 4, 5, 5))
        return [
            (ops.convolution, (x, w, t((4,)), [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}),
            (ops.convolution, (t((2, 4, 7, 5), torch.bfloat16, "channels_last", True), t((6, 2, 3, 3), torch.bfloat16,
                               grad=True), None, [2], [1], [1], False, [0], 2), {}),
            (ops.convolution, (t((2, 3, 5), torch.float64, grad=True), t((3, 2, 3), torch.float64, grad=True),
                               t((2,), torch.float64, grad=True), [2], [1], [1], True, [1], 1), {}),
            (ops.convolution, (t((2, 2, 3, 4, 3)), t((3, 2, 2, 2, 2)), None, [1], [0], [1], False, [0], 1), {}),
            (ops.conv_backward_input, (g, w, [2, 3, 5, 5], [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}),
            (ops.conv_backward_input, (in_layout(g, "channels_last"), w, [2, 3, 5, 5], [1], [1], [1], False, [0], 1),
             {}),
            (ops.conv_backward_weight, (g, x, [4, 3, 3, 3], [1, 1], [1, 1], [1, 1], False, [0, 0], 1), {}),
            (ops.conv_backward_weight, (t((2, 3, 13), torch.float64), t((2, 4, 6), torch.float64), [4, 3, 2], [2], [0],
                                        [1], True, [1], 1), {}),
            (ops.conv_backward_bias, (g,), {}),
        ]

    def compile_cases(self, device):
        for label in ("7->3 3x3/2 NHWC", "T 3x3/2 output_padding 1", "1-D 'same' even"):
            case = next(c for c in CASES if c[0] == label)
            x, w, b = _case_inputs(case, torch.float32, device)
            ours, theirs = _fns(case)
            yield Against(f"{case[1]} {label}", ours, theirs, [x, w, b])
        torch.manual_seed(0)
        native = _small_cnn().to(device)
        converted, _ = torch_dnn.convert(native, include=CONVS)
        yield ModelCase("small CNN", converted, native,
                        random_in_layout((2, 3, 9, 9), torch.float32, device, "channels_last"))

    def bad_inputs(self):
        x, w = torch.ones(2, 3, 5, 5), torch.ones(4, 3, 3, 3)
        return [
            BadInput(lambda: F.conv2d(x, torch.ones(4, 2, 3, 3)), "torch_dnn.convolution", "channels"),
            BadInput(lambda: F.conv2d(torch.ones(2, 4, 5, 5), torch.ones(3, 2, 3, 3), groups=2),
                     "torch_dnn.convolution", "divisible by groups"),
            BadInput(lambda: F.conv2d(x, torch.ones(4, 3, 7, 7)), "torch_dnn.convolution", "dilated kernel"),
            BadInput(lambda: F.conv2d(x, w, padding=-1), "torch_dnn.convolution", "padding"),
            BadInput(lambda: F.conv2d(x, w, stride=0), "torch_dnn.convolution", "stride"),
            BadInput(lambda: F.conv2d(x, w, groups=0), "torch_dnn.convolution", "groups"),
            BadInput(lambda: F.conv2d(x, w.double()), "torch_dnn.convolution", "weight"),
            BadInput(lambda: F.conv2d(x, w, torch.ones(5)), "torch_dnn.convolution", "bias"),
            BadInput(lambda: F.conv2d(x, w.to("meta")), "torch_dnn.convolution", "device"),
            BadInput(lambda: F.conv2d(x.int(), w.int()), "torch_dnn.convolution", "input"),
            BadInput(lambda: F.conv_transpose2d(x, torch.ones(3, 4, 3, 3), stride=2, output_padding=2),
                     "torch_dnn.convolution", "output_padding"),
            BadInput(lambda: F.conv2d(x[0, 0], w), None, "Expected 3D (unbatched) or 4D (batched) input to conv2d"),
            BadInput(lambda: F.conv2d(x, w, stride=2, padding="same"), None, "strided convolutions"),
            BadInput(lambda: ops.conv_backward_input(torch.ones(2, 4, 4, 4), w, [2, 3, 5, 5], [1], [0], [1], False,
                                                     [0], 1), "torch_dnn.conv_backward_input", "grad_output"),
            BadInput(lambda: ops.conv_backward_weight(torch.ones(2, 4, 3, 3), x, [4, 3, 3], [1], [0], [1], False,
                                                      [0], 1), "torch_dnn.conv_backward_weight", "weight_size"),
        ]

    def cuda_graph_step(self):
        x = random_in_layout((4, 32, 14, 14), torch.bfloat16, "cuda", "channels_last").requires_grad_()
        w = random_in_layout((64, 32, 3, 3), torch.bfloat16, "cuda").requires_grad_()
        b = random_in_layout((64,), torch.bfloat16, "cuda").requires_grad_()

        def step():
            y = F.conv2d(x, w, b, padding=1)
            gx, gw, gb = torch.autograd.grad(y.float().square().sum(), [x, w, b])
            return y, gx, gw, gb

        return step, lambda: x.copy_(random_in_layout((4, 32, 14, 14), torch.bfloat16, "cuda", "channels_last"))

    def past_2_31_cases(self):
        return {"conv1d": _past_2_31_elements}


def _past_2_31_elements():
    # one channel, one long row: 64-bit offsets in the direct kernels (forward and input gradient); the last
    # positions' reference is PyTorch's on the row's tail alone
    n = 2**31 + 4099
    x = torch.empty((1, 1, n), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    w = random_in_layout((1, 1, 3), torch.bfloat16, "cuda")
    y = F.conv1d(x, w, padding=1)
    tail = x[..., -64:]
    v = compare(y[..., -63:], TF.conv1d(tail, w, padding=1)[..., -63:],
                                  TF.conv1d(tail.double(), w.double(), padding=1)[..., -63:], name="conv1d past 2^31")
    assert v, v.message
    del y
    dx = ops.conv_backward_input(x, w, [1, 1, n], [1], [1], [1], False, [0], 1)  # x stands in for grad_output
    ref = [TF.conv_transpose1d(tail.to(d), w.to(d), padding=1)[..., -63:] for d in (torch.bfloat16, torch.float64)]
    v = compare(dx[..., -63:], *ref, grad=True, name="conv1d input gradient past 2^31")
    assert v, v.message


def _small_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, stride=2, groups=4),
        torch.nn.ConvTranspose2d(8, 4, 3, stride=2, output_padding=1), torch.nn.Conv2d(4, 5, 1))


# ---- modules and convert ----

@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "replicate", "circular"])
def test_module_padding_modes(device, padding_mode):
    torch.manual_seed(0)
    for cls, shape in ((torch.nn.Conv1d, (2, 3, 9)), (torch.nn.Conv2d, (2, 3, 7, 6)), (torch.nn.Conv3d, (2, 3, 5, 4, 6))):
        for padding in (2, "same"):
            native = cls(3, 5, 3, padding=padding, padding_mode=padding_mode, dilation=2 if padding == 2 else 1)
            native = native.to(device, torch.float64)
            converted, report = torch_dnn.convert(native, include=CONVS)
            assert type(converted).__name__ == cls.__name__ and type(converted).__module__ == "torch_dnn.nn.conv"
            assert repr(converted) == repr(native)
            assert converted.state_dict().keys() == native.state_dict().keys()
            for k, v in native.state_dict().items():
                assert torch.equal(converted.state_dict()[k], v), k
            x = random_in_layout(shape, torch.float64, device)
            assert_models_agree(native, converted, x, name=f"{cls.__name__} padding={padding} {padding_mode}")


@pytest.mark.parametrize("device", devices())
def test_conv_transpose_output_size(device):
    torch.manual_seed(0)
    for cls, shape, out in ((torch.nn.ConvTranspose1d, (2, 4, 5), [10]), (torch.nn.ConvTranspose2d, (2, 4, 5, 4), [10, 8]),
                            (torch.nn.ConvTranspose3d, (1, 4, 3, 3, 2), [6, 5, 4])):
        native = cls(4, 6, 3, stride=2, padding=1, groups=2).to(device, torch.float64)
        converted, _ = torch_dnn.convert(native, include=CONVS)
        assert isinstance(converted, cls) and type(converted) is not cls
        x = random_in_layout(shape, torch.float64, device)
        y = converted(x, output_size=out)
        assert list(y.shape[2:]) == out
        torch.testing.assert_close(y, native(x, output_size=out))
        with pytest.raises(ValueError):
            converted(x, output_size=[o + 5 for o in out])


@pytest.mark.parametrize("device", devices())
def test_convert_swaps_every_conv(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(_small_cnn(), torch.nn.Flatten(0)).to(device, torch.float64)
    converted, report = torch_dnn.convert(model, include=CONVS)
    assert sum(t.startswith("Conv") for _, t, _ in report.swapped) == 4, str(report)
    x = random_in_layout((2, 3, 9, 9), torch.float64, device, "channels_last")
    assert_models_agree(model, converted, x, name="converted CNN")


# ---- layouts, special values, determinism ----

@pytest.mark.parametrize("device", devices())
def test_result_layouts_as_pytorch(device):
    # the result's and the gradients' strides are PyTorch's for each input / weight / grad_output layout
    for name, xs, ws, kw in (("conv2d", (2, 6, 5, 7), (4, 6, 3, 3), dict(padding=1)),
                             ("conv_transpose2d", (2, 6, 5, 7), (6, 4, 3, 3), dict(stride=2)),
                             ("conv3d", (2, 6, 3, 5, 4), (4, 3, 3, 3, 3), dict(groups=2)),
                             ("conv1d", (2, 6, 7), (4, 6, 3), {})):
        lay = "channels_last" if len(xs) > 3 else "nlc"
        for x_layout, w_layout, g_layout in (("contiguous", "contiguous", lay), (lay, "contiguous", "contiguous"),
                                             ("contiguous", lay, "contiguous"), (lay, lay, lay)):
            for dtype in (torch.float32, torch.float64, torch.bfloat16):
                x = random_in_layout(xs, dtype, device, x_layout).requires_grad_()
                w = random_in_layout(ws, dtype, device, w_layout).requires_grad_()
                xr, wr = (t.detach().clone(memory_format=torch.preserve_format).requires_grad_() for t in (x, w))
                y, yr = getattr(F, name)(x, w, **kw), getattr(TF, name)(xr, wr, **kw)
                what = f"{name} x {x_layout} w {w_layout} g {g_layout} {dtype}"
                assert y.stride() == yr.stride(), what
                g = random_in_layout(yr.shape, dtype, device, g_layout)
                for a, r in zip(torch.autograd.grad(y, [x, w], g), torch.autograd.grad(yr, [xr, wr], g)):
                    assert a.stride() == r.stride(), what


@pytest.mark.parametrize("device", devices())
def test_special_values_propagate(device):
    x = random_in_layout((2, 3, 6, 6), torch.float32, device)
    x[0, 1, 2, 3] = float("nan")
    x[1, 0, 0, 0] = float("inf")
    w = random_in_layout((4, 3, 3, 3), torch.float32, device)
    torch.testing.assert_close(F.conv2d(x, w, padding=1), TF.conv2d(x, w, padding=1), equal_nan=True)


@pytest.mark.parametrize("device", devices())
def test_zero_input_channels(device):
    # as PyTorch: a result with no channels (its rule for an input without channels, not the bias), empty input and
    # weight gradients, a zero bias gradient
    x = torch.ones(2, 0, 5, 5, device=device, requires_grad=True)
    w = torch.ones(3, 0, 3, 3, device=device, requires_grad=True)
    b = torch.arange(3.0, device=device, requires_grad=True)
    y, yr = F.conv2d(x, w, b), TF.conv2d(x, w, b)
    assert y.shape == yr.shape
    for a, r in zip(torch.autograd.grad(y.sum(), [x, w, b]), torch.autograd.grad(yr.sum(), [x, w, b])):
        torch.testing.assert_close(a, r)


@pytest.mark.parametrize("device", devices())
def test_deterministic_weight_gradient(device):
    x = random_in_layout((4, 16, 9, 9), torch.float32, device).requires_grad_()
    w = random_in_layout((8, 16, 3, 3), torch.float32, device).requires_grad_()
    g = random_in_layout((4, 8, 9, 9), torch.float32, device)
    with _deterministic():
        runs = [torch.autograd.grad(F.conv2d(x, w, padding=1), [x, w], g) for _ in range(2)]
    for a, b in zip(*runs):
        assert torch.equal(a, b)


class _deterministic:
    def __enter__(self):
        self.was = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(self.was)


@pytest.mark.cuda
def test_cuda_autocast_dtype():
    x, w = random_in_layout((2, 8, 7, 7), torch.float32, "cuda"), random_in_layout((4, 8, 3, 3), torch.float32, "cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ours, theirs = F.conv2d(x, w), TF.conv2d(x, w)
    assert ours.dtype == theirs.dtype == torch.bfloat16


def test_cpu_autocast_dtype():
    x, w = random_in_layout((2, 8, 7, 7), torch.float32, "cpu"), random_in_layout((4, 8, 3, 3), torch.float32, "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, theirs = F.conv2d(x, w), TF.conv2d(x, w)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    torch.testing.assert_close(ours.float(), theirs.float(), atol=3e-2, rtol=3e-2)


class TestErrors(expecttest.TestCase):
    def test_channels(self):
        with self.assertRaises(RuntimeError) as cm:
            F.conv2d(torch.ones(2, 3, 5, 5), torch.ones(4, 2, 3, 3))
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.convolution: expected input to have 2 channels (weight of size [4, 2, 3, 3], groups=1, transposed=false), but got input of size [2, 3, 5, 5]""")

    def test_kernel_larger_than_padded_input(self):
        with self.assertRaises(RuntimeError) as cm:
            F.conv2d(torch.ones(2, 3, 5, 5), torch.ones(4, 3, 8, 3), padding=1)
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.convolution: expected the padded input (size [5, 5] plus padding [1, 1]) to be at least as large as the dilated kernel (weight of size [4, 3, 8, 3], dilation [1, 1])""")

    def test_mixed_dtypes(self):
        with self.assertRaises(RuntimeError) as cm:
            F.conv1d(torch.ones(2, 3, 5), torch.ones(4, 3, 3, dtype=torch.float64))
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.convolution: expected weight to have the same dtype as input (Float), but got Double""")
