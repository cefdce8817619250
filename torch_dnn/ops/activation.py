"""Activation family: fake kernels, autograd formulas (backward = torch_dnn ops) and functional wrappers
whose signatures mirror torch.nn.functional."""
import torch

from torch_dnn.ops._layout import iter_empty
from torch_dnn.ops._registry import add_family, apply_inplace, ops, register_autograd, register_single_input_formula
from torch_dnn.ops import _checks

_ops = ops  # torch.ops.torch_dnn, below autograd when no gradient is needed


class _Spec:
    """One activation op as the tests take it: its positional parameters, its keyword-only ones and whether it has an
    in-place form (what its backward op reads is in the C++ autograd spec: _single_input_autograd_spec)."""

    def __init__(self, params=(), kwparams=(), inplace=True):
        self.params, self.kwparams, self.inplace = params, kwparams, inplace


SPECS = {
    "relu": _Spec(),
    "relu6": _Spec(),
    "hardtanh": _Spec(params=("min_val", "max_val")),
    "leaky_relu": _Spec(params=("negative_slope",)),
    "elu": _Spec(params=("alpha",)),
    "gelu": _Spec(kwparams=("approximate",), inplace=False),
    "silu": _Spec(),
    "sigmoid": _Spec(inplace=False),
    "tanh": _Spec(inplace=False),
    "softplus": _Spec(params=("beta", "threshold"), inplace=False),
    "mish": _Spec(),
    "hardswish": _Spec(),
    "hardsigmoid": _Spec(),
}


def _register(name: str, spec: _Spec) -> None:
    qual = f"torch_dnn::{name}"

    @torch.library.register_fake(qual)
    def _fake(x, *args, **kwargs):
        _checks.activation(name, x, *args, **kwargs)
        return iter_empty(x)

    # the gradient's layout: PyTorch's backward op's (grad_output first but for relu and leaky_relu: act_backward in
    # csrc/activation/activation_ops.h)
    grad_leads = name not in ("relu", "leaky_relu")

    @torch.library.register_fake(f"torch_dnn::{name}_backward")
    def _fake_backward(grad, saved, *args, **kwargs):
        _checks.activation_backward(name, grad, saved, *args, **kwargs)
        return iter_empty(grad, saved) if grad_leads else iter_empty(saved, grad)

    if spec.inplace:

        @torch.library.register_fake(f"torch_dnn::{name}_")
        def _fake_inplace(x, *args, **kwargs):
            _checks.activation(f"{name}_", x, *args, **kwargs)
            return None

    # the formula torch.func runs, from the spec of the C++ kernel (csrc/activation/activation.cpp)
    register_single_input_formula(name)


for _name, _spec in SPECS.items():
    _register(_name, _spec)


# bias_act: act(input + bias along dim). Backward recomputes input + bias rather than saving the
# pre-activation: one tensor saved instead of two, and the recompute is free in a memory-bound kernel.
BIAS_ACTS = (
    "none", "relu", "relu6", "leaky_relu", "elu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "softplus",
    "mish", "hardswish", "hardsigmoid",
)


@torch.library.register_fake("torch_dnn::bias_act")
def _bias_act_fake(x, bias, dim, act):
    _checks.bias_act(x, bias, dim, act)
    return iter_empty(x)


@torch.library.register_fake("torch_dnn::bias_act_backward")
def _bias_act_backward_fake(grad, x, bias, dim, act, bias_grad):
    _checks.bias_act_backward(grad, x, bias, dim, act, bias_grad)
    n = x.shape[dim] if bias_grad else 0
    dx = iter_empty(x, grad) if act in ("relu", "leaky_relu") else iter_empty(grad, x)
    return dx, x.new_empty((n,))


def _bias_act_setup(ctx, inputs, output):
    x, bias, dim, act = inputs
    ctx.save_for_backward(x, bias)
    ctx.dim, ctx.act = dim, act


def _bias_act_backward(ctx, grad):
    x, bias = ctx.saved_tensors
    want_bias = bias is not None and ctx.needs_input_grad[1]
    dx, dbias = _ops.bias_act_backward(grad, x, bias, ctx.dim, ctx.act, want_bias)
    return dx, (dbias if want_bias else None), None, None


# the same formula is the C++ kernel of csrc/activation/bias_act_autograd.cpp
register_autograd("torch_dnn::bias_act", _bias_act_backward, setup_context=_bias_act_setup, cpp_kernel=True)

add_family(
    "activation",
    list(SPECS) + [f"{n}_" for n, s in SPECS.items() if s.inplace] + [f"{n}_backward" for n in SPECS]
    + ["bias_act", "bias_act_backward"],
)


# ---- functional wrappers (torch.nn.functional signatures) ----

# The in-place forms' autograd (csrc/activation/activation.cpp) reads the derivative from the result where its mask
# reads the same as from the input (relu: r <= 0 iff x <= 0; relu6 / hardtanh: r at a bound iff x at or past it;
# leaky_relu: r > 0 iff x > 0 for a slope >= 0), as PyTorch's in-place forms do, else from a copy of the input.

def relu(input, inplace=False):
    if inplace:
        return apply_inplace(_ops.relu, _ops.relu_, input)
    return _ops.relu(input)


def relu6(input, inplace=False):
    if inplace:
        return apply_inplace(_ops.relu6, _ops.relu6_, input)
    return _ops.relu6(input)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if min_val > max_val:
        raise ValueError("torch_dnn.hardtanh: min_val cannot be greater than max_val")
    if inplace:
        return apply_inplace(_ops.hardtanh, _ops.hardtanh_, input, float(min_val), float(max_val))
    return _ops.hardtanh(input, float(min_val), float(max_val))


def leaky_relu(input, negative_slope=0.01, inplace=False):
    if inplace:
        return apply_inplace(_ops.leaky_relu, _ops.leaky_relu_, input, float(negative_slope))
    return _ops.leaky_relu(input, float(negative_slope))


def elu(input, alpha=1.0, inplace=False):
    if inplace:
        return apply_inplace(_ops.elu, _ops.elu_, input, float(alpha))
    return _ops.elu(input, float(alpha))


def gelu(input, approximate="none"):
    return _ops.gelu(input, approximate=approximate)


def silu(input, inplace=False):
    if inplace:
        return apply_inplace(_ops.silu, _ops.silu_, input)
    return _ops.silu(input)


def sigmoid(input):
    return _ops.sigmoid(input)


def tanh(input):
    return _ops.tanh(input)


def softplus(input, beta=1.0, threshold=20.0):
    return _ops.softplus(input, float(beta), float(threshold))


def mish(input, inplace=False):
    if inplace:
        return apply_inplace(_ops.mish, _ops.mish_, input)
    return _ops.mish(input)


def hardswish(input, inplace=False):
    if inplace:
        return apply_inplace(_ops.hardswish, _ops.hardswish_, input)
    return _ops.hardswish(input)


def hardsigmoid(input, inplace=False):
    if inplace:
        return apply_inplace(_ops.hardsigmoid, _ops.hardsigmoid_, input)
    return _ops.hardsigmoid(input)


def bias_act(input, bias=None, dim=1, act="relu"):
    """act(input + bias), with bias (1-D, of size input.shape[dim]) broadcast along dim; bias may be None.

    act: one of BIAS_ACTS; parameterised activations take PyTorch's defaults (leaky_relu 0.01, elu 1.0,
    softplus beta 1 threshold 20); gelu_tanh is gelu(approximate='tanh').
    """
    return _ops.bias_act(input, bias, dim, act)


FUNCTIONAL = [
    "relu", "relu6", "hardtanh", "leaky_relu", "elu", "gelu", "silu", "sigmoid", "tanh", "softplus", "mish",
    "hardswish", "hardsigmoid", "bias_act",
]


def selfcheck_cases():
    """python -m torch_dnn's rows of this family: (op, callable(device, dtype) -> list of Verdicts)."""
    import torch.nn.functional as TF

    from torch_dnn.reference.activation import (BIAS_ACT_TORCH, bias_act_reference, hardsigmoid_reference,
                                                hardswish_reference)
    from torch_dnn.testing import check_against_torch, random_like_case

    # the float64 references where PyTorch's op is not exact (hardsigmoid's gradient, hardswish on CUDA), else
    # PyTorch's op
    exact = {"hardsigmoid": hardsigmoid_reference, "hardswish": hardswish_reference}

    pairs = {
        "relu": (relu, TF.relu), "relu6": (relu6, TF.relu6), "hardtanh": (hardtanh, TF.hardtanh),
        "leaky_relu": (leaky_relu, TF.leaky_relu), "elu": (elu, TF.elu), "gelu": (gelu, TF.gelu),
        "silu": (silu, TF.silu), "sigmoid": (sigmoid, torch.sigmoid), "tanh": (tanh, torch.tanh),
        "softplus": (softplus, TF.softplus), "mish": (mish, TF.mish), "hardswish": (hardswish, TF.hardswish),
        "hardsigmoid": (hardsigmoid, TF.hardsigmoid),
    }
    out = [(name, lambda d, t, o=ours, p=theirs, n=name: check_against_torch(
        o, p, [random_like_case((33, 65), t, d)], name=n, ref_fn=exact.get(n)))
        for name, (ours, theirs) in pairs.items()]
    out += [(f"bias_act[{act}]", lambda d, t, a=act: check_against_torch(
        lambda x, b: bias_act(x, b, 1, a), lambda x, b: bias_act_reference(x, b, 1, a),
        [random_like_case((4, 24, 5), t, d), random_like_case((24,), t, d)], name=f"bias_act {a}",
        ref_fn=(lambda x, b: exact[a](x + b[:, None])) if a in exact else None))
        for act in BIAS_ACT_TORCH]
    return out
