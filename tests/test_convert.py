"""convert(): a model built from the supported modules gives the same outputs and gradients after the swap;
the swap keeps parameters, buffers, hooks, training mode. (torch.compile of the modules: each family's
compile_cases, tests/family_tester.py.)"""
import copy

import pytest
import torch

import torch_dnn
from torch_dnn.demo import SmallNet
from torch_dnn.reference import hardsigmoid_reference, hardswish_reference
from tests.utils import assert_models_agree, devices, make_input


def _small_net(device):
    torch.manual_seed(0)
    model = SmallNet().to(device, torch.float64)
    calls = []
    model.acts[0].register_forward_hook(lambda m, i, o: calls.append(1))
    model.eval()
    converted, report = torch_dnn.convert(model, include=(torch.nn.Conv2d,))
    return model, converted, report, calls


@pytest.mark.parametrize("device", devices())
def test_convert_keeps_the_model(device):
    model, converted, report, calls = _small_net(device)
    assert converted is not model
    assert type(model.acts[0]) is torch.nn.ReLU  # the input is untouched
    assert len(report.swapped) == 20, str(report)
    assert not report.left, str(report)
    assert isinstance(converted.acts[0], torch_dnn.nn.ReLU) and isinstance(converted.acts[0], torch.nn.ReLU)
    assert not converted.training
    assert converted.state_dict().keys() == model.state_dict().keys()
    assert repr(converted.acts[2]) == repr(model.acts[2])
    x = make_input((2, 3, 8, 8), torch.float64, device)
    model(x), converted(x)
    assert len(calls) == 2, "the forward hook must survive the swap"


class _ExactHardsigmoid(torch.nn.Hardsigmoid):
    """nn.Hardsigmoid with its exact derivative: PyTorch's gradient rounds 1/6 to float32 (tests/test_float64.py)."""

    def forward(self, input):
        return hardsigmoid_reference(input)


class _ExactHardswish(torch.nn.Hardswish):
    """nn.Hardswish computed exactly: PyTorch's CUDA forward rounds 1/6 to float32."""

    def forward(self, input):
        return hardswish_reference(input)


def _exact(model):
    """model with its Hardsigmoid modules exact: the float64 reference of a model that has them."""
    model = copy.deepcopy(model)
    for name, m in list(model.named_modules()):
        exact = {torch.nn.Hardsigmoid: _ExactHardsigmoid, torch.nn.Hardswish: _ExactHardswish}.get(type(m))
        if exact is not None:
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, exact())
    return model


@pytest.mark.parametrize("device", devices())
def test_convert_same_outputs_and_grads(device):
    model, converted, _, calls = _small_net(device)
    x = make_input((2, 3, 8, 8), torch.float64, device)
    assert_models_agree(_exact(model), converted, x, name="converted model", loss=lambda y: y.sum())
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


def test_convert_exclude_leaves_those_types_native():
    m = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.GELU(), torch.nn.ReLU())
    out, report = torch_dnn.convert(m, exclude=(torch.nn.ReLU,))
    assert type(out[0]) is torch.nn.ReLU and type(out[2]) is torch.nn.ReLU
    assert isinstance(out[1], torch_dnn.nn.GELU)
    assert sorted(n for n, _, why in report.left if why == "excluded") == ["0", "2"]


def test_convolutions_are_opt_in():
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    out, report = torch_dnn.convert(m)
    assert type(out[0]) is torch.nn.Conv2d and isinstance(out[1], torch_dnn.nn.ReLU)
    assert [(n, why) for n, _, why in report.left] == [("0", "opt-in (convert's include)")]
    out, report = torch_dnn.convert(m, include=(torch.nn.Conv2d,))
    assert isinstance(out[0], torch_dnn.nn.Conv2d) and not report.left
