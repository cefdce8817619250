"""Benchmark cases of the batch_norm family: batch_norm2d training on 64x256x56x56 bf16, NHWC and NCHW, and on
16x256x56x56 NCHW (the whole-channel kernels' size, against the separate passes), forward alone and forward+backward (autograd: d_input, d_weight, d_bias), against eager (cuDNN through
F.batch_norm) and torch.compile; evaluation (running statistics) forward on 64x256x56x56 in both layouts as GPU
time; batch_norm_add_act (bn + residual + relu) forward+backward NHWC against eager
bn, add, relu. Bytes are the minimum traffic: forward reads x and writes y (2 tensors), backward reads x and dy
and writes dx (3 tensors); the fused op adds the residual read and its gradient write. The fwd+bwd cases also
run as GPU time (CUDA-graph replay: harness.Case.graph), apart from the host."""
import math

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import Case, rand_cuda, with_env

SHAPE = (64, 256, 56, 56)
# A/B rows of the NHWC training passes: the separate passes, and the persistent kernels without L2-held rows,
# and with other ring shapes (slots x chunk KB; 6 x 16 by default)
VARIANTS = {"td separate": {"TORCH_DNN_BN_PERSIST": "0"}, "td L2=0": {"TORCH_DNN_BN_L2_MB": "0"},
            "td ring 4x32": {"TORCH_DNN_BN_RING": "4", "TORCH_DNN_BN_CHUNK_KB": "32"},
            "td ring 8x8": {"TORCH_DNN_BN_RING": "8", "TORCH_DNN_BN_CHUNK_KB": "8"},
            "td ring 8x16": {"TORCH_DNN_BN_RING": "8", "TORCH_DNN_BN_CHUNK_KB": "16"}}


def _params(c, dtype, grad=False):
    # float32 parameters and running statistics with bf16 activations, as in mixed-precision training
    w = rand_cuda((c,), torch.float32, "NCHW", 0.5, 1.5).requires_grad_(grad)
    b = rand_cuda((c,), torch.float32, "NCHW", -1, 1).requires_grad_(grad)
    rm = torch.zeros(c, device="cuda")
    rv = torch.ones(c, device="cuda")
    return w, b, rm, rv


def _bn_cases(dtype, layout, shape=SHAPE, variants=None, graph_variants=False):
    es = torch.empty((), dtype=dtype).element_size()
    numel = math.prod(shape)
    C = shape[1]
    tag = f"{'x'.join(map(str, shape))} {layout} bf16"
    variants = VARIANTS if variants is None else variants
    group = f"batch_norm {layout}"
    target = ">=1.8x cuDNN fwd+bwd" if layout == "NHWC" else ">=1x cuDNN"

    def fwd_inputs():
        return (rand_cuda(shape, dtype, layout),) + _params(C, dtype)

    def eager_fwd(x, w, b, rm, rv):
        return TF.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)

    ours_fwd = lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)  # noqa: E731
    fwd_impls = {"torch_dnn": ours_fwd, "eager": eager_fwd, "compile": torch.compile(eager_fwd, dynamic=False)}
    fwd_impls.update({name: with_env(ours_fwd, **env) for name, env in variants.items()})
    fwd = Case("batch_norm", f"batch_norm2d train fwd {tag}", fwd_inputs, fwd_impls,
               bytes=2 * numel * es, target=target, group=group)

    def fb_inputs():
        x = rand_cuda(shape, dtype, layout).requires_grad_()
        return (x,) + _params(C, dtype, grad=True) + (rand_cuda(shape, dtype, layout, -1, 1),)

    def fwd_bwd(fn):
        def run(x, w, b, rm, rv, g):
            y = fn(x, rm, rv, w, b, True, 0.1, 1e-5)
            return torch.autograd.grad(y, [x, w, b], g)
        return run

    compiled = torch.compile(lambda x, rm, rv, w, b, t, m, e: TF.batch_norm(x, rm, rv, w, b, t, m, e), dynamic=False)
    fb_impls = {"torch_dnn": fwd_bwd(F.batch_norm), "eager": fwd_bwd(TF.batch_norm), "compile": fwd_bwd(compiled)}
    fb_impls.update({name: with_env(fwd_bwd(F.batch_norm), **env) for name, env in variants.items()})
    fb = Case("batch_norm", f"batch_norm2d train fwd+bwd {tag}", fb_inputs, fb_impls,
              bytes=5 * numel * es, target=target, group=group)
    # the same step as GPU time (CUDA-graph replay of forward + autograd backward): the per-call rows include
    # the host's autograd path, which on some device hosts takes longer than the GPU work (p10-p90 wide)
    graph_impls = ("torch_dnn", "eager", "compile") + (tuple(variants) if graph_variants else ())
    fb_graph = Case("batch_norm", f"batch_norm2d train fwd+bwd {tag} graph", fb_inputs,
                    {k: fb_impls[k] for k in graph_impls}, bytes=5 * numel * es, target=target, group=group, graph=True)
    return [fwd, fb, fb_graph]


def _fused_case(dtype):
    es = torch.empty((), dtype=dtype).element_size()
    numel = math.prod(SHAPE)
    C = SHAPE[1]
    tag = f"{'x'.join(map(str, SHAPE))} NHWC bf16"

    def inputs():
        x = rand_cuda(SHAPE, dtype, "NHWC").requires_grad_()
        r = rand_cuda(SHAPE, dtype, "NHWC").requires_grad_()
        return (x, r) + _params(C, dtype, grad=True) + (rand_cuda(SHAPE, dtype, "NHWC", -1, 1),)

    def ours(x, r, w, b, rm, rv, g):
        y = F.batch_norm_add_act(x, rm, rv, w, b, r, "relu", True, 0.1, 1e-5)
        return torch.autograd.grad(y, [x, r, w, b], g)

    def eager_fn(x, r, w, b, rm, rv):
        return torch.relu(TF.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5) + r)

    def grads(fn):
        def run(x, r, w, b, rm, rv, g):
            return torch.autograd.grad(fn(x, r, w, b, rm, rv), [x, r, w, b], g)
        return run

    # minimum: fwd reads x, r, writes y; bwd reads x, r (or y), dy, writes dx, dr
    impls = {"torch_dnn": ours, "eager": grads(eager_fn), "compile": grads(torch.compile(eager_fn, dynamic=False))}
    # A/B (graph row): the forward's residual rows loaded where used instead of a chunk's two together
    ab = {"td res loads": with_env(ours, TORCH_DNN_BN_RES_PREFETCH="0")}
    return [Case("batch_norm", f"batch_norm_add_act(relu) fwd+bwd {tag}{how}", inputs,
                 {**impls, **(ab if how else {})}, bytes=8 * numel * es, target=">=1.8x eager",
                 group="batch_norm_add_act NHWC", graph=how != "") for how in ("", " graph")]


def _eval_cases(dtype):
    """batch_norm2d in evaluation (running statistics: one elementwise pass, y = x * a + b per channel) on SHAPE, both
    layouts, as GPU time (graph replay) against eager (cuDNN) and torch.compile. Bytes: x read, y written."""
    es = torch.empty((), dtype=dtype).element_size()
    numel = math.prod(SHAPE)
    C = SHAPE[1]
    out = []
    for layout in ("NHWC", "NCHW"):
        def inputs(layout=layout):
            w, b = rand_cuda((C,), torch.float32, "NCHW", 0.5, 1.5), rand_cuda((C,), torch.float32, "NCHW", -1, 1)
            rm, rv = rand_cuda((C,), torch.float32, "NCHW", -1, 1), rand_cuda((C,), torch.float32, "NCHW", 0.5, 2)
            return rand_cuda(SHAPE, dtype, layout), w, b, rm, rv

        def eager(x, w, b, rm, rv):
            return TF.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)

        impls = {"torch_dnn": lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5),
                 "eager": eager, "compile": torch.compile(eager, dynamic=False)}
        out.append(Case("batch_norm", f"batch_norm2d eval fwd {'x'.join(map(str, SHAPE))} {layout} bf16 graph", inputs,
                        impls, bytes=2 * numel * es, target=">=1x cuDNN", group=f"batch_norm {layout}", graph=True))
    return out


def cases(quick: bool = False):
    dtype = torch.bfloat16
    out = _bn_cases(dtype, "NHWC") + _bn_cases(dtype, "NCHW", variants={})
    # ResNet-50's batch-16 size: NCHW runs the whole-channel kernels, against the separate passes
    out += _bn_cases(dtype, "NCHW", (16, 256, 56, 56), {"td separate": {"TORCH_DNN_BN_CHANNEL_KB": "0"}},
                     graph_variants=True)
    if not quick:
        out += _eval_cases(dtype) + _fused_case(dtype)
    return out
