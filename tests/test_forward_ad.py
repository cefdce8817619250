"""Forward-mode AD: no torch_dnn op has a forward-mode formula, so a tangent on any tensor argument of any op
(every name of torch_dnn.ops.FAMILIES: forward, backward and in-place ops) raises an error that names the op, through
torch.autograd.forward_ad and through torch.func.jvp, called as the raw op or through the functional wrappers. A
result without a tangent (all zeros under jvp) would be a silent wrong answer."""
import pytest
import torch
import torch.autograd.forward_ad as fwAD

import torch_dnn.functional as F
from tests.op_samples import op_samples, tensor_positions
from torch_dnn.ops import FAMILIES

ops = torch.ops.torch_dnn
OP_NAMES = [n for family in FAMILIES.values() for n in family]
REFUSED = (NotImplementedError, RuntimeError)


def _names_op(err, name):
    msg = str(err)
    return f"torch_dnn.{name}:" in msg or f"torch_dnn::{name} " in msg


def _floating_positions(args):
    return [i for i in tensor_positions(args) if args[i].is_floating_point()]


def _with(args, i, value):
    return tuple(value if j == i else (a.clone() if isinstance(a, torch.Tensor) else a) for j, a in enumerate(args))


def test_every_op_has_a_sample():
    assert len(OP_NAMES) > 50 and set(op_samples()) == set(OP_NAMES)


@pytest.mark.parametrize("name", OP_NAMES)
def test_forward_ad_tangent_is_refused(name):
    """A dual tensor (torch.autograd.forward_ad) in each floating tensor argument of the raw op, in turn."""
    args, kwargs = op_samples()[name]
    positions = _floating_positions(args)
    assert positions, name
    for i in positions:
        with fwAD.dual_level():
            dual = fwAD.make_dual(args[i].clone(), torch.randn_like(args[i]))
            with pytest.raises(REFUSED) as e:
                getattr(ops, name)(*_with(args, i, dual), **kwargs)
        assert _names_op(e.value, name), f"{name} (argument {i}): {e.value}"


@pytest.mark.parametrize("name", OP_NAMES)
def test_jvp_is_refused(name):
    """torch.func.jvp with respect to each floating tensor argument of the raw op, in turn."""
    args, kwargs = op_samples()[name]
    for i in _floating_positions(args):
        def f(t, i=i):
            out = getattr(ops, name)(*_with(args, i, t), **kwargs)
            return out if out is not None else t
        with pytest.raises(REFUSED) as e:
            torch.func.jvp(f, (args[i].clone(),), (torch.randn_like(args[i]),))
        assert _names_op(e.value, name), f"{name} (argument {i}): {e.value}"


def _functional_cases():
    """(op named in the error, f(x)) through torch_dnn.functional, the issue's cases among them."""
    w, b = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    lw = torch.randn(3, 8, dtype=torch.float64)
    return [
        ("gelu", lambda x: F.gelu(x)),
        ("relu", lambda x: F.relu(x)),
        ("relu_", lambda x: F.relu(x.clone(), inplace=True)),
        ("hardswish_", lambda x: F.hardswish(x * 1, inplace=True)),
        ("softmax", lambda x: F.softmax(x, -1)),
        ("log_softmax", lambda x: F.log_softmax(x, 0)),
        ("max_pool1d", lambda x: F.max_pool1d(x[None], 2)),
        ("adaptive_avg_pool1d", lambda x: F.adaptive_avg_pool1d(x[None], 3)),
        ("layer_norm", lambda x: F.layer_norm(x, (8,), w, b)),
        ("rms_norm", lambda x: F.rms_norm(x, (8,), w)),
        ("linear", lambda x: F.linear(x, lw)),
        ("mm", lambda x: F.matmul(x, lw.t())),
        ("bias_act", lambda x: F.bias_act(x, b, 1, "silu")),
        ("batch_norm", lambda x: F.batch_norm(x, None, None, w, b, training=True)),
        ("batch_norm", lambda x: F.batch_norm(x, torch.zeros(8, dtype=x.dtype), torch.ones(8, dtype=x.dtype))),
        ("group_norm", lambda x: F.group_norm(x[None], 2, w, b)),
        ("local_response_norm", lambda x: F.local_response_norm(x[None, None], 2)),
    ]


@pytest.mark.parametrize("case", range(len(_functional_cases())))
def test_functional_wrappers_refuse_tangents(case):
    name, f = _functional_cases()[case]
    x, t = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    with pytest.raises(REFUSED) as e:
        torch.func.jvp(f, (x,), (t,))
    assert _names_op(e.value, name), e.value
    with fwAD.dual_level():
        with pytest.raises(REFUSED) as e:
            f(fwAD.make_dual(x, t))
    assert _names_op(e.value, name), e.value


def test_ops_without_tangents_still_run_under_forward_ad():
    """Under a forward-AD level, an op whose arguments carry no tangent runs as usual (and other arguments of the
    computation keep theirs)."""
    x, c = torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    t = torch.randn_like(x)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, t)
        out = F.gelu(c) * dual
        primal, tangent = fwAD.unpack_dual(out)
    torch.testing.assert_close(primal, F.gelu(c) * x, rtol=0, atol=0)
    torch.testing.assert_close(tangent, F.gelu(c) * t, rtol=0, atol=0)


def test_in_place_op_records_its_gradient_or_refuses():
    """The raw in-place op records its gradient on a non-leaf that is not a view (its C++ autograd kernel), and
    raises on a leaf or a view that requires grad (the functional form with inplace=True handles those) rather than
    leaving a gradient that ignores it."""
    x = torch.tensor([-1.0, 2.0], requires_grad=True)
    y = x * 1
    ops.relu_(y)
    torch.testing.assert_close(torch.autograd.grad(y.sum(), x)[0], torch.tensor([0.0, 1.0]), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match=r"torch_dnn\.relu_: .*leaf or a view that requires grad"):
        ops.relu_(x)
    with pytest.raises(RuntimeError, match=r"torch_dnn\.relu_: .*leaf or a view that requires grad"):
        ops.relu_((x * 1)[1:])
    y = x * 1
    with torch.no_grad():
        ops.relu_(y)
    torch.testing.assert_close(y.detach(), torch.tensor([0.0, 2.0]), rtol=0, atol=0)
