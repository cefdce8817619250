"""Norm family: layer_norm, rms_norm, add_layer_norm, add_rms_norm against PyTorch over row lengths, layouts,
dtypes and weight/bias presence, with the family tester's checks (the error rule, opcheck, gradcheck and
gradgradcheck, torch.compile against PyTorch, bad input, CUDA graphs, past 2^31 elements); statistics; special
values; convert of a pre-norm transformer block; on CUDA, autocast and the kernel variants."""
import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.reference import add_layer_norm_reference, add_rms_norm_reference
from torch_dnn.testing import compare
from tests.family_tester import Against, BadInput, FamilyTester, GradCase, ModelCase
from tests.utils import (assert_models_agree, ALL_DTYPES, assert_close_to_reference, assert_matches_torch, devices,
                         first_line, make_input)

ops = torch.ops.torch_dnn

# (shape, number of normalized trailing dims, layout): odd and long rows, multi-dim normalized shapes,
# non-contiguous, channels_last, stride 0, empty batch
CASES = [
    ((4, 1), 1, "contiguous"),
    ((5, 7), 1, "contiguous"),
    ((6, 97), 1, "offset"),
    ((3, 128), 1, "contiguous"),
    ((3, 1023), 1, "contiguous"),
    ((2, 1025), 1, "contiguous"),
    ((2, 4096), 1, "contiguous"),
    ((3, 5, 7), 2, "contiguous"),
    ((2, 3, 8, 16), 2, "contiguous"),
    ((20, 30), 1, "transposed"),
    ((3, 20, 32), 1, "transposed"),
    ((12, 40), 1, "strided"),
    ((2, 6, 5, 4), 3, "channels_last"),
    ((2, 6, 5, 8), 1, "channels_last"),
    ((4, 9, 8), 1, "expanded"),
    ((0, 5), 1, "contiguous"),
]

# Rows the GPU computes with its other kernels: a block per row in registers, and the two-pass fallbacks.
CUDA_CASES = [
    ((3, 8192), 1, "contiguous"),
    ((5, 16384), 1, "contiguous"),
    ((4, 20000), 1, "contiguous"),
    ((3, 32768), 1, "contiguous"),
    ((2, 40000), 1, "contiguous"),
    ((300, 40000), 1, "contiguous"),
    ((2, 40001), 1, "contiguous"),
    ((1000, 4096), 1, "contiguous"),
    ((1000, 1024), 1, "contiguous"),
    ((2, 3, 65536), 1, "contiguous"),
]

AFFINE = [(True, True), (True, False), (False, True), (False, False)]


def _params(ns, dtype, device, weight=True, bias=True):
    w = make_input(ns, dtype, device, low=0.5, high=1.5) if weight else None
    b = make_input(ns, dtype, device, low=-1.0, high=1.0) if bias else None
    return w, b


def _one_element_rows(ns):
    """Rows of one element: layer_norm's input and weight gradients are exactly 0 and rms_norm's is pure
    cancellation (g (1 - xhat^2)), so the float64 reference's rounding noise has no meaningful relative error;
    these rows compare forward only (and layer_norm's input gradient is checked to be ~0)."""
    n = 1
    for v in ns:
        n *= v
    return n == 1


def _cases(device):
    return CASES + (CUDA_CASES if device == "cuda" else [])


class TestNorm(FamilyTester):
    variants = ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"]

    def against_torch(self, device, dtype, name):
        return getattr(self, f"_{name}_cases")(device, dtype)

    def _layer_norm_cases(self, device, dtype):
        for shape, k, layout in _cases(device):
            ns = list(shape[-k:])
            x = make_input(shape, dtype, device, layout, low=-3, high=5)
            for weight, bias in AFFINE:
                w, b = _params(ns, dtype, device, weight, bias)
                one = _one_element_rows(ns)
                yield Against(f"layer_norm {shape} ns={ns} {layout} {dtype} w={weight} b={bias}",
                              lambda x, w, b: F.layer_norm(x, ns, w, b), lambda x, w, b: TF.layer_norm(x, ns, w, b),
                              [x, w, b], grad=not one)
                if one:
                    xg = x.detach().clone().requires_grad_()
                    (dx,) = torch.autograd.grad(F.layer_norm(xg, ns, w, b).sum(), [xg])
                    assert dx.abs().max() <= 1e-6

    def _rms_norm_cases(self, device, dtype):
        for shape, k, layout in _cases(device):
            ns = list(shape[-k:])
            x = make_input(shape, dtype, device, layout, low=-3, high=5)
            for weight in (True, False):
                w, _ = _params(ns, dtype, device, weight, False)
                for eps in (None, 1e-6):
                    yield Against(f"rms_norm {shape} ns={ns} {layout} {dtype} w={weight} eps={eps}",
                                  lambda x, w: F.rms_norm(x, ns, w, eps), lambda x, w: TF.rms_norm(x, ns, w, eps),
                                  [x, w], grad=not _one_element_rows(ns))

    def _add_layer_norm_cases(self, device, dtype):
        return _add_norm_cases("layer", device, dtype)

    def _add_rms_norm_cases(self, device, dtype):
        return _add_norm_cases("rms", device, dtype)

    def gradcheck_cases(self, device):
        def inp(shape):
            return make_input(shape, torch.float64, device).requires_grad_()

        cases = []
        for shape, ns in (((4, 9), [9]), ((3, 2, 5), [2, 5])):
            x, w, b, r = inp(shape), inp(ns), inp(ns), inp(shape)
            cases += [
                GradCase(f"layer_norm {shape}", lambda x, w, b, ns=ns: F.layer_norm(x, ns, w, b), (x, w, b)),
                GradCase(f"layer_norm {shape} bias only", lambda x, b, ns=ns: F.layer_norm(x, ns, None, b), (x, b)),
                GradCase(f"rms_norm {shape}", lambda x, w, ns=ns: F.rms_norm(x, ns, w, 1e-6), (x, w)),
                GradCase(f"rms_norm {shape} no weight", lambda x, ns=ns: F.rms_norm(x, ns), (x,)),
                GradCase(f"add_layer_norm {shape}", lambda x, r, w, b, ns=ns: F.add_layer_norm(x, r, ns, w, b),
                         (x, r, w, b)),
                GradCase(f"add_rms_norm {shape}", lambda x, r, w, ns=ns: F.add_rms_norm(x, r, ns, w, 1e-6),
                         (x, r, w)),
            ]
        return cases

    def gradgradcheck_cases(self, device):
        return self.gradcheck_cases(device)

    def opcheck_samples(self, device):
        def inp(shape, dtype=torch.float32, layout="contiguous", grad=False):
            t = make_input(shape, dtype, device, layout)
            return t.requires_grad_() if grad else t

        w33, b33 = inp((33,)), inp((33,))
        samples = [(ops.layer_norm, args, {}) for args in (
            (inp((4, 33)), [33], w33, b33, 1e-5),
            (inp((4, 33), grad=True), [33], None, None, 1e-5),
            (inp((20, 30), torch.float64, "transposed", True), [30], inp((30,), torch.float64, grad=True), None, 1e-5),
            (inp((2, 3, 4, 5), torch.bfloat16, "channels_last", True), [3, 4, 5],
             inp((3, 4, 5), torch.bfloat16, grad=True), inp((3, 4, 5), torch.bfloat16, grad=True), 1e-5),
            (inp((5, 3, 16)).transpose(0, 1), [16], None, inp((16,)), 1e-3),
        )]
        samples += [(ops.rms_norm, args, {}) for args in (
            (inp((4, 33)), [33], w33, 1e-6),
            (inp((4, 33), torch.float16, grad=True), [33], inp((33,), torch.float16, grad=True), 1e-6),
            (inp((3, 4, 5), torch.float64, "transposed", True), [4, 5], None, 1e-6),
        )]
        samples += [(ops.add_layer_norm, args, {}) for args in (
            (inp((4, 33)), inp((4, 33)), [33], w33, b33, 1e-5),
            (inp((4, 33), grad=True), inp((4, 33), grad=True), [33], inp((33,), grad=True), None, 1e-5),
        )]
        samples += [(ops.add_rms_norm, args, {}) for args in (
            (inp((4, 33)), inp((4, 33)), [33], w33, 1e-6),
            (inp((2, 3, 8), torch.bfloat16, grad=True), inp((2, 3, 8), torch.bfloat16, grad=True), [8],
             inp((8,), torch.bfloat16, grad=True), 1e-6),
        )]
        x, g = inp((6, 33)), inp((6, 33))
        _, mean, rstd = ops.layer_norm(x, [33], w33, b33, 1e-5)
        samples += [(ops.layer_norm_backward, args, {}) for args in (
            (g, x, mean, rstd, w33, [33], [True, True, True]),
            (g, x, mean, rstd, None, [33], [True, False, True]),
            (g, x, mean, rstd, w33, [33], [False, True, False]),
        )]
        samples += [(ops.add_layer_norm_backward, args, {}) for args in (
            (g, inp((6, 33)), x, mean, rstd, w33, [33], [True, True, True]),
            (g, None, x, mean, rstd, None, [33], [True, False, False]),
        )]
        _, rstd = ops.rms_norm(x, [33], w33, 1e-6)
        samples += [(ops.rms_norm_backward, args, {}) for args in (
            (g, x, rstd, w33, [33], [True, True]),
            (g, x, rstd, None, [33], [True, False]),
        )]
        samples.append((ops.add_rms_norm_backward, (g, inp((6, 33)), x, rstd, w33, [33], [True, True]), {}))
        return samples

    def compile_cases(self, device):
        x, r = make_input((4, 16), torch.float32, device), make_input((4, 16), torch.float32, device)
        w, b = _params([16], torch.float32, device)
        yield Against("layer_norm -> rms_norm, add_rms_norm",
                      lambda x, r, w, b: F.rms_norm(F.layer_norm(x, [16], w, b), [16], w) + sum(
                          F.add_rms_norm(x, r, [16], w)),
                      lambda x, r, w, b: TF.rms_norm(TF.layer_norm(x, [16], w, b), [16], w) + sum(
                          add_rms_norm_reference(x, r, [16], w)), [x, r, w, b])
        # the modules convert() puts into a model, against the model's own (parameters' gradients too)
        native = torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.RMSNorm(16)).to(device)
        with torch.no_grad():
            for p in native.parameters():
                p.uniform_(0.5, 1.5)
        yield ModelCase("LayerNorm, RMSNorm modules", torch_dnn.convert(native)[0], native,
                        make_input((4, 16), torch.float32, device))

    def bad_inputs(self):
        return [
            BadInput(lambda: F.rms_norm(torch.ones(2, 3, dtype=torch.int64), [3]), "torch_dnn.rms_norm",
                     "expected input to be a floating point"),
            BadInput(lambda: F.layer_norm(torch.ones(2, 3), []), "torch_dnn.layer_norm",
                     "expected normalized_shape to have at least"),
            BadInput(lambda: F.add_layer_norm(torch.ones(2, 3), torch.ones(3, 3), [3]), "torch_dnn.add_layer_norm",
                     "expected residual to have the shape"),
            BadInput(lambda: F.layer_norm(torch.ones(2, 3), [3], None, torch.ones(2, 3)), "torch_dnn.layer_norm",
                     "expected bias of shape"),
            BadInput(lambda: ops.layer_norm_backward(torch.ones(2, 3), torch.ones(2, 3), torch.ones(3), torch.ones(2),
                                                     None, [3], [True, False, False]),
                     "torch_dnn.layer_norm_backward", "expected mean of shape"),
        ]

    def cuda_graph_step(self):
        x = make_input((64, 1024), torch.bfloat16, "cuda").requires_grad_()
        r = make_input((64, 1024), torch.bfloat16, "cuda")
        w, b = _params([1024], torch.bfloat16, "cuda")
        w.requires_grad_()

        def step():
            y = F.layer_norm(x, [1024], w, b) + F.rms_norm(x, [1024], w) + sum(F.add_rms_norm(x, r, [1024], w))
            gx, gw = torch.autograd.grad(y.float().square().sum(), [x, w])
            return y, gx, gw

        return step, lambda: x.copy_(make_input((64, 1024), torch.bfloat16, "cuda"))

    def past_2_31_cases(self):
        return {"forward": _past_2_31_elements, "backward": _backward_past_2_31_elements}


def _add_norm_cases(kind, device, dtype):
    for shape, k, layout in _cases(device):
        ns = list(shape[-k:])
        x = make_input(shape, dtype, device, layout)
        r = make_input(shape, dtype, device, "contiguous", low=-2, high=2)
        w, b = _params(ns, dtype, device, True, kind == "layer")
        if kind == "layer":
            ours, ref = F.add_layer_norm, add_layer_norm_reference
            args = (w, b)
        else:
            ours, ref = F.add_rms_norm, add_rms_norm_reference
            args = (w,)
        for i, part in enumerate(("sum", "normalized")):
            yield Against(f"add_{kind}_norm {part} {shape} ns={ns} {layout} {dtype}",
                          lambda x, r, *a: ours(x, r, ns, *a)[i], lambda x, r, *a: ref(x, r, ns, *a)[i],
                          [x, r, *args], grad=not _one_element_rows(ns))
        # gradients reaching both outputs: the residual stream's own plus the norm's (in the input's dtype, so
        # that both sides receive the same rounded gradient)
        yield Against(f"add_{kind}_norm both outputs {shape} {layout} {dtype}",
                      lambda x, r, *a: sum(ours(x, r, ns, *a)), lambda x, r, *a: sum(ref(x, r, ns, *a)),
                      [x, r, *args], grad=not _one_element_rows(ns))


def test_long_rows_cpu():
    # rows far longer than the tests' others: the statistics' summation error shows above the float32 floor
    x = make_input((1, 360000), torch.float32, "cpu", low=-1, high=1)
    assert_matches_torch(lambda x: F.layer_norm(x, [360000]), lambda x: TF.layer_norm(x, [360000]), [x], grad=False,
                         name="layer_norm a row of 360000")


@pytest.mark.parametrize("device", devices())
def test_statistics_and_layout(device):
    x = make_input((7, 3, 64), torch.float32, device).transpose(0, 1)  # rows dense in memory, batch transposed
    out, mean, rstd = ops.layer_norm(x, [64], None, None, 1e-5)
    assert out.is_contiguous(), "layer_norm's result is contiguous in any layout, as PyTorch's"
    assert mean.shape == rstd.shape == (3, 7) and mean.dtype == torch.float32
    torch.testing.assert_close(mean, x.mean(-1))
    torch.testing.assert_close(rstd, torch.rsqrt(x.var(-1, unbiased=False) + 1e-5))
    _, rstd2 = ops.rms_norm(x.double(), [64], None, 1e-6)
    assert rstd2.dtype == torch.float64
    torch.testing.assert_close(rstd2, torch.rsqrt(x.double().square().mean(-1) + 1e-6))
    c = make_input((2, 8, 4, 4), torch.bfloat16, device, "channels_last")
    y = F.layer_norm(c, [8, 4, 4])
    torch.testing.assert_close(y, TF.layer_norm(c, [8, 4, 4]))


@pytest.mark.parametrize("device", devices())
def test_special_values(device):
    nan, inf = float("nan"), float("inf")
    rows = [
        [1.5] * 6,                        # zero variance: out = bias
        [nan, 1.0, 2.0, 3.0, 4.0, 5.0],   # NaN: the row is NaN
        [inf, 1.0, 2.0, 3.0, 4.0, 5.0],   # inf: NaN for layer_norm as PyTorch
        [1e4, -1e4, 0.0, 1.0, 2.0, 3.0],  # large spread
        [1e3 + 1, 1e3 + 2, 1e3 + 3, 1e3 + 1, 1e3 + 2, 1e3 + 3],  # large mean, small variance
    ]
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.tensor(rows, dtype=dtype, device=device)
        w, b = _params([6], dtype, device)
        assert_matches_torch(lambda x, w, b: F.layer_norm(x, [6], w, b), lambda x, w, b: TF.layer_norm(x, [6], w, b),
                             [x, w, b], grad=False, name="layer_norm special")
        assert_matches_torch(lambda x, w: F.rms_norm(x, [6], w), lambda x, w: TF.rms_norm(x, [6], w), [x, w],
                             grad=False, name="rms_norm special")
        # zero-variance rows differentiate too
        assert_matches_torch(lambda x, w, b: F.layer_norm(x, [6], w, b), lambda x, w, b: TF.layer_norm(x, [6], w, b),
                             [x[:1], w, b], name="layer_norm zero variance")
        if device == "cuda":  # long rows take the other kernels
            for n in (2000, 16384, 40000):
                big = make_input((len(rows), n), dtype, device)
                big[:, :6] = x
                big[0] = 1.5
                assert_matches_torch(lambda x: F.layer_norm(x, [n]), lambda x: TF.layer_norm(x, [n]), [big],
                                     grad=False, name=f"layer_norm special n={n}")


@pytest.mark.parametrize("device", devices())
def test_weight_grads_deterministic_and_mixed_dtype(device):
    x = make_input((300, 96), torch.float32, device).requires_grad_()
    w, b = _params([96], torch.float32, device)
    w.requires_grad_()
    b.requires_grad_()
    g = make_input((300, 96), torch.float32, device)
    grads = [torch.autograd.grad(F.layer_norm(x, [96], w, b), [w, b], g) for _ in range(2)]
    assert all(torch.equal(a, c) for a, c in zip(*grads)), "weight gradients must be bitwise reproducible"
    # float32 parameters with bfloat16 input: computed in the input's dtype, grads in the parameters' dtype
    xb = x.detach().bfloat16().requires_grad_()
    y = F.layer_norm(xb, [96], w, b)
    assert y.dtype == torch.bfloat16
    dw, db = torch.autograd.grad(y, [w, b], g.bfloat16())
    assert dw.dtype == db.dtype == torch.float32


def _block(kind, d=32):
    norm = (lambda: torch.nn.RMSNorm(d)) if kind == "rms" else (lambda: torch.nn.LayerNorm(d))

    class PreNormBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.proj = norm(), torch.nn.Linear(d, d)
            self.norm2 = norm()
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
            self.final = torch.nn.LayerNorm(d, bias=False)

        def forward(self, x):
            x = x + self.proj(self.norm1(x))
            x = x + self.mlp(self.norm2(x))
            return self.final(x)

    return PreNormBlock()


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_convert_prenorm_block(kind, device):
    torch.manual_seed(0)
    model = _block(kind).to(device, torch.float64)
    with torch.no_grad():  # parameters away from their ones/zeros init, so that they matter
        for n, p in model.named_parameters():
            if "norm" in n or "final" in n:
                p.uniform_(0.5, 1.5)
    converted, report = torch_dnn.convert(model)
    swapped = {name for name, _, _ in report.swapped}
    assert {"norm1", "norm2", "final", "mlp.1"} <= swapped, str(report)
    assert isinstance(converted.norm1, torch_dnn.nn.RMSNorm if kind == "rms" else torch_dnn.nn.LayerNorm)
    assert converted.state_dict().keys() == model.state_dict().keys()
    x = make_input((2, 5, 32), torch.float64, device)
    assert_models_agree(model, converted, x, name="converted block")


@pytest.mark.parametrize("device", devices())
def test_add_norm_modules(device):
    x, r = make_input((3, 4, 16), torch.float32, device), make_input((3, 4, 16), torch.float32, device)
    for ours_t, torch_t, ref in ((torch_dnn.nn.AddLayerNorm, torch.nn.LayerNorm, add_layer_norm_reference),
                                 (torch_dnn.nn.AddRMSNorm, torch.nn.RMSNorm, add_rms_norm_reference)):
        m = ours_t(16, device=device)
        assert m.state_dict().keys() == torch_t(16).state_dict().keys()
        s, y = m(x, r)
        params = (m.weight, m.bias) if ours_t is torch_dnn.nn.AddLayerNorm else (m.weight,)
        s_ref, y_ref = ref(x, r, [16], *params, m.eps)
        torch.testing.assert_close(s, s_ref)
        torch.testing.assert_close(y, y_ref)
    seq = torch.nn.Sequential(torch_dnn.nn.AddRMSNorm(8))
    _, report = torch_dnn.convert(seq)
    assert not report.left and not report.swapped, str(report)


@pytest.mark.cuda
def test_autocast_float32():
    x = make_input((4, 64), torch.float16, "cuda")
    w = make_input((64,), torch.float32, "cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        ours, theirs = F.layer_norm(x, [64], w), TF.layer_norm(x, [64], w)
    assert ours.dtype == theirs.dtype == torch.float32
    torch.testing.assert_close(ours, theirs)


def _past_2_31_elements():
    x = torch.empty(65537, 32768, dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    rows = torch.tensor([0, 1, 40000, 65535, 65536], device="cuda")
    w = make_input((32768,), torch.bfloat16, "cuda")
    y = F.layer_norm(x, [32768], w)
    v = compare(y[rows], TF.layer_norm(x[rows], [32768], w), TF.layer_norm(x[rows].double(), [32768], w.double()),
                name="layer_norm past 2^31")
    assert v, v.message
    del y
    y = F.rms_norm(x, [32768], w)
    v = compare(y[rows], TF.rms_norm(x[rows], [32768], w), TF.rms_norm(x[rows].double(), [32768], w.double()),
                name="rms_norm past 2^31")
    assert v, v.message


def _backward_past_2_31_elements():
    # the staged backward (rows <= 16K) indexes rows past 2^31 elements; dx of a row depends on that row only
    rows_n, n = 131073, 16384
    x = torch.empty(rows_n, n, dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    w = make_input((n,), torch.bfloat16, "cuda")
    _, mean, rstd = torch.ops.torch_dnn.layer_norm(x, [n], w, None, 1e-5)
    dy = torch.empty_like(x).uniform_(-1, 1)
    dx, dw, _ = torch.ops.torch_dnn.layer_norm_backward(dy, x, mean, rstd, w, [n], [True, True, False])
    # dw sums dy * x_hat over every row: in float64, a block of rows at a time, with the statistics the op was given
    dw_ref = torch.zeros(n, dtype=torch.float64, device="cuda")
    for start in range(0, rows_n, 8192):
        rs = slice(start, start + 8192)
        x_hat = (x[rs].double() - mean[rs].double()[:, None]) * rstd[rs].double()[:, None]
        dw_ref += (dy[rs].double() * x_hat).sum(0)
        del x_hat
    assert_close_to_reference(dw, dw_ref, grad=True, name="layer_norm backward past 2^31, dw")
    rows = torch.tensor([0, 1, 70000, 131071, 131072], device="cuda")

    def ref(dtype):
        xs = x[rows].to(dtype).requires_grad_()
        (g,) = torch.autograd.grad(TF.layer_norm(xs, [n], w.to(dtype)), [xs], dy[rows].to(dtype))
        return g

    v = compare(dx[rows], ref(torch.bfloat16), ref(torch.float64), name="layer_norm backward past 2^31")
    assert v, v.message


# Every kernel variant the benchmarking knobs select (csrc/norm/kernels/norm_common.cuh), on rows that take the
# block forward and the staged / register backward, with more rows than resident blocks (persistent loops),
# row lengths that leave threads without columns, and one block per SM.
VARIANTS = [{}, {"TORCH_DNN_NORM_FWD_STATS": "twopass", "TORCH_DNN_NORM_FWD_GRID": "waves"},
            {"TORCH_DNN_NORM_FWD_STATS": "fused", "TORCH_DNN_NORM_FWD_GRID": "rows"}, {"TORCH_DNN_NORM_BWD_BLOCKS": "1"}]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("env", VARIANTS, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "default")
def test_kernel_variants(env, dtype, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for shape in [(1500, 4096), (300, 16384), (700, 8192), (200, 12288), (999, 2056), (9, 4104)]:
        ns = [shape[-1]]
        x = make_input(shape, dtype, "cuda", low=-3, high=5)
        w, b = _params(ns, dtype, "cuda")
        assert_matches_torch(lambda x, w, b: F.layer_norm(x, ns, w, b), lambda x, w, b: TF.layer_norm(x, ns, w, b),
                             [x, w, b], name=f"layer_norm {shape} {dtype} {env}")
        assert_matches_torch(lambda x, w: F.rms_norm(x, ns, w, 1e-6), lambda x, w: TF.rms_norm(x, ns, w, 1e-6),
                             [x, w], name=f"rms_norm {shape} {dtype} {env}")
        assert_matches_torch(lambda x: F.layer_norm(x, ns), lambda x: TF.layer_norm(x, ns), [x],
                             name=f"layer_norm no affine {shape} {dtype} {env}")
        r = make_input(shape, dtype, "cuda", low=-2, high=2)
        assert_matches_torch(lambda x, r, w: sum(F.add_rms_norm(x, r, ns, w)),
                             lambda x, r, w: sum(add_rms_norm_reference(x, r, ns, w)), [x, r, w],
                             name=f"add_rms_norm {shape} {dtype} {env}")


class TestErrors(expecttest.TestCase):
    def test_normalized_shape_mismatch(self):
        with self.assertRaises(RuntimeError) as cm:
            F.layer_norm(torch.ones(2, 3), [4])
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.layer_norm: given normalized_shape=[4], expected input with shape [*, 4], but got input of size [2, 3]""")

    def test_weight_shape_mismatch(self):
        with self.assertRaises(RuntimeError) as cm:
            F.rms_norm(torch.ones(2, 3), [3], torch.ones(4))
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.rms_norm: expected weight of shape [3] (normalized_shape), but got [4]""")

    def test_integer_input(self):
        with self.assertRaises(RuntimeError) as cm:
            F.layer_norm(torch.ones(2, 3, dtype=torch.int32), [3])
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.layer_norm: expected input to be a floating point tensor (float32, float16, bfloat16 or float64), but got Int""")
