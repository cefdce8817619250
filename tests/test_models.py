"""Whole networks (torch_dnn.reference.models) in training mode: a converted model's gradients are as accurate as
the native model's.

Each case builds one native float32 model from a fixed seed and a torch_dnn.convert-ed copy, runs one forward
and one backward of each on the same input and the same random grad_output, and measures each model's output and
EVERY parameter's gradient against a float64 copy of the same weights. The converted model's error must be at
most 2x native float32's for the output and 3x for every gradient (the project's rule, torch_dnn.testing). The
error is relative, max-norm and l2, per parameter; the floor is torch_dnn.testing.error_floor(float32) = 1e-5, the
floor every op test uses: a parameter whose native error is below it (most of them, in small models) is held to
3e-5 rather than to a ratio of two rounding noises. The assertion names the worst parameter (its error,
native's, ratio).

Each float32 model has its own float64 copy, whose ReLU, Hardswish, Hardsigmoid and MaxPool2d take the pieces
that float32 model took (tests/piecewise.py says why: an element within rounding of a kink moves a whole
network's gradient by up to 1e-2, by chance, in either model). The message also counts the elements where ours
and native took different pieces.

Small configurations run on the CPU; on CUDA (marked, skipped without a GPU) the full-size ResNet-50 and
MobileNetV3-Large at 224x224, batch 8 and 16, and the 4 x 512 transformers (TF32 off: tests/conftest.py).
"""
import copy

import pytest
import torch

import torch_dnn
from tests.piecewise import follow_pieces, pieces_differ, record_pieces
from torch_dnn.reference import models
from torch_dnn.testing import GRAD_FACTOR, OUTPUT_FACTOR, _errors, compare, error_floor

CL = torch.channels_last
FLOOR = error_floor(torch.float32)


def _image(batch, size):
    return lambda gen: torch.randn(batch, 3, size, size, generator=gen)


def _features(batch, tokens, features):
    return lambda gen: torch.randn(batch, tokens, features, generator=gen)


def _tokens(batch, tokens, vocab):
    return lambda gen: torch.randint(0, vocab, (batch, tokens), generator=gen)


# name -> (builder, input maker, memory formats); small enough for a few seconds each on a 2-core CPU
CPU_CASES = {
    "resnet": (lambda: models.ResNet((1, 1, 1, 1), 16, num_classes=10), _image(4, 64), ("contiguous", "channels_last")),
    "resnet_no_zero_init": (lambda: models.ResNet((1, 1, 1, 1), 16, num_classes=10, zero_init_last=False),
                            _image(4, 64), ("contiguous", "channels_last")),
    "mobilenetv3": (lambda: models.MobileNetV3(models.MOBILENET_V3_SMALL_TEST, 16, 96, 128, num_classes=10),
                    _image(4, 64), ("contiguous", "channels_last")),
    "encoder": (lambda: models.TransformerEncoder(32, 64, depth=2, heads=4, num_classes=10), _features(4, 16, 32),
                ("contiguous",)),
    "llama": (lambda: models.LlamaDecoder(vocab=128, dim=64, depth=2, heads=4, kv_heads=2, max_len=64),
              _tokens(2, 16, 128), ("contiguous",)),
    "llama_no_rotary": (lambda: models.LlamaDecoder(vocab=128, dim=64, depth=2, heads=4, kv_heads=2, rotary=False),
                        _tokens(2, 16, 128), ("contiguous",)),
}

CUDA_CASES = {
    **{f"resnet50_b{b}": (models.resnet50, _image(b, 224), ("contiguous", "channels_last")) for b in (8, 16)},
    **{f"mobilenetv3_large_b{b}": (models.mobilenet_v3_large, _image(b, 224), ("contiguous", "channels_last"))
       for b in (8, 16)},
    "encoder_4x512": (lambda: models.TransformerEncoder(512, 512, depth=4, heads=8), _features(16, 197, 512),
                      ("contiguous",)),
    "llama_4x512": (lambda: models.LlamaDecoder(vocab=32000, dim=512, depth=4, heads=8, kv_heads=2, max_len=512),
                    _tokens(8, 256, 32000), ("contiguous",)),
}


# convert's opt-in swaps, each case also run with the one that applies to it: the transformers with attention
# swapped too, the CNNs with their convolutions
def _opt_in(name):
    if name.startswith(("encoder", "llama")):
        return {"": (), "with_attention": torch_dnn.nn.ATTENTION}
    return {"": (), "with_conv": torch_dnn.nn.CONVOLUTIONS}


def _params():
    out = []
    for device, cases in (("cpu", CPU_CASES), ("cuda", CUDA_CASES)):
        marks = [pytest.mark.cuda] if device == "cuda" else []
        for name, (_, _, fmts) in cases.items():
            for fmt in fmts:
                for tag, include in _opt_in(name).items():
                    out.append(pytest.param(name, fmt, device, include, marks=marks,
                                            id="-".join(p for p in (name, fmt, device, tag) if p)))
    return out


def _to_format(t, fmt):
    return t.contiguous(memory_format=CL) if fmt == "channels_last" else t


def run_models(build, make_input, device, fmt, seed=0, include=()):
    """One forward + backward of the native model, its converted copy and each one's float64 copy following its
    pieces, on the same input and grad_output. Returns ({"native", "ours", "ref_native", "ref_ours"} -> (model,
    output)), the conversion report and the number of elements where ours and native took different pieces."""
    torch.manual_seed(seed)
    native = build().to(device).train()
    if fmt == "channels_last":
        native = native.to(memory_format=CL)
    ref_native, ref_ours = copy.deepcopy(native).double(), copy.deepcopy(native).double()
    ours, report = torch_dnn.convert(copy.deepcopy(native), include=include)
    log_native, log_ours = record_pieces(native), record_pieces(ours)
    gen = torch.Generator().manual_seed(seed + 1)
    x = _to_format(make_input(gen).to(device), fmt)
    x64 = x.double() if x.is_floating_point() else x
    run = {"native": (native, native(x)), "ours": (ours, ours(x))}
    differ = pieces_differ(log_native, log_ours)
    run["ref_native"] = (ref_native, follow_pieces(ref_native, log_native)(x64))
    run["ref_ours"] = (ref_ours, follow_pieces(ref_ours, log_ours)(x64))
    g = torch.randn(run["native"][1].shape, generator=gen).to(device)
    for _, y in run.values():
        y.backward(g.to(y.dtype))
    return run, report, differ


def ratio_rule(ours, ref_ours, native, ref_native, *, grad: bool):
    """(ok, ratio, our errors, native's errors): the rule of torch_dnn.testing.compare, each float32 tensor
    measured against its own float64 reference."""
    if not torch.equal(torch.isfinite(ours), torch.isfinite(native)):
        return False, float("inf"), (float("inf"),) * 2, (0.0, 0.0)
    e_ours, e_native = _errors(ours, ref_ours), _errors(native, ref_native)
    ratio = max(eo / max(en, FLOOR) for eo, en in zip(e_ours, e_native))
    return ratio <= (GRAD_FACTOR if grad else OUTPUT_FACTOR), ratio, e_ours, e_native


def grad_rows(run):
    """(ok, ratio, errors of ours, errors of native, name) for every parameter."""
    named = {k: dict(m.named_parameters()) for k, (m, _) in run.items()}
    rows = []
    for name, p in named["native"].items():
        po = named["ours"][name]
        assert p.grad is not None and po.grad is not None, f"{name}: no gradient"
        rows.append(ratio_rule(po.grad, named["ref_ours"][name].grad, p.grad, named["ref_native"][name].grad,
                               grad=True) + (name,))
    return rows


def worst_message(rows, differ) -> str:
    ok, ratio, eo, en, name = max(rows, key=lambda r: r[1])
    # A parameter whose exact gradient is zero (a norm's bias feeding only a 1x1 conv and a training-mode norm,
    # which removes any per-channel constant: MobileNetV3's projection norms) leaves float32 no correct digit; both
    # errors are then rounding noise of cancelling sums, and their ratio compares the two reductions' accuracy.
    cancelled = " (its exact gradient is zero)" if en[0] > 0.5 else ""
    return (f"{sum(not r[0] for r in rows)} of {len(rows)} parameter gradients fail; worst {name}{cancelled}: ours "
            f"{eo[0]:.3g} (max-norm), {eo[1]:.3g} (l2), native float32 {en[0]:.3g}, {en[1]:.3g}, ratio {ratio:.1f}x "
            f"(allowed {GRAD_FACTOR}x, floor {FLOOR:.0e}); ours and native took different pieces at {differ} "
            f"element(s) of ReLU/Hardswish/Hardsigmoid/MaxPool2d inputs")


@pytest.mark.parametrize("name,fmt,device,include", _params())
def test_model_grads_match_float64(name, fmt, device, include):
    build, make_input, _ = (CPU_CASES if device == "cpu" else CUDA_CASES)[name]
    assert not (torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32), "TF32 must be off"
    run, report, differ = run_models(build, make_input, device, fmt, include=include)
    assert report.swapped, str(report)
    ok, ratio, eo, en = ratio_rule(run["ours"][1], run["ref_ours"][1], run["native"][1], run["ref_native"][1],
                                   grad=False)
    assert ok, f"{name} output: error (max-norm, l2) ours {eo[0]:.3g}, {eo[1]:.3g}, native {en[0]:.3g}, {en[1]:.3g}"
    rows = grad_rows(run)
    assert len(rows) == len(list(run["native"][0].parameters())) > 0
    assert all(r[0] for r in rows), worst_message(rows, differ)


# ---------------------------------------------------------------- in-place ops on converted modules' outputs

def _inplace_cases():
    """(module, input shape): every module type the reference models convert, as they use it."""
    return {
        "BatchNorm2d": (lambda: torch.nn.BatchNorm2d(6), (4, 6, 5, 5)),
        "ReLU": (lambda: torch.nn.ReLU(inplace=True), (4, 6, 5, 5)),
        "Hardswish": (lambda: torch.nn.Hardswish(inplace=True), (4, 6, 5, 5)),
        "Hardsigmoid": (lambda: torch.nn.Hardsigmoid(inplace=True), (4, 6, 5, 5)),
        "MaxPool2d": (lambda: torch.nn.MaxPool2d(3, 2, 1), (4, 6, 9, 9)),
        "AdaptiveAvgPool2d": (lambda: torch.nn.AdaptiveAvgPool2d(1), (4, 6, 5, 5)),
        "LayerNorm": (lambda: torch.nn.LayerNorm(12), (4, 7, 12)),
        "RMSNorm": (lambda: torch.nn.RMSNorm(12), (4, 7, 12)),
        "Linear": (lambda: torch.nn.Linear(12, 10), (4, 7, 12)),
        "GELU": (lambda: torch.nn.GELU(), (4, 7, 12)),
        "SiLU": (lambda: torch.nn.SiLU(), (4, 7, 12)),
    }


def _add_after(mod, x, s, clone):
    y = mod(x * 1)  # a non-leaf input, as inside a network (in-place modules may write into it)
    if clone:
        y = y.clone()
    y += s  # `out += shortcut` on the module's own output
    return torch.relu_(y)  # ReLU(inplace=True) after it


@pytest.mark.parametrize("kind,fmt", [(k, f) for k, (_, shape) in _inplace_cases().items()
                                      for f in ("contiguous", "channels_last")[:2 if len(shape) == 4 else 1]])
def test_inplace_ops_after_converted_module(kind, fmt):
    """`out += shortcut` and an in-place ReLU on a converted module's output give the gradients of the same
    function written out of place (float64 reference), or raise where native PyTorch raises (an op that saved
    its output for backward): never a silently wrong gradient."""
    build, shape = _inplace_cases()[kind]
    torch.manual_seed(0)
    native = build()
    ours, report = torch_dnn.convert(native)
    assert len(report.swapped) == 1, str(report)
    ref = copy.deepcopy(native).double()
    x = _to_format(torch.randn(shape), fmt)
    s0 = _to_format(torch.randn(native(x * 1).shape), fmt)

    def run(mod, dtype, clone):
        xi, si = (t.to(dtype, copy=True).requires_grad_() for t in (x, s0))
        mod.zero_grad(set_to_none=True)
        y = _add_after(mod, xi, si, clone)
        gy = torch.linspace(-1, 1, y.numel(), dtype=torch.float64).view(y.shape).to(dtype)
        y.backward(gy)
        return [y, xi.grad, si.grad] + [p.grad for p in mod.parameters()]

    try:
        run(copy.deepcopy(native), torch.float32, clone=False)
        native_raises = False
    except RuntimeError:
        native_raises = True
    try:
        got = run(ours, torch.float32, clone=False)
    except RuntimeError as e:
        assert native_raises, f"converted {kind}: in-place use of its output raised where PyTorch's does not: {e}"
        return
    peer = run(copy.deepcopy(native), torch.float32, clone=True)
    want = run(ref, torch.float64, clone=True)
    names = ["output", "input grad", "shortcut grad"] + [f"{n} grad" for n, _ in native.named_parameters()]
    for n, a, b, r in zip(names, got, peer, want):
        v = compare(a, b, r, grad=n != "output", name=f"{kind} {n}")
        assert v, v.message


@pytest.mark.parametrize("kind", ["ReLU", "Hardswish", "Hardsigmoid"])
def test_converted_inplace_activation_writes_its_input(kind):
    """ReLU(inplace=True) and friends, converted, return their input tensor with the result written into it."""
    mod = torch_dnn.convert(_inplace_cases()[kind][0]())[0]
    x = torch.randn(4, 6, 5, 5, requires_grad=True)
    h = x * 1
    want = getattr(torch.nn.functional, kind.lower())(h.detach().clone())
    y = mod(h)
    assert y.data_ptr() == h.data_ptr() and y.shape == h.shape
    torch.testing.assert_close(h.detach(), want, rtol=0, atol=0)
    g = torch.randn(y.shape)
    y.backward(g)
    x_native = x.detach().clone().requires_grad_()
    getattr(torch.nn.functional, kind.lower())(x_native * 1, inplace=True).backward(g)
    torch.testing.assert_close(x.grad, x_native.grad)
