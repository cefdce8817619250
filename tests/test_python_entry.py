"""torch_dnn._entry (csrc/python_entry/python_entry.cpp): the functional wrappers' C++ way into an op in eager calls.
It is built and used; it gives what torch.ops gives (values, autograd node, version counters, the error class and
message of a bad input); what it does not convert (tensor subclasses, torch-function modes, other argument types,
unknown or missing arguments) it hands back as NotImplemented, and the wrappers then take torch.ops, so
__torch_function__ still sees the call."""
import pathlib
import subprocess
import sys

import pytest
import torch
from torch.overrides import TorchFunctionMode

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.ops import _registry
from tests.utils import devices

ops = torch.ops.torch_dnn
ROOT = pathlib.Path(torch_dnn.__file__).parent

pytestmark = pytest.mark.skipif(not any(ROOT.glob("_entry*.so")) and not any(ROOT.glob("_entry*.pyd")),
                                reason="torch_dnn._entry is not built for this Python")


def _op(name):
    from torch_dnn import _entry
    return _entry.Op(f"torch_dnn::{name}")


def test_built_and_used():
    assert _registry.python_entry_active()
    for name in ("relu", "softmax", "max_pool2d", "layer_norm", "batch_norm", "relu_", "linear"):
        assert _registry._python_entry(getattr(ops, name)) is not None, name


def test_switched_off_by_the_knob():
    code = "import torch_dnn; from torch_dnn.ops import _registry; print(_registry.python_entry_active())"
    env = {"TORCH_DNN_PYTHON_ENTRY": "0", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, **env}, capture_output=True,
                         text=True, check=True, cwd=ROOT.parent)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("device", devices())
def test_arguments_as_torch_ops_takes_them(device):
    x = torch.randn(2, 3, 9, 9, device=device)
    pool = _op("max_pool2d")
    want = ops.max_pool2d(x, [3, 3], [2, 2], [1, 1], [1, 1], False)
    # one int for an int[2], a tuple, a torch.Size, a list
    got = pool(x, 3, (2, 2), torch.Size([1, 1]), [1, 1], False)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    # a keyword-only string, a default left out, an optional dtype
    y = torch.randn(4, 12, device=device)
    assert torch.equal(_op("gelu")(y, approximate="tanh"), ops.gelu(y, approximate="tanh"))
    assert torch.equal(_op("gelu")(y), ops.gelu(y))
    assert torch.equal(_op("softmax")(y, 1, torch.float64), ops.softmax(y, 1, torch.float64))
    assert torch.equal(_op("softmax")(y, dim=-1), ops.softmax(y, -1))
    # an nn.Parameter is a plain tensor to the dispatcher
    w = torch.nn.Parameter(torch.randn(5, 12, device=device))
    out = _op("linear")(y, w, None)
    assert out is not NotImplemented and torch.equal(out, ops.linear(y, w, None))


def test_hands_back_what_it_does_not_convert():
    y = torch.randn(4, 12)
    softmax, gelu = _op("softmax"), _op("gelu")
    assert softmax(y) is NotImplemented  # missing argument: torch.ops raises its error
    assert softmax(y, 1, None, None) is NotImplemented  # too many
    assert softmax(y, dim=1, bogus=2) is NotImplemented  # unknown keyword
    assert softmax(y, 1, dim=1) is NotImplemented  # given twice
    assert gelu(y, "tanh") is NotImplemented  # keyword-only given by position
    assert softmax(y, 2 ** 70) is NotImplemented  # past int64
    assert softmax(y, 1.0) is NotImplemented
    assert softmax("y", 1) is NotImplemented

    class Sub(torch.Tensor):
        pass

    assert softmax(y.as_subclass(Sub), 1) is NotImplemented
    with TorchFunctionMode():
        assert softmax(y, 1) is NotImplemented
    with pytest.raises(ValueError, match="no op"):
        _op("no_such_op")
    from torch_dnn import _entry
    with pytest.raises(TypeError, match="tensors"):
        _entry.Op("aten::cat")  # a Tensor[] argument


def test_torch_function_still_sees_the_call():
    seen = []

    class Sub(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return super().__torch_function__(func, types, args, kwargs or {})

    y = torch.randn(4, 12).as_subclass(Sub)
    out = F.relu(y)
    assert isinstance(out, Sub) and any("torch_dnn.relu" in s for s in seen), seen

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    seen.clear()
    with Mode():
        F.softmax(torch.randn(4, 12), -1)
    assert any("torch_dnn.softmax" in s for s in seen), seen


def _raised(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001: the class is what is compared
        return type(e), str(e).split("\n")[0]
    raise AssertionError("no error raised")


def test_errors_as_torch_ops_raises_them():
    y = torch.randn(4, 12)
    bad = [
        ("softmax", (y, 5)),  # dim out of range
        ("max_pool2d", (torch.randn(1, 2, 3, 3), [5, 5], [1, 1], [0, 0], [1, 1], False)),  # window past the input
        ("max_pool2d", (torch.randn(1, 2, 8, 8), [3, 3], [1, 1], [2, 2], [1, 1], False)),  # padding past half
        ("layer_norm", (y, [13], None, None, 1e-5)),  # shape mismatch
        ("gelu", (y,), {"approximate": "bogus"}),
    ]
    for name, args, *kw in bad:
        kw = kw[0] if kw else {}
        ours = _raised(lambda: _op(name)(*args, **kw))
        theirs = _raised(lambda: getattr(ops, name)(*args, **kw))
        assert ours == theirs, (name, ours, theirs)


@pytest.mark.parametrize("device", devices())
def test_mutating_ops_and_autograd(device):
    x = torch.randn(8, 4, 5, 5, device=device)
    rm, rv = torch.zeros(4, device=device), torch.ones(4, device=device)
    rm2, rv2 = rm.clone(), rv.clone()
    v = rm._version
    got = _op("batch_norm")(x, None, None, rm, rv, True, 0.1, 1e-5)
    want = ops.batch_norm(x, None, None, rm2, rv2, True, 0.1, 1e-5)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert torch.equal(rm, rm2) and torch.equal(rv, rv2) and rm._version > v
    z = torch.randn(6, 7, device=device)
    v = z._version
    assert _op("relu_")(z) is None and z._version > v and bool((z >= 0).all())
    # a call that records autograd gets the op's own node
    a = torch.randn(6, 7, device=device, requires_grad=True)
    out = _op("gelu")(a)
    assert type(out.grad_fn) is type(ops.gelu(a).grad_fn)
