"""Activation family: every op and dtype against PyTorch, in place, opcheck, gradcheck, special values,
bad input, bias_act."""
import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.reference import BIAS_ACT_TORCH, bias_act_reference
from tests.utils import ALL_DTYPES, assert_matches_torch, case_shapes, devices, first_line, make_input, opcheck_samples

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
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ACTS))
def test_against_torch(name, dtype, device):
    ours, theirs = ACTS[name]
    for shape, layout in case_shapes():
        x = make_input(shape, dtype, device, layout)
        assert_matches_torch(ours, theirs, [x], name=f"{name} {tuple(shape)} {layout} {dtype}")


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
    # a leaf that requires grad cannot be modified in place, as in PyTorch
    with pytest.raises(RuntimeError, match="leaf Variable"):
        ours(make_input((3,), torch.float32, device).requires_grad_())


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", list(ACTS))
def test_gradcheck(name, device):
    ours, _ = ACTS[name]
    x = make_input((6, 7), torch.float64, device)
    # keep away from the kinks (0, +-3, 6, hardtanh's limits) where the derivative is not defined
    x = torch.where((x - x.round()).abs() < 0.05, x + 0.1, x)
    x = torch.where(((x + 0.7).abs() < 0.05) | ((x - 1.3).abs() < 0.05), x + 0.1, x).requires_grad_()
    assert torch.autograd.gradcheck(ours, (x,))


def _opcheck_samples_for(op_name, device):
    spec = torch_dnn.ops.activation.SPECS[op_name]
    params = {"hardtanh": (-0.5, 0.75), "leaky_relu": (0.1,), "elu": (0.9,), "softplus": (1.2, 10.0)}.get(op_name, ())
    kwargs = {"approximate": "tanh"} if spec.kwparams else {}
    samples = []
    for dtype, layout, rg in ((torch.float32, "contiguous", False), (torch.float64, "transposed", True),
                              (torch.bfloat16, "strided", False), (torch.float16, "contiguous", True)):
        x = make_input((5, 6), dtype, device, layout).requires_grad_(rg)
        samples.append(((x, *params), kwargs))
    return samples, params, kwargs


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", list(ACTS.keys() - {"gelu_tanh"}))
def test_opcheck(name, device):
    samples, params, kwargs = _opcheck_samples_for(name, device)
    opcheck_samples(getattr(ops, name), samples)
    g = make_input((5, 6), torch.float32, device)
    s = make_input((5, 6), torch.float32, device)
    opcheck_samples(getattr(ops, f"{name}_backward"), [((g, s, *params), kwargs)])
    if torch_dnn.ops.activation.SPECS[name].inplace:
        opcheck_samples(getattr(ops, f"{name}_"), [((make_input((5, 6), torch.float32, device), *params), {})])


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
    for shape, dim, layout in BIAS_CASES:
        x = make_input(shape, dtype, device, layout)
        b = make_input((shape[dim],), dtype, device)
        assert_matches_torch(lambda x, b: F.bias_act(x, b, dim, act), lambda x, b: bias_act_reference(x, b, dim, act),
                             [x, b], name=f"bias_act {act} {shape} dim={dim} {layout} {dtype}")
    x = make_input((5, 6), dtype, device)
    assert_matches_torch(lambda x: F.bias_act(x, None, 1, act), lambda x: bias_act_reference(x, None, 1, act), [x],
                         name=f"bias_act {act} no bias {dtype}")


@pytest.mark.parametrize("device", devices())
def test_bias_act_gradcheck_and_opcheck(device):
    x = make_input((4, 6, 3), torch.float64, device).requires_grad_()
    b = make_input((6,), torch.float64, device).requires_grad_()
    for act in ("gelu", "silu", "tanh", "softplus"):
        assert torch.autograd.gradcheck(lambda x, b: F.bias_act(x, b, 1, act), (x, b))
    samples = [
        ((make_input((8, 16), torch.float32, device), make_input((16,), torch.float32, device), -1, "gelu"), {}),
        ((make_input((2, 4, 3, 3), torch.bfloat16, device, "channels_last").requires_grad_(),
          make_input((4,), torch.bfloat16, device).requires_grad_(), 1, "silu"), {}),
        ((make_input((4, 5), torch.float64, device).requires_grad_(), None, 0, "relu"), {}),
    ]
    opcheck_samples(ops.bias_act, samples)
    g, xx, bb = (make_input(s, torch.float32, device) for s in ((8, 16), (8, 16), (16,)))
    opcheck_samples(ops.bias_act_backward, [((g, xx, bb, 1, "mish", True), {}), ((g, xx, None, 1, "relu", False), {})])


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
