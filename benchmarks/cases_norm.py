"""Benchmark cases of the norm family: layer_norm and rms_norm forward and backward at 32768x4096,
8192x16384 and the converted models' 8192x512 and 3152x768 (bf16, fp32) against eager and torch.compile of the same function, and the fused pre-norm
residual step add_rms_norm against eager add followed by rms_norm (and its compiled form)."""

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import Case, dtype_tag, rand_cuda, with_env
from torch_dnn.reference import add_rms_norm_reference

ops = torch.ops.torch_dnn
aten = torch.ops.aten

# the large rows, and the rows of the converted models (the 4k-context LLaMA's 8192 tokens x 512, a ViT-B /
# BERT-base batch's 3152 tokens x 768): many short rows, where the backward's per-block partial sums of dw and db
# are a larger share of the traffic
SHAPES = [(32768, 4096), (8192, 16384), (8192, 512), (3152, 768)]
DTYPES = [torch.bfloat16, torch.float32]


def _rand(shape, dtype, lo=-4.0, hi=4.0):
    return rand_cuda(shape, dtype, "NCHW", lo, hi)



def _compiled(fn):
    return torch.compile(fn, dynamic=False)


def _ln_bwd_inputs(shape, dtype):
    x, w, b = _rand(shape, dtype), _rand(shape[1:], dtype, 0.5, 1.5), _rand(shape[1:], dtype)
    _, mean, rstd = ops.layer_norm(x, [shape[1]], w, b, 1e-5)
    return _rand(shape, dtype, -1, 1), x, mean, rstd, w, b


def _rms_bwd_inputs(shape, dtype):
    x, w = _rand(shape, dtype), _rand(shape[1:], dtype, 0.5, 1.5)
    _, rstd = ops.rms_norm(x, [shape[1]], w, 1e-6)
    return _rand(shape, dtype, -1, 1), x, rstd, w


def cases(quick: bool = False):
    out = []
    shapes = SHAPES[:1] if quick else SHAPES
    for dtype in DTYPES:
        es = torch.empty((), dtype=dtype).element_size()
        group = f"norm {dtype_tag(dtype)}"
        for shape in shapes:
            rows, n = shape
            numel = rows * n
            tag = f"{rows}x{n} {dtype_tag(dtype)}"
            # minimum traffic: the input read and the output written once, parameters once, the per-row
            # statistics (float32) the backward reads
            stats = rows * 4

            def ln(x, w, b, n=n):
                return TF.layer_norm(x, [n], w, b)

            out.append(Case("norm", f"layer_norm fwd {tag}",
                            lambda s=shape, d=dtype: (_rand(s, d), _rand(s[1:], d, 0.5, 1.5), _rand(s[1:], d)),
                            {"torch_dnn": (ln_ours := lambda x, w, b, n=n: F.layer_norm(x, [n], w, b)), "eager": ln,
                             "compile": _compiled(ln),
                             "td-old": with_env(ln_ours, TORCH_DNN_NORM_FWD_STATS="twopass",
                                                 TORCH_DNN_NORM_FWD_GRID="waves"),
                             "td-fused-rows": with_env(ln_ours, TORCH_DNN_NORM_FWD_STATS="fused",
                                                        TORCH_DNN_NORM_FWD_GRID="rows")},
                            bytes=2 * numel * es + 2 * n * es, target=">=2.7 TB/s", group=group))

            def ln_bwd_eager(g, x, mean, rstd, w, b, n=n):
                return aten.native_layer_norm_backward(g, x, [n], mean.unsqueeze(-1), rstd.unsqueeze(-1), w, b,
                                                       [True, True, True])

            out.append(Case("norm", f"layer_norm bwd {tag}", lambda s=shape, d=dtype: _ln_bwd_inputs(s, d),
                            {"torch_dnn": (ln_bwd := lambda g, x, mean, rstd, w, b, n=n: ops.layer_norm_backward(
                                g, x, mean, rstd, w, [n], [True, True, True])),
                             "eager": ln_bwd_eager, "compile": _compiled(ln_bwd_eager),
                             "td-2/SM": with_env(ln_bwd, TORCH_DNN_NORM_BWD_BLOCKS="2")},
                            bytes=3 * numel * es + 3 * n * es + 2 * stats, target=">=2.4 TB/s", group=group))

            def rms(x, w, n=n):
                return TF.rms_norm(x, [n], w, 1e-6)

            out.append(Case("norm", f"rms_norm fwd {tag}", lambda s=shape, d=dtype: (_rand(s, d), _rand(s[1:], d, 0.5, 1.5)),
                            {"torch_dnn": (rms_ours := lambda x, w, n=n: F.rms_norm(x, [n], w, 1e-6)), "eager": rms,
                             "compile": _compiled(rms), "td-old": with_env(rms_ours, TORCH_DNN_NORM_FWD_GRID="waves")},
                            bytes=2 * numel * es + n * es, target=">=2.7 TB/s", group=group))

            def rms_bwd_eager(g, x, rstd, w, n=n):
                return aten._fused_rms_norm_backward(g, x, [n], rstd.unsqueeze(-1), w, [True, True])

            out.append(Case("norm", f"rms_norm bwd {tag}", lambda s=shape, d=dtype: _rms_bwd_inputs(s, d),
                            {"torch_dnn": (rms_bwd := lambda g, x, rstd, w, n=n: ops.rms_norm_backward(
                                g, x, rstd, w, [n], [True, True])),
                             "eager": rms_bwd_eager, "compile": _compiled(rms_bwd_eager),
                             "td-2/SM": with_env(rms_bwd, TORCH_DNN_NORM_BWD_BLOCKS="2")},
                            bytes=3 * numel * es + 2 * n * es + stats, target=">=2.4 TB/s", group=group))

            def add_rms(x, r, w, n=n):
                return add_rms_norm_reference(x, r, [n], w, 1e-6)

            # read x and residual, write sum and out
            out.append(Case("norm", f"add_rms_norm fwd {tag}",
                            lambda s=shape, d=dtype: (_rand(s, d), _rand(s, d), _rand(s[1:], d, 0.5, 1.5)),
                            {"torch_dnn": (add_ours := lambda x, r, w, n=n: F.add_rms_norm(x, r, [n], w, 1e-6)),
                             "eager": add_rms, "compile": _compiled(add_rms),
                             "td-old": with_env(add_ours, TORCH_DNN_NORM_FWD_GRID="waves")},
                            bytes=4 * numel * es + n * es, target=">=2.7 TB/s", group=group))
    return out
