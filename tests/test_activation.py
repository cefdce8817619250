"""Activation family: every op and dtype with the family tester's checks (the error rule against PyTorch, opcheck,
gradcheck and gradgradcheck, torch.compile against PyTorch, bad input, CUDA graphs, past 2^31 elements); special
values, in place, bias_act against its reference, error messages; on CUDA, outputs fully written."""
import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.reference import BIAS_ACT_TORCH, bias_act_reference, hardsigmoid_reference, hardswish_reference
from torch_dnn.testing import compare
from tests.family_tester import Against, BadInput, FamilyTester, GradCase
from tests.utils import ALL_DTYPES, assert_matches_torch, case_shapes, devices, first_line, make_input

ops = torch.ops.torch_dnn

# name -> (ours, PyTorch's), both called as f(x)
ACTS = {
    "relu": (F.relu, TF.relu),
    "relu6": (F.relu6, TF.relu6),
    "hardtanh": (lambda x: F.hardtanh(x, -0.7, 1.3), lambda x: TF.hardtanh(x, -0.7, 1.3)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2)),
    "elu": (lambda x: F.elu(x, 0.8), lambda x: TF.elu(x, 0.8)),
    "gelu": (F.gelu, TF.gelu),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    "silu": (F.silu, TF.silu),
    "sigmoid": (F.sigmoid, torch.sigmoid),
    "tanh": (F.tanh, torch.tanh),
    "softplus": (lambda x: F.softplus(x, 1.5, 3.0), lambda x: TF.softplus(x, 1.5, 3.0)),
    "mish": (F.mish, TF.mish),
    "hardswish": (F.hardswish, TF.hardswish),
    "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid),
}

# name -> (ours with inplace=True, PyTorch's with inplace=True)
INPLACE = {
    "relu": (lambda x: F.relu(x, True), lambda x: TF.relu(x, True)),
    "relu6": (lambda x: F.relu6(x, True), lambda x: TF.relu6(x, True)),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 0.5, True), lambda x: TF.hardtanh(x, -0.5, 0.5, True)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1, True), lambda x: TF.leaky_relu(x, 0.1, True)),
    "elu": (lambda x: F.elu(x, 1.0, True), lambda x: TF.elu(x, 1.0, True)),
    "silu": (lambda x: F.silu(x, True), lambda x: TF.silu(x, True)),
    "mish": (lambda x: F.mish(x, True), lambda x: TF.mish(x, True)),
    "hardswish": (lambda x: F.hardswish(x, True), lambda x: TF.hardswish(x, True)),
    "hardsigmoid": (lambda x: F.hardsigmoid(x, True), lambda x: TF.hardsigmoid(x, True)),
}


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", list(ACTS))
def test_special_values(name, device):
    ours, theirs = ACTS[name]
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 30.0, -30.0, 3.0, -3.0, 6.0],
                         dtype=dtype, device=device)
        assert_matches_torch(ours, theirs, [x], name=f"{name} special {dtype}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace(name, device):
    ours, theirs = INPLACE[name]
    for layout in ("contiguous", "strided", "transposed"):
        x = make_input((33, 20), torch.float32, device, layout)
        a, b = x.clone(), x.clone()
        ra, rb = ours(a), theirs(b)
        assert ra is a, "in-place form must return its input"
        torch.testing.assert_close(a, b, rtol=2e-6, atol=1e-6)
    # with autograd: a non-leaf is modified in place and gradients flow
    x = make_input((8, 5), torch.float64, device).requires_grad_()
    y = x * 1.0
    ours(y)
    g = torch.autograd.grad(y.sum(), x)[0]
    x2 = x.detach().clone().requires_grad_()
    y2 = x2 * 1.0
    theirs(y2)
    g2 = torch.autograd.grad(y2.sum(), x2)[0]
    torch.testing.assert_close(g, g2)
    # eager records the op's C++ node (no Python autograd.Function: host time), and bumps the version counter, so
    # that a node that saved the input before the op sees that it changed
    y = x * 1.0
    saved = y.sin()
    ours(y)
    assert "InPlaceFn" in y.grad_fn.name(), y.grad_fn.name()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.sum().backward()
    # a view that requires grad: through the functional form, written back, as PyTorch's
    x3 = x.detach().clone().requires_grad_()
    y3 = (x3 * 1.0)[2:]
    ours(y3)
    x4 = x.detach().clone().requires_grad_()
    y4 = (x4 * 1.0)[2:]
    theirs(y4)
    torch.testing.assert_close(torch.autograd.grad(y3.sum(), x3)[0], torch.autograd.grad(y4.sum(), x4)[0])
    # a leaf that requires grad cannot be modified in place, as in PyTorch
    with pytest.raises(RuntimeError, match="leaf Variable"):
        ours(make_input((3,), torch.float32, device).requires_grad_())


@pytest.mark.parametrize("device", devices())
def test_inplace_leaky_relu_negative_slope(device):
    """A negative slope: the derivative cannot be read from the result, so the C++ node keeps the input's value
    (PyTorch's in-place form refuses this case; its out-of-place form is the reference)."""
    x = make_input((8, 5), torch.float64, device).requires_grad_()
    y = x * 1.0
    F.leaky_relu(y, -0.5, True)
    y_ref = TF.leaky_relu(x * 1.0, -0.5)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(torch.autograd.grad((y * y).sum(), x)[0], torch.autograd.grad((y_ref * y_ref).sum(), x)[0])


def _away_from_kinks(x):
    """x moved off the points where an activation's derivative jumps (0, +-3, 6, hardtanh's limits -0.7 and 1.3)."""
    x = torch.where((x - x.round()).abs() < 0.05, x + 0.1, x)
    return torch.where(((x + 0.7).abs() < 0.05) | ((x - 1.3).abs() < 0.05), x + 0.1, x)


# the ops' own arguments in opcheck's samples
OP_PARAMS = {"hardtanh": (-0.5, 0.75), "leaky_relu": (0.1,), "elu": (0.9,), "softplus": (1.2, 10.0)}


# float64 references other than PyTorch's op, where that is inexact: its hardsigmoid gradient (CPU) and hardswish
# forward (CUDA) round 1/6 to float32
EXACT = {"hardsigmoid": hardsigmoid_reference, "hardswish": hardswish_reference}


class TestActivation(FamilyTester):
    variants = list(ACTS)

    def against_torch(self, device, dtype, name):
        ours, theirs = ACTS[name]
        for shape, layout in case_shapes():
            x = make_input(shape, dtype, device, layout)
            yield Against(f"{name} {tuple(shape)} {layout} {dtype}", ours, theirs, [x], ref_fn=EXACT.get(name))

    def gradcheck_cases(self, device):
        cases = [GradCase(name, ours, (_away_from_kinks(make_input((6, 7), torch.float64, device)).requires_grad_(),))
                 for name, (ours, _) in ACTS.items()]
        x = make_input((4, 6, 3), torch.float64, device).requires_grad_()
        b = make_input((6,), torch.float64, device).requires_grad_()
        for act in ("gelu", "silu", "tanh", "softplus"):
            cases.append(GradCase(f"bias_act {act}", lambda x, b, act=act: F.bias_act(x, b, 1, act), (x, b)))
        return cases

    def gradgradcheck_cases(self, device):
        return self.gradcheck_cases(device)

    def opcheck_samples(self, device):
        samples = []
        for name, spec in torch_dnn.ops.activation.SPECS.items():
            params = OP_PARAMS.get(name, ())
            kwargs = {"approximate": "tanh"} if spec.kwparams else {}
            for dtype, layout, rg in ((torch.float32, "contiguous", False), (torch.float64, "transposed", True),
                                      (torch.bfloat16, "strided", False), (torch.float16, "contiguous", True)):
                x = make_input((5, 6), dtype, device, layout).requires_grad_(rg)
                samples.append((getattr(ops, name), (x, *params), kwargs))
            g = make_input((5, 6), torch.float32, device)
            s = make_input((5, 6), torch.float32, device)
            samples.append((getattr(ops, f"{name}_backward"), (g, s, *params), kwargs))
            if spec.inplace:
                samples.append((getattr(ops, f"{name}_"), (make_input((5, 6), torch.float32, device), *params), {}))
        samples += [
            (ops.bias_act, (make_input((8, 16), torch.float32, device), make_input((16,), torch.float32, device), -1,
                            "gelu"), {}),
            (ops.bias_act, (make_input((2, 4, 3, 3), torch.bfloat16, device, "channels_last").requires_grad_(),
                            make_input((4,), torch.bfloat16, device).requires_grad_(), 1, "silu"), {}),
            (ops.bias_act, (make_input((4, 5), torch.float64, device).requires_grad_(), None, 0, "relu"), {}),
        ]
        g, xx, bb = (make_input(s, torch.float32, device) for s in ((8, 16), (8, 16), (16,)))
        samples += [(ops.bias_act_backward, (g, xx, bb, 1, "mish", True), {}),
                    (ops.bias_act_backward, (g, xx, None, 1, "relu", False), {})]
        return samples

    def compile_cases(self, device):
        yield Against("gelu(x) + bias_act(x, b, silu)", lambda x, b: F.gelu(x) + F.bias_act(x, b, -1, "silu"),
                      lambda x, b: TF.gelu(x) + TF.silu(x + b),
                      [make_input((4, 16), torch.float32, device), make_input((16,), torch.float32, device)])
        # the modules, as convert() puts them into a model (an in-place one on an intermediate result)
        ours = torch.nn.Sequential(torch_dnn.nn.GELU(), torch_dnn.nn.ReLU(inplace=True), torch_dnn.nn.SiLU())
        theirs = torch.nn.Sequential(torch.nn.GELU(), torch.nn.ReLU(inplace=True), torch.nn.SiLU())
        yield Against("GELU, ReLU(inplace), SiLU modules", ours, theirs, [make_input((4, 16), torch.float32, device)])

    def bad_inputs(self):
        return [
            BadInput(lambda: F.silu(torch.ones(3, dtype=torch.int32)), "torch_dnn.silu", "input"),
            BadInput(lambda: ops.gelu_backward(torch.ones(3), torch.ones(3), approximate="fast"),
                     "torch_dnn.gelu_backward", "approximate"),
            BadInput(lambda: F.bias_act(torch.ones(2, 3), torch.ones(3, dtype=torch.float64), 1, "relu"),
                     "torch_dnn.bias_act", "bias"),
            BadInput(lambda: ops.bias_act_backward(torch.ones(2, 4), torch.ones(2, 3), None, 1, "relu", False),
                     "torch_dnn.bias_act_backward", "grad_output"),
        ]

    def cuda_graph_step(self):
        x = make_input((64, 1000), torch.float32, "cuda").requires_grad_()
        b = make_input((1000,), torch.float32, "cuda").requires_grad_()

        def step():
            y = F.bias_act(F.gelu(x), b, -1, "silu") + F.mish(x)
            gx, gb = torch.autograd.grad(y.square().sum(), [x, b])
            return y, gx, gb

        return step, lambda: x.copy_(make_input((64, 1000), torch.float32, "cuda"))

    def past_2_31_cases(self):
        return {"elementwise": _gelu_past_2_31_elements, "bias_act": _bias_act_past_2_31_elements}


def _gelu_past_2_31_elements():
    n = 2**31 + 40000
    x = torch.empty(n, dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    y = F.gelu(x)
    # the tail and samples everywhere, against PyTorch on the same elements
    idx = torch.cat([torch.arange(n - 5000, n, device="cuda"), torch.randint(0, n, (100000,), device="cuda")])
    v = compare(y[idx], TF.gelu(x[idx]), TF.gelu(x[idx].double()), name="gelu past 2^31")
    assert v, v.message


def _bias_act_past_2_31_elements():
    # the bias along the last dim of 65537 rows of 32768
    x = torch.empty(65537, 32768, dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    b = torch.randn(32768, dtype=torch.bfloat16, device="cuda")
    z = F.bias_act(x, b, -1, "silu")
    rows = torch.tensor([0, 1, 40000, 65535, 65536], device="cuda")
    v = compare(z[rows], TF.silu(x[rows] + b), TF.silu(x[rows].double() + b.double()), name="bias_act past 2^31")
    assert v, v.message


@pytest.mark.cuda
def test_cuda_outputs_fully_written():
    # the caching allocator hands back a NaN-poisoned block: every element must be overwritten with PyTorch's value
    for shape, ours, theirs in (((4099,), F.silu, TF.silu),
                                ((64, 1001), lambda x: F.bias_act(x, None, -1, "gelu"), TF.gelu)):
        x = make_input(shape, torch.float32, "cuda")
        poison = torch.full((x.numel(),), float("nan"), device="cuda")
        del poison
        v = compare(ours(x), theirs(x), theirs(x.double()), name=f"{shape} poisoned")
        assert v, v.message


# ---- bias_act ----

BIAS_CASES = [  # (shape, dim, layout)
    ((64, 48), -1, "contiguous"),        # GEMM epilogue: bias along the last dim, vectorized
    ((33, 19), 1, "contiguous"),         # odd row length
    ((2, 8, 5, 7), 1, "contiguous"),     # NCHW: one channel per row
    ((2, 8, 4, 4), 1, "channels_last"),  # NHWC memory: bias innermost
    ((3, 16, 6), 0, "transposed"),
    ((0, 4), 1, "contiguous"),
]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("act", list(BIAS_ACT_TORCH))
def test_bias_act(act, dtype, device):
    def ref(dim):  # the float64 reference where PyTorch's activation is inexact, else PyTorch's composite
        return (lambda x, b=None: EXACT[act](bias_act_reference(x, b, dim, "none"))) if act in EXACT else None

    for shape, dim, layout in BIAS_CASES:
        x = make_input(shape, dtype, device, layout)
        b = make_input((shape[dim],), dtype, device)
        assert_matches_torch(lambda x, b: F.bias_act(x, b, dim, act), lambda x, b: bias_act_reference(x, b, dim, act),
                             [x, b], name=f"bias_act {act} {shape} dim={dim} {layout} {dtype}", ref_fn=ref(dim))
    x = make_input((5, 6), dtype, device)
    assert_matches_torch(lambda x: F.bias_act(x, None, 1, act), lambda x: bias_act_reference(x, None, 1, act), [x],
                         name=f"bias_act {act} no bias {dtype}", ref_fn=ref(1))


# ---- bad input: clear errors that name the op and the argument ----

class TestErrors(expecttest.TestCase):
    def test_integer_dtype(self):
        with self.assertRaises(RuntimeError) as cm:
            F.relu(torch.ones(3, dtype=torch.int64))
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.relu: expected input to be a floating point tensor (float32, float16, bfloat16 or float64), but got Long""")

    def test_bad_approximate(self):
        with self.assertRaises(RuntimeError) as cm:
            F.gelu(torch.ones(3), approximate="fast")
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.gelu: approximate argument must be either 'none' or 'tanh', but got 'fast'""")

    def test_bias_shape(self):
        with self.assertRaises(RuntimeError) as cm:
            F.bias_act(torch.ones(2, 3), torch.ones(4), 1, "relu")
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.bias_act: expected bias of shape [3] (the size of input dim 1), but got [4]""")

    def test_bias_act_dim(self):
        with self.assertRaises(RuntimeError) as cm:
            F.bias_act(torch.ones(2, 3), torch.ones(3), 2, "relu")
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.bias_act: dim 2 is out of range for a tensor of 2 dimensions (expected to be in [-2, 1])""")

    def test_unknown_bias_act(self):
        with self.assertRaises(RuntimeError) as cm:
            F.bias_act(torch.ones(2, 3), None, 1, "swish")
        self.assertIn("unknown act 'swish'", first_line(cm.exception))

    def test_hardtanh_limits(self):
        with self.assertRaises(ValueError):
            F.hardtanh(torch.ones(3), 2.0, 1.0)
        with self.assertRaises(RuntimeError) as cm:
            ops.hardtanh(torch.ones(3), 2.0, 1.0)
        self.assertIn("torch_dnn.hardtanh: min_val", first_line(cm.exception))

    def test_backward_mismatch(self):
        with self.assertRaises(RuntimeError) as cm:
            ops.relu_backward(torch.ones(3), torch.ones(3, dtype=torch.float64))
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.relu_backward: expected grad_output to have the same dtype as self (Double), but got Float""")
        with self.assertRaises(RuntimeError):
            ops.relu_backward(torch.ones(3), torch.ones(4))


@pytest.mark.cuda
def test_mixed_devices():
    with pytest.raises(RuntimeError, match="same device"):
        ops.relu_backward(torch.ones(3, device="cuda"), torch.ones(3))
    with pytest.raises(RuntimeError, match="bias"):
        F.bias_act(torch.ones(2, 3, device="cuda"), torch.ones(3), 1, "relu")
