"""batch_norm family (first, CPU-only cut): batch_norm and batch_norm_add_act against PyTorch over shapes,
layouts, dtypes, affine on/off, training/eval; running stats step by step (momentum and None); opcheck;
float64 gradcheck; bad arguments; modules and convert."""
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from tests.utils import ALL_DTYPES, first_line, make_input, opcheck_samples

ops = torch.ops.torch_dnn
SHAPES = [((8, 3), "contiguous"), ((4, 3, 5), "contiguous"), ((2, 3, 4, 5), "contiguous"),
          ((2, 3, 4, 5), "channels_last"), ((2, 3, 4, 5), "strided"), ((2, 3, 2, 3, 4), "contiguous"),
          ((0, 3, 4, 4), "contiguous")]
TOL = {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1e-1}


def _close(a, b, dtype):
    torch.testing.assert_close(a.double(), b.double(), atol=TOL[dtype], rtol=TOL[dtype], equal_nan=True)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_against_torch(dtype, training, affine):
    for shape, layout in SHAPES:
        x = make_input(shape, dtype, "cpu", layout).requires_grad_()
        w = torch.rand(3, dtype=dtype) + 0.5 if affine else None
        b = torch.randn(3, dtype=dtype) if affine else None
        if affine:
            w.requires_grad_(), b.requires_grad_()
        rm, rv = torch.randn(3), torch.rand(3) + 0.5
        rm2, rv2 = rm.clone(), rv.clone()
        y = F.batch_norm(x, rm, rv, w, b, training, 0.2, 1e-5)
        x64 = x.detach().double().requires_grad_()
        w64 = w.detach().double().requires_grad_() if affine else None
        b64 = b.detach().double().requires_grad_() if affine else None
        rm64, rv64 = rm2.double(), rv2.double()
        y64 = TF.batch_norm(x64, rm64, rv64, w64, b64, training, 0.2, 1e-5)
        _close(y, y64, dtype)
        sd = torch.float32 if dtype == torch.float64 else dtype  # the running stats are float32
        _close(rm, rm64, sd)
        _close(rv, rv64, sd)
        if x.numel():
            g = torch.randn_like(y64)
            ins = (x, w, b) if affine else (x,)
            ins64 = (x64, w64, b64) if affine else (x64,)
            for a, r in zip(torch.autograd.grad(y, ins, g.to(dtype)), torch.autograd.grad(y64, ins64, g)):
                _close(a, r, dtype)
        if layout == "channels_last":
            assert y.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("act", [None, "relu", "silu"])
def test_batch_norm_add_act_gradcheck(act):
    x = torch.randn(3, 4, 3, 2, dtype=torch.float64, requires_grad=True)
    r = torch.randn_like(x, requires_grad=True)
    w = torch.rand(4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    for training in (True, False):
        rm, rv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
        torch.autograd.gradcheck(lambda x, r, w, b: F.batch_norm_add_act(x, rm.clone(), rv.clone(), w, b, r, act, training), (x, r, w, b))
        torch.autograd.gradcheck(lambda x, w, b: F.batch_norm(x, rm.clone(), rv.clone(), w, b, training), (x, w, b))


def test_batch_norm_add_act_against_torch():
    x, r = torch.randn(2, 4, 5, 5), torch.randn(2, 4, 5, 5)
    w, b = torch.rand(4), torch.randn(4)
    ref = {None: lambda t: t, "relu": torch.relu, "silu": TF.silu}
    for act, fn in ref.items():
        y = F.batch_norm_add_act(x, None, None, w, b, r, act, True)
        torch.testing.assert_close(y, fn(TF.batch_norm(x, None, None, w, b, True) + r))


@pytest.mark.parametrize("momentum", [0.1, None])
def test_running_stats_steps(momentum):
    ref = torch.nn.BatchNorm2d(3, momentum=momentum).double()
    ours, _ = torch_dnn.convert(ref)
    for step in range(4):
        x = torch.randn(4, 3, 5, 5, dtype=torch.float64) * (step + 1) + step
        torch.testing.assert_close(ours(x), ref(x))
        torch.testing.assert_close(ours.running_mean, ref.running_mean)
        torch.testing.assert_close(ours.running_var, ref.running_var)
        assert ours.num_batches_tracked == ref.num_batches_tracked
    ref.eval(), ours.eval()
    x = torch.randn(4, 3, 5, 5, dtype=torch.float64)
    torch.testing.assert_close(ours(x), ref(x))


def test_no_running_stats_and_state_dict():
    ref = torch.nn.BatchNorm1d(5, affine=False, track_running_stats=False)
    ours = torch_dnn.nn.BatchNorm1d(5, affine=False, track_running_stats=False)
    x = torch.randn(6, 5, 3)
    ours.eval(), ref.eval()
    torch.testing.assert_close(ours(x), ref(x))
    m = torch_dnn.nn.BatchNorm3d(4)
    assert m.state_dict().keys() == torch.nn.BatchNorm3d(4).state_dict().keys()
    assert torch_dnn.nn.BatchNormAddAct(4).state_dict().keys() == torch.nn.BatchNorm2d(4).state_dict().keys()


def test_zero_variance_and_nan():
    x = torch.full((4, 2, 3), 2.0)
    torch.testing.assert_close(F.batch_norm(x, None, None, training=True), TF.batch_norm(x, None, None, training=True))
    x[0, 0, 0] = float("nan")
    y = F.batch_norm(x, None, None, training=True)
    assert y[:, 0].isnan().all() and not y[:, 1].isnan().any()


def test_bad_arguments():
    x = torch.randn(4, 3, 2)
    with pytest.raises(RuntimeError) as e:
        F.batch_norm(x, torch.zeros(4), torch.ones(4))
    assert first_line(e.value) == ("torch_dnn.batch_norm: expected running_mean of shape [3] (the input's channel "
                                   "count, dim 1), but got [4]")
    with pytest.raises(RuntimeError) as e:
        F.batch_norm(x, None, None, torch.ones(3))
    assert first_line(e.value) == ("torch_dnn.batch_norm: running_mean and running_var must be defined in "
                                   "evaluation mode")
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        F.batch_norm(torch.randn(1, 3), None, None, training=True)


def test_opcheck():
    x = torch.randn(3, 4, 5, 2)
    w, b = torch.rand(4), torch.randn(4)
    opcheck_samples(ops.batch_norm, [((x, w, b, torch.zeros(4), torch.ones(4), True, 0.1, 1e-5), {}),
                                      ((x, None, None, torch.zeros(4), torch.ones(4), False, 0.1, 1e-5), {}),
                                      ((x.to(memory_format=torch.channels_last), w, b, None, None, True, 0.1, 1e-5), {})])
    opcheck_samples(ops.batch_norm_add_act, [((x, torch.randn_like(x), w, b, None, None, True, 0.1, 1e-5, 1), {})])
    _, m, i = ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
    opcheck_samples(ops.batch_norm_backward, [((torch.randn_like(x), x, w, None, None, m, i, True, 1e-5,
                                                [True, True, True]), {})])
    opcheck_samples(ops.batch_norm_add_act_backward, [((torch.randn_like(x), x, x, w, b, m, i, True, 2,
                                                        [True, True, True, True]), {})])
    opcheck_samples(ops.batch_norm_stats, [((x,), {})])


def test_compile_module():
    m = torch_dnn.nn.BatchNorm2d(3)
    ref = torch.nn.BatchNorm2d(3)
    x = torch.randn(2, 3, 4, 4)
    y = torch.compile(m, fullgraph=True)(x)
    torch.testing.assert_close(y, ref(x))
    torch.testing.assert_close(m.running_var, ref.running_var)
