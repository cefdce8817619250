"""Benchmark cases of the softmax family: softmax and log_softmax forward and backward at 32768x4096 and
8192x32768 (bf16, fp32), plus rows of 128 and of 262,144 elements, against eager and torch.compile."""

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import Case, dtype_tag, rand_cuda, row_grid, with_env

ops = torch.ops.torch_dnn
aten = torch.ops.aten

SHAPES = [(32768, 4096), (8192, 32768), (2097152, 128), (256, 262144)]
DTYPES = [torch.bfloat16, torch.float32]


def _rand(shape, dtype, lo=-4.0, hi=4.0):
    return rand_cuda(shape, dtype, "NCHW", lo, hi)



def cases(quick: bool = False):
    out = []
    for dtype, es, shape, tag in row_grid(SHAPES, DTYPES, quick):
        n = shape[0] * shape[1]
        main = shape in SHAPES[:2]
        for name, ours, eager, ours_bwd, eager_bwd in (
            ("softmax", F.softmax, TF.softmax, ops.softmax_backward, aten._softmax_backward_data),
            ("log_softmax", F.log_softmax, TF.log_softmax, ops.log_softmax_backward,
             aten._log_softmax_backward_data),
        ):
            fwd_impls = {"torch_dnn": lambda x, f=ours: f(x, -1), "eager": lambda x, f=eager: f(x, -1)}
            bwd_impls = {"torch_dnn": lambda g, y, f=ours_bwd, d=dtype: f(g, y, -1, d),
                         "eager": lambda g, y, f=eager_bwd, d=dtype: f(g, y, -1, d)}
            if shape[1] > 8192:  # the other plans for long rows, forced, to keep the choice measured
                for plan in ("twopass", "split"):
                    fwd_impls[f"plan={plan}"] = with_env(fwd_impls["torch_dnn"], TORCH_DNN_SOFTMAX_PLAN=plan)
                    bwd_impls[f"plan={plan}"] = with_env(bwd_impls["torch_dnn"], TORCH_DNN_SOFTMAX_PLAN=plan)
            if main:
                fwd_impls["compile"] = torch.compile(lambda x, f=eager: f(x, -1), dynamic=False)
                bwd_impls["compile"] = torch.compile(lambda g, y, f=eager_bwd, d=dtype: f(g, y, -1, d), dynamic=False)
            target = ">=90% copy" + (", >=2x eager" if name == "softmax" else "")
            out.append(Case("softmax", f"{name} fwd {tag}", lambda s=shape, d=dtype: (_rand(s, d),), fwd_impls,
                            bytes=2 * n * es, target=target if main else "", group=f"softmax {dtype_tag(dtype)}"))
            out.append(Case("softmax", f"{name} bwd {tag}",
                            lambda s=shape, d=dtype, f=ours: (_rand(s, d, -1, 1), f(_rand(s, d), -1)), bwd_impls,
                            bytes=3 * n * es, target=">=90% copy" if main else "", group=f"softmax {dtype_tag(dtype)}"))
    return out
