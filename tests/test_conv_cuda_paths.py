"""The CUDA direct convolution kernels (csrc/conv/conv_direct*.cu) through the ops, against PyTorch's convolution
under the project's error rule (torch_dnn/testing.py: float64 reference, ours within 2x PyTorch's error forward,
3x backward): the depthwise kernels (3x3 / 5x5 / 7x7, strides 1 and 2, multipliers 1 and 2, channels-last and
NCHW, every dtype) and the generic kernels (true float32 and float64: the tensor-core path takes neither), every
pass (forward with bias, input, weight and bias gradients), and bitwise-reproducible weight and bias gradients.
Skipped without CUDA."""
import pytest
import torch
import torch.nn.functional as F

import torch_dnn  # noqa: F401
from torch_dnn.testing import compare

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

ops = torch.ops.torch_dnn


def _rand(shape, dtype, gen, channels_last=False):
    t = (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1).to(device="cuda", dtype=dtype)
    if channels_last and t.dim() == 4:
        t = t.contiguous(memory_format=torch.channels_last)
    elif channels_last and t.dim() == 5:
        t = t.contiguous(memory_format=torch.channels_last_3d)
    elif channels_last and t.dim() == 3:
        t = t.transpose(1, 2).contiguous().transpose(1, 2)
    return t


_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_GRAD_INPUT = {1: torch.nn.grad.conv1d_input, 2: torch.nn.grad.conv2d_input, 3: torch.nn.grad.conv3d_input}
_GRAD_WEIGHT = {1: torch.nn.grad.conv1d_weight, 2: torch.nn.grad.conv2d_weight, 3: torch.nn.grad.conv3d_weight}


def check_all_passes(N, C, K, groups, spatial, kernel, stride, padding, dilation, dtype, channels_last, seed=0):
    """Forward (with bias), the three gradients and their reproducibility, each against PyTorch's."""
    rank = len(spatial)
    gen = torch.Generator().manual_seed(seed)
    x = _rand((N, C) + tuple(spatial), dtype, gen, channels_last)
    w = _rand((K, C // groups) + tuple(kernel), dtype, gen, channels_last)
    b = _rand((K,), dtype, gen)
    args = (list(stride), list(padding), list(dilation))
    label = (f"N{N} C{C} K{K} G{groups} {tuple(spatial)} k{tuple(kernel)} s{tuple(stride)} p{tuple(padding)} "
             f"d{tuple(dilation)} {dtype} {'channels_last' if channels_last else 'contiguous'}")
    x64, w64, b64 = x.double(), w.double(), b.double()

    y = ops.convolution(x, w, b, *args, False, [0] * rank, groups)
    peer = _CONV[rank](x, w, b, stride, padding, dilation, groups)
    ref = _CONV[rank](x64, w64, b64, stride, padding, dilation, groups)
    v = compare(y, peer, ref, name=f"forward {label}")
    assert v, v.message

    g = _rand(tuple(peer.shape), dtype, gen, channels_last)
    g64 = g.double()
    dx = ops.conv_backward_input(g, w, list(x.shape), *args, False, [0] * rank, groups)
    v = compare(dx, _GRAD_INPUT[rank](x.shape, w, g, stride, padding, dilation, groups),
                _GRAD_INPUT[rank](x.shape, w64, g64, stride, padding, dilation, groups), grad=True,
                name=f"input gradient {label}")
    assert v, v.message

    dw = ops.conv_backward_weight(g, x, list(w.shape), *args, False, [0] * rank, groups)
    v = compare(dw, _GRAD_WEIGHT[rank](x, w.shape, g, stride, padding, dilation, groups),
                _GRAD_WEIGHT[rank](x64, w.shape, g64, stride, padding, dilation, groups), grad=True,
                name=f"weight gradient {label}")
    assert v, v.message
    dw2 = ops.conv_backward_weight(g, x, list(w.shape), *args, False, [0] * rank, groups)
    assert torch.equal(dw, dw2), f"weight gradient {label}: two runs differ"

    dims = [0] + list(range(2, 2 + rank))
    db = ops.conv_backward_bias(g)
    v = compare(db, g.sum(dims), g64.sum(dims), grad=True, name=f"bias gradient {label}")
    assert v, v.message
    assert torch.equal(db, ops.conv_backward_bias(g)), f"bias gradient {label}: two runs differ"


DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]


# (N, C, multiplier, H, W, kernel, stride): depthwise shapes of MobileNet / EfficientNet / ConvNeXt, odd sizes
DEPTHWISE = [
    (2, 32, 1, 13, 13, 3, 1),
    (2, 32, 1, 14, 15, 3, 2),
    (2, 24, 1, 11, 12, 5, 1),
    (2, 40, 1, 15, 13, 5, 2),
    (2, 16, 1, 14, 14, 7, 1),
    (2, 16, 1, 17, 15, 7, 2),
    (2, 16, 2, 13, 11, 3, 1),
    (2, 8, 2, 12, 13, 5, 2),
    (2, 7, 1, 9, 10, 3, 1),  # channels no vector divides
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: "_".join(map(str, c)))
@pytest.mark.parametrize("channels_last", [True, False], ids=["nhwc", "nchw"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_depthwise(case, channels_last, dtype):
    N, C, m, H, W, k, s = case
    check_all_passes(N, C, C * m, C, (H, W), (k, k), (s, s), (k // 2, k // 2), (1, 1), dtype, channels_last)


def test_depthwise_larger():
    # more items than one wave, several slices in the weight gradient
    check_all_passes(8, 96, 96, 96, (56, 56), (3, 3), (1, 1), (1, 1), (1, 1), torch.bfloat16, True, seed=1)
    check_all_passes(4, 64, 64, 64, (28, 28), (7, 7), (1, 1), (3, 3), (1, 1), torch.float32, False, seed=2)


# (N, C, K, groups, spatial, kernel, stride, padding, dilation): the generic kernels (and depthwise ones the
# dedicated kernels leave to them: 1-D shapes run there only without a fixed width, 3-D always)
GENERIC = [
    (2, 8, 12, 1, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1)),
    (2, 6, 9, 3, (10, 7), (3, 2), (2, 1), (1, 0), (1, 2)),
    (3, 5, 7, 1, (23,), (5,), (3,), (2,), (2,)),
    (2, 4, 6, 2, (5, 6, 7), (2, 3, 3), (1, 2, 1), (1, 1, 0), (1, 1, 2)),
    (2, 16, 32, 1, (7, 7), (1, 1), (2, 2), (0, 0), (1, 1)),
    (1, 3, 8, 1, (20, 20), (7, 7), (2, 2), (3, 3), (1, 1)),
    (2, 8, 8, 8, (5, 6, 7), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),  # 3-D depthwise
    (2, 8, 8, 8, (9, 10), (3, 3), (1, 1), (2, 2), (2, 2)),                 # dilated depthwise
]


@pytest.mark.parametrize("case", GENERIC, ids=lambda c: "_".join(str(v) for v in c[:5]))
@pytest.mark.parametrize("channels_last", [True, False], ids=["channels_last", "contiguous"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_generic(case, channels_last, dtype):
    check_all_passes(*case, dtype, channels_last)
