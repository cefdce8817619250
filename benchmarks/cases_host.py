"""Host overhead per call: torch_dnn's op against PyTorch's own on small tensors (issue 35, docs/host-overhead.md).

Each op is called four ways, each a case: through its nn module (module(x)) and through its functional wrapper,
forward only and forward + backward (out.backward(grad) with the parameters, or for ops without parameters the
input, requiring grad). The tensors are tiny, so a call's time is the cost of the Python layers, the dispatcher and
the autograd graph, not of the kernel. On the CPU that is all a call costs; where CUDA is available the same cases
run on CUDA tensors and measure the launch side (the host time of a call whose kernel is shorter).
Rows report ms per call (the harness's unit); ours over PyTorch's is 1 / the speedup column.
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


def _op_cases(group, name, shape, out_shape, ours_mod, torch_mod, ours_fn, torch_fn, inplace=False, quick=False):
    """The four cases of one op: module / functional x forward / forward+backward.

    ours_mod / torch_mod: modules built once (their parameters require grad, as a model's do); ours_fn / torch_fn:
    callables of the input alone (parameters bound from the torch module, shared by both)."""
    rounds = 2 if quick else ROUNDS
    cases = []

    def fwd_inputs():
        return (_rand(shape),)

    def bwd_inputs():
        # parameterless ops differentiate the input; in-place ones a clone of it (a leaf cannot be modified in place)
        return (_rand(shape, requires_grad=True), _rand(out_shape))

    wrap = _inplace_fwd_bwd if inplace else _fwd_bwd
    for how, ours, peer in (("module", ours_mod, torch_mod), ("functional", ours_fn, torch_fn)):
        if ours is None:
            continue
        cases.append(Case("host", f"{name} {list(shape)} {how} fwd", fwd_inputs,
                          {"torch_dnn": _no_grad(ours), "torch": _no_grad(peer)}, group=group, host=True,
                          rounds=rounds, target="<=1.2x torch"))
        cases.append(Case("host", f"{name} {list(shape)} {how} fwd+bwd", bwd_inputs,
                          {"torch_dnn": wrap(ours), "torch": wrap(peer)}, group=group, host=True, rounds=rounds,
                          target="<=1.2x torch"))
    return cases


def _no_grad(f):
    # forward only, as inference runs it: the parameters still require grad, so grad mode decides
    def run(x):
        with torch.no_grad():
            return f(x)
    return run


def _pair(torch_cls, ours_cls, *args, **kwargs):
    peer = _module(torch_cls, *args, **kwargs)
    ours = _module(ours_cls, *args, **kwargs)
    ours.load_state_dict(peer.state_dict())
    return ours, peer


def cases(quick=False):
    act_shape = (4, 64)
    out = []
    for name, tcls, ocls, tf, of, kw in (
        ("relu", torch.nn.ReLU, N.ReLU, TF.relu, F.relu, {}),
        ("gelu", torch.nn.GELU, N.GELU, TF.gelu, F.gelu, {}),
        ("hardswish", torch.nn.Hardswish, N.Hardswish, TF.hardswish, F.hardswish, {}),
    ):
        ours, peer = _pair(tcls, ocls)
        out += _op_cases("activation", name, act_shape, act_shape, ours, peer, of, tf, quick=quick)
    for name, tcls, ocls, tf, of in (
        ("relu_", torch.nn.ReLU, N.ReLU, TF.relu, F.relu),
        ("hardswish_", torch.nn.Hardswish, N.Hardswish, TF.hardswish, F.hardswish),
    ):
        ours, peer = _pair(tcls, ocls, inplace=True)
        out += _op_cases("activation", name, act_shape, act_shape, ours, peer,
                         lambda x, f=of: f(x, inplace=True), lambda x, f=tf: f(x, inplace=True), inplace=True,
                         quick=quick)

    ours, peer = _pair(torch.nn.Softmax, N.Softmax, dim=-1)
    out += _op_cases("softmax", "softmax", act_shape, act_shape, ours, peer,
                     lambda x: F.softmax(x, -1), lambda x: TF.softmax(x, -1), quick=quick)

    ours, peer = _pair(torch.nn.LayerNorm, N.LayerNorm, 64)
    out += _op_cases("norm", "layer_norm", act_shape, act_shape, ours, peer,
                     lambda x, m=peer: F.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps),
                     lambda x, m=peer: TF.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps), quick=quick)
    ours, peer = _pair(torch.nn.RMSNorm, N.RMSNorm, 64)
    out += _op_cases("norm", "rms_norm", act_shape, act_shape, ours, peer,
                     lambda x, m=peer: F.rms_norm(x, m.normalized_shape, m.weight, m.eps),
                     lambda x, m=peer: TF.rms_norm(x, m.normalized_shape, m.weight, m.eps), quick=quick)

    img = (4, 8, 4, 4)
    for mode in ("train", "eval"):
        ours, peer = _pair(torch.nn.BatchNorm2d, N.BatchNorm2d, 8)
        ours.train(mode == "train")
        peer.train(mode == "train")
        training = mode == "train"
        out += _op_cases(
            "batch_norm", f"batch_norm {mode}", img, img, ours, peer,
            lambda x, m=peer, t=training: F.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, t,
                                                       0.1, m.eps),
            lambda x, m=peer, t=training: TF.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, t,
                                                        0.1, m.eps), quick=quick)

    ours, peer = _pair(torch.nn.GroupNorm, N.GroupNorm, 2, 8)
    out += _op_cases("group_norm", "group_norm", img, img, ours, peer,
                     lambda x, m=peer: F.group_norm(x, 2, m.weight, m.bias, m.eps),
                     lambda x, m=peer: TF.group_norm(x, 2, m.weight, m.bias, m.eps), quick=quick)

    pimg = (2, 4, 8, 8)
    ours, peer = _pair(torch.nn.MaxPool2d, N.MaxPool2d, 3, 2, 1)
    out += _op_cases("pool", "max_pool2d 3/2", pimg, (2, 4, 4, 4), ours, peer,
                     lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: TF.max_pool2d(x, 3, 2, 1), quick=quick)
    ours, peer = _pair(torch.nn.AvgPool2d, N.AvgPool2d, 2)
    out += _op_cases("pool", "avg_pool2d 2", pimg, (2, 4, 4, 4), ours, peer,
                     lambda x: F.avg_pool2d(x, 2), lambda x: TF.avg_pool2d(x, 2), quick=quick)
    ours, peer = _pair(torch.nn.AdaptiveAvgPool2d, N.AdaptiveAvgPool2d, 1)
    out += _op_cases("pool", "adaptive_avg_pool2d 1", pimg, (2, 4, 1, 1), ours, peer,
                     lambda x: F.adaptive_avg_pool2d(x, 1), lambda x: TF.adaptive_avg_pool2d(x, 1), quick=quick)

    ours, peer = _pair(torch.nn.Linear, N.Linear, 64, 64)
    out += _op_cases("matmul", "linear", act_shape, act_shape, ours, peer,
                     lambda x, m=peer: F.linear(x, m.weight, m.bias),
                     lambda x, m=peer: TF.linear(x, m.weight, m.bias), quick=quick)
    ours = N.LinearAct(64, 64, activation="relu").to(_device())
    peer = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).to(_device())
    ours.load_state_dict(peer[0].state_dict())
    out += _op_cases("matmul", "linear_act relu", act_shape, act_shape, ours, peer,
                     lambda x, m=peer[0]: F.linear_act(x, m.weight, m.bias, "relu"),
                     lambda x, m=peer[0]: TF.relu(TF.linear(x, m.weight, m.bias)), quick=quick)
    w = _rand((64, 64), requires_grad=True)
    out += _op_cases("matmul", "matmul", act_shape, act_shape, None, None,
                     lambda x, w=w: F.matmul(x, w), lambda x, w=w: torch.matmul(x, w), quick=quick)
    return out
