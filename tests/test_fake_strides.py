"""Every op's fake kernel gives its real kernel's sizes and strides, on every device, for inputs in every layout.

torch.compile (inductor) plans its buffers from the fake kernels' results and then reads the real kernels' outputs
with those strides: a fake kernel whose strides differ from the real kernel's (e.g. a device-dependent layout rule
mirrored for one device only) makes a compiled graph silently wrong. torch.library.opcheck's test_faketensor
compares strides as well, but only for the samples a family hands it (contiguous ones); here every op of every
family (tests/op_samples.py, plus the 4-D / 5-D and evaluation-mode samples below) runs with its tensor arguments
of rank >= 2 in each layout of their rank: all in one layout, one in it with the others contiguous, and one
contiguous with the others in it (the mixed cases, e.g. a channels-last input with a contiguous grad_output). The
op runs on the real tensors and, under FakeTensorMode, on fakes of them (same device and strides); every output's
sizes and strides (on the dims of size > 1, as PyTorch compares them) must agree.
"""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_leaves

from tests.op_samples import _activation, _softmax, op_samples, tensor_positions
from tests.utils import devices
from torch_dnn.ops import FAMILIES
from torch_dnn.ops.pool import RANKS

ops = torch.ops.torch_dnn
OP_NAMES = [n for family in FAMILIES.values() for n in family]

# the layouts of each rank besides contiguous (tests/test_memory_format.py's names)
LAYOUTS = {2: ["transposed"], 3: ["channels_last_1d", "batch_transposed"], 4: ["channels_last"],
           5: ["channels_last_3d"]}


def in_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "contiguous":
        return t.contiguous()
    if layout == "transposed":
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "channels_last_1d":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    if layout == "batch_transposed":
        return t.transpose(0, 1).contiguous().transpose(0, 1)
    if layout == "channels_last":
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "channels_last_3d":
        return t.contiguous(memory_format=torch.channels_last_3d)
    raise ValueError(layout)


def layout_variants(args) -> list[dict]:
    """{position: layout} for the tensor arguments of rank >= 2: each non-contiguous layout index k applied to all
    of them, to one of them, and to all but one."""
    laid = [i for i in tensor_positions(args) if args[i].dim() >= 2]
    out = [{}]
    for k in range(max(len(v) for v in LAYOUTS.values())):
        def at(i):
            names = LAYOUTS.get(args[i].dim(), [])
            return names[k] if k < len(names) else None
        movable = [i for i in laid if at(i) is not None]
        if not movable:
            continue
        out.append({i: at(i) for i in movable})
        for j in movable:
            out.append({j: at(j)})
            if len(movable) > 2:
                out.append({i: at(i) for i in movable if i != j})
    unique = []
    for v in out:
        if v not in unique:
            unique.append(v)
    return unique


def _significant(t: torch.Tensor):
    return tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride()))


def _arrange(args, variant):
    return tuple(in_layout(a, variant[i]) if i in variant else (a.clone() if isinstance(a, torch.Tensor) else a)
                 for i, a in enumerate(args))


def _extra_samples(device) -> list:
    """(op, args, kwargs) beyond op_samples: the activations and softmax at 4-D, batch_norm at 4-D and 5-D in both
    modes, the global average pool's backward (a rule of its own)."""
    gen = torch.Generator().manual_seed(1)

    def rand(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(device)

    def four_d(*shape):  # op_samples' (3, 5) tensors as (2, 5, 3, 4): dim 1 keeps its size (bias_act's bias)
        return rand(*((2, 5, 3, 4) if shape == (3, 5) else shape))

    out = [(n, a, kw) for n, (a, kw) in {**_activation(four_d), **_softmax(four_d)}.items()]
    for shape in ((2, 3, 4, 5), (2, 3, 2, 4, 5)):
        x, g, res, w, b = rand(*shape), rand(*shape), rand(*shape), rand(3), rand(3)
        rm, rv = rand(3), rand(3).abs() + 0.5
        for training in (True, False):
            _, mean, invstd = ops.batch_norm(x, w, b, rm.clone(), rv.clone(), training, 0.1, 1e-5)
            out += [
                ("batch_norm", (x, w, b, rm.clone(), rv.clone(), training, 0.1, 1e-5), {}),
                ("batch_norm_backward", (g, x, w, rm, rv, mean, invstd, training, 1e-5, [True, True, True]), {}),
                ("batch_norm_add_act", (x, res, w, b, rm.clone(), rv.clone(), training, 0.1, 1e-5, 1), {}),
                ("batch_norm_add_act_backward", (g, x, res, w, b, mean, invstd, training, 1, [True] * 4), {}),
                ("batch_norm_backward", (g, x, w, rm, rv, mean, invstd, training, 1e-5, [True, False, False]), {}),
            ]
        mean2, _ = ops.batch_norm_stats(x)
        _, _, invstd = ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
        out += [("batch_norm_elemt", (x, mean2, invstd, w, b), {}),
                ("batch_norm_backward_elemt", (g, x, mean2, invstd, w, rand(3), rand(3), 20), {})]
    for r in RANKS:
        x = rand(2, 3, *(5,) * r)
        out.append((f"adaptive_avg_pool{r}d_backward", (rand(2, 3, *(1,) * r), x), {}))
    return out


def _samples(device):
    base = [(n, a, kw) for n, (a, kw) in op_samples(device=device).items()]
    return base + _extra_samples(device)


def _run_fake(name, args, kwargs):
    with FakeTensorMode() as mode:
        fake = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
        return getattr(ops, name)(*fake, **kwargs)


def _check(name, args, kwargs, variant):
    real_args = _arrange(args, variant)
    fake_args = _arrange(args, variant)
    for a, b in zip(real_args, fake_args):
        assert not isinstance(a, torch.Tensor) or a.stride() == b.stride()
    real = tree_leaves(getattr(ops, name)(*real_args, **kwargs))
    fake = tree_leaves(_run_fake(name, fake_args, kwargs))
    assert len(real) == len(fake), f"{name}: {len(real)} outputs, the fake kernel {len(fake)}"
    where = f"{name} with {variant or 'all contiguous'}"
    for k, (r, f) in enumerate(zip(real, fake)):
        if not isinstance(r, torch.Tensor):
            continue
        assert r.shape == f.shape, f"{where}: output {k} has shape {tuple(r.shape)}, the fake {tuple(f.shape)}"
        assert r.device == f.device and r.dtype == f.dtype, f"{where}: output {k} {r.device} {r.dtype} vs {f}"
        assert _significant(r) == _significant(f), (
            f"{where}: output {k} has strides {r.stride()}, the fake kernel's {f.stride()} (shape {tuple(r.shape)})")


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", OP_NAMES)
def test_fake_strides_match_the_kernel(name, device):
    samples = [(a, kw) for n, a, kw in _samples(device) if n == name]
    ran = 0
    for args, kwargs in samples:
        for variant in layout_variants(args):
            _check(name, args, kwargs, variant)
            ran += 1
    assert samples and ran > 0, f"{name}: no sample ran"


def test_layout_variants_mix_layouts():
    """The variants include a channels-last input with a contiguous grad_output and the reverse."""
    g, x = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    variants = layout_variants((g, x, torch.randn(3)))
    assert {0: "channels_last"} in variants and {1: "channels_last"} in variants
    assert {0: "channels_last", 1: "channels_last"} in variants and {} in variants
