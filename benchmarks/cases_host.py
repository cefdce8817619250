"""Host overhead per call: torch_dnn's op against PyTorch's own on small tensors (issue 35, docs/host-overhead.md).

Each op is called four ways, each a case: through its nn module (module(x)) and through its functional wrapper,
forward only (parameters that do not require grad, as an inference model's: no graph) and forward + backward
(out.backward(grad) with the parameters, or for ops without parameters the input, requiring grad). The tensors are
tiny, so a call's time is mostly the Python layers, the dispatcher and the autograd graph; on the CPU the kernel's
time is in the row too (small, except where a CPU kernel is itself slow: docs/host-overhead.md). Where CUDA is
available the same cases run on CUDA tensors and measure the launch side (the host time of a call whose kernel is
shorter).
Rows report ms per call (the harness's unit); ours over PyTorch's is 1 / the speedup column. Some functional
forward cases also time PyTorch's own op through `torch.ops.aten` ("torch via torch.ops"): the entry every torch_dnn
op takes (a boxed call, arguments parsed against the schema), i.e. the floor our forward-only calls stand on.
"""
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
import torch_dnn.nn as N
from benchmarks.harness import Case

ROUNDS = 6  # turns per impl (interleaved, odd rounds reversed): the machine's other load drifts


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def _rand(shape, requires_grad=False):
    t = torch.randn(shape, device=_device())
    return t.requires_grad_(requires_grad)


def _fwd_bwd(f):
    def run(x, g):
        f(x).backward(g)
    return run


def _inplace_fwd_bwd(f):
    # an in-place op under autograd needs a non-leaf input: the clone is the same cost for both impls
    def run(x, g):
        f(x.clone()).backward(g)
    return run


def _module(cls, *args, **kwargs):
    return cls(*args, **kwargs).to(_device())


def _op_cases(group, name, shape, out_shape, make, inplace=False, quick=False, entry=None):
    """The four cases of one op: module / functional x forward / forward+backward; entry: PyTorch's op through
    torch.ops.aten as a callable of the input, timed beside the functional forward.

    make(frozen) -> (ours_mod, torch_mod, ours_fn, torch_fn): the modules (ours holding a copy of the torch module's
    parameters) and callables of the input alone (parameters bound from the torch module). frozen: parameters that
    do not require grad, as an inference model's (forward cases: no graph recorded, and no per-call no_grad block
    timed); otherwise they require grad, as a training model's."""
    rounds = 2 if quick else ROUNDS
    cases = []

    def fwd_inputs():
        return (_rand(shape),)

    def bwd_inputs():
        # parameterless ops differentiate the input; in-place ones a clone of it (a leaf cannot be modified in place)
        return (_rand(shape, requires_grad=True), _rand(out_shape))

    wrap = _inplace_fwd_bwd if inplace else _fwd_bwd
    fwd, bwd = make(True), make(False)
    for i, how in ((0, "module"), (2, "functional")):
        if fwd[i] is None:
            continue
        impls = {"torch_dnn": fwd[i], "torch": fwd[i + 1]}
        if how == "functional" and entry is not None:
            impls["torch via torch.ops"] = entry
        cases.append(Case("host", f"{name} {list(shape)} {how} fwd", fwd_inputs, impls, group=group, host=True,
                          rounds=rounds, target="<=1.2x torch"))
        cases.append(Case("host", f"{name} {list(shape)} {how} fwd+bwd", bwd_inputs,
                          {"torch_dnn": wrap(bwd[i]), "torch": wrap(bwd[i + 1])}, group=group, host=True,
                          rounds=rounds, target="<=1.2x torch"))
    return cases


def _pair(torch_cls, ours_cls, frozen, *args, **kwargs):
    peer = _module(torch_cls, *args, **kwargs)
    ours = _module(ours_cls, *args, **kwargs)
    ours.load_state_dict(peer.state_dict())
    if frozen:
        peer.requires_grad_(False)
        ours.requires_grad_(False)
    return ours, peer


def cases(quick=False):
    act_shape = (4, 64)
    aten = torch.ops.aten
    out = []
    for name, tcls, ocls, tf, of, entry in (
        ("relu", torch.nn.ReLU, N.ReLU, TF.relu, F.relu, aten.relu.default),
        ("gelu", torch.nn.GELU, N.GELU, TF.gelu, F.gelu, aten.gelu.default),
        ("hardswish", torch.nn.Hardswish, N.Hardswish, TF.hardswish, F.hardswish, aten.hardswish.default),
    ):
        out += _op_cases("activation", name, act_shape, act_shape,
                         lambda fz, tcls=tcls, ocls=ocls, tf=tf, of=of: (*_pair(tcls, ocls, fz), of, tf), quick=quick,
                         entry=entry)
    for name, tcls, ocls, tf, of in (
        ("relu_", torch.nn.ReLU, N.ReLU, TF.relu, F.relu),
        ("hardswish_", torch.nn.Hardswish, N.Hardswish, TF.hardswish, F.hardswish),
    ):
        out += _op_cases("activation", name, act_shape, act_shape,
                         lambda fz, tcls=tcls, ocls=ocls, tf=tf, of=of: (
                             *_pair(tcls, ocls, fz, inplace=True), lambda x: of(x, inplace=True),
                             lambda x: tf(x, inplace=True)),
                         inplace=True, quick=quick)

    out += _op_cases("softmax", "softmax", act_shape, act_shape,
                     lambda fz: (*_pair(torch.nn.Softmax, N.Softmax, fz, dim=-1), lambda x: F.softmax(x, -1),
                                 lambda x: TF.softmax(x, -1)), quick=quick,
                     entry=lambda x: aten._softmax.default(x, -1, False))

    def layer_norm(fz):
        ours, peer = _pair(torch.nn.LayerNorm, N.LayerNorm, fz, 64)
        return (ours, peer, lambda x, m=peer: F.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps),
                lambda x, m=peer: TF.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps))

    def rms_norm(fz):
        ours, peer = _pair(torch.nn.RMSNorm, N.RMSNorm, fz, 64)
        return (ours, peer, lambda x, m=peer: F.rms_norm(x, m.normalized_shape, m.weight, m.eps),
                lambda x, m=peer: TF.rms_norm(x, m.normalized_shape, m.weight, m.eps))

    out += _op_cases("norm", "layer_norm", act_shape, act_shape, layer_norm, quick=quick)
    out += _op_cases("norm", "rms_norm", act_shape, act_shape, rms_norm, quick=quick)

    img = (4, 8, 4, 4)
    for mode in ("train", "eval"):
        def batch_norm(fz, training=mode == "train"):
            ours, peer = _pair(torch.nn.BatchNorm2d, N.BatchNorm2d, fz, 8)
            ours.train(training)
            peer.train(training)
            return (ours, peer,
                    lambda x, m=peer: F.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, training,
                                                   0.1, m.eps),
                    lambda x, m=peer: TF.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, training,
                                                    0.1, m.eps))
        out += _op_cases("batch_norm", f"batch_norm {mode}", img, img, batch_norm, quick=quick)

    def group_norm(fz):
        ours, peer = _pair(torch.nn.GroupNorm, N.GroupNorm, fz, 2, 8)
        return (ours, peer, lambda x, m=peer: F.group_norm(x, 2, m.weight, m.bias, m.eps),
                lambda x, m=peer: TF.group_norm(x, 2, m.weight, m.bias, m.eps))

    out += _op_cases("group_norm", "group_norm", img, img, group_norm, quick=quick)

    pimg = (2, 4, 8, 8)
    out += _op_cases("pool", "max_pool2d 3/2", pimg, (2, 4, 4, 4),
                     lambda fz: (*_pair(torch.nn.MaxPool2d, N.MaxPool2d, fz, 3, 2, 1),
                                 lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: TF.max_pool2d(x, 3, 2, 1)), quick=quick,
                     entry=lambda x: aten.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1], [1, 1], False))
    out += _op_cases("pool", "avg_pool2d 2", pimg, (2, 4, 4, 4),
                     lambda fz: (*_pair(torch.nn.AvgPool2d, N.AvgPool2d, fz, 2),
                                 lambda x: F.avg_pool2d(x, 2), lambda x: TF.avg_pool2d(x, 2)), quick=quick,
                     entry=lambda x: aten.avg_pool2d.default(x, [2, 2], [2, 2], [0, 0], False, True, None))
    out += _op_cases("pool", "adaptive_avg_pool2d 1", pimg, (2, 4, 1, 1),
                     lambda fz: (*_pair(torch.nn.AdaptiveAvgPool2d, N.AdaptiveAvgPool2d, fz, 1),
                                 lambda x: F.adaptive_avg_pool2d(x, 1), lambda x: TF.adaptive_avg_pool2d(x, 1)),
                     quick=quick)

    def linear(fz):
        ours, peer = _pair(torch.nn.Linear, N.Linear, fz, 64, 64)
        return (ours, peer, lambda x, m=peer: F.linear(x, m.weight, m.bias),
                lambda x, m=peer: TF.linear(x, m.weight, m.bias))

    def linear_act(fz):
        ours = N.LinearAct(64, 64, activation="relu").to(_device())
        peer = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).to(_device())
        ours.load_state_dict(peer[0].state_dict())
        if fz:
            ours.requires_grad_(False)
            peer.requires_grad_(False)
        return (ours, peer, lambda x, m=peer[0]: F.linear_act(x, m.weight, m.bias, "relu"),
                lambda x, m=peer[0]: TF.relu(TF.linear(x, m.weight, m.bias)))

    def matmul(fz):
        w = _rand((64, 64), requires_grad=not fz)
        return None, None, lambda x: F.matmul(x, w), lambda x: torch.matmul(x, w)

    def conv2d(fz):
        ours, peer = _pair(torch.nn.Conv2d, N.Conv2d, fz, 4, 4, 3, padding=1)
        return (ours, peer, lambda x, m=peer: F.conv2d(x, m.weight, m.bias, padding=1),
                lambda x, m=peer: TF.conv2d(x, m.weight, m.bias, padding=1))

    out += _op_cases("conv", "conv2d 3x3", pimg, pimg, conv2d, quick=quick)

    att = (1, 2, 8, 16)  # (batch, heads, tokens, head dim): the query is the case's input

    def sdpa(fz):
        k, v = _rand(att, requires_grad=not fz), _rand(att, requires_grad=not fz)
        return (None, None, lambda q: F.scaled_dot_product_attention(q, k, v),
                lambda q: TF.scaled_dot_product_attention(q, k, v))

    out += _op_cases("attention", "scaled_dot_product_attention", att, att, sdpa, quick=quick)
    out += _op_cases("matmul", "linear", act_shape, act_shape, linear, quick=quick)
    out += _op_cases("matmul", "linear_act relu", act_shape, act_shape, linear_act, quick=quick)
    out += _op_cases("matmul", "matmul", act_shape, act_shape, matmul, quick=quick)
    return out
