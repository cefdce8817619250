"""batch_norm of an empty input accepts what PyTorch's accepts: any rank (a 1-D one too), any statistics and
parameters (PyTorch returns the input's copy times weight[0] plus bias[0] before any check), with PyTorch's result,
strides, gradients and errors, and running statistics left as they were."""
import itertools

import pytest
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from tests.utils import devices

SHAPES = [(0,), (0, 3), (2, 0), (0, 0), (0, 3, 4), (2, 3, 0), (0, 3, 2, 2)]
STATS = [None, 3, 0]  # running statistics absent, of the channel count, of size 0
PARAMS = [None, 3, 0]


def _outcome(fn, x, stats, weight, bias, training):
    x = x.clone().requires_grad_()
    rm = None if stats is None else torch.full((stats,), 0.5, dtype=x.dtype, device=x.device)
    rv = None if stats is None else torch.full((stats,), 2.0, dtype=x.dtype, device=x.device)
    w = None if weight is None else torch.randn(weight, dtype=x.dtype, device=x.device).requires_grad_()
    b = None if bias is None else torch.randn(bias, dtype=x.dtype, device=x.device).requires_grad_()
    try:
        y = fn(x, rm, rv, w, b, training=training)
    except Exception as e:  # noqa: BLE001 (compared with PyTorch's)
        return type(e)
    wrt = [t for t in (x, w, b) if t is not None]
    grads = torch.autograd.grad(y.sum() if y.numel() else (y * 1).sum(), wrt, allow_unused=True)
    stats_after = [t.clone() for t in (rm, rv) if t is not None]
    return y, y.stride(), grads, stats_after


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_empty_input_as_pytorch(device, shape):
    x = torch.empty(shape, device=device)
    if len(shape) == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    checked = 0
    for stats, weight, bias, training in itertools.product(STATS, PARAMS, PARAMS, (True, False)):
        ours = _outcome(F.batch_norm, x, stats, weight, bias, training)
        theirs = _outcome(TF.batch_norm, x, stats, weight, bias, training)
        case = f"{shape} stats={stats} weight={weight} bias={bias} training={training}"
        if isinstance(theirs, type):
            assert ours is theirs, f"{case}: PyTorch raises {theirs.__name__}, ours gives {ours}"
            continue
        assert not isinstance(ours, type), f"{case}: PyTorch accepts it, ours raises {ours.__name__}"
        (y, stride, grads, stats_after), (ty, tstride, tgrads, tstats_after) = ours, theirs
        torch.testing.assert_close(y, ty, rtol=0, atol=0, msg=case)
        assert stride == tstride, case
        for g, tg in zip(grads, tgrads):
            assert (g is None) == (tg is None), case
            if g is not None:
                torch.testing.assert_close(g, tg, rtol=0, atol=0, msg=case)
        for s, ts in zip(stats_after, tstats_after):
            torch.testing.assert_close(s, ts, rtol=0, atol=0, msg=case)
        checked += 1
    assert checked > 0
