"""The functional wrappers' op handle (torch_dnn/ops/_registry.py): a call that records autograd applies the op's
registered formula directly (an autograd.Function named Direct_<op>) and must give what the dispatcher's path
(torch.library's autograd kernel, reached by calling torch.ops.torch_dnn.<op>) gives, bit for bit; where autocast,
a dispatch mode or a functorch transform would see the call first, the dispatcher's path is taken."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torch_dnn.functional as F
from tests.utils import devices, make_input

ops = torch.ops.torch_dnn


def _inp(shape, device, dtype=torch.float32):
    return make_input(shape, dtype, device, low=-2, high=2).requires_grad_()


def _cases(device):
    """(name, through the wrappers, through the dispatcher, inputs): ops of several families, with keyword-only
    arguments, defaults left out, tuple results and integer (non-differentiable) results."""
    x4 = _inp((2, 3, 8, 8), device)
    x2, w, b = _inp((5, 12), device), _inp((7, 12), device), _inp((7,), device)
    lw, lb = _inp((12,), device), _inp((12,), device)
    return [
        ("linear", lambda x, w, b: F.linear(x, w, b), lambda x, w, b: ops.linear(x, w, b), (x2, w, b)),
        ("linear_act gelu", lambda x, w, b: F.linear_act(x, w, b, "gelu"),
         lambda x, w, b: ops.linear_act(x, w, b, "gelu", save_preact=True)[0], (x2, w, b)),
        ("relu", F.relu, ops.relu, (x2,)),
        ("softmax", lambda x: F.softmax(x, 1), lambda x: ops.softmax(x, 1), (x2,)),
        ("layer_norm", lambda x, w, b: F.layer_norm(x, (12,), w, b),
         lambda x, w, b: ops.layer_norm(x, [12], w, b, 1e-5)[0], (x2, lw, lb)),
        ("max_pool2d indices", lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True)[0],
         lambda x: ops.max_pool2d(x, [3, 3], [2, 2], [1, 1], [1, 1], False)[0], (x4,)),
    ]


@pytest.mark.parametrize("device", devices())
def test_direct_path_matches_dispatcher(device):
    for name, ours, dispatched, inputs in _cases(device):
        y1 = ours(*inputs)
        y2 = dispatched(*inputs)
        assert type(y1.grad_fn).__name__.startswith("Direct"), (name, type(y1.grad_fn).__name__)
        assert not type(y2.grad_fn).__name__.startswith("Direct"), name
        torch.testing.assert_close(y1, y2, rtol=0, atol=0, msg=name)
        g = torch.randn_like(y1)
        d1 = torch.autograd.grad(y1, inputs, g)
        d2 = torch.autograd.grad(y2, inputs, g)
        for a, c in zip(d1, d2):
            torch.testing.assert_close(a, c, rtol=0, atol=0, msg=name)


class _Recorder(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", devices())
def test_direct_path_not_taken(device):
    x, w, b = _inp((5, 12), device), _inp((7, 12), device), _inp((7,), device)
    # autocast casts before the Autograd key: the graph must see the casts, and the gradients keep x's dtype
    with torch.autocast(device, dtype=torch.bfloat16):
        y = F.linear(x, w, b)
    assert y.dtype == torch.bfloat16 and not type(y.grad_fn).__name__.startswith("Direct")
    (dx,) = torch.autograd.grad(y.float().sum(), [x])
    assert dx.dtype == torch.float32
    with _Recorder():
        y = F.linear(x, w, b)
    assert not type(y.grad_fn).__name__.startswith("Direct")
    # grad mode off, or nothing requires grad: no graph at all
    with torch.no_grad():
        assert F.relu(x).grad_fn is None
    assert F.relu(x.detach()).grad_fn is None
