"""CUDA-only checks: a tensor past 2^31 elements, CUDA graph capture, inductor-compiled model, the output is
written everywhere (poisoned buffers)."""
import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from torch_dnn.testing import compare
from tests.utils import assert_cuda_graph_replays, make_input

pytestmark = pytest.mark.cuda


def test_past_2_31_elements():
    n = 2**31 + 40000  # also holds 65537 rows of 32768
    x = torch.empty(n, dtype=torch.bfloat16, device="cuda").uniform_(-3, 3)
    y = F.gelu(x)
    # check the tail and samples everywhere, against PyTorch on the same slices
    idx = torch.cat([torch.arange(n - 5000, n, device="cuda"), torch.randint(0, n, (100000,), device="cuda")])
    v = compare(y[idx], TF.gelu(x[idx]), TF.gelu(x[idx].double()), name="gelu past 2^31")
    assert v, v.message
    del y
    # softmax with rows x cols past 2^31
    x2 = x[: 65537 * 32768].view(65537, 32768)
    s = F.softmax(x2, -1)
    rows = torch.tensor([0, 1, 40000, 65535, 65536], device="cuda")
    v = compare(s[rows], TF.softmax(x2[rows], -1), TF.softmax(x2[rows].double(), -1), name="softmax past 2^31")
    assert v, v.message
    del s
    # bias_act along the last dim
    b = torch.randn(32768, dtype=torch.bfloat16, device="cuda")
    z = F.bias_act(x2, b, -1, "silu")
    v = compare(z[rows], TF.silu(x2[rows] + b), TF.silu(x2[rows].double() + b.double()), name="bias_act past 2^31")
    assert v, v.message


def test_cuda_graph_capture():
    x = make_input((64, 1000), torch.float32, "cuda").requires_grad_()
    b = make_input((1000,), torch.float32, "cuda").requires_grad_()

    def step():
        y = F.softmax(F.bias_act(F.gelu(x), b, -1, "silu"), -1) + F.log_softmax(F.mish(x), 0)
        gx, gb = torch.autograd.grad(y.square().sum(), [x, b])
        return y, gx, gb

    assert_cuda_graph_replays(step, lambda: x.copy_(make_input((64, 1000), torch.float32, "cuda")))


def test_outputs_fully_written():
    # the caching allocator hands back the poisoned block: every element must be overwritten
    for shape, fn in (((1000, 777), lambda x: F.softmax(x, -1)), ((3, 5000, 7), lambda x: F.log_softmax(x, 1)),
                      ((4099,), F.silu), ((64, 1001), lambda x: F.bias_act(x, None, -1, "gelu"))):
        n = 1
        for s in shape:
            n *= s
        x = make_input(shape, torch.float32, "cuda")
        poison = torch.full((n,), float("nan"), device="cuda")
        del poison
        y = fn(x)
        assert not torch.isnan(y).any()


def test_compile_inductor():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch_dnn.nn.GELU(), torch_dnn.nn.Softmax(-1)).cuda()
    x = make_input((32, 64), torch.float32, "cuda")
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x))
