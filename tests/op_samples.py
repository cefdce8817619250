"""One valid call of every torch_dnn op (every name of torch_dnn.ops.FAMILIES, backward ops and in-place forms
included), with every optional tensor argument given: for the tests that go over all ops (forward-mode AD, tensor
arguments on another device, fake kernels against the real ones). `op_samples()` fails if an op has no sample, so a
new op cannot be skipped by them."""
from __future__ import annotations

import torch

from torch_dnn.ops import FAMILIES
from torch_dnn.ops.activation import SPECS
from torch_dnn.ops.pool import RANKS

ops = torch.ops.torch_dnn

# the activations' scalar arguments (positional), and gelu's keyword-only one
_ACT_ARGS = {"hardtanh": (-0.5, 0.7), "leaky_relu": (0.2,), "elu": (1.3,), "softplus": (1.5, 15.0)}
_ACT_KWARGS = {"gelu": {"approximate": "tanh"}}


def _activation(t):
    s = {}
    x = t(3, 5)
    for name, spec in SPECS.items():
        args, kw = _ACT_ARGS.get(name, ()), _ACT_KWARGS.get(name, {})
        s[name] = ((x, *args), kw)
        reads_result = torch.ops.torch_dnn._single_input_autograd_spec(name)[0] == ["output0"]  # the C++ spec's
        saved = getattr(ops, name)(x, *args, **kw) if reads_result else x
        s[f"{name}_backward"] = ((t(3, 5), saved, *args), kw)
        if spec.inplace:
            s[f"{name}_"] = ((x.clone(), *args), {})
    s["bias_act"] = ((x, t(5), 1, "gelu"), {})
    s["bias_act_backward"] = ((t(3, 5), x, t(5), 1, "gelu", True), {})
    return s


def _softmax(t):
    s = {}
    x = t(3, 5)
    for name in ("softmax", "log_softmax"):
        s[name] = ((x, 1, None), {})
        s[f"{name}_backward"] = ((t(3, 5), getattr(ops, name)(x, 1, None), 1, x.dtype), {})
    return s


def _norm(t, pos):
    x, r, w, b = t(3, 2, 4), t(3, 2, 4), t(4), t(4)
    ln = ops.layer_norm(x, [4], w, b, 1e-5)
    rms = ops.rms_norm(x, [4], w, 1e-5)
    return {
        "layer_norm": ((x, [4], w, b, 1e-5), {}),
        "rms_norm": ((x, [4], w, 1e-5), {}),
        "add_layer_norm": ((x, r, [4], w, b, 1e-5), {}),
        "add_rms_norm": ((x, r, [4], w, 1e-5), {}),
        "layer_norm_backward": ((t(3, 2, 4), x, ln[1], ln[2], w, [4], [True, True, True]), {}),
        "rms_norm_backward": ((t(3, 2, 4), x, rms[1], w, [4], [True, True]), {}),
        "add_layer_norm_backward": ((t(3, 2, 4), t(3, 2, 4), x, ln[1], ln[2], w, [4], [True, True, True]), {}),
        "add_rms_norm_backward": ((t(3, 2, 4), t(3, 2, 4), x, rms[1], w, [4], [True, True]), {}),
    }


def _pool(t, pos):
    s = {}
    for r in RANKS:
        x = pos(2, 3, *(5,) * r)
        k, st, p, d = [3] * r, [2] * r, [1] * r, [1] * r
        g = t(*getattr(ops, f"avg_pool{r}d")(x, k, st, p, False, True, None).shape)
        y, idx = getattr(ops, f"max_pool{r}d")(x, k, st, p, d, False)
        s[f"max_pool{r}d"] = ((x, k, st, p, d, False), {})
        s[f"max_pool{r}d_backward"] = ((t(*y.shape), x, idx, k, st, p, d, False), {})
        s[f"avg_pool{r}d"] = ((x, k, st, p, False, True, None), {})
        s[f"avg_pool{r}d_backward"] = ((g, x, k, st, p, False, True, None), {})
        out = [2] * r
        s[f"adaptive_avg_pool{r}d"] = ((x, out), {})
        s[f"adaptive_avg_pool{r}d_backward"] = ((t(2, 3, *out), x), {})
        s[f"adaptive_max_pool{r}d"] = ((x, out), {})
        s[f"adaptive_max_pool{r}d_backward"] = ((t(2, 3, *out), x, getattr(ops, f"adaptive_max_pool{r}d")(x, out)[1]),
                                                {})
        y = getattr(ops, f"lp_pool{r}d")(x, 2.0, k, st, False)
        s[f"lp_pool{r}d"] = ((x, 2.0, k, st, False), {})
        s[f"lp_pool{r}d_backward"] = ((t(*y.shape), x, y, 2.0, k, st, False), {})
    return s


def _batch_norm(t, pos):
    x, res, w, b, rm, rv = t(4, 3, 5), t(4, 3, 5), t(3), t(3), t(3), pos(3)
    _, mean, invstd = ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
    mean2, m2 = ops.batch_norm_stats(x)
    return {
        "batch_norm": ((x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5), {}),
        "batch_norm_backward": ((t(4, 3, 5), x, w, rm, rv, mean, invstd, True, 1e-5, [True, True, True]), {}),
        "batch_norm_add_act": ((x, res, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5, 1), {}),
        "batch_norm_add_act_backward": ((t(4, 3, 5), x, res, w, b, mean, invstd, True, 1, [True] * 4), {}),
        "batch_norm_stats": ((x,), {}),
        "batch_norm_elemt": ((x, mean2, invstd, w, b), {}),
        "batch_norm_backward_reduce": ((t(4, 3, 5), x, mean2, invstd), {}),
        "batch_norm_backward_elemt": ((t(4, 3, 5), x, mean2, invstd, w, t(3), t(3), 20), {}),
    }


def _group_norm(t, pos):
    x, w, b = t(2, 4, 3, 3), t(4), t(4)
    _, mean, rstd = ops.group_norm(x, 2, w, b, 1e-5)
    return {
        "group_norm": ((x, 2, w, b, 1e-5), {}),
        "group_norm_with_stats": ((x, 2, mean, rstd, w, b), {}),
        "group_norm_backward": ((t(2, 4, 3, 3), x, mean, rstd, w, 2, False, [True, True, True]), {}),
    }


def _lrn(t, pos):
    x = t(2, 4, 3, 3)
    return {
        "local_response_norm": ((x, 3, 1e-3, 0.75, 1.0), {}),
        "local_response_norm_backward": ((t(2, 4, 3, 3), x, 3, 1e-3, 0.75, 1.0), {}),
    }


def _matmul(t, pos):
    x, w, b, res = t(3, 4), t(5, 4), t(5), t(3, 5)
    pre = ops.linear_act(x, w, b, "gelu", save_preact=True)[1]
    return {
        "mm": ((x, t(4, 5)), {}),
        "bmm": ((t(2, 3, 4), t(2, 4, 5)), {}),
        "linear": ((x, w, b), {}),
        "linear_act": ((x, w, b, "gelu", res), {}),
        "linear_act_backward": ((t(3, 5), x, w, pre, "gelu", None, None, t(3, 5), [True, True, True]), {}),
    }


def _conv(t, pos):
    x, w, b, g = t(2, 3, 5, 5), t(4, 3, 3, 3), t(4), t(2, 4, 5, 5)
    geo = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    return {
        "convolution": ((x, w, b, *geo), {}),
        "conv_backward_input": ((g, w, [2, 3, 5, 5], *geo), {}),
        "conv_backward_weight": ((g, x, [4, 3, 3, 3], *geo), {}),
        "conv_backward_bias": ((g,), {}),
        "conv_bias_act": ((x, w, b, [1, 1], [1, 1], [1, 1], 1, "gelu"), {}),
        "conv_bias_add_act": ((x, w, b, t(2, 4, 5, 5), [1, 1], [1, 1], [1, 1], 1, "softplus", 2.0, 5.0), {}),
    }


def _attention(t, pos):
    # GQA (4 query heads over 2), a broadcast additive mask, ALiBi, d_qk != d_v
    q, k, v, mask = t(2, 4, 5, 8), t(2, 2, 7, 8), t(2, 2, 7, 6), t(2, 1, 5, 7)
    alibi = pos(4).to(torch.float32)
    out, lse, rng = ops.attention_forward(q, k, v, mask, 0.0, False, None, alibi_slopes=alibi)
    return {
        # (tensors only positional: the tests that go over every op make those fake / move them)
        "attention_forward": ((q, k, v, mask, 0.0, True, 0.3), {"softcap": 2.0, "window_left": 3}),
        "attention_backward": ((t(*out.shape), q, k, v, out, lse, rng, mask, 0.0, False, None, False, -1, -1, 0.0,
                                alibi, None, None, 0, 0, False, True), {}),
        # a paged cache (GQA 4 over 2) with an append; lengths well within the capacity, so a shorter block table
        # still holds them
        "flash_decode": ((t(2, 3, 4, 64), t(5, 4, 2, 64), t(5, 4, 2, 64),
                          torch.tensor([1, 2], dtype=torch.int32, device=q.device), t(2, 1, 2, 64), t(2, 1, 2, 64),
                          torch.tensor([[3, 0], [1, 4]], dtype=torch.int32, device=q.device)), {"causal": True}),
    }


def op_samples(device="cpu", dtype=torch.float64, seed=0) -> dict:
    """{op name: (args, kwargs)}: a valid call of each op, tensors of `dtype` on `device`."""
    gen = torch.Generator().manual_seed(seed)

    def t(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)

    def pos(*shape):
        return (torch.rand(shape, generator=gen, dtype=torch.float64) + 0.5).to(device=device, dtype=dtype)

    s = {}
    s.update(_activation(t))
    s.update(_softmax(t))
    for family in (_norm, _pool, _batch_norm, _group_norm, _lrn, _matmul, _conv, _attention):
        s.update(family(t, pos))
    names = [n for family in FAMILIES.values() for n in family]
    missing = sorted(set(names) - set(s))
    assert not missing, f"tests/op_samples.py has no sample for {missing}"
    return {n: s[n] for n in names}


def tensor_positions(args) -> list:
    """Positions of the tensor arguments in args."""
    return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
