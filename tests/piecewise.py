"""A float64 reference that takes the same pieces as a float32 model through its piecewise modules.

ReLU, Hardswish, Hardsigmoid and MaxPool2d have kinks (ReLU at 0, the hard functions at -3 and 3, max pooling
where two window values are equal). An element whose float32 input lies within rounding of a kink may take the
other piece than in float64; the forward barely moves (the functions are continuous) but that element's
derivative jumps (Hardswish's by 0.5), and over a whole network one such element moves a parameter's gradient by
up to about 1e-2 relative. Measured on the CPU (full-size MobileNetV3-Large, batch 8, 224x224): the converted
model took one Hardswish element onto the other piece and its worst gradient error against a free float64 copy
was 2.2e-2 where native's, with no such element, was 7e-6; in channels_last native itself took 31 elements onto
other pieces, with errors up to 8e-3. Against a free float64 copy, the error of a whole network's gradient
counts these coin flips, not the rounding of the computation.

So each float32 model is measured against its own float64 copy whose piecewise modules follow the pieces that
model took (recorded by forward pre-hooks, in call order, per module): the exact gradient of the same
piecewise-linear branch, and a gradient error that is rounding alone.
"""
from __future__ import annotations

import collections
import copy
import functools

import torch

PIECEWISE = (torch.nn.ReLU, torch.nn.Hardswish, torch.nn.Hardsigmoid, torch.nn.MaxPool2d)


def _pieces(module, x):
    """Which piece each element of x takes in module (computed before an in-place module overwrites x)."""
    if isinstance(module, torch.nn.ReLU):
        return x > 0
    if isinstance(module, (torch.nn.Hardswish, torch.nn.Hardsigmoid)):
        return (x > -3).to(torch.int8) + (x >= 3).to(torch.int8)  # 0: x <= -3, 1: inside, 2: x >= 3
    # MaxPool2d: the module's own op with return_indices gives the element each window took
    with_indices = copy.copy(module)
    with_indices.return_indices = True
    return with_indices.forward(x)[1]


def record_pieces(model) -> dict:
    """Forward pre-hooks on every piecewise module of `model`; returns {module name: deque of pieces}, filled in
    call order by the next forward (a module called several times, as a block's shared ReLU, gets one entry per
    call)."""
    log = collections.defaultdict(collections.deque)
    for name, mod in model.named_modules():
        if isinstance(mod, PIECEWISE):
            mod.register_forward_pre_hook(lambda m, args, name=name: log[name].append(_pieces(m, args[0].detach())))
    return log


def _forced(module, queue, x):
    p = queue.popleft()
    if isinstance(module, torch.nn.ReLU):
        return torch.where(p, x, 0.0)
    if isinstance(module, torch.nn.Hardswish):
        return torch.where(p == 0, 0.0, torch.where(p == 1, x * (x + 3) / 6, x))
    if isinstance(module, torch.nn.Hardsigmoid):
        return torch.where(p == 0, 0.0, torch.where(p == 1, x / 6 + 0.5, 1.0))
    flat = x.flatten(2)  # MaxPool2d: the recorded window maxima, gathered
    return flat.gather(2, p.flatten(2)).view(p.shape)


def follow_pieces(model, log: dict):
    """Make every piecewise module of `model` (a float64 copy) compute the piece `log` recorded for the same
    call of the same module. Returns the same values as the module up to rounding, out of place."""
    for name, mod in model.named_modules():
        if isinstance(mod, PIECEWISE):
            mod.forward = functools.partial(_forced, mod, log[name])
    return model


def pieces_differ(log_a: dict, log_b: dict) -> int:
    """How many elements took different pieces in two recorded runs of the same network."""
    return sum(int((a != b).sum()) for name in log_a for a, b in zip(log_a[name], log_b[name]))
