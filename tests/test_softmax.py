"""Softmax family: softmax / log_softmax over every dim and row length (the family tester's checks: the error
rule, opcheck, gradcheck and gradgradcheck, torch.compile against PyTorch, bad input, CUDA graphs, past 2^31
elements), dtype=, special values, the legacy implicit dim, error messages; on CUDA, outputs fully written."""
import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.testing import compare
from tests.family_tester import Against, BadInput, FamilyTester, GradCase
from tests.utils import assert_matches_torch, devices, first_line, make_input

ops = torch.ops.torch_dnn
FNS = {"softmax": (F.softmax, TF.softmax), "log_softmax": (F.log_softmax, TF.log_softmax)}

# (shape, dim, layout): short, odd, long rows; a dim that is not innermost; non-contiguous and channels_last
CASES = [
    ((4, 1), -1, "contiguous"),
    ((5, 7), -1, "contiguous"),
    ((6, 97), -1, "offset"),
    ((3, 128), -1, "contiguous"),
    ((3, 1023), -1, "contiguous"),
    ((2, 1025), -1, "contiguous"),
    ((2, 4096), -1, "contiguous"),
    ((9, 33), 0, "contiguous"),
    ((3, 7, 5), 1, "contiguous"),
    ((20, 30), -1, "transposed"),
    ((20, 30), 0, "transposed"),
    ((12, 40), -1, "strided"),
    ((2, 6, 5, 4), 1, "channels_last"),
    ((2, 6, 5, 4), 3, "channels_last"),
    ((0, 5), -1, "contiguous"),
    ((5, 0), -1, "contiguous"),
    ((), 0, "contiguous"),
]

# Rows the GPU computes with its other kernels: several blocks per row, and a block re-reading long rows.
CUDA_CASES = [
    ((3, 8192), -1, "contiguous"),
    ((4, 20000), -1, "contiguous"),
    ((3, 32768), -1, "contiguous"),
    ((2, 40001), -1, "contiguous"),
    ((300, 40000), -1, "contiguous"),
    ((2, 262144), -1, "contiguous"),
    ((3, 262147), -1, "contiguous"),
    ((1, 3, 262144), 1, "contiguous"),
]


class TestSoftmax(FamilyTester):
    variants = list(FNS)

    def against_torch(self, device, dtype, name):
        ours, theirs = FNS[name]
        for shape, dim, layout in CASES + (CUDA_CASES if device == "cuda" else []):
            x = make_input(shape, dtype, device, layout, low=-8, high=8) if shape else make_input((), dtype, device)
            yield Against(f"{name} {shape} dim={dim} {layout} {dtype}", lambda x: ours(x, dim),
                          lambda x: theirs(x, dim), [x])

    def gradcheck_cases(self, device):
        return [GradCase(f"{name} {shape} dim={dim}", lambda x, f=f, dim=dim: f(x, dim),
                         (make_input(shape, torch.float64, device).requires_grad_(),))
                for name, (f, _) in FNS.items() for shape, dim in (((4, 9), -1), ((3, 5, 4), 1))]

    def gradgradcheck_cases(self, device):
        return self.gradcheck_cases(device)

    def opcheck_samples(self, device):
        y = make_input((4, 33), torch.float32, device)
        g = make_input((4, 33), torch.float32, device)
        samples = []
        for name in FNS:
            samples += [
                (getattr(ops, name), (make_input((4, 33), torch.float32, device), -1), {}),
                (getattr(ops, name), (make_input((4, 33), torch.float64, device, "transposed").requires_grad_(), 0),
                 {}),
                (getattr(ops, name), (make_input((2, 3, 4, 5), torch.bfloat16, device, "channels_last")
                                      .requires_grad_(), 1), {}),
                (getattr(ops, name), (make_input((4, 33), torch.float16, device).requires_grad_(), -1),
                 {"dtype": torch.float32}),
                (getattr(ops, f"{name}_backward"), (g, y, -1, torch.float32), {}),
                (getattr(ops, f"{name}_backward"), (g, y, 1, torch.float16), {}),
            ]
        return samples

    def compile_cases(self, device):
        yield Against("softmax(-1) + log_softmax(0)", lambda x: F.softmax(x, -1) + F.log_softmax(x, 0),
                      lambda x: TF.softmax(x, -1) + TF.log_softmax(x, 0), [make_input((4, 33), torch.float32, device)])
        # the modules, as convert() puts them into a model
        ours = torch.nn.Sequential(torch_dnn.nn.Softmax(-1), torch_dnn.nn.LogSoftmax(-1))
        theirs = torch.nn.Sequential(torch.nn.Softmax(-1), torch.nn.LogSoftmax(-1))
        yield Against("Softmax, LogSoftmax modules", ours, theirs, [make_input((4, 16), torch.float32, device)])

    def bad_inputs(self):
        return [
            BadInput(lambda: F.log_softmax(torch.ones(2, 3), -3), "torch_dnn.log_softmax", "dim -3"),
            BadInput(lambda: ops.softmax_backward(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.float64), 1,
                                                  torch.float64), "torch_dnn.softmax_backward", "grad_output"),
            BadInput(lambda: ops.log_softmax_backward(torch.ones(2, 3), torch.ones(2, 3), 2, torch.float32),
                     "torch_dnn.log_softmax_backward", "dim 2"),
        ]

    def cuda_graph_step(self):
        x = make_input((64, 1000), torch.float32, "cuda").requires_grad_()

        def step():
            y = F.softmax(x, -1) + F.log_softmax(x, 0)
            (gx,) = torch.autograd.grad(y.square().sum(), [x])
            return y, gx

        return step, lambda: x.copy_(make_input((64, 1000), torch.float32, "cuda"))

    def past_2_31_cases(self):
        return {"rows": _softmax_past_2_31_elements}


@pytest.mark.cuda
def test_cuda_outputs_fully_written():
    # the caching allocator hands back a NaN-poisoned block: every element must be overwritten with PyTorch's value
    for shape, dim, name in (((1000, 777), -1, "softmax"), ((3, 5000, 7), 1, "log_softmax")):
        x = make_input(shape, torch.float32, "cuda")
        poison = torch.full((x.numel(),), float("nan"), device="cuda")
        del poison
        ours, theirs = FNS[name]
        v = compare(ours(x, dim), theirs(x, dim), theirs(x.double(), dim), name=f"{name} {shape} poisoned")
        assert v, v.message


def _softmax_past_2_31_elements():
    # rows x cols past 2^31: 64-bit row offsets
    x = torch.empty(65537, 32768, dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    rows = torch.tensor([0, 1, 40000, 65535, 65536], device="cuda")
    for name, (ours, theirs) in FNS.items():
        y = ours(x, -1)
        v = compare(y[rows], theirs(x[rows], -1), theirs(x[rows].double(), -1), name=f"{name} past 2^31")
        assert v, v.message
        del y


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", list(FNS))
def test_dtype_argument(name, device):
    ours, theirs = FNS[name]
    for in_t, out_t in ((torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.float64),
                        (torch.float32, torch.bfloat16), (torch.float64, torch.float32)):
        for shape in ((7, 33), (4, 2048)):
            x = make_input(shape, in_t, device)
            # the reference: the input cast to dtype (as the op's contract says), then float64 math
            # (computed in out_t: a float64 input's gradient carries out_t's rounding)
            assert_matches_torch(lambda x: ours(x, -1, dtype=out_t), lambda x: theirs(x, -1, dtype=out_t), [x],
                                 ref_fn=lambda x: theirs(x.to(out_t).double(), -1), compute_dtype=out_t,
                                 name=f"{name} {in_t}->{out_t} {shape}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", list(FNS))
def test_special_values(name, device):
    ours, theirs = FNS[name]
    inf, nan = float("inf"), float("nan")
    rows = [
        [-inf] * 6,                          # all -inf: NaN, as PyTorch
        [-inf, 1.0, -inf, 2.0, -inf, 0.5],   # some -inf: exact zeros
        [inf, 1.0, 2.0, 3.0, 4.0, 5.0],      # +inf
        [nan, 1.0, 2.0, 3.0, 4.0, 5.0],      # NaN
        [1e4, -1e4, 0.0, 1.0, 2.0, 3.0],     # large spread
    ]
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.tensor(rows, dtype=dtype, device=device)
        assert_matches_torch(lambda x: ours(x, -1), lambda x: theirs(x, -1), [x], grad=False, name=f"{name} special")
        # the same rows spread over a dim that is not innermost
        assert_matches_torch(lambda x: ours(x, 0), lambda x: theirs(x, 0), [x.t().contiguous()], grad=False,
                             name=f"{name} special dim 0")
        if device == "cuda":  # long rows take the other kernels
            for n in (2000, 40000):
                big = make_input((5, n), dtype, device)
                big[:, : len(rows[0])] = x
                big[0] = -inf
                big[1, :] = -inf  # a NaN among -inf values only: the row is still NaN
                big[1, 5] = nan
                big[1, -1] = 1.0
                assert_matches_torch(lambda x: ours(x, -1), lambda x: theirs(x, -1), [big], grad=False,
                                     name=f"{name} special n={n}")


@pytest.mark.parametrize("device", devices())
def test_legacy_dim_none(device):
    x = make_input((3, 4), torch.float32, device)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        y = F.softmax(x)
    torch.testing.assert_close(y, TF.softmax(x, 1))


class TestErrors(expecttest.TestCase):
    def test_dim_out_of_range(self):
        with self.assertRaises(RuntimeError) as cm:
            F.softmax(torch.ones(2, 3), 2)
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.softmax: dim 2 is out of range for a tensor of 2 dimensions (expected to be in [-2, 1])""")

    def test_integer_input(self):
        with self.assertRaises(RuntimeError) as cm:
            F.log_softmax(torch.ones(2, 3, dtype=torch.int32), 1)
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.log_softmax: expected input to be a floating point tensor (float32, float16, bfloat16 or float64), but got Int""")

    def test_integer_dtype_argument(self):
        with self.assertRaises(RuntimeError) as cm:
            F.softmax(torch.ones(2, 3), 1, dtype=torch.int64)
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.softmax: expected dtype to be a floating point type, but got Long""")

    def test_backward_shape(self):
        with self.assertRaises(RuntimeError) as cm:
            ops.softmax_backward(torch.ones(2, 3), torch.ones(3, 2), 1, torch.float32)
        self.assertExpectedInline(first_line(cm.exception), """torch_dnn.softmax_backward: expected grad_output to have the shape of output [3, 2], but got [2, 3]""")
