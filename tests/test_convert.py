"""convert(): a model built from the supported modules gives the same outputs and gradients after the swap;
the swap keeps parameters, buffers, hooks, training mode; torch.compile(fullgraph=True) has no graph break."""
import pytest
import torch

import torch_dnn
from torch_dnn.demo import SmallNet
from tests.utils import assert_models_agree, devices, make_input


@pytest.mark.parametrize("device", devices())
def test_convert_same_outputs_and_grads(device):
    torch.manual_seed(0)
    dtype = torch.float64
    model = SmallNet().to(device, dtype)
    calls = []
    model.acts[0].register_forward_hook(lambda m, i, o: calls.append(1))
    model.eval()
    converted, report = torch_dnn.convert(model)
    assert converted is not model
    assert type(model.acts[0]) is torch.nn.ReLU  # the input is untouched
    assert len(report.swapped) == 19, str(report)
    assert {name for name, _, _ in report.left} == {"conv"}, str(report)
    assert isinstance(converted.acts[0], torch_dnn.nn.ReLU) and isinstance(converted.acts[0], torch.nn.ReLU)
    assert not converted.training
    assert converted.state_dict().keys() == model.state_dict().keys()
    assert repr(converted.acts[2]) == repr(model.acts[2])

    x = make_input((2, 3, 8, 8), dtype, device)
    assert_models_agree(model, converted, x, name="converted model", loss=lambda y: y.sum())
    assert len(calls) == 2, "the forward hook must survive the swap"


def test_convert_inplace_and_subclass():
    class MyReLU(torch.nn.ReLU):
        def forward(self, x):
            return super().forward(x) * 2

    m = torch.nn.Sequential(torch.nn.GELU(), MyReLU())
    out, report = torch_dnn.convert(m, inplace=True)
    assert out is m and isinstance(m[0], torch_dnn.nn.GELU)
    assert type(m[1]) is MyReLU
    assert any("subclass of ReLU" in why for _, _, why in report.left)


def test_compile_fullgraph_no_graph_break():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch_dnn.nn.Softmax(-1), torch_dnn.nn.LogSoftmax(-1), torch_dnn.nn.GELU(),
                                torch_dnn.nn.ReLU(inplace=True), torch_dnn.nn.SiLU())
    x = make_input((4, 16), torch.float32, "cpu").requires_grad_()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    y = compiled(x)
    torch.testing.assert_close(y, model(x))
    y.sum().backward()
    assert x.grad is not None
