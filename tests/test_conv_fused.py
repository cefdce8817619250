"""The fused convolutions conv_bias_act and conv_bias_add_act (act(conv + bias [+ residual]) in one pass) against the
unfused PyTorch composition (F.conv*d, the residual add, the activation: torch_dnn.reference.conv_act_reference) by
the error rule, every activation of bias_act, 1-D to 3-D, grouped, strided, channels-last and unbatched inputs,
residuals in another layout, with the family tester's checks (opcheck, float64 gradcheck and gradgradcheck,
torch.compile, bad input, CUDA graphs, past 2^31 elements); then convert(model, fuse=True): BatchNorm folding and
convolution + activation fusion, outputs of the fused model against the native one in evaluation mode."""
import copy

import pytest
import torch
import torch.nn.functional as TF

import torch_dnn
import torch_dnn.functional as F
from tests.family_tester import Against, BadInput, FamilyTester, GradCase, ModelCase
from tests.utils import KINKS, devices, grad_off_kinks, random_in_layout
from torch_dnn.reference import hardsigmoid_reference, hardswish_reference
from torch_dnn.reference.conv import conv_act_reference
from torch_dnn.testing import compare

ops = torch.ops.torch_dnn

CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
# bias_act's activations, and parameterised ones with their parameters overridden (act_a, act_b)
ACTS = ("none", "relu", "relu6", "leaky_relu", "elu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "softplus",
        "mish", "hardswish", "hardsigmoid")
PARAMS = {"leaky_relu": (0.2, None), "elu": (0.5, None), "softplus": (2.0, 5.0)}
# PyTorch's CPU hardsigmoid / hardswish gradients multiply by 1/6 rounded to float32 in every dtype: the float64
# reference is the exact composite (tests/test_float64.py)
EXACT = {"hardsigmoid": hardsigmoid_reference, "hardswish": hardswish_reference}


def _off_kinks(r, act, pre):
    """The residual r moved by 0.125 (away from the point) where the exact pre-activation `pre` (float64, r
    included) lies within 0.0625 of one of act's derivative jumps (KINKS), so that no rounding decides the side:
    at +-3 and 6 one element on the other side moves d_input by |w| / 6 there."""
    r = r.clone()
    with torch.no_grad():
        for k in KINKS.get(act, ()):
            near = (pre - k).abs() < 0.0625
            r += (near * torch.where(pre >= k, 0.125, -0.125)).to(r.dtype)
    return r


def _grad_off_kinks(case, act, ts):
    """A random upstream gradient, zero where the exact pre-activation (float64, bias and residual included) lies
    within 8 eps of the dtype of one of act's derivative jumps (KINKS): the backward recomputes the pre-activation
    from the rounded convolution, bias and residual (up to three roundings at magnitudes up to ~8), so there the
    rounding picks the side; None for other activations."""
    if act not in KINKS:
        return None
    dtype = ts[0].dtype
    x, w, b, r = (t.double() if t is not None else None for t in _split(case, ts))
    with torch.no_grad():
        pre = conv_act_reference(x, w, b, **case[5], activation="none", residual=r)
    return grad_off_kinks(pre, act, dtype, lambda k: 8 * torch.finfo(dtype).eps)


# (label, input shape, weight shape, bias, residual layout or None (conv_bias_act), keywords, input layout)
CASES = [
    ("2-D 3x3 pad 1", (2, 5, 7, 6), (6, 5, 3, 3), True, None, dict(padding=1), "contiguous"),
    ("2-D 3x3/2 NHWC + residual NCHW", (2, 8, 9, 7), (8, 8, 3, 3), True, "contiguous", dict(stride=2, padding=1),
     "channels_last"),
    ("2-D 1x1 + residual", (2, 8, 5, 5), (16, 8, 1, 1), True, "channels_last", {}, "channels_last"),
    ("2-D groups 2 dilation 2, no bias + residual", (2, 6, 9, 9), (4, 3, 3, 3), False, "strided",
     dict(padding=2, dilation=2, groups=2), "contiguous"),
    ("2-D depthwise 'same'", (2, 6, 7, 5), (6, 1, 3, 3), True, None, dict(padding="same", groups=6), "contiguous"),
    ("1-D stride 2 + residual", (2, 5, 13), (7, 5, 3), True, "contiguous", dict(stride=2, padding=1), "nlc"),
    ("3-D + residual", (2, 3, 4, 5, 4), (5, 3, 3, 3, 3), True, "contiguous", dict(padding=1), "contiguous"),
    ("unbatched + residual", (3, 6, 5), (4, 3, 3, 3), True, "contiguous", dict(padding=1), "contiguous"),
]


def _inputs(case, dtype, device):
    _, xs, ws, bias, res, kw, lay = case
    x = random_in_layout(xs, dtype, device, lay)
    w = random_in_layout(ws, dtype, device, low=-0.5, high=0.5)
    b = random_in_layout((ws[0],), dtype, device) if bias else None
    r = None
    if res is not None:
        with torch.no_grad():
            shape = conv_act_reference(x.double(), w.double(), None, **kw, activation="none").shape
        r = random_in_layout(shape, dtype, device, res)
    return x, w, b, r


def _split(case, ts):
    """(x, w, bias or None, residual or None) from the case's tensor list (x, w, then the bias and residual where the
    case has them)."""
    ts = list(ts)
    return ts[0], ts[1], ts[2] if case[3] else None, ts[-1] if case[4] is not None else None


def _fns(case, act, act_a=None, act_b=None):
    """(ours, theirs, the float64 reference) over the given tensors (x, w, then the bias and residual where the
    case has them)."""
    kw = case[5]

    def ours(*ts):
        x, w, b, r = _split(case, ts)
        if r is None:
            return F.conv_bias_act(x, w, b, act, act_a=act_a, act_b=act_b, **kw)
        return F.conv_bias_add_act(x, w, b, r, act, act_a=act_a, act_b=act_b, **kw)

    def theirs(*ts):
        x, w, b, r = _split(case, ts)
        return conv_act_reference(x, w, b, **kw, activation=act, residual=r, act_a=act_a, act_b=act_b)

    def ref(*ts):
        if act not in EXACT:
            return theirs(*ts)
        x, w, b, r = _split(case, ts)
        return EXACT[act](conv_act_reference(x, w, b, **kw, activation="none", residual=r))

    return ours, theirs, ref


def _tensors(x, w, b, r):
    return [t for t in (x, w, b, r) if t is not None]


class TestConvFused(FamilyTester):
    variants = ACTS + ("params",)

    def against_torch(self, device, dtype, variant):
        acts = [(a, *PARAMS[a]) for a in PARAMS] if variant == "params" else [(variant, None, None)]
        for act, a, b in acts:
            for case in CASES:
                ours, theirs, ref = _fns(case, act, a, b)
                ts = _tensors(*_inputs(case, dtype, device))
                yield Against(f"{act} {case[0]} {dtype}", ours, theirs, ts, ref_fn=ref,
                              grad_output=_grad_off_kinks(case, act, ts))

    def gradcheck_cases(self, device):
        out = []
        for label, act, params in (("2-D 3x3 pad 1", "gelu", (None, None)),
                                   ("2-D groups 2 dilation 2, no bias + residual", "silu", (None, None)),
                                   ("1-D stride 2 + residual", "relu", (None, None)),
                                   ("3-D + residual", "tanh", (None, None)),
                                   ("unbatched + residual", "softplus", PARAMS["softplus"]),
                                   ("2-D 3x3/2 NHWC + residual NCHW", "elu", PARAMS["elu"])):
            case = next(c for c in CASES if c[0] == label)
            x, w, b, r = _inputs(case, torch.float64, device)
            if x.dim() == 4:
                x, r = x[:1], (r[:1] if r is not None else None)  # small: gradcheck is O(elements^2)
            ours = _fns(case, act, *params)[0]
            out.append(GradCase(f"{act} {label}", ours,
                                tuple(t.detach().requires_grad_() for t in _tensors(x, w, b, r))))
        return out

    def gradgradcheck_cases(self, device):
        keep = ("gelu 2-D 3x3 pad 1", "relu 1-D stride 2 + residual", "silu 2-D groups 2 dilation 2, no bias + residual")
        return [c for c in self.gradcheck_cases(device) if c.name in keep]

    def opcheck_samples(self, device):
        def t(shape, dtype=torch.float32, layout="contiguous", grad=False):
            r = random_in_layout(shape, dtype, device, layout)
            return r.requires_grad_() if grad else r

        x, w = t((2, 3, 5, 5), grad=True), t((4, 3, 3, 3), grad=True)
        return [
            (ops.conv_bias_act, (x, w, t((4,), grad=True), [1, 1], [1, 1], [1, 1], 1, "gelu"), {}),
            (ops.conv_bias_act, (t((2, 4, 7, 5), torch.bfloat16, "channels_last", True),
                                 t((6, 2, 3, 3), torch.bfloat16, grad=True), None, [2], [1], [1], 2, "relu"), {}),
            (ops.conv_bias_act, (t((2, 3, 9), torch.float64, grad=True), t((3, 3, 3), torch.float64, grad=True),
                                 t((3,), torch.float64), [1], [0], [2], 1, "leaky_relu", 0.3), {}),
            (ops.conv_bias_add_act, (x, w, t((4,), grad=True), t((2, 4, 5, 5), grad=True), [1, 1], [1, 1], [1, 1],
                                     1, "silu"), {}),
            (ops.conv_bias_add_act, (t((2, 2, 3, 4, 3), torch.float64, grad=True), t((3, 2, 2, 2, 2), torch.float64),
                                     None, t((2, 3, 2, 3, 2), torch.float64, "channels_last", True), [1], [0], [1], 1,
                                     "softplus", 2.0, 5.0), {}),
            (ops.conv_bias_add_act, (t((2, 3, 5, 5)), t((4, 3, 3, 3)), t((4,)), t((2, 4, 5, 5)), [1, 1], [1, 1],
                                     [1, 1], 1, "none"), {}),
        ]

    def compile_cases(self, device):
        for label, act in (("2-D 3x3/2 NHWC + residual NCHW", "relu"), ("2-D 3x3 pad 1", "gelu")):
            case = next(c for c in CASES if c[0] == label)
            ours, theirs, _ = _fns(case, act)
            yield Against(f"{act} {label}", ours, theirs, _tensors(*_inputs(case, torch.float32, device)))
        torch.manual_seed(0)
        native = _small_cnn().to(device)
        converted, report = torch_dnn.convert(native, include=CONVS, fuse=True)
        assert len(report.fused) == 2
        yield ModelCase("small CNN fused", converted, native,
                        random_in_layout((2, 3, 9, 9), torch.float32, device, "channels_last"))

    def bad_inputs(self):
        x, w, b, r = torch.ones(2, 3, 5, 5), torch.ones(4, 3, 3, 3), torch.ones(4), torch.ones(2, 4, 3, 3)
        return [
            BadInput(lambda: F.conv_bias_act(x, w, b, "swish"), "torch_dnn.conv_bias_act", "activation"),
            BadInput(lambda: F.conv_bias_act(x, torch.ones(4, 2, 3, 3), b), "torch_dnn.conv_bias_act", "channels"),
            BadInput(lambda: F.conv_bias_act(x, w, torch.ones(5)), "torch_dnn.conv_bias_act", "bias"),
            BadInput(lambda: F.conv_bias_act(x, w, b, stride=0), "torch_dnn.conv_bias_act", "stride"),
            BadInput(lambda: F.conv_bias_act(x, w, b, groups=2), "torch_dnn.conv_bias_act", "groups"),
            BadInput(lambda: F.conv_bias_act(x, w.double(), b), "torch_dnn.conv_bias_act", "weight"),
            BadInput(lambda: F.conv_bias_add_act(x, w, b, torch.ones(2, 4, 5, 5)), "torch_dnn.conv_bias_add_act",
                     "residual"),
            BadInput(lambda: F.conv_bias_add_act(x, w, b, r.double()), "torch_dnn.conv_bias_add_act", "residual"),
            BadInput(lambda: F.conv_bias_add_act(x, w, b, r.to("meta")), "torch_dnn.conv_bias_add_act", "device"),
            BadInput(lambda: F.conv_bias_add_act(x, w, b, r.int()), "torch_dnn.conv_bias_add_act", "residual"),
            BadInput(lambda: F.conv_bias_add_act(x, w, b, r, "relu", padding=-1), "torch_dnn.conv_bias_add_act",
                     "padding"),
            BadInput(lambda: F.conv_bias_act(x[0, 0], w), None, "Expected 3D (unbatched) or 4D (batched) input"),
            BadInput(lambda: F.conv_bias_act(x, w[0, 0]), None, "expected weight to be 3-D, 4-D or 5-D"),
        ]

    def cuda_graph_step(self):
        x = random_in_layout((4, 32, 14, 14), torch.bfloat16, "cuda", "channels_last").requires_grad_()
        w = random_in_layout((64, 32, 3, 3), torch.bfloat16, "cuda").requires_grad_()
        b = random_in_layout((64,), torch.bfloat16, "cuda").requires_grad_()
        r = random_in_layout((4, 64, 14, 14), torch.bfloat16, "cuda", "channels_last").requires_grad_()

        def step():
            y = F.conv_bias_add_act(x, w, b, r, "relu", padding=1)
            gx, gw, gb, gr = torch.autograd.grad(y.float().square().sum(), [x, w, b, r])
            return y, gx, gw, gb, gr

        return step, lambda: x.copy_(random_in_layout((4, 32, 14, 14), torch.bfloat16, "cuda", "channels_last"))

    def past_2_31_cases(self):
        return {"conv_bias_add_act 1-D": _past_2_31_elements}


def _past_2_31_elements():
    # one channel, one long row: 64-bit offsets in the direct kernels' epilogue (bias, residual, activation); the
    # last positions' reference is PyTorch's composition on the row's tail alone
    n = 2**31 + 4099
    x = torch.empty((1, 1, n), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    r = torch.empty((1, 1, n), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    w, b = random_in_layout((1, 1, 3), torch.bfloat16, "cuda"), random_in_layout((1,), torch.bfloat16, "cuda")
    y = F.conv_bias_add_act(x, w, b, r, "silu", padding=1)
    tx, tr = x[..., -64:], r[..., -63:]
    ref = [TF.silu(TF.conv1d(tx.to(d), w.to(d), b.to(d), padding=1)[..., -63:] + tr.to(d))
           for d in (torch.bfloat16, torch.float64)]
    v = compare(y[..., -63:], *ref, name="conv_bias_add_act past 2^31")
    assert v, v.message


def _small_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, stride=2, groups=4),
        torch.nn.SiLU(), torch.nn.Conv2d(8, 5, 1))


# ---- CUDA: the tensor-core paths' epilogue ----

@pytest.mark.cuda
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("residual", [False, True], ids=["bias_act", "bias_add_act"])
def test_tensor_core_epilogue(act, residual):
    """bf16 channels-last, C and K multiples of 8 (the layouts the Hopper and portable implicit-GEMM paths take):
    3x3 and 1x1 (a GEMM) layers, every activation, against the unfused composition by the error rule."""
    for xs, ws, kw in (((4, 64, 14, 14), (64, 64, 3, 3), dict(padding=1)), ((4, 64, 14, 14), (128, 64, 1, 1), {}),
                       ((4, 32, 15, 15), (64, 32, 3, 3), dict(stride=2, padding=1))):
        x = random_in_layout(xs, torch.bfloat16, "cuda", "channels_last")
        w = random_in_layout(ws, torch.bfloat16, "cuda", "channels_last", low=-0.2, high=0.2)
        b = random_in_layout((ws[0],), torch.bfloat16, "cuda")
        ins, grad_output = [x, w, b], None
        with torch.no_grad():
            pre = TF.conv2d(x.double(), w.double(), b.double(), **kw)
        if residual:
            r = random_in_layout(pre.shape, torch.bfloat16, "cuda", "channels_last")
            ins.append(_off_kinks(r, act, pre + r.double()).contiguous(memory_format=torch.channels_last))
            ours = lambda x, w, b, r: F.conv_bias_add_act(x, w, b, r, act, **kw)  # noqa: E731
        else:
            # no residual to move the pre-activation with: outputs within _off_kinks' margin of a derivative jump
            # get a zero upstream gradient instead (which side of the jump bf16 rounding puts them on is chance)
            grad_output = grad_off_kinks(pre, act, torch.bfloat16, lambda k: 0.0625)
            ours = lambda x, w, b: F.conv_bias_act(x, w, b, act, **kw)  # noqa: E731
        theirs = lambda x, w, b, r=None: conv_act_reference(x, w, b, **kw, activation=act, residual=r)  # noqa: E731
        ref = (lambda x, w, b, r=None: EXACT[act](conv_act_reference(x, w, b, **kw, activation="none", residual=r))
               ) if act in EXACT else None
        Against(f"{act} {ws} {kw}", ours, theirs, ins, ref_fn=ref, grad_output=grad_output).check()


# ---- convert(model, fuse=True) ----

def _randomize_bn(bn):
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        if bn.weight is not None:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    return bn


def _bn_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), _randomize_bn(torch.nn.BatchNorm2d(8)), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, groups=4, bias=False), _randomize_bn(torch.nn.BatchNorm2d(8, affine=False)),
        torch.nn.Conv2d(8, 6, 1), _randomize_bn(torch.nn.BatchNorm2d(6)), torch.nn.SiLU(),
        torch.nn.Sequential(torch.nn.Conv2d(6, 4, 3, padding_mode="reflect", padding=1),
                            _randomize_bn(torch.nn.BatchNorm2d(4)), torch.nn.GELU(approximate="tanh")),
    )


def _assert_eval_agrees(native, converted, x, name):
    """converted(x) against native(x) by the error rule, the reference native in float64."""
    ref = copy.deepcopy(native).double()
    with torch.no_grad():
        v = compare(converted(x), native(x), ref(x.double()), name=name)
    assert v, v.message


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("include", [(), CONVS], ids=["convs native", "convs swapped"])
def test_convert_folds_batch_norm_and_fuses(device, include):
    native = _bn_model().to(device).eval()
    converted, report = torch_dnn.convert(native, fuse=True, include=include)
    assert [b for _, b in report.folded] == ["1", "4", "6", "8.1"]
    assert all(type(converted[i]) is torch_dnn.nn.FusedAway for i in (1, 4, 6))
    if include:
        # after folding, each activation follows its convolution: fused into Conv2dAct (the BatchNorm between
        # them counts as absent)
        assert [(a, b, act, p.into) for p in report.fused for a, b, act in [p]] == [
            ("0", "2", "relu", "Conv2dAct"), ("5", "7", "silu", "Conv2dAct"), ("8.0", "8.2", "gelu_tanh", "Conv2dAct")]
        assert type(converted[0]) is torch_dnn.nn.Conv2dAct and type(converted[3]) is torch_dnn.nn.Conv2d
        assert "fused   0 + 2 -> torch_dnn.nn.Conv2dAct(activation='relu')" in str(report)
    else:
        assert not report.fused and type(converted[0]) is torch.nn.Conv2d  # convolutions are opt-in
    assert "folded  1 into 0" in str(report)
    for layout in ("contiguous", "channels_last"):
        x = random_in_layout((2, 3, 11, 9), torch.float32, device, layout)
        _assert_eval_agrees(native, converted, x, f"fused model {layout}")
    # the native model is untouched (convert copies)
    assert type(native[1]) is torch.nn.BatchNorm2d and native[0].weight.dtype == torch.float32


@pytest.mark.parametrize("device", devices())
def test_convert_folds_1d_and_3d(device):
    torch.manual_seed(0)
    native = torch.nn.Sequential(torch.nn.Conv3d(3, 4, 3, padding=1), _randomize_bn(torch.nn.BatchNorm3d(4)),
                                 torch.nn.ReLU()).to(device).eval()
    converted, report = torch_dnn.convert(native, fuse=True, include=CONVS)
    assert report.folded == [("0", "1")] and type(converted[0]) is torch_dnn.nn.Conv3dAct
    _assert_eval_agrees(native, converted, random_in_layout((2, 3, 5, 4, 6), torch.float32, device), "3-D")
    native = torch.nn.Sequential(torch.nn.Conv1d(3, 4, 3), _randomize_bn(torch.nn.BatchNorm1d(4)),
                                 torch.nn.LeakyReLU(0.2)).to(device).eval()
    converted, report = torch_dnn.convert(native, fuse=True, include=CONVS)
    assert report.folded == [("0", "1")] and converted[0].act_a == 0.2
    _assert_eval_agrees(native, converted, random_in_layout((2, 3, 9), torch.float32, device), "1-D")


def test_convert_leaves_training_and_mismatched_batch_norms():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    converted, report = torch_dnn.convert(model, fuse=True, include=CONVS)  # training mode: no folding
    assert not report.folded and type(converted[1]) is torch_dnn.nn.BatchNorm2d
    assert not report.fused  # the BatchNorm stands between the convolution and the activation
    model.eval()
    model[1].running_mean = None  # no running statistics
    model[1].running_var = None
    _, report = torch_dnn.convert(model, fuse=True)
    assert not report.folded
    mixed = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm1d(4)).eval()  # a BatchNorm of another rank
    _, report = torch_dnn.convert(mixed, fuse=True)
    assert not report.folded
    hooked = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
    hooked[1].register_forward_hook(lambda m, i, o: None)
    _, report = torch_dnn.convert(hooked, fuse=True)
    assert not report.folded
    _, report = torch_dnn.convert(model.train(), fuse=False, include=CONVS)
    assert not report.folded and not report.fused


@pytest.mark.parametrize("device", devices())
def test_conv_act_module_trains_as_native(device):
    """A fused Conv2dAct in training mode: outputs and every gradient against the native Conv2d + ReLU (error rule,
    float64 reference), its parameters shared with the convolution it was made from."""
    torch.manual_seed(0)
    native = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.ReLU(),
                                 torch.nn.Conv2d(8, 8, 3, padding=1, padding_mode="circular"), torch.nn.Hardswish())
    native = native.to(device)
    converted, report = torch_dnn.convert(native, fuse=True, include=CONVS)
    assert len(report.fused) == 2 and converted[0].weight is not native[0].weight  # convert copied the model
    assert converted.state_dict().keys() == native.state_dict().keys()
    ModelCase("Conv2dAct train", converted, native, random_in_layout((2, 4, 7, 6), torch.float32, device)).check()


@pytest.mark.parametrize("act", ["gelu", "relu", "softplus"])
def test_torch_func_grad(act):
    """torch.func.grad takes the ops' Python formula (torch_dnn/ops/conv.py, the C++ kernel's twin): float64
    gradients of every input against the unfused composition's, to rounding."""
    torch.manual_seed(0)
    x, w, b, r = (torch.randn(s, dtype=torch.float64) for s in ((2, 4, 6, 5), (6, 4, 3, 3), (6,), (2, 6, 6, 5)))
    a = 2.0 if act == "softplus" else None
    ours = torch.func.grad(lambda *t: F.conv_bias_add_act(*t, act, padding=1, act_a=a).square().sum(),
                           argnums=(0, 1, 2, 3))(x, w, b, r)
    ref = torch.func.grad(lambda *t: conv_act_reference(*t[:3], padding=1, activation=act, residual=t[3],
                                                        act_a=a).square().sum(), argnums=(0, 1, 2, 3))(x, w, b, r)
    for o, e in zip(ours, ref):
        torch.testing.assert_close(o, e, rtol=1e-12, atol=1e-12)
