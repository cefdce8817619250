"""Matmul family: mm, bmm, matmul (torch.matmul's semantics), linear, linear_act against PyTorch with the
error-ratio rule, with the family tester's checks (opcheck, gradcheck and gradgradcheck, torch.compile against
PyTorch, bad input, CUDA graphs, past 2^31 elements); odd, tiny and empty shapes; transposed, strided, offset and
broadcast operands; TF32 and autocast semantics; error messages; convert(fuse=True); CUDA-only checks (both GEMM
paths, poisoned outputs, split-K determinism, the skinny kernel, float32 without TF32 on 3xTF32 and on SIMT)."""
import itertools
import re

import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.ops.matmul import gemm_paths
from torch_dnn.reference import hardsigmoid_reference, hardswish_reference, linear_act_reference
from torch_dnn.testing import compare, no_tf32, random_like_case
from tests.family_tester import Against, BadInput, FamilyTester, GradCase, ModelCase
from tests.utils import (assert_models_agree, ALL_DTYPES, assert_matches_torch, devices, first_line, grad_off_kinks,
                         make_input)

ops = torch.ops.torch_dnn

# (M, N, K) from {1, 7, 97, 1023, 4097} and 0: each size in each role, products kept small for the CPU kernel
MNK = [
    (1, 1, 1), (7, 97, 1), (1, 7, 97), (97, 7, 1023), (7, 1023, 97), (1023, 7, 7), (4097, 7, 1), (1, 4097, 7),
    (7, 1, 4097), (97, 97, 97), (0, 7, 5), (7, 0, 5), (7, 5, 0),
]
# sizes the GPU kernels treat differently: full tiles, split-K (skinny M, long K), many tiles, long K
CUDA_MNK = [(128, 128, 64), (1023, 1025, 4097), (4097, 97, 1023), (256, 4096, 4096), (16, 4096, 16384), (64, 33, 8191)]

ACTS = ["none", "relu", "relu6", "leaky_relu", "elu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "softplus",
        "mish", "hardswish", "hardsigmoid"]


def _grad_away_from_kinks(act, x, w, b):
    """linear_act's upstream gradient, zero within 2 ulps (of the dtype at the kink's size, at least 1e-3) of a
    derivative jump (tests/utils.py KINKS)."""
    pre = x.double() @ w.double().t() + (b.double() if b is not None else 0.0)
    eps = torch.finfo(x.dtype).eps
    return grad_off_kinks(pre, act, x.dtype, lambda k: max(2 * eps * abs(k), 1e-3))


def _mnk(device):
    return MNK + (CUDA_MNK if device == "cuda" else [])


def _operand(shape, dtype, device, transposed, low=-2.0, high=2.0):
    return make_input(shape, dtype, device, "transposed" if transposed else "contiguous", low=low, high=high)


class TestMatmul(FamilyTester):
    variants = ["mm", "bmm", "linear", "linear_act"]

    def against_torch(self, device, dtype, name):
        return globals()[f"_{name}_cases"](device, dtype)

    def gradcheck_cases(self, device):
        def inp(*shape):
            return make_input(shape, torch.float64, device, low=-1, high=1).requires_grad_()

        x, w, b, r = inp(4, 3, 6), inp(5, 6), inp(5), inp(4, 3, 5)
        cases = [GradCase(f"linear_act {act}", lambda x, w, b, r, act=act, a=a, b_=b_: F.linear_act(x, w, b, act, r, a,
                                                                                                    b_), (x, w, b, r))
                 for act, a, b_ in (("none", None, None), ("relu", None, None), ("gelu", None, None),
                                    ("gelu_tanh", None, None), ("silu", None, None), ("sigmoid", None, None),
                                    ("tanh", None, None), ("leaky_relu", 0.3, None), ("elu", 0.7, None),
                                    ("softplus", 2.0, 5.0), ("mish", None, None), ("hardswish", None, None))]
        return cases + [
            GradCase("linear_act gelu, no bias", lambda x, w: F.linear_act(x, w, None, "gelu"), (x, w)),
            GradCase("linear", F.linear, (inp(7, 6), w, b)),
            GradCase("linear 3-D, no bias", F.linear, (x, w)),
            GradCase("mm", F.mm, (inp(4, 6), inp(6, 3))),
            GradCase("bmm", F.bmm, (inp(2, 4, 6), inp(2, 6, 3))),
            GradCase("matmul batch broadcast", F.matmul, (inp(2, 1, 4, 6), inp(3, 6, 5))),
            GradCase("matmul vector", F.matmul, (inp(6), inp(2, 6, 5))),
            # the preact output's own gradient
            GradCase("linear_act preact", lambda x, w, b: ops.linear_act(x, w, b, "tanh", save_preact=True), (x, w, b)),
        ]

    def gradgradcheck_cases(self, device):
        # the activations' second derivatives are bias_act's (tests/test_activation.py): a few of them here
        acts = {"linear_act none", "linear_act gelu", "linear_act tanh", "linear_act leaky_relu"}
        return [c for c in self.gradcheck_cases(device) if not c.name.startswith("linear_act ") or c.name in acts]

    def opcheck_samples(self, device):
        def inp(shape, dtype=torch.float32, layout="contiguous", grad=False):
            t = make_input(shape, dtype, device, layout, low=-1, high=1)
            return t.requires_grad_() if grad else t

        samples = [(ops.mm, args, kwargs) for args, kwargs in (
            ((inp((5, 7)), inp((7, 3))), {}),
            ((inp((5, 7), grad=True), inp((7, 3), layout="transposed", grad=True)), {}),
            ((inp((5, 7), torch.bfloat16, "transposed", True), inp((7, 3), torch.bfloat16)), {"allow_tf32": True}),
            ((inp((0, 7), grad=True), inp((7, 3), grad=True)), {}),
        )]
        samples += [(ops.bmm, args, {}) for args in (
            (inp((2, 5, 7)), inp((2, 7, 3))),
            (inp((2, 5, 7), torch.float64, "transposed", True), inp((2, 7, 3), torch.float64, grad=True)),
            (inp((1, 5, 7), grad=True).expand(3, 5, 7), inp((3, 7, 3), grad=True)),
        )]
        x, w, b, r = inp((4, 9), grad=True), inp((6, 9), grad=True), inp((6,), grad=True), inp((4, 6), grad=True)
        samples += [(ops.linear, args, kwargs) for args, kwargs in (
            ((x, w, b), {}),
            ((x, w), {"allow_tf32": True}),
            ((inp((2, 3, 9), torch.bfloat16, grad=True), inp((6, 9), torch.bfloat16, "transposed", True)), {}),
            ((inp((9,), torch.float64, grad=True), inp((6, 9), torch.float64, grad=True),
              inp((6,), torch.float64, grad=True)), {}),
            ((inp((0, 9), grad=True), w, b), {}),
        )]
        samples += [(ops.linear_act, args, kwargs) for args, kwargs in (
            ((x, w, b, "gelu"), {"save_preact": True}),
            ((x, w, b, "gelu"), {}),
            ((x, w, None, "none", r), {}),
            ((inp((2, 3, 9), torch.float16, grad=True), inp((6, 9), torch.float16, grad=True), None, "leaky_relu",
              None, 0.2), {"save_preact": True}),
            ((inp((9,), torch.float64, grad=True), inp((6, 9), torch.float64, "transposed", True),
              inp((6,), torch.float64, grad=True), "softplus", None, 2.0, 10.0), {"save_preact": True}),
        )]
        g = inp((4, 6))
        pre = ops.linear_act(x.detach(), w.detach(), b.detach(), "none")[0]
        samples += [(ops.linear_act_backward, args, {}) for args in (
            (g, x.detach(), w.detach(), pre, "silu", None, None, None, [True, True, True]),
            (g, x.detach(), w.detach(), None, "none", None, None, None, [True, False, True]),
            (g, x.detach(), w.detach(), pre, "elu", 0.5, None, inp((4, 6)), [False, True, True]),
        )]
        return samples

    def compile_cases(self, device):
        # the fused MLP convert() makes, against the native one it was made from (parameters' gradients too)
        native = _mlp(device)
        converted, _ = torch_dnn.convert(native, fuse=True)
        yield ModelCase("converted MLP (fuse=True)", converted, native, make_input((6, 16), torch.float32, device))
        # matmul's composite (views, batch broadcasting)
        yield Against("matmul broadcast", lambda a, b: F.matmul(a, b) + F.matmul(a, b[0]),
                      lambda a, b: torch.matmul(a, b) + torch.matmul(a, b[0]),
                      [make_input((2, 5, 7), torch.float32, device), make_input((2, 7, 3), torch.float32, device)])

    def bad_inputs(self):
        return [
            BadInput(lambda: F.mm(torch.ones(2, 3, dtype=torch.int32), torch.ones(3, 2, dtype=torch.int32)),
                     "torch_dnn.mm", "expected self to be a floating point tensor"),
            BadInput(lambda: F.bmm(torch.ones(2, 3, 4), torch.ones(3, 4, 5)), "torch_dnn.bmm",
                     "expected self and mat2 to have the same batch size"),
            BadInput(lambda: F.bmm(torch.ones(3, 4), torch.ones(4, 5)), "torch_dnn.bmm",
                     "expected self to be a 3-D tensor"),
            BadInput(lambda: F.linear_act(torch.ones(2, 3), torch.ones(4, 3), None, "relu", torch.ones(2, 5)),
                     "torch_dnn.linear_act", "expected residual of shape"),
            BadInput(lambda: ops.linear_act_backward(torch.ones(2, 4), torch.ones(2, 3), torch.ones(4, 3), None, "gelu",
                                                     None, None, None, [True, True, False]),
                     "torch_dnn.linear_act_backward", "needs the pre-activation"),
            # PyTorch's own message, as torch.matmul gives it
            BadInput(lambda: F.matmul(torch.tensor(1.0), torch.ones(3)), None,
                     "both arguments to matmul need to be at least 1D"),
        ]

    def cuda_graph_step(self):
        x = make_input((64, 256), torch.bfloat16, "cuda").requires_grad_()
        w = make_input((512, 256), torch.bfloat16, "cuda").requires_grad_()
        b = make_input((512,), torch.bfloat16, "cuda").requires_grad_()
        w2 = make_input((4096, 512), torch.bfloat16, "cuda")

        def step():
            h = F.linear_act(x, w, b, "gelu")
            y = F.matmul(h, w2.t()[:, :128])  # split-K sized
            gx, gw, gb = torch.autograd.grad(y.float().square().sum(), [x, w, b])
            return y, gx, gw, gb

        return step, lambda: x.copy_(make_input((64, 256), torch.bfloat16, "cuda"))

    def past_2_31_cases(self):
        return {"mm": _past_2_31_elements}


def _mm_cases(device, dtype):
    for i, (m, n, k) in enumerate(_mnk(device)):
        ta, tb = bool(i & 1), bool(i & 2)  # every operand layout over the list
        a, b = _operand((m, k), dtype, device, ta), _operand((k, n), dtype, device, tb)
        yield Against(f"mm {m}x{n}x{k} ta={ta} tb={tb} {dtype}", F.mm, torch.mm, [a, b], grad=m * n * k > 0)


def _bmm_cases(device, dtype):
    for batch, m, n, k in ((3, 7, 5, 97), (2, 33, 17, 9), (1, 1, 1, 1), (0, 3, 4, 5), (4, 0, 3, 2), (2, 3, 4, 0)):
        for ta, tb in ((False, False), (True, True), (True, False)):
            a, b = _operand((batch, m, k), dtype, device, ta), _operand((batch, k, n), dtype, device, tb)
            yield Against(f"bmm {batch}x{m}x{n}x{k} ta={ta} tb={tb} {dtype}", F.bmm, torch.bmm, [a, b],
                          grad=batch * m * n * k > 0)


def _linear_cases(device, dtype):
    for shape, n, bias in (((7, 33), 17, True), ((2, 5, 97), 7, False), ((33,), 5, True), ((1, 1), 1, True),
                           ((3, 1023), 9, True), ((0, 8), 5, True), ((4, 0), 3, True), ((4, 3), 0, True)):
        x, w, b, _ = _linear_inputs(shape, n, dtype, device, bias)
        yield Against(f"linear {shape}->{n} bias={bias} {dtype}", F.linear, TF.linear, [x, w, b],
                      grad=x.numel() > 0 and w.numel() > 0)
    x, w, b, _ = _linear_inputs((9, 40), 12, dtype, device, w_transposed=True)
    yield Against(f"linear transposed weight {dtype}", F.linear, TF.linear, [x, w, b])


def _linear_act_cases(device, dtype):
    shapes = [((13, 40), 24)] + ([((300, 1000), 520)] if device == "cuda" else [])
    for act in ACTS:
        if (device, dtype, act) == ("cpu", torch.float64, "hardsigmoid"):
            continue  # a known bug: test_linear_act_hardsigmoid_float64_cpu
        for shape, n in shapes:
            x, w, b, _ = _linear_inputs(shape, n, dtype, device, bias=True)
            # PyTorch's CUDA hardswish and hardsigmoid round 1/6 to float32: the exact composite is the float64
            # reference
            exact = {"hardswish": lambda x, w, b: hardswish_reference(linear_act_reference(x, w, b, "none")),
                     "hardsigmoid": lambda x, w, b: hardsigmoid_reference(linear_act_reference(x, w, b, "none"))
                     }.get(act)
            yield Against(f"linear_act {act} {shape}->{n} {dtype}", lambda x, w, b: F.linear_act(x, w, b, act),
                          lambda x, w, b: linear_act_reference(x, w, b, act), [x, w, b],
                          grad_output=_grad_away_from_kinks(act, x, w, b), ref_fn=exact)
    # residual, no bias, batched input, parameterised activations
    for act, a, b_ in (("gelu", None, None), ("leaky_relu", 0.2, None), ("elu", 0.5, None), ("softplus", 2.0, 10.0),
                       ("none", None, None)):
        x, w, b, r = _linear_inputs((2, 5, 33), 19, dtype, device, bias=act != "gelu", residual=True)
        yield Against(f"linear_act {act}({a}, {b_}) + residual {dtype}",
                      lambda x, w, b, r: F.linear_act(x, w, b, act, r, a, b_),
                      lambda x, w, b, r: linear_act_reference(x, w, b, act, r, a, b_), [x, w, b, r])


def test_linear_act_hardsigmoid_float64_cpu():
    """Against the exact float64 reference: PyTorch's hardsigmoid gradient rounds 1/6 to float32."""
    x, w, b, _ = _linear_inputs((13, 40), 24, torch.float64, "cpu", bias=True)
    assert_matches_torch(lambda x, w, b: F.linear_act(x, w, b, "hardsigmoid"),
                         lambda x, w, b: linear_act_reference(x, w, b, "hardsigmoid"), [x, w, b],
                         grad_output=_grad_away_from_kinks("hardsigmoid", x, w, b),
                         ref_fn=lambda x, w, b: hardsigmoid_reference(linear_act_reference(x, w, b, "none")))


# (shape of input, shape of other): torch.matmul's every rank combination, batch broadcasting
MATMUL_SHAPES = [
    ((7,), (7,)), ((5, 7), (7,)), ((7,), (7, 3)), ((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((2, 5, 7), (7,)),
    ((7,), (2, 7, 3)), ((2, 1, 5, 7), (3, 7, 4)), ((5, 7), (2, 7, 3)), ((3, 5, 7), (1, 7, 3)), ((2, 3, 5, 7), (2, 3, 7, 4)),
    ((0, 5, 7), (7, 3)), ((2, 5, 0), (0, 3)),
]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_matmul_semantics(dtype, device):
    for sa, sb in MATMUL_SHAPES:
        a, b = make_input(sa, dtype, device, low=-2, high=2), make_input(sb, dtype, device, low=-2, high=2)
        assert F.matmul(a, b).shape == torch.matmul(a, b).shape
        assert_matches_torch(F.matmul, torch.matmul, [a, b], name=f"matmul {sa} @ {sb} {dtype}",
                             grad=a.numel() * b.numel() > 0)


@pytest.mark.parametrize("device", devices())
def test_views_read_in_place(device):
    """Transposed, strided, offset and batch-broadcast operands give PyTorch's values. (The common layouts,
    x @ W.T, W @ x.T, column-major A, row slices, a transposed batch against a matrix, reach the kernels as
    views; a column step of 2 is copied.)"""
    dtype = torch.float32
    base = make_input((40, 64), dtype, device)
    w = make_input((24, 64), dtype, device)
    cases = {
        "x @ w.T": (base, w.t()),
        "w @ x.T": (w, base.t()),
        "x.T.T (column-major A) @ w.T": (make_input((64, 40), dtype, device).t(), w.t()),
        "column slice": (base[:, 3:50], make_input((47, 9), dtype, device)),
        "every other row": (base[::2], w.t()),
        "every other column (copied)": (base[:, ::2], make_input((32, 5), dtype, device)),
        "offset by one element": (make_input((40 * 64 + 1,), dtype, device)[1:].view(40, 64), w.t()),
    }
    for name, (a, b) in cases.items():
        assert_matches_torch(F.matmul, torch.matmul, [a, b], name=name)
    # a transposed batch (not foldable into rows) against a matrix: bmm with a stride-0 batch, no copy
    x = make_input((5, 3, 7), dtype, device).transpose(0, 1)
    assert_matches_torch(F.matmul, torch.matmul, [x, make_input((7, 4), dtype, device)], name="transposed batch")
    assert_matches_torch(F.matmul, torch.matmul, [make_input((4, 5), dtype, device), x],
                         name="matrix @ transposed batch")
    # the in-place rule itself: op outputs depend on strides only through values
    x2 = make_input((6, 8), dtype, device)
    torch.testing.assert_close(ops.mm(x2.t(), x2), ops.mm(x2.t().contiguous(), x2), rtol=0, atol=0)


def _linear_inputs(shape, n, dtype, device, bias=True, residual=False, w_transposed=False):
    x = make_input(shape, dtype, device, low=-2, high=2)
    k = shape[-1]
    w = (make_input((k, n), dtype, device, low=-1, high=1).t() if w_transposed
         else make_input((n, k), dtype, device, low=-1, high=1))
    b = make_input((n,), dtype, device, low=-1, high=1) if bias else None
    r = make_input(tuple(shape[:-1]) + (n,), dtype, device, low=-1, high=1) if residual else None
    return x, w, b, r


@pytest.mark.parametrize("device", devices())
def test_linear_act_preact_and_recompute(device):
    x, w, b, _ = _linear_inputs((6, 10), 8, torch.float64, device)
    out, pre = ops.linear_act(x, w, b, "gelu", save_preact=True)
    torch.testing.assert_close(pre, TF.linear(x, w, b))
    torch.testing.assert_close(out, TF.gelu(pre))
    assert ops.linear_act(x, w, b, "gelu")[1].numel() == 0
    assert ops.linear_act(x, w, b, "none", save_preact=True)[1].numel() == 0, "no activation: nothing to save"
    # called without save_preact, the backward recomputes the pre-activation
    xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
    out = ops.linear_act(xs, ws, bs, "silu")[0]
    grads = torch.autograd.grad(out.sum(), [xs, ws, bs])
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    ref = torch.autograd.grad(TF.silu(TF.linear(xr, wr, br)).sum(), [xr, wr, br])
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r)
    # the gradient of the preact output itself flows into x, w and b
    xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
    out, pre = ops.linear_act(xs, ws, bs, "tanh", save_preact=True)
    grads = torch.autograd.grad((out + 2 * pre).sum(), [xs, ws, bs])
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    z = TF.linear(xr, wr, br)
    ref = torch.autograd.grad((torch.tanh(z) + 2 * z).sum(), [xr, wr, br])
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r)


@pytest.mark.parametrize("device", devices())
def test_empty_dims(device):
    for m, n, k in ((0, 4, 3), (4, 0, 3), (4, 3, 0), (0, 0, 0)):
        a = make_input((m, k), torch.float32, device).requires_grad_()
        b = make_input((k, n), torch.float32, device).requires_grad_()
        y = F.mm(a, b)
        assert y.shape == (m, n) and (y == 0).all()
        y.sum().backward()
        assert a.grad.shape == a.shape and b.grad.shape == b.shape and not a.grad.any() and not b.grad.any()
    # K = 0: the output is the epilogue of zeros
    x, w, b = torch.empty(3, 0, device=device), torch.empty(4, 0, device=device), make_input((4,), torch.float32, device)
    r = make_input((3, 4), torch.float32, device)
    torch.testing.assert_close(F.linear_act(x, w, b, "relu", r), TF.relu(b).expand(3, 4) + r)


def test_tf32_flag_follows_pytorch():
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        assert torch_dnn.ops.matmul.allow_tf32()
        torch.backends.cuda.matmul.allow_tf32 = False
        assert not torch_dnn.ops.matmul.allow_tf32()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    # the CPU computes float32 in full precision whatever the flag says
    a, b = make_input((33, 257), torch.float32, "cpu"), make_input((257, 9), torch.float32, "cpu")
    torch.testing.assert_close(ops.mm(a, b, allow_tf32=True), ops.mm(a, b), rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["sm80", "sm90"])
def test_tf32_semantics_cuda(path, monkeypatch):
    if path not in gemm_paths():
        pytest.skip(f"no {path} GEMM path in this build/device")
    monkeypatch.setenv("TORCH_DNN_GEMM_PATH", path if path == "sm80" else "auto")
    a, b = make_input((512, 1024), torch.float32, "cuda"), make_input((1024, 384), torch.float32, "cuda")
    ref = a.double() @ b.double()
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        ours = F.mm(a, b)
        err = float((ours.double() - ref).abs().max() / ref.abs().max())
        assert err < 1e-5, f"TF32 off must give float32 accuracy, got {err:.3g}"
        torch.backends.cuda.matmul.allow_tf32 = True
        ours, theirs = F.mm(a, b), torch.mm(a, b)
        v = compare(ours, theirs, ref, name="tf32 on")
        assert v, v.message
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


@pytest.mark.parametrize("device", devices())
def test_autocast(device):
    dtype = torch.bfloat16
    a, b = make_input((8, 16), torch.float32, device), make_input((16, 4), torch.float32, device)
    w, bias = make_input((4, 16), torch.float32, device), make_input((4,), torch.float32, device)
    with torch.autocast(device, dtype=dtype):
        pairs = ((F.matmul(a, b), torch.matmul(a, b)), (F.mm(a, b), torch.mm(a, b)),
                 (F.linear(a, w, bias), TF.linear(a, w, bias)), (F.bmm(a[None], b[None]), torch.bmm(a[None], b[None])))
    # the float64 product of the bf16-rounded inputs: bf16 outputs judged by the error-ratio rule, not bitwise
    ad, bd, wd, biasd = (t.to(dtype).double() for t in (a, b, w, bias))
    refs = (ad @ bd, ad @ bd, ad @ wd.T + biasd, (ad @ bd)[None])
    for (ours, theirs), ref in zip(pairs, refs):
        assert ours.dtype == theirs.dtype == dtype
        v = compare(ours, theirs, ref, name="autocast")
        assert v, v.message
    with torch.autocast(device, dtype=dtype):
        y = F.linear_act(a, w, bias, "gelu")
        assert y.dtype == dtype
        d = F.mm(a.double(), b.double())  # float64 is not autocast
        assert d.dtype == torch.float64
    xg = a.clone().requires_grad_()
    with torch.autocast(device, dtype=dtype):
        y = F.linear_act(xg, w, bias, "silu")
    y.float().sum().backward()
    assert xg.grad.dtype == torch.float32


def _mlp(device, dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Dropout(0.0),
        torch.nn.Linear(32, 24), torch.nn.LeakyReLU(0.2), torch.nn.Linear(24, 24), torch.nn.Softplus(2.0, 10.0),
        torch.nn.Linear(24, 8, bias=False), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Hardtanh(),
        torch.nn.Linear(8, 4),
    ).to(device, dtype)


@pytest.mark.parametrize("device", devices())
def test_convert_fuse(device):
    model = _mlp(device, torch.float64)
    hooked = []
    model[11].register_forward_hook(lambda m, i, o: hooked.append(1))  # a hook keeps Linear 11 unfused
    converted, report = torch_dnn.convert(model, fuse=True)
    assert [(a, b, act) for a, b, act in report.fused] == [
        ("0", "1", "gelu"), ("2", "3", "relu"), ("5", "6", "leaky_relu"), ("7", "8", "softplus"), ("9", "10", "tanh"),
    ], str(report)
    assert "fused   0 + 1 -> torch_dnn.nn.LinearAct(activation='gelu')" in str(report)
    assert isinstance(converted[0], torch_dnn.nn.LinearAct) and isinstance(converted[1], torch_dnn.nn.FusedAway)
    assert converted[5].act_a == 0.2 and (converted[7].act_a, converted[7].act_b) == (2.0, 10.0)
    assert type(converted[11]) is torch_dnn.nn.Linear and type(converted[13]) is torch_dnn.nn.Linear
    assert converted.state_dict().keys() == model.state_dict().keys()
    x = make_input((5, 16), torch.float64, device)
    assert_models_agree(model, converted, x, name="fused model")
    assert len(hooked) == 2
    # without fuse: only swaps
    plain, report = torch_dnn.convert(_mlp(device))
    assert not report.fused and type(plain[0]) is torch_dnn.nn.Linear


def test_linear_modules():
    m = torch_dnn.nn.LinearAct(8, 5, activation="silu")
    ref = torch.nn.Linear(8, 5)
    assert m.state_dict().keys() == ref.state_dict().keys()
    m.load_state_dict(ref.state_dict())
    x, r = make_input((3, 8), torch.float32, "cpu"), make_input((3, 5), torch.float32, "cpu")
    torch.testing.assert_close(m(x, r), TF.silu(ref(x)) + r)
    assert "activation='silu'" in repr(m)
    lin = torch_dnn.nn.Linear(8, 5, bias=False)
    torch.testing.assert_close(lin(x), TF.linear(x, lin.weight))


# ---- CUDA only ----

def sm90_takes(fn, *args):
    """Whether the forced sm90 path accepts fn(*args) (it raises when the Hopper kernels cannot take it)."""
    try:
        fn(*args)
        return True
    except RuntimeError as e:
        if "cannot take this problem" in str(e):
            return False
        raise

@pytest.mark.cuda
@pytest.mark.parametrize("path", ["sm80", "sm90"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_gemm_paths_forced(path, dtype, monkeypatch):
    """Each GEMM path on its own (TORCH_DNN_GEMM_PATH), over odd sizes, layouts and the fused epilogue."""
    if path not in gemm_paths():
        pytest.skip(f"no {path} GEMM path in this build/device")
    if path == "sm90" and dtype == torch.float32:
        pytest.skip("sm90 takes float32 (TF32) only as batch-1 K-major mm on a rounded operand copy: "
                    "tests/test_gemm_sm90.py::test_mm_tf32")
    monkeypatch.setenv("TORCH_DNN_GEMM_PATH", path)
    tf32 = dtype == torch.float32
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32  # the sm90 path takes float32 only as TF32
    try:
        checked = 0
        for i, (m, n, k) in enumerate([(128, 128, 64), (256, 512, 1024), (1024, 1024, 4096), (64, 4096, 4096),
                                       (2048, 256, 8192), (512, 1536, 1000)]):
            ta, tb = bool(i & 1), bool(i & 2)
            a, b = _operand((m, k), dtype, "cuda", ta), _operand((k, n), dtype, "cuda", tb)
            if path == "sm90" and not sm90_takes(F.mm, a, b):
                continue  # a layout/dtype the Hopper kernels do not instantiate: the auto path falls back
            assert_matches_torch(F.mm, torch.mm, [a, b], name=f"{path} mm {m}x{n}x{k} ta={ta} tb={tb} {dtype}")
            checked += 1
        assert checked > 0, f"the {path} path took none of the mm problems"
        for act in ("gelu", "relu", "silu"):
            x, w, b, r = _linear_inputs((4, 256, 512), 1024, dtype, "cuda", residual=True)
            assert_matches_torch(lambda x, w, b, r: F.linear_act(x, w, b, act, r),
                                 lambda x, w, b, r: linear_act_reference(x, w, b, act, r), [x, w, b, r],
                                 name=f"{path} linear_act {act} {dtype}")
        a, b = make_input((6, 256, 512), dtype, "cuda"), make_input((6, 512, 384), dtype, "cuda")
        assert_matches_torch(F.bmm, torch.bmm, [a, b], name=f"{path} bmm {dtype}")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


@pytest.mark.cuda
def test_forced_path_errors(monkeypatch):
    a = make_input((8, 8), torch.float64, "cuda")
    monkeypatch.setenv("TORCH_DNN_GEMM_PATH", "sm90")
    with pytest.raises(RuntimeError, match="TORCH_DNN_GEMM_PATH=sm90"):
        F.mm(a, a)  # float64 (or no sm90 path at all): a clear error, not a silent fallback
    monkeypatch.setenv("TORCH_DNN_GEMM_PATH", "bogus")
    with pytest.raises(RuntimeError, match="must be auto, sm80 or sm90"):
        F.mm(a, a)


@pytest.mark.cuda
def test_unaligned_and_odd_cuda():
    """Operands whose pointers or leading dimensions break 16-byte alignment take the element-wise loads."""
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        flat = make_input((300 * 301 + 1,), dtype, "cuda")
        a = flat[1:].view(300, 301)  # offset by one element, odd leading dimension
        b = make_input((301, 129), dtype, "cuda")
        assert_matches_torch(F.mm, torch.mm, [a, b], name=f"unaligned {dtype}")
        assert_matches_torch(F.mm, torch.mm, [a.t()[:, :257], b[:257, :7]], name=f"unaligned transposed {dtype}")
        x, w, bias, r = _linear_inputs((77, 301), 131, dtype, "cuda", residual=True)
        assert_matches_torch(lambda x, w, b, r: F.linear_act(x, w, b, "gelu_tanh", r),
                             lambda x, w, b, r: linear_act_reference(x, w, b, "gelu_tanh", r), [x, w, bias, r],
                             name=f"odd linear_act {dtype}")


@pytest.mark.cuda
def test_split_k_deterministic():
    a, b = make_input((64, 16384), torch.bfloat16, "cuda"), make_input((16384, 1024), torch.bfloat16, "cuda")
    outs = [F.mm(a, b) for _ in range(3)]
    assert all(torch.equal(outs[0], o) for o in outs[1:]), "split-K must reduce in a fixed order"
    v = compare(outs[0], torch.mm(a, b), a.double() @ b.double(), name="split-K")
    assert v, v.message
    x, w = make_input((32, 8192), torch.float32, "cuda"), make_input((512, 8192), torch.float32, "cuda")
    y = [F.linear(x, w) for _ in range(2)]
    assert torch.equal(y[0], y[1])


# the portable path's float32 GEMM kernels as the profiler names them: 3xTF32 (gemm_kernel<float, AK, BK, X3 = true>)
# and SIMT FFMA
FP32_KERNELS = {"3xtf32": r"mma::gemm_kernel<float, (true|false), (true|false), true>",
                "simt": r"simt::gemm_kernel<float, "}


def _cuda_kernel_names(fn):
    """Names of the CUDA kernels fn launched (empty when the profiler cannot see kernels here)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.cuda
@pytest.mark.parametrize("kernel", ["3xtf32", "simt"])
def test_float32_without_tf32(kernel, monkeypatch):
    """Float32 with TF32 off (PyTorch's default) on the portable path's 3xTF32 kernel (TORCH_DNN_GEMM_FP32=3xtf32) and
    on its SIMT FFMA kernel (=simt, the default): mm, bmm, linear and linear_act, forward and gradients, meet the
    error rule against float64 with PyTorch's own float32 error (TF32 off) on the same inputs as the reference, over
    odd sizes, every operand layout, split-K shapes (small M and N, long K), batches, all-positive data (where the
    tensor cores' truncating accumulation would show) and unaligned operands; every float32 GEMM these calls launch,
    forward and backward, is the kernel the knob names (where the profiler sees kernel names)."""
    monkeypatch.setenv("TORCH_DNN_GEMM_PATH", "auto")
    monkeypatch.setenv("TORCH_DNN_GEMM_FP32", kernel)
    dtype = torch.float32
    checked = []

    def check(name, ours, theirs, inputs, **kw):
        assert_matches_torch(ours, theirs, inputs, name=f"{kernel} {name}", **kw)
        checked.append(name)

    def cases():
        for i, (m, n, k) in enumerate([(1023, 1025, 4097), (97, 7, 1023), (129, 257, 65), (300, 301, 257),
                                       (64, 96, 8192), (33, 40, 16384), (7, 1, 4097), (1, 130, 3000)]):
            ta, tb = bool(i & 1), bool(i & 2)  # every operand layout over the list
            a, b = _operand((m, k), dtype, "cuda", ta), _operand((k, n), dtype, "cuda", tb)
            check(f"mm {m}x{n}x{k} ta={ta} tb={tb}", F.mm, torch.mm, [a, b])
        # all-positive data over a long K: one accumulator chained through the tensor cores would drift (truncation)
        a, b = _operand((256, 8192), dtype, "cuda", False, 0, 1), _operand((8192, 256), dtype, "cuda", True, 0, 1)
        check("mm positive 256x256x8192", F.mm, torch.mm, [a, b])
        for batch, m, n, k in ((3, 257, 129, 511), (4, 33, 17, 2049)):
            for ta, tb in ((False, False), (True, True), (True, False)):
                a, b = _operand((batch, m, k), dtype, "cuda", ta), _operand((batch, k, n), dtype, "cuda", tb)
                check(f"bmm {batch}x{m}x{n}x{k} ta={ta} tb={tb}", F.bmm, torch.bmm, [a, b])
        for shape, n, wt in (((2, 77, 301), 131, False), ((8, 4096), 512, False), ((300, 1000), 520, True)):
            x, w, bias, _ = _linear_inputs(shape, n, dtype, "cuda", w_transposed=wt)
            check(f"linear {shape}->{n} wt={wt}", F.linear, TF.linear, [x, w, bias])
        x, w, bias, r = _linear_inputs((2, 65, 300), 260, dtype, "cuda", residual=True)
        check("linear_act gelu + residual", lambda x, w, b, r: F.linear_act(x, w, b, "gelu", r),
              lambda x, w, b, r: linear_act_reference(x, w, b, "gelu", r), [x, w, bias, r],
              grad_output=_grad_away_from_kinks("gelu", x, w, bias))
        flat = make_input((300 * 301 + 1,), dtype, "cuda")
        a, b = flat[1:].view(300, 301), make_input((301, 129), dtype, "cuda")  # offset, odd leading dimension
        check("mm unaligned", F.mm, torch.mm, [a, b])

    with no_tf32():
        names = _cuda_kernel_names(cases)
    assert len(checked) >= 20, f"ran {len(checked)} cases"
    if names:  # the profiler saw kernels: every float32 GEMM was the kernel the knob names
        other = "simt" if kernel == "3xtf32" else "3xtf32"
        ran = [n for n in names if re.search(FP32_KERNELS[kernel], n)]
        wrong = sorted({n for n in names if re.search(FP32_KERNELS[other], n)})
        assert ran and not wrong, f"TORCH_DNN_GEMM_FP32={kernel}: ran {len(ran)} of its kernels and {wrong}"


@pytest.mark.cuda
def test_float32_kernel_knob_per_call(monkeypatch):
    """TORCH_DNN_GEMM_FP32 is read at every call: one process switches between 3xTF32 and SIMT FFMA (different
    roundings: different bits; each deterministic), and any other value is an error naming the knob."""
    a, b = make_input((256, 1024), torch.float32, "cuda"), make_input((1024, 384), torch.float32, "cuda")
    outs = {}
    with no_tf32():
        for kernel in ("3xtf32", "simt", "3xtf32", "simt"):
            monkeypatch.setenv("TORCH_DNN_GEMM_FP32", kernel)
            y = F.mm(a, b)
            if kernel in outs:
                assert torch.equal(outs[kernel], y), f"{kernel}: not deterministic"
            outs[kernel] = y
        assert not torch.equal(outs["3xtf32"], outs["simt"]), "TORCH_DNN_GEMM_FP32 changed nothing within the process"
        monkeypatch.setenv("TORCH_DNN_GEMM_FP32", "bogus")
        with pytest.raises(RuntimeError, match="TORCH_DNN_GEMM_FP32 must be simt or 3xtf32"):
            F.mm(a, b)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_skinny_kernel(dtype, monkeypatch):
    """The skinny kernel (x @ W.T, M <= 64, swap-AB split-K): row counts around its 16/32/64 tiles, N and K off
    its 128 / 64 tiles, the fused epilogue, both split reductions (DSMEM cluster on sm_90, and the workspace +
    counter one) and both pipeline depths; deterministic, the whole output written, and the same values as
    with the kernel switched off (TORCH_DNN_GEMM_SKINNY=0) to within the error rule."""
    cases = [(1, 4104, 4096, "none"), (7, 100, 72, "gelu"), (16, 4096, 4160, "silu"), (17, 520, 8, "relu"),
             (33, 1032, 1000, "gelu_tanh"), (64, 4096, 16384, "none"), (64, 136, 4096, "tanh")]
    # "1": the skinny kernel wherever it applies (auto prefers the Hopper swap-AB kernels for most of these)
    for (m, n, k, act), mode, stages in itertools.product(cases, ("1", "counter"), ("4", "8")):
        monkeypatch.setenv("TORCH_DNN_GEMM_SKINNY", mode)
        monkeypatch.setenv("TORCH_DNN_GEMM_SKINNY_STAGES", stages)
        x, w, b, r = _linear_inputs((m, k), n, dtype, "cuda", bias=True, residual=act == "silu")
        args = (x, w, b, act) + ((r,) if r is not None else ())
        outs = []
        for _ in range(2):
            torch.cuda.empty_cache()
            poison = torch.full((m * n * 2,), float("nan"), device="cuda", dtype=dtype)
            del poison
            outs.append(F.linear_act(*args))
        assert torch.equal(outs[0], outs[1]), f"skinny ({mode}) {m}x{n}x{k}: not deterministic"
        assert not torch.isnan(outs[0]).any(), f"skinny {m}x{n}x{k}: output not fully written"
        ref = linear_act_reference(*[t.double() if isinstance(t, torch.Tensor) else t for t in args])
        peer = linear_act_reference(*args)
        v = compare(outs[0], peer, ref, name=f"skinny {m}x{n}x{k} {act} {dtype}")
        assert v, v.message
        monkeypatch.setenv("TORCH_DNN_GEMM_SKINNY", "0")
        v = compare(outs[0], F.linear_act(*args), ref, name=f"skinny ({mode}) vs not {m}x{n}x{k}")
        assert v, v.message


@pytest.mark.cuda
def test_outputs_fully_written():
    # the caching allocator hands back a NaN-poisoned block: every element must be overwritten with PyTorch's value
    for m, n, k in ((1000, 777, 65), (129, 4097, 3000), (7, 9, 11)):
        for dtype in (torch.bfloat16, torch.float32):
            a, b = make_input((m, k), dtype, "cuda"), make_input((k, n), dtype, "cuda")
            for name, ours, theirs in (("mm", F.mm, torch.mm),
                                       ("linear_act gelu", lambda a, b: F.linear_act(a, b.t(), None, "gelu"),
                                        lambda a, b: linear_act_reference(a, b.t(), None, "gelu"))):
                poison = torch.full((m * n * 4,), float("nan"), device="cuda", dtype=dtype)
                del poison
                v = compare(ours(a, b), theirs(a, b), theirs(a.double(), b.double()),
                            name=f"{name} {m}x{n}x{k} {dtype} poisoned")
                assert v, v.message


def _past_2_31_elements():
    a = make_input((65537, 8), torch.bfloat16, "cuda")
    b = make_input((8, 32768), torch.bfloat16, "cuda")
    y = F.mm(a, b)  # 2^31 + 32768 outputs
    rows = torch.tensor([0, 1, 40000, 65535, 65536], device="cuda")
    v = compare(y[rows], torch.mm(a[rows], b), a[rows].double() @ b.double(), name="mm past 2^31")
    assert v, v.message


class TestErrors(expecttest.TestCase):
    def test_shape_mismatch(self):
        with self.assertRaises(RuntimeError) as cm:
            F.mm(torch.ones(2, 3), torch.ones(4, 5))
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.mm: self and mat2 shapes cannot be multiplied (2x3 and 4x5)""")

    def test_linear_shape_mismatch(self):
        with self.assertRaises(RuntimeError) as cm:
            F.linear(torch.ones(2, 3), torch.ones(4, 5))
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.linear: input and weight.T shapes cannot be multiplied (2x3 and 5x4)""")

    def test_mixed_dtypes(self):
        with self.assertRaises(RuntimeError) as cm:
            F.matmul(torch.ones(2, 3), torch.ones(3, 4, dtype=torch.float64))
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.mm: expected mat2 to have the same dtype as self (Float), but got Double""")

    def test_bias_shape(self):
        with self.assertRaises(RuntimeError) as cm:
            F.linear_act(torch.ones(2, 3), torch.ones(4, 3), torch.ones(5), "relu")
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.linear_act: expected bias of shape [4], but got [5]""")

    def test_unknown_activation(self):
        with self.assertRaises(RuntimeError) as cm:
            F.linear_act(torch.ones(2, 3), torch.ones(4, 3), None, "swish")
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.bias_act: unknown act 'swish' (expected one of none, relu, relu6, leaky_relu, elu, gelu, gelu_tanh, silu, sigmoid, tanh, softplus, mish, hardswish, hardsigmoid)""")


@pytest.mark.cuda
def test_mixed_devices():
    with pytest.raises(RuntimeError, match="expected mat2 to be on the same device as self"):
        F.mm(torch.ones(2, 3), torch.ones(3, 2, device="cuda"))
