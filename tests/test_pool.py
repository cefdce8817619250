"""Pooling family, ranks 1 to 3: max_pool (values, PyTorch's indices, NaN), avg_pool (padding, ceil_mode,
count_include_pad, divisor_override), adaptive_avg_pool, adaptive_max_pool, lp_pool, over every dtype,
contiguous / channels-last / other layouts, unbatched inputs and empty batches, with the family tester's checks
(the error rule, opcheck, gradcheck and gradgradcheck, torch.compile against PyTorch, bad input, CUDA graphs, past
2^31 elements); indices, special values, random configurations, modules, error messages; on CUDA poisoned outputs,
determinism, the global-average paths and the kernel variants."""
import random

import expecttest
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
from torch_dnn.testing import compare as compare_errors
import torch_dnn.functional as F
from torch_dnn.reference import (avg_pool1d_reference, avg_pool2d_reference, avg_pool3d_reference, lp_pool3d_reference,
                                 max_pool1d_reference, max_pool2d_reference, max_pool3d_reference)
from tests.family_tester import Against, BadInput, FamilyTester, GradCase
from tests.utils import (POOL_VARIANTS, ALL_DTYPES, assert_matches_torch, devices, make_input, raised_first_line,
                         set_variant)

ops = torch.ops.torch_dnn
RANKS = [1, 2, 3]
HAS_LP3D = hasattr(TF, "lp_pool3d")  # torch >= 2.2


def _fn(name):
    return getattr(F, name)


# torch.nn.functional's op, or its reference where PyTorch has a bug (torch_dnn/reference/pool.py)
TORCH = {
    "max_pool1d": max_pool1d_reference, "max_pool2d": max_pool2d_reference, "max_pool3d": max_pool3d_reference,
    "avg_pool1d": avg_pool1d_reference, "avg_pool2d": avg_pool2d_reference, "avg_pool3d": avg_pool3d_reference,
    "adaptive_avg_pool1d": TF.adaptive_avg_pool1d, "adaptive_avg_pool2d": TF.adaptive_avg_pool2d,
    "adaptive_avg_pool3d": TF.adaptive_avg_pool3d,
    "adaptive_max_pool1d": TF.adaptive_max_pool1d, "adaptive_max_pool2d": TF.adaptive_max_pool2d,
    "adaptive_max_pool3d": TF.adaptive_max_pool3d,
    "lp_pool1d": TF.lp_pool1d, "lp_pool2d": TF.lp_pool2d, "lp_pool3d": lp_pool3d_reference if HAS_LP3D else None,
}

# (shape, layout, kwargs) per op and rank
CASES = {
    "max_pool1d": [
        ((2, 3, 11), "contiguous", dict(kernel_size=3, stride=2, padding=1)),
        ((2, 16, 11), "channels_last", dict(kernel_size=3, stride=2, padding=1)),  # (N, L, C): 16-byte vectors
        ((2, 5, 11), "channels_last", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
        ((1, 2, 13), "contiguous", dict(kernel_size=3, stride=1, padding=1, dilation=2)),
        ((2, 3, 12), "transposed", dict(kernel_size=2, stride=3, padding=1)),
        ((3, 10), "contiguous", dict(kernel_size=2)),
        ((1, 1, 1), "contiguous", dict(kernel_size=1)),
        ((0, 3, 8), "contiguous", dict(kernel_size=3, stride=2, padding=1)),
    ],
    "max_pool2d": [
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
    ],
    "max_pool3d": [
        ((2, 3, 5, 6, 7), "contiguous", dict(kernel_size=3, stride=2, padding=1)),
        ((2, 16, 5, 6, 7), "channels_last", dict(kernel_size=3, stride=2, padding=1)),
        ((2, 3, 5, 6, 7), "channels_last", dict(kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0),
                                                ceil_mode=True)),
        ((1, 2, 7, 6, 5), "contiguous", dict(kernel_size=2, stride=1, padding=1, dilation=(2, 1, 2))),
        ((2, 3, 4, 5, 6), "transposed", dict(kernel_size=2)),
        ((3, 4, 5, 6), "contiguous", dict(kernel_size=2, stride=(1, 2, 3))),
        ((0, 3, 4, 4, 4), "channels_last", dict(kernel_size=2)),
    ],
    "avg_pool1d": [
        ((2, 3, 11), "contiguous", dict(kernel_size=3, stride=2, padding=1)),
        ((2, 16, 11), "channels_last", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
        ((2, 5, 10), "channels_last", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
        ((2, 3, 12), "transposed", dict(kernel_size=2, stride=3, padding=1, ceil_mode=True, count_include_pad=False)),
        ((3, 10), "contiguous", dict(kernel_size=3, stride=1, padding=1)),
        ((0, 3, 8), "channels_last", dict(kernel_size=3, stride=2)),
    ],
    "avg_pool2d": [
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
    ],
    "avg_pool3d": [
        ((2, 3, 5, 6, 7), "contiguous", dict(kernel_size=3, stride=2, padding=1)),
        ((2, 16, 5, 6, 7), "channels_last", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
        ((2, 3, 6, 5, 7), "channels_last", dict(kernel_size=(2, 3, 3), stride=(2, 1, 2), padding=(1, 1, 0),
                                                ceil_mode=True)),
        ((2, 3, 5, 6, 7), "contiguous", dict(kernel_size=2, padding=1, ceil_mode=True, divisor_override=3)),
        ((2, 3, 4, 5, 6), "transposed", dict(kernel_size=2, stride=1)),
        ((3, 4, 5, 6), "contiguous", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
        ((0, 3, 4, 4, 4), "contiguous", dict(kernel_size=2)),
    ],
    "adaptive_avg_pool1d": [
        ((2, 3, 11), "contiguous", dict(output_size=4)),
        ((2, 16, 11), "channels_last", dict(output_size=1)),
        ((3, 10), "contiguous", dict(output_size=13)),  # larger than the input: windows overlap
        ((0, 3, 5), "contiguous", dict(output_size=2)),
    ],
    "adaptive_avg_pool2d": [
        ((2, 3, 9, 11), "contiguous", dict(output_size=1)),
        ((2, 16, 7, 7), "channels_last", dict(output_size=1)),
        ((2, 3, 10, 9), "channels_last", dict(output_size=(3, 5))),
        ((2, 3, 10, 9), "contiguous", dict(output_size=(4, None))),
        ((2, 3, 3, 3), "contiguous", dict(output_size=5)),
        ((3, 13, 6), "contiguous", dict(output_size=(4, 4))),
        ((2, 3, 8, 8), "transposed", dict(output_size=3)),
        ((0, 3, 8, 8), "contiguous", dict(output_size=2)),
    ],
    "adaptive_avg_pool3d": [
        ((2, 3, 5, 6, 7), "contiguous", dict(output_size=(2, 3, 4))),
        ((2, 16, 5, 6, 7), "channels_last", dict(output_size=1)),
        ((2, 3, 5, 6, 7), "channels_last", dict(output_size=(None, 2, 9))),
        ((2, 3, 4, 5, 6), "transposed", dict(output_size=1)),
        ((3, 4, 5, 6), "contiguous", dict(output_size=3)),
    ],
    "adaptive_max_pool1d": [
        ((2, 3, 11), "contiguous", dict(output_size=4)),
        ((2, 16, 11), "channels_last", dict(output_size=3)),
        ((3, 10), "contiguous", dict(output_size=13)),
        ((0, 3, 5), "contiguous", dict(output_size=2)),
    ],
    "adaptive_max_pool2d": [
        ((2, 3, 9, 11), "contiguous", dict(output_size=(4, 3))),
        ((2, 16, 7, 7), "channels_last", dict(output_size=1)),
        ((2, 3, 10, 9), "channels_last", dict(output_size=(3, 5))),
        ((2, 3, 3, 3), "contiguous", dict(output_size=5)),
        ((3, 13, 6), "contiguous", dict(output_size=(4, None))),
        ((2, 3, 8, 8), "transposed", dict(output_size=3)),
    ],
    "adaptive_max_pool3d": [
        ((2, 3, 5, 6, 7), "contiguous", dict(output_size=(2, 3, 4))),
        ((2, 16, 5, 6, 7), "channels_last", dict(output_size=(3, 2, 1))),
        ((2, 3, 4, 5, 6), "transposed", dict(output_size=2)),
        ((3, 4, 5, 6), "contiguous", dict(output_size=(5, 1, 7))),
    ],
    # signed inputs: norm_type 1 and 2 (other powers of negative sums are NaN: see test_lp_pool_powers)
    "lp_pool1d": [
        ((2, 3, 11), "contiguous", dict(norm_type=2, kernel_size=3, stride=2)),
        ((2, 16, 11), "channels_last", dict(norm_type=1, kernel_size=2, ceil_mode=True)),
        ((3, 10), "contiguous", dict(norm_type=2, kernel_size=3, stride=2, ceil_mode=True)),
    ],
    "lp_pool2d": [
        ((2, 3, 9, 11), "contiguous", dict(norm_type=2, kernel_size=3, stride=2)),
        ((2, 16, 9, 11), "channels_last", dict(norm_type=2, kernel_size=(2, 3), ceil_mode=True)),
        ((2, 3, 9, 8), "transposed", dict(norm_type=1, kernel_size=2)),
        ((3, 9, 8), "contiguous", dict(norm_type=2, kernel_size=3, stride=(1, 2))),
    ],
    "lp_pool3d": [
        ((2, 3, 5, 6, 7), "contiguous", dict(norm_type=2, kernel_size=2)),
        ((2, 16, 5, 6, 7), "channels_last", dict(norm_type=2, kernel_size=(2, 3, 2), stride=(1, 2, 2), ceil_mode=True)),
        ((3, 4, 5, 6), "contiguous", dict(norm_type=1, kernel_size=3, stride=2, ceil_mode=True)),
    ],
}
NAMES = [n for n in CASES if TORCH[n] is not None]

# Larger sizes for the GPU's grid-stride loops, the NCDHW rows and both channels-last paths (vector, scalar).
CUDA_CASES = {
    1: [((8, 64, 1001), "channels_last"), ((8, 12, 1001), "contiguous")],
    2: [((4, 64, 56, 57), "channels_last"), ((4, 64, 56, 57), "contiguous"), ((2, 12, 33, 31), "channels_last")],
    3: [((2, 32, 9, 20, 21), "channels_last"), ((2, 5, 9, 20, 21), "contiguous")],
}
CUDA_KWARGS = {"max_pool": dict(kernel_size=3, stride=2, padding=1), "avg_pool": dict(kernel_size=3, stride=2, padding=1),
               "adaptive_avg_pool": dict(output_size=5), "adaptive_max_pool": dict(output_size=5),
               "lp_pool": dict(norm_type=2, kernel_size=3, stride=2)}


def _rank(name):
    return int(name[-2])


def _kind(name):
    return name[:-2]


def _input(shape, dtype, device, layout="contiguous", low=-4.0, high=4.0):
    """make_input, with channels-last for every rank ((N, L, C) in memory for 3-D tensors, channels_last_3d for
    5-D) and "transposed" = the last two spatial dims swapped in memory (dense, neither layout)."""
    if layout == "channels_last" and len(shape) == 3:
        return make_input((shape[0], shape[2], shape[1]), dtype, device, low=low, high=high).transpose(1, 2)
    if layout == "channels_last" and len(shape) == 5:
        return make_input(shape, dtype, device, low=low, high=high).contiguous(memory_format=torch.channels_last_3d)
    if layout == "transposed" and len(shape) == 3:
        return make_input(shape, dtype, device, "strided", low, high)
    if layout == "transposed":
        return make_input(shape[:-2] + shape[-2:][::-1], dtype, device, low=low, high=high).transpose(-1, -2)
    return make_input(shape, dtype, device, layout, low, high)


def _check_layout(name, y, y_ref, x, layout):
    """Pooling returns PyTorch's strides (on the dims of size > 1; tests/test_memory_format.py checks every layout and
    the gradients): channels-last for a channels-last batch but from avg_pool3d, the adaptive pools 3d and lp_pool3d,
    whose results PyTorch makes contiguous."""
    def significant(t):
        return tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride()))
    if y.numel() > 1:
        assert significant(y) == significant(y_ref), f"{name} {layout}: strides {y.stride()} != {y_ref.stride()}"


def _first(y):
    return y[0] if isinstance(y, tuple) else y


class TestPool(FamilyTester):
    variants = NAMES
    compile_backend = "inductor"

    def against_torch(self, device, dtype, name):
        ours, theirs, r = _fn(name), TORCH[name], _rank(name)
        cases = list(CASES[name])
        if device != "cpu":
            cases += [(shape, layout, CUDA_KWARGS[_kind(name)]) for shape, layout in CUDA_CASES[r]]
        for shape, layout, kw in cases:
            x = _input(shape, dtype, device, layout)
            yield Against(f"{name} {shape} {layout} {kw} {dtype}", lambda x: ours(x, **kw), lambda x: theirs(x, **kw),
                          [x])
            _check_layout(name, ours(x, **kw), theirs(x, **kw), x, layout)

    def gradcheck_cases(self, device):
        return [case for rank in RANKS for case in _gradcheck_cases(rank, device)]

    def gradgradcheck_cases(self, device):
        # second derivatives: recorded as a map linear in grad (max, average and adaptive pooling) or through a
        # recomputation of the op (lp_pool)
        x = make_input((2, 4, 6, 6), torch.float64, device, low=-2, high=2).requires_grad_()
        return [GradCase(name, fn, (x,)) for name, fn in (
            ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1)),
            ("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
            ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 2))),
            ("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 2))),
            ("max_pool1d", lambda x: F.max_pool1d(x.flatten(2), 4)),
            ("avg_pool3d", lambda x: F.avg_pool3d(x.unsqueeze(2), (1, 2, 2))),
            ("lp_pool2d", lambda x: F.lp_pool2d(x, 2.0, 2)),
        )]

    def opcheck_samples(self, device):
        return [sample for rank in RANKS for sample in _opcheck_samples(rank, device)]

    def compile_cases(self, device):
        # one graph over every rank (one compile): the outputs flattened into one tensor
        def ours(x1, x2, x3):
            a = F.max_pool1d(x1, 3, 2, 1) + F.avg_pool1d(x1, 3, 2, 1) + F.lp_pool1d(x1, 2, 2, 2)
            b = F.max_pool2d(x2, 3, 2, 1) + F.avg_pool2d(x2, 3, 2, 1) + F.adaptive_max_pool2d(x2, (6, 5))
            c = F.max_pool3d(x3, 3, 2, 1) + F.avg_pool3d(x3, 3, 2, 1) + F.adaptive_avg_pool3d(x3, (3, 3, 4))
            return torch.cat([a.flatten(), b.flatten(), c.flatten()])

        # PyTorch's ops through TORCH's references: its CUDA avg_pool2d backward (and so avg_pool1d's) is wrong for
        # channels-last inputs with padding (torch_dnn/reference/pool.py), which would make it the wrong peer and
        # the wrong float64 reference for these channels-last inputs
        def theirs(x1, x2, x3):
            a = TORCH["max_pool1d"](x1, 3, 2, 1) + TORCH["avg_pool1d"](x1, 3, 2, 1) + TF.lp_pool1d(x1, 2, 2, 2)
            b = TORCH["max_pool2d"](x2, 3, 2, 1) + TORCH["avg_pool2d"](x2, 3, 2, 1) + TF.adaptive_max_pool2d(x2, (6, 5))
            c = (TORCH["max_pool3d"](x3, 3, 2, 1) + TORCH["avg_pool3d"](x3, 3, 2, 1)
                 + TF.adaptive_avg_pool3d(x3, (3, 3, 4)))
            return torch.cat([a.flatten(), b.flatten(), c.flatten()])

        yield Against("pooling, ranks 1 to 3, channels-last", ours, theirs,
                      [_input((2, 8, 12), torch.float32, device, "channels_last"),
                       _input((2, 8, 11, 10), torch.float32, device, "channels_last"),
                       _input((2, 8, 5, 6, 7), torch.float32, device, "channels_last")])

    def bad_inputs(self):
        x = torch.ones(1, 2, 8, 8)
        x3 = torch.ones(1, 2, 4, 4, 4)
        return [BadInput(call, f"torch_dnn.{op}", words) for call, op, words in (
            (lambda: F.max_pool2d(x, 0), "max_pool2d", "kernel_size"),
            (lambda: F.max_pool3d(x3, 2, stride=(1, 0, 1)), "max_pool3d", "stride"),
            (lambda: F.max_pool2d(x, 2, padding=-1), "max_pool2d", "padding"),
            (lambda: F.max_pool1d(x[0], 2, dilation=0), "max_pool1d", "dilation"),
            (lambda: F.avg_pool2d(x, 2, divisor_override=0), "avg_pool2d", "divisor_override"),
            (lambda: F.avg_pool3d(x3, 2, divisor_override=0), "avg_pool3d", "divisor_override"),
            (lambda: F.adaptive_avg_pool2d(x, -1), "adaptive_avg_pool2d", "output_size"),
            (lambda: F.adaptive_max_pool1d(x[0], -2), "adaptive_max_pool1d", "output_size"),
            (lambda: F.max_pool2d(torch.ones(1, 2, 8, 8, dtype=torch.int32), 2), "max_pool2d", "input"),
            (lambda: F.max_pool2d(torch.ones(1, 0, 8, 8), 2), "max_pool2d", "input"),
            (lambda: F.avg_pool3d(torch.ones(1, 2, 0, 8, 8), 2), "avg_pool3d", "input"),
            (lambda: ops.max_pool3d(x3, (2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), False), "max_pool3d", "kernel_size"),
            (lambda: ops.avg_pool2d_backward(torch.ones(1, 2, 3, 3), x, (2, 2), (2, 2), (0, 0), False, True, None),
             "avg_pool2d_backward", "grad_output"),
            (lambda: ops.max_pool1d_backward(torch.ones(1, 2, 4), x[0], torch.ones(1, 2, 4), (2,), (2,), (0,), (1,),
                                             False), "max_pool1d_backward", "indices"),
            (lambda: ops.adaptive_max_pool2d_backward(torch.ones(2, 2, 2), x, torch.zeros(2, 2, 2, dtype=torch.long)),
             "adaptive_max_pool2d_backward", "grad_output"),
            (lambda: ops.lp_pool2d_backward(torch.ones(1, 2, 4, 4), x, torch.ones(1, 2, 4, 4, dtype=torch.float64),
                                            2.0, (2, 2), (2, 2), False), "lp_pool2d_backward", "output"),
        )]

    def cuda_graph_step(self):
        x = make_input((4, 16, 28, 28), torch.bfloat16, "cuda", "channels_last").requires_grad_()
        x3 = _input((2, 16, 6, 14, 14), torch.bfloat16, "cuda", "channels_last").requires_grad_()
        x1 = _input((4, 16, 50), torch.bfloat16, "cuda").requires_grad_()

        def step():
            y = F.max_pool2d(x, 3, 2, 1) + F.avg_pool2d(x, 3, 2, 1)
            z = F.adaptive_avg_pool2d(y, 1)
            z3 = F.adaptive_max_pool3d(F.max_pool3d(x3, 2), 1) + F.adaptive_avg_pool3d(F.avg_pool3d(x3, 3, 2, 1), 1)
            w = F.lp_pool1d(x1, 2, 2, 2) + F.avg_pool1d(x1, 3, 2, 1)
            loss = z.float().square().sum() + z3.float().square().sum() + w.float().square().sum()
            return (z, z3, w) + torch.autograd.grad(loss, [x, x3, x1])

        def refill():
            x.copy_(make_input((4, 16, 28, 28), torch.bfloat16, "cuda", "channels_last"))
            x3.copy_(_input((2, 16, 6, 14, 14), torch.bfloat16, "cuda"))
            x1.copy_(_input((4, 16, 50), torch.bfloat16, "cuda"))

        return step, refill

    def past_2_31_cases(self):
        return {"channels_last_3d": _past_2_31_elements, "nchw_and_global": _past_2_31_elements_nchw_and_global,
                "channels_last_bands": _past_2_31_elements_channels_last_bands}


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("rank", RANKS)
def test_indices(rank, dtype, device):
    for kind in ("max_pool", "adaptive_max_pool"):
        name = f"{kind}{rank}d"
        for shape, layout, kw in CASES[name]:
            x = _input(shape, dtype, device, layout)
            y, i = _fn(name)(x, **kw, return_indices=True)
            y_ref, i_ref = TORCH[name](x, **kw, return_indices=True)
            assert i.dtype == torch.int64
            assert torch.equal(i, i_ref), f"{name} {shape} {layout} {kw}"
            assert torch.equal(y, y_ref)
            if kind == "max_pool" and x.dim() == rank + 2 and "dilation" not in kw and "ceil_mode" not in kw:
                # the index convention is PyTorch's: max_unpool puts every maximum back where it was
                unpool = getattr(TF, f"max_unpool{rank}d")
                args = (kw["kernel_size"], kw.get("stride"), kw.get("padding", 0))
                up = unpool(y, i, *args, output_size=x.shape[-rank:])
                assert torch.equal(up, unpool(y_ref, i_ref, *args, output_size=x.shape[-rank:]))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("rank", RANKS)
def test_special_values(rank, layout, device):
    inf, nan = float("inf"), float("nan")
    shape = (2, 8) + (6, 7, 5)[3 - rank:]
    for dtype in (torch.float32, torch.bfloat16):
        x = _input(shape, dtype, device, layout)
        lead = (0,) * (rank - 1)
        x[(0, 0) + lead + (0,)] = nan               # in the first window (with padding)
        x[(0, 1) + lead + (2,)] = nan               # two NaNs in one window: PyTorch keeps the last
        x[(0, 1) + lead + (3,)] = nan
        x[(1, 3) + (2,) * rank] = inf
        x[1, 2] = -inf                               # a volume of only -inf: the first element's index
        windows = (dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, ceil_mode=True))
        for name, kws in ((f"max_pool{rank}d", windows), (f"adaptive_max_pool{rank}d", (dict(output_size=3),))):
            for kw in kws:
                y, i = _fn(name)(x, **kw, return_indices=True)
                y_ref = TORCH[name](x, **kw)
                # indices from float32 (the same values): PyTorch's CPU bfloat16 channels_last_3d max_pool3d
                # drops the depth offset from the index of a window of only -inf
                i_ref = TORCH[name](x.float(), **kw, return_indices=True)[1]
                torch.testing.assert_close(y, y_ref, equal_nan=True, rtol=0, atol=0)
                assert torch.equal(i, i_ref), f"{name} {kw}"
                assert_matches_torch(lambda x: _fn(name)(x, **kw), lambda x: TORCH[name](x, **kw), [x],
                                     name=f"{name} special {layout} {kw}")
        for name, kw in ((f"avg_pool{rank}d", dict(kernel_size=3)), (f"adaptive_avg_pool{rank}d", dict(output_size=3)),
                         (f"lp_pool{rank}d", dict(norm_type=2, kernel_size=2))):
            if TORCH[name] is not None:
                assert_matches_torch(lambda x: _fn(name)(x, **kw), lambda x: TORCH[name](x, **kw), [x], grad=False,
                                     name=f"{name} special {layout}")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("rank", RANKS)
def test_empty_batch_backward(rank, device):
    for layout in ("contiguous", "channels_last"):
        x = _input((0, 3) + (8,) * rank, torch.float32, device, layout).requires_grad_()
        for name, kw in ((f"max_pool{rank}d", dict(kernel_size=3, stride=2, padding=1)),
                         (f"avg_pool{rank}d", dict(kernel_size=3, stride=2, padding=1)),
                         (f"adaptive_avg_pool{rank}d", dict(output_size=2)),
                         (f"adaptive_max_pool{rank}d", dict(output_size=2)),
                         (f"lp_pool{rank}d", dict(norm_type=2, kernel_size=2))):
            y, y_ref = _fn(name)(x, **kw), TORCH[name](x, **kw)
            torch.testing.assert_close(y, y_ref, rtol=0, atol=0)
            (g,) = torch.autograd.grad(y.sum(), [x])
            (g_ref,) = torch.autograd.grad(y_ref.sum(), [x])
            torch.testing.assert_close(g, g_ref, rtol=0, atol=0)
            assert g.stride() == g_ref.stride() or g.numel() == 0, (name, layout, g.stride(), g_ref.stride())


@pytest.mark.parametrize("device", devices())
def test_adaptive_output_size_zero(device):
    # as PyTorch, an adaptive output size of 0 gives an empty output; its gradient is zero
    x = make_input((2, 3, 5, 6), torch.float64, device).requires_grad_()
    for fn in (F.adaptive_avg_pool2d, F.adaptive_max_pool2d):
        y = fn(x, (0, 3))
        assert y.shape == TF.adaptive_avg_pool2d(x, (0, 3)).shape
        (g,) = torch.autograd.grad(y.sum(), [x])
        assert torch.equal(g, torch.zeros_like(x))


def _gradcheck_cases(rank, device):
    shape = (2, 3) + (7, 8, 6)[3 - rank:]
    cases = []
    for layout in ("contiguous", "channels_last"):
        x = _input(shape, torch.float64, device, layout).requires_grad_()
        maxp, avgp, lpp = (getattr(F, f"{k}{rank}d") for k in ("max_pool", "avg_pool", "lp_pool"))
        amax, aavg = getattr(F, f"adaptive_max_pool{rank}d"), getattr(F, f"adaptive_avg_pool{rank}d")
        checks = [
            lambda x: maxp(x, 3, 2, 1),
            lambda x: maxp(x, 2, 1, 0, 2, ceil_mode=True),
            lambda x: avgp(x, 3, 2, 1, ceil_mode=True),
            lambda x: avgp(x, 3, 2, 1, count_include_pad=False),
            lambda x: aavg(x, 3),
            lambda x: amax(x, 4),
            lambda x: lpp(x, 2, 2, ceil_mode=True),
            lambda x: lpp(x.abs() + 0.5, 1.5, 3, 2),
        ]
        if rank > 1:
            checks.append(lambda x: avgp(x, 2, divisor_override=3))
        cases += [GradCase(f"rank {rank} {layout} check {i}", fn, (x,)) for i, fn in enumerate(checks)]
    xu = _input(shape[1:], torch.float64, device).requires_grad_()  # unbatched
    cases.append(GradCase(f"max_pool{rank}d unbatched", lambda x: getattr(F, f"max_pool{rank}d")(x, 3, 2, 1), (xu,)))
    cases.append(GradCase(f"adaptive_avg_pool{rank}d unbatched",
                          lambda x: getattr(F, f"adaptive_avg_pool{rank}d")(x, 2), (xu,)))
    return cases


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("rank", [1, 2] + ([3] if HAS_LP3D else []))
def test_lp_pool_powers(rank, device):
    # other norm types on positive inputs; zero windows have a zero gradient, as PyTorch's (relu's backward)
    ours, theirs = getattr(F, f"lp_pool{rank}d"), TORCH[f"lp_pool{rank}d"]
    shape = (2, 3) + (8, 9, 7)[3 - rank:]
    for dtype in (torch.float32, torch.bfloat16):
        x = _input(shape, dtype, device, low=0.1, high=2.0)
        for p in (3, 1.5, 0.5, -1.0):
            assert_matches_torch(lambda x: ours(x, p, 2, ceil_mode=True), lambda x: theirs(x, p, 2, ceil_mode=True),
                                 [x], name=f"lp_pool{rank}d p={p} {dtype}")
    x = _input(shape, torch.float64, device)
    x[..., :4] = 0  # whole windows of zeros
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ga = torch.autograd.grad(ours(xa, 2, 2).sum(), [xa])[0]
    gb = torch.autograd.grad(theirs(xb, 2, 2).sum(), [xb])[0]
    torch.testing.assert_close(ga, gb, equal_nan=True)
    assert not torch.isnan(ga).any()
    # norm_type +-inf: the max (min) of |x| over each window, as torch.nn.functional 2.14 defines it
    y = ours(x, float("inf"), 2)
    torch.testing.assert_close(y, getattr(TF, f"max_pool{rank}d")(x.abs(), 2))
    torch.testing.assert_close(ours(x, -float("inf"), 2), -getattr(TF, f"max_pool{rank}d")(-x.abs(), 2))


def _opcheck_samples(rank, device):
    def x(spatial, dtype, layout="contiguous", grad=False, batch=(2, 8)):
        t = _input(batch + spatial, dtype, device, layout)
        return t.requires_grad_() if grad else t

    samples = []

    def add(op, calls):
        samples.extend((op, args, kwargs) for args, kwargs in calls)

    sp = (9, 8, 7)[3 - rank:]
    k, s, p, d, one = (3,) * rank, (2,) * rank, (1,) * rank, (2,) * rank, (1,) * rank
    name = lambda kind: getattr(ops, f"{kind}{rank}d")  # noqa: E731
    add(name("max_pool"), [
        ((x(sp, torch.float32), k, s, p, one, False), {}),
        ((x(sp, torch.bfloat16, "channels_last", True), k, s, p, one, True), {}),
        ((x(sp, torch.float64, grad=True, batch=(3,)), k, one, p, d, False), {}),
        ((x(sp, torch.float16, "transposed", True), k, s, p, one, True), {}),
    ])
    add(name("avg_pool"), [
        ((x(sp, torch.float32), k, s, p, False, True, None), {}),
        ((x(sp, torch.bfloat16, "channels_last", True), k, s, p, True, False, None), {}),
        ((x(sp, torch.float64, grad=True, batch=(3,)), k, one, p, False, True, 5), {}),
    ])
    for kind in ("adaptive_avg_pool", "adaptive_max_pool"):
        add(name(kind), [
            ((x(sp, torch.float32), one), {}),
            ((x(sp, torch.bfloat16, "channels_last", True), (4, 3, 5)[:rank]), {}),
            ((x(sp, torch.float64, grad=True, batch=(3,)), (5,) * rank), {}),
        ])
    add(name("lp_pool"), [
        ((x(sp, torch.float32), 2.0, k, s, False), {}),
        ((x(sp, torch.bfloat16, "channels_last", True), 1.0, (2,) * rank, (2,) * rank, True), {}),
        ((x(sp, torch.float64, grad=True, batch=(3,)), 2.0, k, one, True), {}),
    ])
    xi = x(sp, torch.float32, "channels_last")
    y, idx = name("max_pool")(xi, k, s, p, one, False)
    g = torch.randn_like(y)
    add(getattr(ops, f"max_pool{rank}d_backward"), [((g, xi, idx, k, s, p, one, False), {})])
    add(getattr(ops, f"avg_pool{rank}d_backward"), [((g, xi, k, s, p, False, True, None), {})])
    ya, ia = name("adaptive_max_pool")(xi, (3,) * rank)
    ga = torch.randn_like(ya)
    add(getattr(ops, f"adaptive_avg_pool{rank}d_backward"), [((ga, xi), {})])
    add(getattr(ops, f"adaptive_max_pool{rank}d_backward"), [((ga, xi, ia), {})])
    yl = name("lp_pool")(xi, 2.0, k, s, False)
    add(getattr(ops, f"lp_pool{rank}d_backward"), [((torch.randn_like(yl), xi, yl, 2.0, k, s, False), {})])
    return samples


MODULES = [
    (torch.nn.MaxPool1d(3, 2, 1), 1), (torch.nn.MaxPool2d(3, 2, 1), 2), (torch.nn.MaxPool3d(2, 1, 1), 3),
    (torch.nn.AvgPool1d(3, 1, 1, count_include_pad=False), 1), (torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False), 2),
    (torch.nn.AvgPool3d(2, divisor_override=3), 3),
    (torch.nn.AdaptiveAvgPool1d(4), 1), (torch.nn.AdaptiveAvgPool2d((2, 3)), 2), (torch.nn.AdaptiveAvgPool3d((2, None, 3)), 3),
    (torch.nn.AdaptiveMaxPool1d(4), 1), (torch.nn.AdaptiveMaxPool2d((2, 3)), 2), (torch.nn.AdaptiveMaxPool3d(2), 3),
    (torch.nn.LPPool1d(2, 3, 2), 1), (torch.nn.LPPool2d(1.0, 2, ceil_mode=True), 2),
] + ([(torch.nn.LPPool3d(2, 2), 3)] if hasattr(torch.nn, "LPPool3d") else [])


@pytest.mark.parametrize("device", devices())
def test_modules_and_convert(device):
    model = torch.nn.ModuleList([m for m, _ in MODULES]).to(device)
    ours, report = torch_dnn.convert(model)
    assert len(report.swapped) == len(MODULES), str(report)
    for (m, r), o in zip(MODULES, ours):
        assert type(o) is getattr(torch_dnn.nn, type(m).__name__)
        assert isinstance(o, type(m)) and repr(o) == repr(m)
        x = _input((2, 8) + (11, 10, 9)[3 - r:], torch.float32, device, "channels_last")
        torch.testing.assert_close(o(x), m(x))
    for cls, r in ((torch.nn.MaxPool1d, 1), (torch.nn.MaxPool3d, 3), (torch.nn.AdaptiveMaxPool2d, 2)):
        x = _input((2, 8) + (11, 10, 9)[3 - r:], torch.float32, device, "channels_last")
        m = cls(2, return_indices=True)
        (y, i), (y_ref, i_ref) = getattr(torch_dnn.nn, cls.__name__)(2, return_indices=True)(x), m(x)
        assert torch.equal(y, y_ref) and torch.equal(i, i_ref)


class TestErrors(expecttest.TestCase):
    _msg = staticmethod(raised_first_line)

    def test_padding_over_half_kernel(self):
        self.assertExpectedInline(self._msg(lambda: F.max_pool2d(torch.ones(1, 1, 8, 8), 3, 1, 2)), """torch_dnn.max_pool2d: expected padding to be at most half of kernel_size, but got padding=[2, 2] and kernel_size=[3, 3]""")
        self.assertExpectedInline(self._msg(lambda: F.avg_pool3d(torch.ones(1, 1, 8, 8, 8), (3, 3, 2), 1, (1, 1, 2))), """torch_dnn.avg_pool3d: expected padding to be at most half of kernel_size, but got padding=[1, 1, 2] and kernel_size=[3, 3, 2]""")

    def test_zero_stride(self):
        self.assertExpectedInline(self._msg(lambda: F.max_pool1d(torch.ones(1, 1, 8), 3, 0)), """torch_dnn.max_pool1d: expected stride to be positive, but got [0]""")

    def test_output_too_small(self):
        self.assertExpectedInline(self._msg(lambda: F.avg_pool2d(torch.ones(1, 1, 2, 2), 3)), """torch_dnn.avg_pool2d: output size is too small: input size [2, 2] gives output size [0, 0]""")
        self.assertExpectedInline(self._msg(lambda: F.max_pool3d(torch.ones(1, 1, 4, 2, 4), 3)), """torch_dnn.max_pool3d: output size is too small: input size [4, 2, 4] gives output size [1, 0, 1]""")

    def test_wrong_rank(self):
        self.assertExpectedInline(self._msg(lambda: F.adaptive_avg_pool2d(torch.ones(4, 4), 2)), """torch_dnn.adaptive_avg_pool2d: expected input to be 3-D (C, H, W) or 4-D (N, C, H, W) with non-zero channels and spatial sizes, but got [4, 4]""")
        self.assertExpectedInline(self._msg(lambda: F.max_pool1d(torch.ones(1, 2, 4, 4), 2)), """torch_dnn.max_pool1d: expected input to be 2-D (C, L) or 3-D (N, C, L) with non-zero channels and spatial sizes, but got [1, 2, 4, 4]""")
        self.assertExpectedInline(self._msg(lambda: F.adaptive_max_pool3d(torch.ones(2, 4, 4), 2)), """torch_dnn.adaptive_max_pool3d: expected input to be 4-D (C, D, H, W) or 5-D (N, C, D, H, W) with non-zero channels and spatial sizes, but got [2, 4, 4]""")

    def test_lp_pool_norm_type(self):
        self.assertExpectedInline(self._msg(lambda: F.lp_pool2d(torch.ones(1, 1, 4, 4), 0, 2), ValueError), """torch_dnn.lp_pool2d: norm_type must be a non-zero value, but got 0""")
        self.assertExpectedInline(self._msg(lambda: ops.lp_pool1d(torch.ones(1, 1, 4), float("nan"), (2,), (2,), False)),
                                  """torch_dnn.lp_pool1d: expected norm_type to be finite and non-zero, but got nan""")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("rank", [2, 3])
def test_max_pool_window_only_in_padding(rank, device):
    # With dilation a window can hold only padding: PyTorch returns -inf with the index of the element after
    # the padding, which can lie outside the volume (its own CPU backward then writes out of bounds). We return
    # the same values and indices; the gradient of such outputs reaches no input.
    x = make_input((1,) * rank + (6,), torch.float64, device).requires_grad_()  # unbatched, leading sizes 1
    kw = dict(kernel_size=2, stride=(1,) * (rank - 1) + (2,), padding=1, dilation=2)
    y, i = getattr(F, f"max_pool{rank}d")(x, **kw, return_indices=True)
    y_ref, i_ref = getattr(TF, f"max_pool{rank}d")(x.detach(), **kw, return_indices=True)
    assert torch.equal(y, y_ref) and torch.equal(i, i_ref)
    (g,) = torch.autograd.grad(y, [x], torch.ones_like(y))
    assert torch.equal(g, torch.zeros_like(x))


def _random_case(rng, rank):
    """A random (input shape, layout, op name, kwargs) of one pooling op."""
    ks = [rng.randint(1, 4) for _ in range(rank)]
    small = 12 if rank < 3 else 7
    shape = (rng.choice([1, 2]), rng.choice([1, 3, 8])) + tuple(rng.randint(1, small) for _ in range(rank))
    win = dict(kernel_size=tuple(ks), stride=tuple(rng.randint(1, 3) for _ in range(rank)),
               padding=tuple(rng.randint(0, k // 2) for k in ks), ceil_mode=rng.random() < 0.5)
    kind = rng.choice(["max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "lp_pool"])
    if kind == "max_pool":
        kw = dict(win, dilation=tuple(rng.randint(1, 2) for _ in range(rank)), return_indices=True)
    elif kind == "avg_pool":
        kw = dict(win, count_include_pad=rng.random() < 0.5)
        if rank > 1:
            kw["divisor_override"] = rng.choice([None, 2])
    elif kind == "lp_pool":
        # torch's lp_pool1d takes int sizes only
        unpack = (lambda t: t[0]) if rank == 1 else (lambda t: t)  # noqa: E731
        kw = dict(norm_type=rng.choice([1, 2]), kernel_size=unpack(win["kernel_size"]), stride=unpack(win["stride"]),
                  ceil_mode=win["ceil_mode"])
    else:
        kw = dict(output_size=tuple(rng.randint(1, 8) for _ in range(rank)))
        if kind == "adaptive_max_pool":
            kw["return_indices"] = True
    return shape, rng.choice(["contiguous", "channels_last"]), f"{kind}{rank}d", kw


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("rank", RANKS)
def test_random_configurations(rank, device):
    # Random sizes, windows, strides, paddings, dilations and flags in float64: same accept/reject decision
    # as PyTorch, same values, indices, strides and gradients.
    rng = random.Random(rank)
    for _ in range(200 if rank < 3 else 120):
        shape, layout, name, kw = _random_case(rng, rank)
        if TORCH[name] is None:
            continue
        x = _input(shape, torch.float64, device, layout)
        x = (x[0] if rng.random() < 0.2 else x).requires_grad_()
        try:
            r = TORCH[name](x, **kw)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                _fn(name)(x, **kw)
            continue
        o = _fn(name)(x, **kw)
        if isinstance(r, tuple):
            # indices of windows that hold only padding (-inf) differ between PyTorch's own CPU and CUDA
            # kernels: compare the others (see test_max_pool_window_only_in_padding)
            finite = torch.isfinite(r[0])
            assert torch.equal(o[1][finite], r[1][finite]), (name, kw)
            o, r = o[0], r[0]
        torch.testing.assert_close(o, r, msg=lambda m: f"{name} {x.shape} {kw}: {m}")
        if rank == 2 and o.dim() == 4 and min(o.shape) > 1:  # strides of size-1 dims are arbitrary
            assert o.stride() == r.stride(), (name, kw)
        if torch.isinf(r).any():
            continue  # windows only in padding: see test_max_pool_window_only_in_padding
        g = torch.randn_like(r)
        torch.testing.assert_close(torch.autograd.grad(o, x, g)[0], torch.autograd.grad(r, x, g)[0],
                                   msg=lambda m: f"{name} {x.shape} {kw} grad: {m}")


# ---- CUDA only ----

def _past_2_31_elements():
    # 64-bit indexing: the last depth slices of a channels_last_3d input past 2^31 elements. C = 3 takes the
    # one-channel-a-thread path, whose backward has more than 2^31 items (64-bit item splitting).
    x = torch.empty((1, 3, 716, 1000, 1000), dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    x = x.contiguous(memory_format=torch.channels_last_3d)
    assert x.numel() > 2**31
    tail = x[:, :, -4:].contiguous()
    y, i = F.max_pool3d(x, 2, return_indices=True)
    y_ref, i_ref = TF.max_pool3d(tail, 2, return_indices=True)
    torch.testing.assert_close(y[:, :, -2:], y_ref)
    assert torch.equal(i[:, :, -2:] - 712 * 1000 * 1000, i_ref)
    g = torch.ones_like(y)
    dx = ops.max_pool3d_backward(g, x, i, (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), False)
    torch.testing.assert_close(dx[:, :, -4:], TF.max_unpool3d(g[:, :, -2:].contiguous(), i_ref, 2, output_size=tail.shape[-3:]))
    del dx, g, i, y
    torch.testing.assert_close(F.avg_pool3d(x, 2)[:, :, -2:], TF.avg_pool3d(tail, 2))


@pytest.mark.cuda
def test_cuda_poisoned_outputs():
    # the caching allocator hands back a NaN-poisoned block: every element of the output and the gradient must be
    # overwritten with PyTorch's value
    for rank in RANKS:
        for layout in ("contiguous", "channels_last"):
            x = _input((3, 24) + (9, 37, 41)[3 - rank:], torch.float32, "cuda", layout)
            for name, kw in ((f"max_pool{rank}d", dict(kernel_size=3, stride=2, padding=1)),
                             (f"avg_pool{rank}d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
                             (f"adaptive_avg_pool{rank}d", dict(output_size=(3, 5, 7)[3 - rank:])),
                             (f"adaptive_avg_pool{rank}d", dict(output_size=1)),
                             (f"adaptive_max_pool{rank}d", dict(output_size=(3, 5, 7)[3 - rank:])),
                             (f"lp_pool{rank}d", dict(norm_type=2, kernel_size=2, ceil_mode=True))):
                poison = torch.full((4 * x.numel(),), float("nan"), device="cuda")
                del poison
                assert_matches_torch(lambda x: _fn(name)(x, **kw), lambda x: TORCH[name](x, **kw), [x],
                                     name=f"{name} {layout} {kw} poisoned")


@pytest.mark.cuda
def test_cuda_deterministic_backward():
    # gather-style backward: bitwise the same on every run
    x = make_input((8, 32, 56, 56), torch.float32, "cuda", "channels_last").requires_grad_()
    x3 = _input((2, 8, 12, 20, 20), torch.float32, "cuda").requires_grad_()
    g = None
    for _ in range(3):
        y = F.max_pool2d(x, 3, 1, 1) + F.avg_pool2d(x, 3, 1, 1)
        y3 = F.max_pool3d(x3, 3, 1, 1) + F.avg_pool3d(x3, 3, 1, 1) + F.adaptive_max_pool3d(x3, (12, 20, 20))
        gx = torch.autograd.grad((y, y3), [x, x3], (torch.ones_like(y), torch.ones_like(y3)))
        assert g is None or all(torch.equal(a, b) for a, b in zip(g, gx))
        g = gx


def _past_2_31_elements_nchw_and_global():
    # NCHW plane tiles (64-bit plane offsets) and the global-average chunk / broadcast kernels past 2^31
    x = torch.empty((2, 64, 4100, 4100), dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    assert x.numel() > 2**31
    tail = x[:, -2:].contiguous()
    y, i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    y_ref, i_ref = TF.max_pool2d(tail, 3, 2, 1, return_indices=True)
    assert torch.equal(y[:, -2:], y_ref) and torch.equal(i[:, -2:], i_ref)
    g = torch.ones_like(y)
    dx = ops.max_pool2d_backward(g, x, i, (3, 3), (2, 2), (1, 1), (1, 1), False)
    # overlapping windows: an input that is the max of several outputs sums their grads (max_unpool would not)
    ref = torch.ops.aten.max_pool2d_with_indices_backward(g[:, -2:].contiguous(), tail, (3, 3), (2, 2), (1, 1),
                                                          (1, 1), False, i_ref)
    torch.testing.assert_close(dx[:, -2:], ref)
    del dx, g, i, y
    ya = F.avg_pool2d(x, 3, 2)
    torch.testing.assert_close(ya[:, -2:], TF.avg_pool2d(tail, 3, 2))
    ga = torch.ones_like(ya)
    dxa = ops.avg_pool2d_backward(ga, x, (3, 3), (2, 2), (0, 0), False, True, None)
    ref = torch.ops.aten.avg_pool2d_backward(ga[:, -2:].contiguous(), tail, (3, 3), (2, 2), (0, 0), False, True, None)
    torch.testing.assert_close(dxa[:, -2:], ref)
    del dxa, ga, ya, x, tail
    for layout in ("contiguous", "channels_last"):
        x = torch.empty((44000, 1024, 7, 7), dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        assert x.numel() > 2**31
        tail = x[-3:].contiguous()
        torch.testing.assert_close(F.adaptive_avg_pool2d(x, 1)[-3:], TF.adaptive_avg_pool2d(tail, 1))
        g = torch.randn((44000, 1024, 1, 1), dtype=torch.bfloat16, device="cuda")
        dx = ops.adaptive_avg_pool2d_backward(g, x)
        torch.testing.assert_close(dx[-3:], torch.ops.aten._adaptive_avg_pool2d_backward(g[-3:].contiguous(), tail))
        del dx, g, x, tail


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_cuda_global_average_paths(dtype):
    # global average pooling forward and backward, 7x7 (compiled in) and 5x5 (runtime P; a last chunk of 20 planes),
    # NCDHW chunks and channels-last columns: the error rule against PyTorch
    cases = [((700, 200, 7, 7), "contiguous"), ((340, 401, 5, 5), "contiguous"), ((256, 1024, 7, 7), "channels_last"),
             ((256, 1024, 5, 5), "channels_last")]
    xs = [_input(shape, dtype, "cuda", layout) for shape, layout in cases]
    gs = [_input(x.shape[:2] + (1, 1), dtype, "cuda") for x in xs]

    for x, g in zip(xs, gs):
        y, dx = F.adaptive_avg_pool2d(x, 1), ops.adaptive_avg_pool2d_backward(g, x)
        v = compare_errors(y, TF.adaptive_avg_pool2d(x, 1), TF.adaptive_avg_pool2d(x.double(), 1),
                           name=f"adaptive_avg_pool2d(1) {tuple(x.shape)}")
        assert v, v.message
        aten_bwd = torch.ops.aten._adaptive_avg_pool2d_backward
        v = compare_errors(dx, aten_bwd(g, x), aten_bwd(g.double(), x.double()), grad=True,
                           name=f"adaptive_avg_pool2d(1) backward {tuple(x.shape)}")
        assert v, v.message


def _past_2_31_elements_channels_last_bands():
    # the channels-last row bands (pool_band.cuh): 64-bit slice offsets, forward and backward, max and avg;
    # references in NCHW (PyTorch's channels-last avg_pool backward has its own bug, pytorch#188344)
    x = torch.empty((38000, 64, 30, 30), dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    x = x.contiguous(memory_format=torch.channels_last)
    assert x.numel() > 2**31
    tail = x[-2:].contiguous()
    y, i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    y_ref, i_ref = TF.max_pool2d(tail, 3, 2, 1, return_indices=True)
    assert torch.equal(y[-2:], y_ref) and torch.equal(i[-2:], i_ref)
    g = torch.randn_like(y)
    dx = ops.max_pool2d_backward(g, x, i, (3, 3), (2, 2), (1, 1), (1, 1), False)
    ref = torch.ops.aten.max_pool2d_with_indices_backward(g[-2:].contiguous(), tail, (3, 3), (2, 2), (1, 1), (1, 1),
                                                          False, i_ref)
    torch.testing.assert_close(dx[-2:], ref)
    del dx, g, i, y
    ya = F.avg_pool2d(x, 3, 2)
    torch.testing.assert_close(ya[-2:], TF.avg_pool2d(tail, 3, 2))
    ga = torch.randn_like(ya)
    dxa = ops.avg_pool2d_backward(ga, x, (3, 3), (2, 2), (0, 0), False, True, None)
    ref = torch.ops.aten.avg_pool2d_backward(ga[-2:].contiguous(), tail, (3, 3), (2, 2), (0, 0), False, True, None)
    ref64 = torch.ops.aten.avg_pool2d_backward(ga[-2:].double(), tail.double(), (3, 3), (2, 2), (0, 0), False, True,
                                               None)
    v = compare_errors(dxa[-2:], ref, ref64, grad=True, name="avg_pool2d_backward tail")  # sums of 1-4 g / 9
    assert v, v.message


@pytest.mark.cuda
@pytest.mark.parametrize("variant", POOL_VARIANTS)
def test_cuda_variants_agree(variant, monkeypatch):
    # the old paths kept for A/B measurements give what the default paths give (up to float summation order)
    # (W = 32: NCHW 3x3/2 avg takes the vector-staged backward, its windows one divisor)
    xs = [make_input(shape, torch.float32, "cuda", layout) for layout in ("contiguous", "channels_last")
          for shape in ((4, 24, 37, 30), (2, 8, 21, 32))]

    def run():
        out = []
        for x0 in xs:
            x = x0.detach().requires_grad_()
            for fn in (lambda t: F.max_pool2d(t, 3, 2, 1), lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True),
                       lambda t: F.avg_pool2d(t, 2, 2, count_include_pad=False), lambda t: F.adaptive_avg_pool2d(t, 1),
                       lambda t: F.avg_pool2d(t, 3, 2)):
                y = fn(x)
                (gx,) = torch.autograd.grad(y, [x], torch.ones_like(y))
                out += [y, gx]
        return out

    base = run()
    set_variant(monkeypatch, variant)
    for a, b in zip(base, run()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
