"""batch_norm's CUDA kernels run on the CPU (tests/emulation/bn_emulation.cpp: the kernel source compiled by g++ with
a shim that runs each block's threads on host threads) against PyTorch in float64, by the error rule: the
whole-channel kernels (csrc/batch_norm/kernels/bn_channel.cuh: statistics, coefficients and the elementwise pass of
a channel in one launch, NCHW), forward (y, mean, invstd, running statistics) and backward (dx, d_weight, d_bias),
every dtype, planes with and without 16-byte vectors, grids smaller than the channel count; and the one-pass
evaluation forward (bn_elementwise.cuh's EvalApplyOp) over the rows and planes walks. This checks the kernels' index
arithmetic and reductions without a GPU, not their speed. Opt in with TORCH_DNN_EMULATE=1."""

import pytest
import torch
import torch.nn.functional as TF

import torch_dnn  # noqa: F401
from tests.utils import load_kernel_emulation, requires_emulation
from torch_dnn.testing import compare, random_like_case

pytestmark = requires_emulation


@pytest.fixture(scope="module")
def emu():
    load_kernel_emulation("torch_dnn_bn_emulation", "bn_emulation.cpp")
    return torch.ops.torch_dnn_bn_emu


# (N, C, H, W, grid): 7x7 planes (no vectors), 8x8 (16-byte vectors), a plane of more than one piece (the
# 512-access pieces of the planes walk), a grid of fewer blocks than channels
CASES = [(3, 5, 7, 7, 5), (2, 6, 8, 8, 4), (2, 3, 80, 70, 2), (4, 9, 4, 6, 3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_channel_kernels_against_pytorch(emu, case, dtype):
    N, C, H, W, grid = case
    g = torch.Generator().manual_seed(N * 1000 + C * 10 + H)
    pdtype = torch.float64 if dtype == torch.float64 else torch.float32
    x = random_like_case((N, C, H, W), dtype, "cpu", generator=g).add_(1.5)  # a mean away from 0
    w = random_like_case((C,), pdtype, "cpu", low=0.5, high=1.5, generator=g)
    b = random_like_case((C,), pdtype, "cpu", generator=g)
    dy = random_like_case((N, C, H, W), dtype, "cpu", generator=g)
    rm0 = random_like_case((C,), pdtype, "cpu", generator=g)
    rv0 = random_like_case((C,), pdtype, "cpu", low=0.5, high=2.0, generator=g)
    name = f"{case} {dtype}"

    rm, rv = rm0.clone(), rv0.clone()
    y, mean, invstd = emu.channel_forward(x.reshape(N, C, H * W), w, b, rm, rv, 0.1, 1e-5, grid)
    dx, dw, db = emu.channel_backward(dy.reshape(N, C, H * W), x.reshape(N, C, H * W), w, mean, invstd, grid)

    def pytorch(d):
        xs = x.to(d).requires_grad_()
        ws, bs = w.to(d if d == torch.float64 else pdtype).requires_grad_(), b.to(
            d if d == torch.float64 else pdtype).requires_grad_()
        rms, rvs = rm0.to(ws.dtype).clone(), rv0.to(ws.dtype).clone()
        out = TF.batch_norm(xs, rms, rvs, ws, bs, True, 0.1, 1e-5)
        grads = torch.autograd.grad(out, (xs, ws, bs), dy.to(d))
        m = xs.detach().double().mean((0, 2, 3))
        inv = 1 / (xs.detach().double().var((0, 2, 3), unbiased=False) + 1e-5).sqrt()
        return out.detach(), grads, rms, rvs, m, inv

    y_pt, (dx_pt, dw_pt, db_pt), rm_pt, rv_pt, _, _ = pytorch(dtype)
    y64, (dx64, dw64, db64), rm64, rv64, m64, inv64 = pytorch(torch.float64)
    verdicts = [
        compare(y.reshape(N, C, H, W), y_pt, y64, name=f"{name} y"),
        compare(dx.reshape(N, C, H, W), dx_pt, dx64, grad=True, name=f"{name} dx"),
        compare(dw, dw_pt, dw64, grad=True, name=f"{name} d_weight"),
        compare(db, db_pt, db64, grad=True, name=f"{name} d_bias"),
        compare(rm, rm_pt, rm64, name=f"{name} running_mean"),
        compare(rv, rv_pt, rv64, name=f"{name} running_var"),
    ]
    assert all(verdicts), "; ".join(v.message for v in verdicts if not v)
    # mean and invstd in the accumulation type, against float64 at that type's rounding
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(mean.double(), m64, rtol=tol, atol=tol)
    torch.testing.assert_close(invstd.double(), inv64, rtol=tol, atol=tol)


# (N, C, S, grid_x, grid_y): the rows walk (S = 1: C with and without 16-byte vectors, more rows than the grid's,
# channel vectors over several blocks) and the planes walk (planes with and without vectors, of several pieces,
# fewer blocks than planes)
EVAL_CASES = [(37, 64, 1, 0, 3), (20, 13, 1, 0, 2), (9, 520, 1, 0, 1), (3, 5, 49, 4, 0), (2, 6, 64, 3, 0),
              (2, 3, 5600, 2, 0)]


@pytest.mark.parametrize("act", [0, 1, 2], ids=["identity", "relu", "silu"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("case", EVAL_CASES, ids=lambda c: "x".join(map(str, c)))
def test_eval_apply_against_pytorch(emu, case, dtype, act):
    # the evaluation forward in one pass (EvalApplyOp): act(batch_norm(x) + residual) with the running statistics,
    # and the mean and invstd it saves for the backward
    N, C, S, gx, gy = case
    g = torch.Generator().manual_seed(N * 1000 + C * 10 + S)
    pdtype = torch.float64 if dtype == torch.float64 else torch.float32
    x = random_like_case((N, C, S), dtype, "cpu", generator=g)
    res = random_like_case((N, C, S), dtype, "cpu", generator=g) if act != 0 else None
    w = random_like_case((C,), pdtype, "cpu", low=0.5, high=1.5, generator=g)
    b = random_like_case((C,), pdtype, "cpu", generator=g)
    rm = random_like_case((C,), pdtype, "cpu", generator=g)
    rv = random_like_case((C,), pdtype, "cpu", low=0.5, high=2.0, generator=g)
    y, mean, invstd = emu.eval_apply(x, res, w, b, rm, rv, 1e-5, act, gx, gy)

    acts = {0: lambda t: t, 1: torch.relu, 2: TF.silu}

    def pytorch(d):
        pd = d if d == torch.float64 else pdtype
        z = TF.batch_norm(x.to(d), rm.to(pd), rv.to(pd), w.to(pd), b.to(pd), False, 0.1, 1e-5)
        return acts[act](z + res.to(d) if res is not None else z)

    v = compare(y, pytorch(dtype), pytorch(torch.float64), name=f"{case} {dtype} act={act} y")
    assert v, v.message
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(mean.double(), rm.double(), rtol=0, atol=0)
    torch.testing.assert_close(invstd.double(), 1 / (rv.double() + 1e-5).sqrt(), rtol=tol, atol=tol)
