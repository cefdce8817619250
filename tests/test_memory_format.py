"""Memory formats (issue 35): every op's outputs and every input gradient have the strides PyTorch's own op gives
for the same inputs.

Each case runs one functional wrapper of torch_dnn and its PyTorch counterpart (the torch.nn.functional op, or
for the fused ops the composite of torch_dnn/reference) on the same values, with the input in each layout its
rank allows (contiguous; channels_last for 4-D, channels_last_3d for 5-D; for 3-D channels-last-1d, i.e.
(N, L, C) in memory, and the first two dims swapped in memory; a transposed matrix for the matmul family) and
the output gradient in each of the same layouts, the two chosen independently (the mixed cases: a channels_last
input with a contiguous grad_output and the reverse). It compares the strides of every output, then of every
input gradient (input, weight, bias, residual).

Strides are compared on the dims of size > 1 only. A size-1 dim's stride never moves an address, so PyTorch
ignores it too (is_contiguous, suggest_memory_format, and opcheck's check_significant_strides), and two
allocations of the same layout can differ there (empty(memory_format=channels_last) against empty_strided with
the strides a TensorIterator works out).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

import torch_dnn.functional as TD
from torch_dnn.ops import FAMILIES
from torch_dnn.ops.activation import BIAS_ACTS, SPECS
from torch_dnn.reference import (
    add_layer_norm_reference, add_rms_norm_reference, bias_act_reference, conv_act_reference, linear_act_reference,
)

DTYPE = torch.float32


def significant_strides(t: torch.Tensor):
    """The strides of t's dims of size > 1 (None for a size-1 dim)."""
    return tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride()))


# ---- layouts -------------------------------------------------------------------------------------------------

def layouts_for(rank: int, matrix: bool = False):
    if matrix:
        return ["contiguous", "transposed"] if rank >= 2 else ["contiguous"]
    return {3: ["contiguous", "channels_last_1d", "batch_transposed"], 4: ["contiguous", "channels_last"],
            5: ["contiguous", "channels_last_3d"]}.get(rank, ["contiguous"])


def in_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """t's values in `layout` (a new, dense tensor)."""
    if layout == "contiguous":
        return t.contiguous()
    if layout == "channels_last":
        return t.contiguous(memory_format=torch.channels_last)
    if layout == "channels_last_3d":
        return t.contiguous(memory_format=torch.channels_last_3d)
    if layout == "channels_last_1d":  # (N, C, L) stored as (N, L, C)
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    if layout == "transposed":  # the last two dims swapped in memory
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "batch_transposed":  # the first two dims swapped in memory: a (T, B, C) sequence seen as (B, T, C)
        return t.transpose(0, 1).contiguous().transpose(0, 1)
    raise ValueError(layout)


def randn(shape, layout="contiguous", low=-2.0, high=2.0):
    g = torch.Generator().manual_seed(len(shape) * 1000 + sum(shape))
    t = torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low
    return in_layout(t.to(DTYPE), layout)


# ---- cases ---------------------------------------------------------------------------------------------------

@dataclass
class Case:
    """ours(*tensors) against theirs(*tensors): tensors[0] (and tensors[i] for i in `follow`) take the input
    layout; the others are parameters (1-D, contiguous). `grad`: which tensors require grad. `covers`: the ops
    of FAMILIES this case runs (forward and backward)."""
    name: str
    ours: object
    theirs: object
    shapes: tuple
    covers: tuple
    grad: tuple = None
    follow: tuple = ()
    matrix: bool = False     # the matmul family: layouts are row- or column-major (contiguous or transposed)
    each: bool = False       # every operand takes its own layout (always so for the matmul family)
    cuda_only: bool = False
    contiguous_only: bool = False  # PyTorch's op rejects the other layouts of this rank
    # known differences from PyTorch's layouts: (device, input layouts) -> the reason those cases are expected to fail
    # (xfail), or "" where none is known
    known_gap: object = None


    def input_layouts(self):
        if self.contiguous_only:
            return [("contiguous",) * (len(self.shapes) if self.matrix or self.each else 1)]
        if self.matrix or self.each:
            per = [layouts_for(len(s), self.matrix) if len(s) > 1 else ["contiguous"] for s in self.shapes]
            return list(itertools.product(*per))
        return [(lay,) for lay in layouts_for(len(self.shapes[0]))]


CASES: list = []


def case(*args, **kwargs):
    CASES.append(Case(*args, **kwargs))


N4 = (2, 6, 5, 7)          # N, C, H, W: every size > 1 and distinct, so no layout is ambiguous
N5 = (2, 6, 3, 5, 4)
N3 = (3, 6, 7)

def _autocast(fn, x, **kwargs):
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        return fn(x, **kwargs)


# activations, out of place and in place (on a clone: autograd records the in-place op on a non-leaf)
_TORCH_ACT = {"sigmoid": torch.sigmoid, "tanh": torch.tanh}
for _name, _spec in SPECS.items():
    _theirs = _TORCH_ACT.get(_name) or getattr(F, _name)
    for _shape in (N4, N5, N3):
        case(f"{_name}[{len(_shape)}d]", getattr(TD, _name), _theirs, (_shape,), (_name, f"{_name}_backward"))
    if _name == "gelu":
        case("gelu_tanh[4d]", lambda x: TD.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"),
             (N4,), ("gelu", "gelu_backward"))
    if _spec.inplace:
        for _shape in (N4, N5):
            case(f"{_name}_[{len(_shape)}d]",
                 lambda x, n=_name: getattr(TD, n)(x.clone(), inplace=True),
                 lambda x, f=_theirs: f(x.clone(), inplace=True), (_shape,), (f"{_name}_", f"{_name}_backward"))
        # under autocast, as in a mixed-precision training step (the activations have no autocast rule)
        case(f"{_name}_[autocast]", lambda x, n=_name: _autocast(getattr(TD, n), x.clone(), inplace=True),
             lambda x, f=_theirs: _autocast(f, x.clone(), inplace=True), (N4,), (f"{_name}_", f"{_name}_backward"))

for _act in BIAS_ACTS:
    case(f"bias_act[{_act}]", lambda x, b, a=_act: TD.bias_act(x, b, 1, a),
         lambda x, b, a=_act: bias_act_reference(x, b, 1, a), (N4, (N4[1],)), ("bias_act", "bias_act_backward"))
case("bias_act[gelu,5d]", lambda x, b: TD.bias_act(x, b, 1, "gelu"), lambda x, b: bias_act_reference(x, b, 1, "gelu"),
     (N5, (N5[1],)), ("bias_act", "bias_act_backward"))
case("bias_act[relu,dim=-1]", lambda x, b: TD.bias_act(x, b, -1, "relu"),
     lambda x, b: bias_act_reference(x, b, -1, "relu"), (N4, (N4[-1],)), ("bias_act", "bias_act_backward"))

for _fn in ("softmax", "log_softmax"):
    for _dim in (1, -1):
        for _shape in (N4, N5, N3):
            case(f"{_fn}[dim={_dim},{len(_shape)}d]", lambda x, f=_fn, d=_dim: getattr(TD, f)(x, dim=d),
                 lambda x, f=_fn, d=_dim: getattr(F, f)(x, dim=d), (_shape,), (_fn, f"{_fn}_backward"))

for _shape in (N4, N5, N3):
    _ns = (_shape[-1],)
    case(f"layer_norm[{len(_shape)}d]", lambda x, w, b, ns=_ns: TD.layer_norm(x, ns, w, b),
         lambda x, w, b, ns=_ns: F.layer_norm(x, ns, w, b), (_shape, _ns, _ns), ("layer_norm", "layer_norm_backward"))
    case(f"rms_norm[{len(_shape)}d]", lambda x, w, ns=_ns: TD.rms_norm(x, ns, w),
         lambda x, w, ns=_ns: F.rms_norm(x, ns, w), (_shape, _ns), ("rms_norm", "rms_norm_backward"))
    case(f"add_layer_norm[{len(_shape)}d]", lambda x, r, w, b, ns=_ns: TD.add_layer_norm(x, r, ns, w, b),
         lambda x, r, w, b, ns=_ns: add_layer_norm_reference(x, r, ns, w, b), (_shape, _shape, _ns, _ns),
         ("add_layer_norm", "add_layer_norm_backward"), follow=(1,))
    case(f"add_rms_norm[{len(_shape)}d]", lambda x, r, w, ns=_ns: TD.add_rms_norm(x, r, ns, w),
         lambda x, r, w, ns=_ns: add_rms_norm_reference(x, r, ns, w), (_shape, _shape, _ns),
         ("add_rms_norm", "add_rms_norm_backward"), follow=(1,))
case("layer_norm[2 dims]", lambda x, w, b: TD.layer_norm(x, N4[-2:], w, b),
     lambda x, w, b: F.layer_norm(x, N4[-2:], w, b), (N4, N4[-2:], N4[-2:]), ("layer_norm", "layer_norm_backward"))


def _bn(fn, training, act=None, residual=False):
    """batch_norm (or batch_norm_add_act) with its own running statistics for each call."""
    def run(x, *rest):
        c = x.shape[1]
        rm = torch.zeros(c, dtype=x.dtype, device=x.device)
        rv = torch.ones(c, dtype=x.dtype, device=x.device)
        if residual:
            r, w, b = rest
        else:
            (w, b), r = rest, None
        if fn == "ours":
            if residual or act is not None:
                return TD.batch_norm_add_act(x, rm, rv, w, b, residual=r, act=act, training=training)
            return TD.batch_norm(x, rm, rv, w, b, training=training)
        y = F.batch_norm(x, rm, rv, w, b, training=training)
        if r is not None:
            y = y + r
        return {None: lambda z: z, "identity": lambda z: z, "relu": F.relu, "silu": F.silu}[act](y)
    return run


for _training in (True, False):
    for _shape in (N4, N5, N3):
        _c = (_shape[1],)
        case(f"batch_norm[{'train' if _training else 'eval'},{len(_shape)}d]", _bn("ours", _training),
             _bn("torch", _training), (_shape, _c, _c), ("batch_norm", "batch_norm_backward"))
    for _act in ("identity", "relu", "silu"):
        case(f"batch_norm_add_act[{_act},{'train' if _training else 'eval'}]",
             _bn("ours", _training, _act, True), _bn("torch", _training, _act, True), (N4, N4, (N4[1],), (N4[1],)),
             ("batch_norm_add_act", "batch_norm_add_act_backward"), follow=(1,))
case("batch_norm_add_act[relu,train,5d]", _bn("ours", True, "relu", True), _bn("torch", True, "relu", True),
     (N5, N5, (N5[1],), (N5[1],)), ("batch_norm_add_act", "batch_norm_add_act_backward"), follow=(1,))
case("batch_norm_add_act[relu,no residual]", _bn("ours", True, "relu"), _bn("torch", True, "relu"),
     (N4, (N4[1],), (N4[1],)), ("batch_norm_add_act", "batch_norm_add_act_backward"))


def _instance_norm_running(fn):
    def run(x, w, b):
        c = x.shape[1]
        rm = torch.linspace(-0.5, 0.5, c, dtype=x.dtype, device=x.device)
        rv = torch.linspace(0.5, 1.5, c, dtype=x.dtype, device=x.device)
        f = TD.instance_norm if fn == "ours" else F.instance_norm
        return f(x, rm, rv, w, b, use_input_stats=False)
    return run


for _shape in (N4, N5, N3):
    _c = (_shape[1],)
    case(f"group_norm[{len(_shape)}d]", lambda x, w, b: TD.group_norm(x, 3, w, b),
         lambda x, w, b: F.group_norm(x, 3, w, b), (_shape, _c, _c), ("group_norm", "group_norm_backward"))
    case(f"instance_norm[{len(_shape)}d]", lambda x, w, b: TD.instance_norm(x, weight=w, bias=b),
         lambda x, w, b: F.instance_norm(x, weight=w, bias=b), (_shape, _c, _c), ("group_norm", "group_norm_backward"))
    case(f"instance_norm[running stats,{len(_shape)}d]", _instance_norm_running("ours"),
         _instance_norm_running("torch"), (_shape, _c, _c), ("group_norm_with_stats", "group_norm_backward"))
    case(f"local_response_norm[{len(_shape)}d]", lambda x: TD.local_response_norm(x, 3),
         lambda x: F.local_response_norm(x, 3), (_shape,), ("local_response_norm", "local_response_norm_backward"))

# pooling: batched and unbatched inputs of every rank
_POOL_SHAPES = {1: [(3, 6, 9), (6, 9)], 2: [(2, 6, 7, 9), (6, 7, 9)], 3: [(2, 6, 5, 7, 9), (6, 5, 7, 9)]}
for _r, _shapes in _POOL_SHAPES.items():
    for _shape in _shapes:
        _tag = f"{_r}d,{len(_shape)}-D"
        _pools = [
            ("max_pool", lambda x, f: f(x, 3, 2, 1)),
            ("max_pool", lambda x, f: f(x, 2, return_indices=True)),
            ("avg_pool", lambda x, f: f(x, 3, 2, 1)),
            ("adaptive_avg_pool", lambda x, f: f(x, 3)),
            ("adaptive_avg_pool", lambda x, f: f(x, 1)),
            ("adaptive_max_pool", lambda x, f: f(x, 3)),
            ("adaptive_max_pool", lambda x, f: f(x, 2, return_indices=True)),
            ("lp_pool", lambda x, f: f(x, 2.0, 2)),
        ]
        for _i, (_kind, _call) in enumerate(_pools):
            _fname = f"{_kind}{_r}d"
            # PyTorch's max_pool3d takes an unbatched (C, D, H, W) input contiguous only (channels_last: an error)
            case(f"{_fname}#{_i}[{_tag}]", lambda x, c=_call, n=_fname: c(x, getattr(TD, n)),
                 lambda x, c=_call, n=_fname: c(x, getattr(F, n)), (_shape,), (_fname, f"{_fname}_backward"),
                 contiguous_only=_fname == "max_pool3d" and len(_shape) == 4)

# PyTorch's CPU max_pool1d with no gradient or indices to give has a kernel of its own (contiguous results)
case("max_pool1d[no grad]", lambda x: TD.max_pool1d(x, 3, 2, 1), lambda x: F.max_pool1d(x, 3, 2, 1), ((3, 6, 9),),
     ("max_pool1d",), grad=())

# the matmul family: every operand contiguous or transposed (row- or column-major), each on its own
case("mm", TD.mm, torch.mm, ((5, 7), (7, 6)), ("mm",), matrix=True)
case("bmm", TD.bmm, torch.bmm, ((3, 5, 7), (3, 7, 6)), ("bmm",), matrix=True)
case("matmul[2d@2d]", TD.matmul, torch.matmul, ((5, 7), (7, 6)), ("mm",), matrix=True)
case("matmul[3d@2d]", TD.matmul, torch.matmul, ((3, 5, 7), (7, 6)), ("mm",), matrix=True)
case("matmul[2d@3d]", TD.matmul, torch.matmul, ((5, 7), (3, 7, 6)), ("mm",), matrix=True)
case("matmul[3d@3d]", TD.matmul, torch.matmul, ((3, 5, 7), (3, 7, 6)), ("bmm",), matrix=True)
case("matmul[4d@3d broadcast]", TD.matmul, torch.matmul, ((2, 3, 5, 7), (3, 7, 6)), ("bmm",), matrix=True)
case("matmul[1d@2d]", TD.matmul, torch.matmul, ((7,), (7, 6)), ("mm",), matrix=True)
case("matmul[3d@1d]", TD.matmul, torch.matmul, ((3, 5, 7), (7,)), ("mm",), matrix=True)
case("linear[2d]", TD.linear, F.linear, ((5, 7), (6, 7), (6,)), ("linear",), matrix=True)
case("linear[3d]", TD.linear, F.linear, ((3, 5, 7), (6, 7), (6,)), ("linear",), matrix=True)
case("linear[no bias]", lambda x, w: TD.linear(x, w), lambda x, w: F.linear(x, w), ((5, 7), (6, 7)), ("linear",),
     matrix=True)
for _act in ("relu", "gelu", "none"):
    case(f"linear_act[{_act}]", lambda x, w, b, a=_act: TD.linear_act(x, w, b, a),
         lambda x, w, b, a=_act: linear_act_reference(x, w, b, a), ((5, 7), (6, 7), (6,)),
         ("linear_act", "linear_act_backward"), matrix=True)
case("linear_act[gelu,residual]", lambda x, w, b, r: TD.linear_act(x, w, b, "gelu", r),
     lambda x, w, b, r: linear_act_reference(x, w, b, "gelu", r), ((5, 7), (6, 7), (6,), (5, 6)),
     ("linear_act", "linear_act_backward"), matrix=True)
case("linear_act[relu,3d]", lambda x, w, b: TD.linear_act(x, w, b, "relu"),
     lambda x, w, b: linear_act_reference(x, w, b, "relu"), ((3, 5, 7), (6, 7), (6,)),
     ("linear_act", "linear_act_backward"), matrix=True)

# convolutions: the input and the weight each in every layout of their rank (PyTorch's result is channels-last
# when either suggests it, as its backend decides), the bias contiguous
_CONV_OPS = ("convolution", "conv_backward_input", "conv_backward_weight", "conv_backward_bias")
case("conv2d", lambda x, w, b: TD.conv2d(x, w, b, padding=1), lambda x, w, b: F.conv2d(x, w, b, padding=1),
     (N4, (4, 6, 3, 3), (4,)), _CONV_OPS, each=True)
case("conv2d[depthwise,stride 2]", lambda x, w: TD.conv2d(x, w, stride=2, groups=6),
     lambda x, w: F.conv2d(x, w, stride=2, groups=6), (N4, (12, 1, 3, 3)), _CONV_OPS[:3], each=True)
case("conv_transpose2d", lambda x, w, b: TD.conv_transpose2d(x, w, b, stride=2, output_padding=1),
     lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, output_padding=1), (N4, (6, 4, 3, 3), (4,)), _CONV_OPS,
     each=True)
case("conv1d", lambda x, w, b: TD.conv1d(x, w, b, padding=1), lambda x, w, b: F.conv1d(x, w, b, padding=1),
     (N3, (4, 6, 3), (4,)), _CONV_OPS, each=True)
case("conv3d", lambda x, w, b: TD.conv3d(x, w, b, padding=1), lambda x, w, b: F.conv3d(x, w, b, padding=1),
     (N5, (4, 6, 3, 3, 3), (4,)), _CONV_OPS, each=True)
# the fused ones against the unfused composition, the residual in every layout of its own
case("conv_bias_act[relu]", lambda x, w, b: TD.conv_bias_act(x, w, b, "relu", padding=1),
     lambda x, w, b: conv_act_reference(x, w, b, padding=1, activation="relu"), (N4, (4, 6, 3, 3), (4,)),
     ("conv_bias_act",), each=True)
case("conv_bias_add_act[gelu]", lambda x, w, b, r: TD.conv_bias_add_act(x, w, b, r, "gelu", padding=1),
     lambda x, w, b, r: conv_act_reference(x, w, b, padding=1, activation="gelu", residual=r),
     (N4, (4, 6, 3, 3), (4,), (2, 4, 5, 7)), ("conv_bias_add_act",), each=True)

# attention: q, k, v of [B, H, S, D] (Sq != Sk) in every layout of their rank
case("scaled_dot_product_attention", lambda q, k, v: TD.scaled_dot_product_attention(q, k, v),
     lambda q, k, v: F.scaled_dot_product_attention(q, k, v), ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 8)),
     ("attention_forward", "attention_backward"),
     known_gap=lambda device, lays: (
         "attention's results are laid out [B][S][H][D] in memory, as PyTorch's CUDA flash, efficient and cuDNN "
         "backends lay theirs; " + ("PyTorch's CPU backends return contiguous [B][H][S][D]" if device == "cpu" else
                                    "PyTorch's CUDA falls back to its math backend when the head dim is strided "
                                    "(channels_last), whose output is contiguous [B][H][S][D]")
         if device == "cpu" or "channels_last" in lays else ""))
# flash_decode (no gradient): q [B, Sq, Hq, D] and the caches in every layout; its output is contiguous
# [B, Sq, Hq, D] whatever the inputs' layouts, as flash_attn_with_kvcache's (PyTorch has no such op: the peer is the
# SDPA composition made contiguous)
case("flash_decode", lambda q, kc, vc: TD.flash_decode(q, kc, vc, torch.tensor([5, 7], dtype=torch.int32,
                                                                                 device=q.device)),
     lambda q, kc, vc: F.scaled_dot_product_attention(q.transpose(1, 2), kc.transpose(1, 2), kc.transpose(1, 2),
                                                      enable_gqa=True).transpose(1, 2).contiguous(),
     ((2, 3, 4, 64), (2, 7, 2, 64), (2, 7, 2, 64)), ("flash_decode",), grad=(), follow=(1, 2))

# SyncBatchNorm's pieces: PyTorch has them on CUDA only. Per-channel arguments: (C,) tensors after the input(s).
_C4 = (N4[1],)
case("batch_norm_elemt", lambda x, m, s, w, b: torch.ops.torch_dnn.batch_norm_elemt(x, m, s, w, b),
     lambda x, m, s, w, b: torch.batch_norm_elemt(x, w, b, m, s, 1e-5), (N4, _C4, _C4, _C4, _C4),
     ("batch_norm_elemt",), grad=(), cuda_only=True)
case("batch_norm_stats", lambda x: torch.ops.torch_dnn.batch_norm_stats(x), lambda x: torch.batch_norm_stats(x, 1e-5),
     (N4,), ("batch_norm_stats",), grad=(), cuda_only=True)
case("batch_norm_backward_reduce", lambda g, x, m, s: torch.ops.torch_dnn.batch_norm_backward_reduce(g, x, m, s),
     lambda g, x, m, s: torch.batch_norm_backward_reduce(g, x, m, s, None, True, False, False)[:2],
     (N4, N4, _C4, _C4), ("batch_norm_backward_reduce",), grad=(), each=True, cuda_only=True)
case("batch_norm_backward_elemt",
     lambda g, x, m, s, w, a, b: torch.ops.torch_dnn.batch_norm_backward_elemt(g, x, m, s, w, a, b, 1),
     lambda g, x, m, s, w, a, b: torch.batch_norm_backward_elemt(
         g, x, m, s, w, a, b, torch.tensor([1], dtype=torch.int32, device=x.device)),
     (N4, N4, _C4, _C4, _C4, _C4, _C4), ("batch_norm_backward_elemt",), grad=(), each=True, cuda_only=True)


# ---- the checks ----------------------------------------------------------------------------------------------

def _tensors(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _make(case_: Case, in_layouts, device):
    """The case's tensors: tensor 0 (and the `follow` ones) in the input layout, parameters positive and 1-D."""
    tensors = []
    for i, shape in enumerate(case_.shapes):
        if case_.matrix or case_.each:
            t = randn(shape, in_layouts[i], low=0.5 if len(shape) == 1 else -2.0)
        elif i == 0 or i in case_.follow:
            t = randn(shape, in_layouts[0])
        else:
            t = randn(shape, low=0.5, high=1.5)
        tensors.append(t.to(device))
    return tensors


def _grad_layouts(case_: Case, out: torch.Tensor):
    return ["contiguous"] if case_.contiguous_only else layouts_for(out.dim(), case_.matrix)


def _params(device):
    out = []
    for c in CASES:
        marks = [pytest.mark.cuda] if device == "cuda" else []
        if c.cuda_only and device != "cuda":
            continue
        for lays in c.input_layouts():
            gap = c.known_gap(device, lays) if c.known_gap else ""
            out.append(pytest.param(c, lays, id=f"{c.name}-{'-'.join(lays)}",
                                    marks=marks + [pytest.mark.xfail(reason=gap)] if gap else marks))
    return out


def _check(case_: Case, in_layouts, device):
    base = _make(case_, in_layouts, device)
    grad_idx = case_.grad if case_.grad is not None else tuple(range(len(base)))
    ours_in = [t.detach().clone(memory_format=torch.preserve_format).requires_grad_(i in grad_idx)
               for i, t in enumerate(base)]
    theirs_in = [t.detach().clone(memory_format=torch.preserve_format).requires_grad_(i in grad_idx)
                 for i, t in enumerate(base)]
    for a, b in zip(ours_in, theirs_in):
        assert a.stride() == b.stride()
    ours_out = _tensors(case_.ours(*ours_in))
    theirs_out = _tensors(case_.theirs(*theirs_in))
    assert len(ours_out) == len(theirs_out)
    for k, (o, t) in enumerate(zip(ours_out, theirs_out)):
        assert o.shape == t.shape, f"output {k}: shape {tuple(o.shape)}, PyTorch's {tuple(t.shape)}"
        assert significant_strides(o) == significant_strides(t), (
            f"output {k}: strides {o.stride()}, PyTorch's {t.stride()} (shape {tuple(t.shape)})")
    if not grad_idx:
        return
    diff = [k for k, t in enumerate(theirs_out) if t.requires_grad]
    assert diff and [k for k, o in enumerate(ours_out) if o.requires_grad] == diff
    # every output's gradient in each layout of its rank (all outputs alike), the input's layout chosen apart
    for g_layout in _grad_layouts(case_, theirs_out[diff[0]]):
        grads = [randn(theirs_out[k].shape, g_layout if g_layout in layouts_for(theirs_out[k].dim(), case_.matrix)
                       else "contiguous").to(device) for k in diff]
        wrt_ours = [ours_in[i] for i in grad_idx]
        wrt_theirs = [theirs_in[i] for i in grad_idx]
        g_ours = torch.autograd.grad([ours_out[k] for k in diff], wrt_ours, grads, retain_graph=True,
                                     allow_unused=True)
        g_theirs = torch.autograd.grad([theirs_out[k] for k in diff], wrt_theirs, grads, retain_graph=True,
                                       allow_unused=True)
        for i, go, gt in zip(grad_idx, g_ours, g_theirs):
            assert (go is None) == (gt is None), f"gradient of input {i}: ours {go is None}, PyTorch's {gt is None}"
            if gt is None:
                continue
            assert significant_strides(go) == significant_strides(gt), (
                f"grad_output {g_layout}: gradient of input {i} has strides {go.stride()}, PyTorch's {gt.stride()} "
                f"(shape {tuple(gt.shape)})")


@pytest.mark.parametrize("case_, in_layouts", _params("cpu"))
def test_strides_cpu(case_, in_layouts):
    _check(case_, in_layouts, "cpu")


@pytest.mark.cuda
@pytest.mark.parametrize("case_, in_layouts", _params("cuda"))
def test_strides_cuda(case_, in_layouts):
    _check(case_, in_layouts, "cuda")


def test_every_op_has_a_case():
    """Every op of every family runs in some case, forward and backward (a new op without one fails here)."""
    covered = {op for c in CASES for op in c.covers}
    missing = [op for ops in FAMILIES.values() for op in ops if op not in covered]
    assert not missing, f"ops without a memory-format case: {missing}"
    assert len(_params("cpu")) > 100


def test_significant_strides_ignores_size_one_dims():
    a = torch.empty(2, 3, 1, 1, memory_format=torch.channels_last)
    b = torch.empty(2, 3, 1, 1)
    assert a.stride() != b.stride() and significant_strides(a) == significant_strides(b)
    c = torch.empty(2, 3, 4, 5, memory_format=torch.channels_last)
    assert significant_strides(c) != significant_strides(torch.empty(2, 3, 4, 5))
