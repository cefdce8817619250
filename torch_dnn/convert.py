"""torch_dnn.convert(model): swap every supported torch.nn module for its torch_dnn drop-in, by type.

The drop-ins subclass the torch.nn modules and add no state, so a swap changes only the module's class:
parameters, buffers, device, dtype, training mode and hooks all stay exactly as they were.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

# torch.nn type -> torch_dnn.nn type; each family's nn module fills it with @register_swap.
SWAPS: dict = {}


def register_swap(torch_type):
    def deco(td_type):
        assert issubclass(td_type, torch_type), f"{td_type} must subclass {torch_type}"
        SWAPS[torch_type] = td_type
        return td_type

    return deco


@dataclass
class ConvertReport:
    swapped: list = field(default_factory=list)  # (qualified name, torch type name, torch_dnn type name)
    left: list = field(default_factory=list)  # (qualified name, type name, why)

    def __str__(self):
        lines = [f"torch_dnn.convert: {len(self.swapped)} module(s) swapped, {len(self.left)} left"]
        lines += [f"  swapped {n or '<root>'}: {a} -> torch_dnn.nn.{b}" for n, a, b in self.swapped]
        lines += [f"  left    {n or '<root>'}: {t} ({why})" for n, t, why in self.left]
        return "\n".join(lines)


def _why_left(module) -> str | None:
    t = type(module)
    if t in SWAPS.values() or t.__module__.startswith("torch_dnn."):
        return None  # already ours (drop-ins, and torch_dnn's own modules such as AddLayerNorm)
    for torch_type in SWAPS:
        if isinstance(module, torch_type):
            return f"subclass of {torch_type.__name__}: its forward may differ, so it is kept"
    if len(module._modules) == 0 and t.__module__.startswith("torch.nn"):
        return "no torch_dnn equivalent yet"
    return None  # containers and user modules: their children are visited


def convert(model: torch.nn.Module, inplace: bool = False):
    """Return (model, report). With inplace=False the model is deep-copied first and the input is untouched."""
    if not inplace:
        model = copy.deepcopy(model)
    report = ConvertReport()
    for name, module in model.named_modules():
        t = type(module)
        if t in SWAPS:
            module.__class__ = SWAPS[t]
            report.swapped.append((name, t.__name__, SWAPS[t].__name__))
        else:
            why = _why_left(module)
            if why:
                report.left.append((name, t.__name__, why))
    return model, report
