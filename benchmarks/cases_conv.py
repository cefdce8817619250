"""Benchmark cases of the convolution family (TFLOP/s): ResNet-50's distinct convolutions and MobileNet/EfficientNet
depthwise layers (3x3, 5x5/2, ConvNeXt's 7x7; their input and weight gradients also one by one), N = 64, bf16, channels_last, forward alone and forward+backward (autograd: d_input, d_weight), and
the fused conv_bias_act(relu) / conv_bias_add_act(relu) forwards at ResNet-50's layers,
against F.conv2d (cuDNN, torch.backends.cudnn.benchmark = True, as issue 36's targets are measured) and its
torch.compile; three of the layers also in float16 and float32 (TF32 on both sides, PyTorch's default for
convolutions). FLOPs are the convolution's multiply-adds x 2 (x 3 for forward+backward: dgrad and wgrad each
cost the forward's); bytes the minimum traffic (input, weight and output once each; x 3 for forward+backward)."""
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import Case, dtype_tag, rand_cuda, with_env

N = 64

# (label, C_in, C_out, kernel, stride, padding, spatial input size, groups)
LAYERS = [
    ("3x3 64->64 @56", 64, 64, 3, 1, 1, 56, 1),
    ("3x3 128->128 @28", 128, 128, 3, 1, 1, 28, 1),
    ("3x3 256->256 @14", 256, 256, 3, 1, 1, 14, 1),
    ("3x3 512->512 @7", 512, 512, 3, 1, 1, 7, 1),
    ("1x1 256->64 @56", 256, 64, 1, 1, 0, 56, 1),
    ("1x1 64->256 @56", 64, 256, 1, 1, 0, 56, 1),
    ("1x1/2 1024->2048 @14", 1024, 2048, 1, 2, 0, 14, 1),
    ("7x7/2 stem 3->64 @224", 3, 64, 7, 2, 3, 224, 1),
    ("depthwise 3x3 384 @28", 384, 384, 3, 1, 1, 28, 384),
    ("depthwise 5x5/2 144 @56", 144, 144, 5, 2, 2, 56, 144),
    ("depthwise 7x7 96 @56", 96, 96, 7, 1, 3, 56, 96),  # ConvNeXt-T's first stage
]

# the layers also run with NCHW operands (staged for the tensor-core paths: conv_staging.h)
NCHW_LAYERS = ("3x3 64->64 @56", "1x1 256->64 @56", "7x7/2 stem 3->64 @224")

# the layers also run in float16 and float32 (TF32)
OTHER_DTYPE_LAYERS = ("3x3 64->64 @56", "3x3 256->256 @14", "1x1 256->64 @56")

# cuDNN's targets of issue 36 (TFLOP/s, fwd / fwd+bwd), where measured
TARGETS = {"3x3 64->64 @56": (313, 176), "3x3 256->256 @14": (456, 330), "1x1 256->64 @56": (118, 106),
           "7x7/2 stem 3->64 @224": (32.5, 26.5), "1x1/2 1024->2048 @14": (412, 329),
           "depthwise 3x3 384 @28": (7.8, 6.6)}


def _cudnn_benchmark(fn):
    """fn with torch.backends.cudnn.benchmark on (cuDNN autotunes each shape once, as the targets were measured)."""
    def run(*args):
        old = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True
        try:
            return fn(*args)
        finally:
            torch.backends.cudnn.benchmark = old
    return run


def _cases_of(label, cin, cout, k, stride, pad, size, groups, dtype, layout="NHWC"):
    # float32 computes on TF32 tensor cores on both sides: torch.backends.cudnn.allow_tf32 is on by default
    tag = "tf32" if dtype == torch.float32 else dtype_tag(dtype)
    es = torch.empty((), dtype=dtype).element_size()
    out = (size + 2 * pad - k) // stride + 1
    flops = 2 * N * cout * out * out * (cin // groups) * k * k
    x_bytes, w_bytes, y_bytes = N * cin * size * size * es, cout * (cin // groups) * k * k * es, N * cout * out * out * es

    def conv(fn):
        return lambda x, w: fn(x, w, None, stride, pad, 1, groups)

    def inputs(grad=False):
        x = rand_cuda((N, cin, size, size), dtype, layout, -1, 1)
        w = rand_cuda((cout, cin // groups, k, k), dtype, layout, -0.1, 0.1)
        if not grad:
            return x, w
        g = rand_cuda((N, cout, out, out), dtype, layout, -1, 1)
        return x.requires_grad_(), w.requires_grad_(), g

    def fwd_bwd(fn):
        def run(x, w, g):
            return torch.autograd.grad(fn(x, w), [x, w], g)
        return run

    eager = conv(TF.conv2d)
    compiled = torch.compile(eager, dynamic=False)
    ours = {"torch_dnn": conv(F.conv2d)}
    if layout == "NCHW" or cin % 8 != 0 or cout % 8 != 0:  # staged: also without staging (the direct kernels)
        ours["torch_dnn unstaged"] = with_env(conv(F.conv2d), TORCH_DNN_CONV_STAGE="0")
    fwd_target, fb_target = TARGETS.get(label, (None, None))
    target = (lambda t: f">= cuDNN ({t} TFLOP/s)" if t else ">= cuDNN")
    fwd = Case("conv", f"conv {label} fwd {tag} {layout}", inputs,
               {**ours, "cuDNN (F.conv2d)": _cudnn_benchmark(eager),
                "compile": _cudnn_benchmark(compiled)},
               bytes=x_bytes + w_bytes + y_bytes, flops=flops, group=f"conv forward {tag} {layout}",
               target=target(fwd_target))
    fb = Case("conv", f"conv {label} fwd+bwd {tag} {layout}", lambda: inputs(True),
              {**{k: fwd_bwd(v) for k, v in ours.items()}, "cuDNN (F.conv2d)": _cudnn_benchmark(fwd_bwd(eager)),
               "compile": _cudnn_benchmark(fwd_bwd(compiled))},
              bytes=3 * (x_bytes + w_bytes + y_bytes), flops=3 * flops,
              group=f"conv forward+backward {tag} {layout}",
              target=target(fb_target))
    if cin > 4:
        return [fwd, fb]
    # a network's first convolution: its input needs no gradient, so its backward is the weight gradient alone
    def fwd_wgrad(fn):
        def run(x, w, g):
            return torch.autograd.grad(fn(x, w), [w], g)
        return run

    def stem_inputs():
        x, w, g = inputs(True)
        return x.detach(), w, g

    fw = Case("conv", f"conv {label} fwd+wgrad {tag} {layout}", stem_inputs,
              {**{k: fwd_wgrad(v) for k, v in ours.items()}, "cuDNN (F.conv2d)": _cudnn_benchmark(fwd_wgrad(eager)),
               "compile": _cudnn_benchmark(fwd_wgrad(compiled))},
              bytes=2 * (x_bytes + w_bytes + y_bytes), flops=2 * flops, group=f"conv forward+backward {tag} {layout}",
              target=">= cuDNN")
    return [fwd, fb, fw]


def _pass_cases_of(label, cin, cout, k, stride, pad, size, groups, dtype):
    """The input gradient and the weight gradient alone (NHWC), ours (conv_backward_input / conv_backward_weight)
    against cuDNN's (aten.convolution_backward with one output asked for): which pass of forward+backward loses.
    Bytes: the two operands read and the gradient written, once each."""
    tag = "tf32" if dtype == torch.float32 else dtype_tag(dtype)
    es = torch.empty((), dtype=dtype).element_size()
    out = (size + 2 * pad - k) // stride + 1
    flops = 2 * N * cout * out * out * (cin // groups) * k * k
    x_bytes, w_bytes, y_bytes = N * cin * size * size * es, cout * (cin // groups) * k * k * es, N * cout * out * out * es
    geo = ([stride, stride], [pad, pad], [1, 1], False, [0, 0], groups)

    def inputs():
        x = rand_cuda((N, cin, size, size), dtype, "NHWC", -1, 1)
        w = rand_cuda((cout, cin // groups, k, k), dtype, "NHWC", -0.1, 0.1)
        return x, w, rand_cuda((N, cout, out, out), dtype, "NHWC", -1, 1)

    def cudnn(mask):
        i = mask.index(True)
        return _cudnn_benchmark(
            lambda x, w, g: torch.ops.aten.convolution_backward(g, x, w, None, *geo, mask)[i])

    ops = torch.ops.torch_dnn
    return [
        Case("conv", f"conv {label} dgrad {tag} NHWC", inputs,
             {"torch_dnn": lambda x, w, g: ops.conv_backward_input(g, w, list(x.shape), *geo),
              "cuDNN (convolution_backward)": cudnn([True, False, False])},
             bytes=x_bytes + w_bytes + y_bytes, flops=flops, group=f"conv backward passes {tag} NHWC", target=">= cuDNN"),
        Case("conv", f"conv {label} wgrad {tag} NHWC", inputs,
             {"torch_dnn": lambda x, w, g: ops.conv_backward_weight(g, x, list(w.shape), *geo),
              "cuDNN (convolution_backward)": cudnn([False, True, False])},
             bytes=x_bytes + w_bytes + y_bytes, flops=flops, group=f"conv backward passes {tag} NHWC", target=">= cuDNN"),
    ]


def _fused_cases_of(label, cin, cout, k, stride, pad, size, groups, dtype):
    """conv_bias_act(relu) and conv_bias_add_act(relu), forward, against F.conv2d with the bias (cuDNN, benchmark
    mode) followed by PyTorch's residual add and relu (eager), and that composition compiled. Bytes: input, weight,
    bias, output (and the residual) once each; FLOPs: the convolution's."""
    es = torch.empty((), dtype=dtype).element_size()
    out = (size + 2 * pad - k) // stride + 1
    flops = 2 * N * cout * out * out * (cin // groups) * k * k
    base = (N * cin * size * size + cout * (cin // groups) * k * k + cout + N * cout * out * out) * es
    res_bytes = N * cout * out * out * es

    def inputs(residual):
        def make():
            x = rand_cuda((N, cin, size, size), dtype, "NHWC", -1, 1)
            w = rand_cuda((cout, cin // groups, k, k), dtype, "NHWC", -0.1, 0.1)
            b = rand_cuda((cout,), dtype, "NCHW", -0.5, 0.5)
            return (x, w, b, rand_cuda((N, cout, out, out), dtype, "NHWC", -1, 1)) if residual else (x, w, b)
        return make

    def peer_act(x, w, b):
        return torch.relu(TF.conv2d(x, w, b, stride, pad, 1, groups))

    def peer_add_act(x, w, b, r):
        return torch.relu(TF.conv2d(x, w, b, stride, pad, 1, groups) + r)

    rows = []
    for name, residual, ours, peer in (
            ("conv_bias_act", False,
             lambda x, w, b: F.conv_bias_act(x, w, b, "relu", stride, pad, 1, groups), peer_act),
            ("conv_bias_add_act", True,
             lambda x, w, b, r: F.conv_bias_add_act(x, w, b, r, "relu", stride, pad, 1, groups), peer_add_act)):
        rows.append(Case("conv", f"{name}(relu) {label} fwd bf16 NHWC", inputs(residual),
                         {"torch_dnn": ours, "cuDNN + eager": _cudnn_benchmark(peer),
                          "compile": _cudnn_benchmark(torch.compile(peer, dynamic=False))},
                         bytes=base + (res_bytes if residual else 0), flops=flops,
                         group=f"{name}(relu) forward bf16 NHWC",
                         target=">= 1.15x cuDNN + eager (geometric mean over the layers)"))
    return rows


def cases(quick: bool = False):
    layers = LAYERS[:1] + [layer for layer in LAYERS if layer[0].startswith("depthwise")][:2] if quick else LAYERS
    out = [c for layer in layers for c in _cases_of(*layer, torch.bfloat16)]
    out += [c for layer in layers if layer[0] in NCHW_LAYERS for c in _cases_of(*layer, torch.bfloat16, "NCHW")]
    # float16 and float32 (TF32) at three of ResNet-50's layers: issue 36's "float16 as bfloat16", "TF32 >= 0.9x"
    other = [layer for layer in layers if layer[0] in OTHER_DTYPE_LAYERS]
    out += [c for dtype in (torch.float16, torch.float32) for layer in other for c in _cases_of(*layer, dtype)]
    # the depthwise layers' backward passes one by one (memory-bound kernels of their own: which pass loses)
    out += [c for layer in layers if layer[-1] == layer[1] > 1 for c in _pass_cases_of(*layer, torch.bfloat16)]
    # and TF32's (the Hopper path takes its forward and stride-1 input gradient, the portable one its weight gradient)
    out += [c for layer in other for c in _pass_cases_of(*layer, torch.float32)]
    # the fused epilogues at ResNet-50's layers (the depthwise layer is MobileNet's)
    resnet = [layer for layer in (LAYERS[:1] if quick else LAYERS) if layer[-1] == 1]
    return out + [c for layer in resnet for c in _fused_cases_of(*layer, torch.bfloat16)]
