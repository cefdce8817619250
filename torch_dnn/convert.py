"""torch_dnn.convert(model): swap every supported torch.nn module for its torch_dnn drop-in, by type.

The drop-ins subclass the torch.nn modules and add no state, so a swap changes only the module's class:
parameters, buffers, device, dtype, training mode and hooks all stay exactly as they were.

convert(model, fuse=True) first fuses, inside every nn.Sequential, a Linear directly followed by an activation
module that the GEMM epilogue computes (ReLU, ReLU6, LeakyReLU, ELU, GELU, SiLU, Sigmoid, Tanh, Softplus, Mish,
Hardswish, Hardsigmoid) into one torch_dnn.nn.LinearAct sharing the Linear's parameters; the activation's
place holds a torch_dnn.nn.FusedAway (an identity), so indices and state_dict keys do not change. Modules with
hooks are not fused.

Convolutions, inside every nn.Sequential too (convert(model, fuse=True)):
- a BatchNorm1d/2d/3d in evaluation mode with running statistics directly following a Conv1d/2d/3d of its rank
  (also in evaluation mode) is folded into the convolution: w' = w * gamma / sqrt(var + eps),
  b' = (b - mean) * gamma / sqrt(var + eps) + beta, computed in float64 and stored in the convolution's dtype (as
  torch.nn.utils.fusion.fuse_conv_bn_eval; the folded convolution is a copy with new parameters, the BatchNorm's
  place a FusedAway). The folded convolution stays a native one unless convolutions are swapped (`include`).
- a convolution whose type convert swaps (convolutions are opt-in: include=(torch.nn.Conv2d, ...)) directly
  followed by one of the activations above (a folded BatchNorm between them counts as absent) becomes a
  torch_dnn.nn.Conv1dAct/Conv2dAct/Conv3dAct sharing its parameters (conv_bias_act: one pass).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

# torch.nn type -> torch_dnn.nn type; each family's nn module fills it with @register_swap.
SWAPS: dict = {}
# the torch.nn types swapped only when convert's `include` names them: families whose drop-ins would make a typical
# model slower today (docs/<family>.md says why)
OPT_IN: set = set()


def register_swap(torch_type, opt_in: bool = False):
    def deco(td_type):
        assert issubclass(td_type, torch_type), f"{td_type} must subclass {torch_type}"
        SWAPS[torch_type] = td_type
        if opt_in:
            OPT_IN.add(torch_type)
        return td_type

    return deco


# Functions (model, report) -> None run on the model after the swaps, registered by the families' nn modules with
# @register_pass (attention's routes the F.scaled_dot_product_attention calls of models' own modules to torch_dnn's).
PASSES: list = []
# pass -> the token (a class) that convert's `include` must name for the pass to run: opt-in passes, as OPT_IN types
OPT_IN_PASSES: dict = {}


def register_pass(fn=None, *, opt_in=None):
    def deco(f):
        PASSES.append(f)
        if opt_in is not None:
            OPT_IN_PASSES[f] = opt_in
        return f

    return deco(fn) if fn is not None else deco


@dataclass
class ConvertReport:
    swapped: list = field(default_factory=list)  # (qualified name, torch type name, torch_dnn type name)
    left: list = field(default_factory=list)  # (qualified name, type name, why)
    # (Linear's / convolution's qualified name, activation's qualified name, activation); .into: the fused module
    fused: list = field(default_factory=list)
    folded: list = field(default_factory=list)  # (convolution's qualified name, BatchNorm's qualified name)

    def __str__(self):
        lines = [f"torch_dnn.convert: {len(self.swapped)} module(s) swapped, {len(self.left)} left"
                 + (f", {len(self.fused)} module+activation pair(s) fused" if self.fused else "")
                 + (f", {len(self.folded)} BatchNorm(s) folded" if self.folded else "")]
        lines += [f"  folded  {b} into {a}" for a, b in self.folded]
        lines += [f"  fused   {p[0]} + {p[1]} -> torch_dnn.nn.{getattr(p, 'into', 'LinearAct')}(activation={p[2]!r})"
                  for p in self.fused]
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


# activation module type -> (linear_act activation name, act_a, act_b) for convert(fuse=True)
FUSIBLE_ACTIVATIONS = {
    torch.nn.ReLU: lambda m: ("relu", None, None),
    torch.nn.ReLU6: lambda m: ("relu6", None, None),
    torch.nn.LeakyReLU: lambda m: ("leaky_relu", float(m.negative_slope), None),
    torch.nn.ELU: lambda m: ("elu", float(m.alpha), None),
    torch.nn.GELU: lambda m: ("gelu" if m.approximate == "none" else "gelu_tanh", None, None),
    torch.nn.SiLU: lambda m: ("silu", None, None),
    torch.nn.Sigmoid: lambda m: ("sigmoid", None, None),
    torch.nn.Tanh: lambda m: ("tanh", None, None),
    torch.nn.Softplus: lambda m: ("softplus", float(m.beta), float(m.threshold)),
    torch.nn.Mish: lambda m: ("mish", None, None),
    torch.nn.Hardswish: lambda m: ("hardswish", None, None),
    torch.nn.Hardsigmoid: lambda m: ("hardsigmoid", None, None),
}


def _exact(module, torch_type) -> bool:
    """module is exactly torch_type or exactly its torch_dnn drop-in (not a user subclass)."""
    return type(module) is torch_type or (torch_type in SWAPS and type(module) is SWAPS[torch_type])


def _has_hooks(module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


def _fuse_linear_act(model, report) -> None:
    from torch_dnn.nn.linear import FusedAway, LinearAct

    for seq_name, seq in list(model.named_modules()):
        if type(seq) is not torch.nn.Sequential:
            continue
        keys = list(seq._modules.keys())
        for k_lin, k_act in zip(keys, keys[1:]):
            lin, act = seq._modules[k_lin], seq._modules[k_act]
            if lin is None or act is None or not _exact(lin, torch.nn.Linear) or _has_hooks(lin) or _has_hooks(act):
                continue
            spec = next((f(act) for t, f in FUSIBLE_ACTIVATIONS.items() if _exact(act, t)), None)
            if spec is None:
                continue
            q_lin, q_act = (f"{seq_name}.{k}" if seq_name else k for k in (k_lin, k_act))
            seq._modules[k_lin] = LinearAct.from_linear(lin, *spec)
            seq._modules[k_act] = FusedAway(q_lin, type(act).__name__)
            report.fused.append((q_lin, q_act, spec[0]))


class FusedPair(tuple):
    """A report.fused entry: (first module's name, activation's name, activation), the fused module's type in .into."""

    def __new__(cls, first, second, activation, into="LinearAct"):
        pair = super().__new__(cls, (first, second, activation))
        pair.into = into
        return pair


_CONVS = {torch.nn.Conv1d: (1, torch.nn.BatchNorm1d), torch.nn.Conv2d: (2, torch.nn.BatchNorm2d),
          torch.nn.Conv3d: (3, torch.nn.BatchNorm3d)}


def _conv_type(module):
    """The exact torch.nn convolution type of module (or of its drop-in), or None."""
    return next((t for t in _CONVS if _exact(module, t)), None)


def _fold_bn(conv, bn):
    """A copy of conv (eval) with bn (eval, running statistics) folded into its weight and bias, in float64."""
    scale = bn.running_var.double().add(bn.eps).rsqrt()
    if bn.weight is not None:
        scale = scale * bn.weight.double()
    shift = -bn.running_mean.double() * scale
    if bn.bias is not None:
        shift = shift + bn.bias.double()
    w = conv.weight.detach().double()
    b = conv.bias.detach().double() if conv.bias is not None else torch.zeros_like(shift)
    folded = copy.deepcopy(conv)
    view = (-1,) + (1,) * (w.dim() - 1)
    folded.weight = torch.nn.Parameter((w * scale.view(view)).to(conv.weight.dtype), conv.weight.requires_grad)
    folded.bias = torch.nn.Parameter((b * scale + shift).to(conv.weight.dtype), conv.weight.requires_grad)
    return folded


def _foldable(conv, bn) -> bool:
    t = _conv_type(conv)
    if t is None or not _exact(bn, _CONVS[t][1]) or _has_hooks(conv) or _has_hooks(bn):
        return False
    return (not conv.training and not bn.training and bn.running_mean is not None and bn.running_var is not None
            and bn.num_features == conv.out_channels)


def _fuse_conv(model, report, exclude) -> None:
    """BatchNorm folding and convolution + activation fusion in every nn.Sequential (the module docstring)."""
    from torch_dnn.nn.conv import Conv1dAct, Conv2dAct, Conv3dAct
    from torch_dnn.nn.linear import FusedAway

    fused_types = {torch.nn.Conv1d: Conv1dAct, torch.nn.Conv2d: Conv2dAct, torch.nn.Conv3d: Conv3dAct}
    for seq_name, seq in list(model.named_modules()):
        if type(seq) is not torch.nn.Sequential:
            continue
        q = lambda k: f"{seq_name}.{k}" if seq_name else k  # noqa: E731
        prev = None  # the key of the last module that is not a FusedAway
        for key in list(seq._modules.keys()):
            m = seq._modules[key]
            if m is None or isinstance(m, FusedAway):
                continue
            first = seq._modules[prev] if prev is not None else None
            if first is not None and _foldable(first, m):
                seq._modules[prev] = _fold_bn(first, m)
                seq._modules[key] = FusedAway(q(prev), type(m).__name__)
                report.folded.append((q(prev), q(key)))
                continue
            t = _conv_type(first) if first is not None else None
            if t is not None and t not in exclude and not _has_hooks(first) and not _has_hooks(m):
                spec = next((f(m) for at, f in FUSIBLE_ACTIVATIONS.items() if _exact(m, at)), None)
                if spec is not None:
                    seq._modules[prev] = fused_types[t].from_conv(first, *spec)
                    seq._modules[key] = FusedAway(q(prev), type(m).__name__)
                    report.fused.append(FusedPair(q(prev), q(key), spec[0], fused_types[t].__name__))
                    prev = None
                    continue
            prev = key


def convert(model: torch.nn.Module, inplace: bool = False, fuse: bool = False, exclude=(), include=()):
    """Return (model, report). With inplace=False the model is deep-copied first and the input is untouched.
    fuse=True also fuses Linear + activation pairs of nn.Sequential containers into LinearAct, folds evaluation-mode
    BatchNorms into the convolutions they follow and fuses swapped convolutions with their activation (see above).
    exclude: torch.nn types left native (e.g. (torch.nn.Conv2d,)), reported as left with the reason "excluded".
    include: opt-in torch.nn types to swap too (OPT_IN: the convolutions, e.g. include=(torch.nn.Conv2d,)), and
    opt-in passes by their token: torch_dnn.nn.AttentionRouting routes the model's own
    F.scaled_dot_product_attention calls; torch_dnn.nn.ATTENTION names all of attention, torch_dnn.nn.CONVOLUTIONS
    all the convolutions."""
    exclude = tuple(exclude) + tuple(t for t in OPT_IN if t not in tuple(include))
    if not inplace:
        model = copy.deepcopy(model)
    report = ConvertReport()
    if fuse:
        _fuse_conv(model, report, exclude)
        _fuse_linear_act(model, report)
    for name, module in model.named_modules():
        t = type(module)
        if t in exclude:
            report.left.append((name, t.__name__, "opt-in (convert's include)" if t in OPT_IN else "excluded"))
        elif t in SWAPS:
            module.__class__ = SWAPS[t]
            report.swapped.append((name, t.__name__, SWAPS[t].__name__))
        else:
            why = _why_left(module)
            if why:
                report.left.append((name, t.__name__, why))
    for run_pass in PASSES:
        if run_pass not in OPT_IN_PASSES or OPT_IN_PASSES[run_pass] in tuple(include):
            run_pass(model, report)
    return model, report
