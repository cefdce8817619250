"""Softmax family: softmax / log_softmax over every dim and row length, dtype=, special values, opcheck,
gradcheck, bad input."""
import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from tests.utils import ALL_DTYPES, assert_matches_torch, devices, first_line, make_input, opcheck_samples

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


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(FNS))
def test_against_torch(name, dtype, device):
    ours, theirs = FNS[name]
    cases = CASES + (CUDA_CASES if device == "cuda" else [])
    for shape, dim, layout in cases:
        x = make_input(shape, dtype, device, layout, low=-8, high=8) if shape else make_input((), dtype, device)
        assert_matches_torch(lambda x: ours(x, dim), lambda x: theirs(x, dim), [x],
                             name=f"{name} {shape} dim={dim} {layout} {dtype}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", list(FNS))
def test_dtype_argument(name, device):
    ours, theirs = FNS[name]
    for in_t, out_t in ((torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.float64),
                        (torch.float32, torch.bfloat16), (torch.float64, torch.float32)):
        for shape in ((7, 33), (4, 2048)):
            x = make_input(shape, in_t, device)
            # the reference: the input cast to dtype (as the op's contract says), then float64 math
            assert_matches_torch(lambda x: ours(x, -1, dtype=out_t), lambda x: theirs(x, -1, dtype=out_t), [x],
                                 ref_fn=lambda x: theirs(x.to(out_t).double(), -1),
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
@pytest.mark.parametrize("name", list(FNS))
def test_gradcheck_and_opcheck(name, device):
    ours, _ = FNS[name]
    for shape, dim in (((4, 9), -1), ((3, 5, 4), 1)):
        x = make_input(shape, torch.float64, device).requires_grad_()
        assert torch.autograd.gradcheck(lambda x: ours(x, dim), (x,))
    op = getattr(ops, name)
    opcheck_samples(op, [
        ((make_input((4, 33), torch.float32, device), -1), {}),
        ((make_input((4, 33), torch.float64, device, "transposed").requires_grad_(), 0), {}),
        ((make_input((2, 3, 4, 5), torch.bfloat16, device, "channels_last").requires_grad_(), 1), {}),
        ((make_input((4, 33), torch.float16, device).requires_grad_(), -1), {"dtype": torch.float32}),
    ])
    y = make_input((4, 33), torch.float32, device)
    g = make_input((4, 33), torch.float32, device)
    opcheck_samples(getattr(ops, f"{name}_backward"), [((g, y, -1, torch.float32), {}), ((g, y, 1, torch.float16), {})])


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
