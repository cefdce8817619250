"""Benchmark cases of the activation family: every activation forward and backward, bias_act forward and
backward, at 32768x4096 and 8192x32768 in bf16 and fp32, against PyTorch eager (and torch.compile for
bias_act, where a user would fuse the add and the activation)."""
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import Case, dtype_tag, rand_cuda, row_grid
from torch_dnn.reference import bias_act_reference

ops = torch.ops.torch_dnn
aten = torch.ops.aten

SHAPES = [(32768, 4096), (8192, 32768)]
DTYPES = [torch.bfloat16, torch.float32]
TARGET = ">=90% copy"

# name -> (ours forward, eager forward, ours backward(g, saved), eager backward(g, saved), saves result?)
ACTS = {
    "relu": (F.relu, TF.relu, ops.relu_backward, lambda g, s: aten.threshold_backward(g, s, 0), False),
    "relu6": (F.relu6, TF.relu6, ops.relu6_backward, lambda g, s: aten.hardtanh_backward(g, s, 0.0, 6.0), False),
    "hardtanh": (F.hardtanh, TF.hardtanh, lambda g, s: ops.hardtanh_backward(g, s, -1.0, 1.0),
                 lambda g, s: aten.hardtanh_backward(g, s, -1.0, 1.0), False),
    "leaky_relu": (F.leaky_relu, TF.leaky_relu, lambda g, s: ops.leaky_relu_backward(g, s, 0.01),
                   lambda g, s: aten.leaky_relu_backward(g, s, 0.01, False), False),
    "elu": (F.elu, TF.elu, lambda g, s: ops.elu_backward(g, s, 1.0),
            lambda g, s: aten.elu_backward(g, 1.0, 1, 1, False, s), False),
    "gelu": (F.gelu, TF.gelu, ops.gelu_backward, aten.gelu_backward, False),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh"),
                  lambda g, s: ops.gelu_backward(g, s, approximate="tanh"),
                  lambda g, s: aten.gelu_backward(g, s, approximate="tanh"), False),
    "silu": (F.silu, TF.silu, ops.silu_backward, aten.silu_backward, False),
    "sigmoid": (F.sigmoid, torch.sigmoid, ops.sigmoid_backward, aten.sigmoid_backward, True),
    "tanh": (F.tanh, torch.tanh, ops.tanh_backward, aten.tanh_backward, True),
    "softplus": (F.softplus, TF.softplus, lambda g, s: ops.softplus_backward(g, s, 1.0, 20.0),
                 lambda g, s: aten.softplus_backward(g, s, 1.0, 20.0), False),
    "mish": (F.mish, TF.mish, ops.mish_backward, aten.mish_backward, False),
    "hardswish": (F.hardswish, TF.hardswish, ops.hardswish_backward, aten.hardswish_backward, False),
    "hardsigmoid": (F.hardsigmoid, TF.hardsigmoid, ops.hardsigmoid_backward, aten.hardsigmoid_backward, False),
}


def _rand(shape, dtype, lo=-3.0, hi=3.0):
    return rand_cuda(shape, dtype, "NCHW", lo, hi)



def cases(quick: bool = False):
    out = []
    for dtype, es, shape, tag in row_grid(SHAPES, DTYPES, quick):
        n = shape[0] * shape[1]
        for name, (fwd, eager_fwd, bwd, eager_bwd, saves_result) in ACTS.items():
            out.append(Case("activation", f"{name} fwd {tag}", lambda s=shape, d=dtype: (_rand(s, d),),
                            {"torch_dnn": fwd, "eager": eager_fwd}, bytes=2 * n * es, target=TARGET,
                            group=f"activation forward {dtype_tag(dtype)}"))
            lo = 0.05 if saves_result else -3.0
            hi = 0.95 if saves_result else 3.0
            out.append(Case("activation", f"{name} bwd {tag}",
                            lambda s=shape, d=dtype, lo=lo, hi=hi: (_rand(s, d), _rand(s, d, lo, hi)),
                            {"torch_dnn": bwd, "eager": eager_bwd}, bytes=3 * n * es, target=TARGET,
                            group=f"activation backward {dtype_tag(dtype)}"))
        # bias_act: the GEMM epilogue (bias along the last dim)
        for act in ("gelu", "silu", "relu"):
            ref = lambda x, b, a=act: bias_act_reference(x, b, -1, a)  # noqa: E731
            compiled = torch.compile(ref, dynamic=False)
            out.append(Case("activation", f"bias_act {act} fwd {tag}",
                            lambda s=shape, d=dtype: (_rand(s, d), _rand((s[1],), d)),
                            {"torch_dnn": lambda x, b, a=act: F.bias_act(x, b, -1, a), "eager": ref,
                             "compile": compiled},
                            bytes=2 * n * es + shape[1] * es, target=TARGET, group=f"bias_act {dtype_tag(dtype)}"))
        eager_bwd = ACTS["gelu"][3]
        out.append(Case("activation", f"bias_act gelu bwd {tag}",
                        lambda s=shape, d=dtype: (_rand(s, d), _rand(s, d), _rand((s[1],), d)),
                        {"torch_dnn": lambda g, x, b: ops.bias_act_backward(g, x, b, -1, "gelu", True),
                         "eager": lambda g, x, b: (lambda dz: (dz, dz.sum(0)))(eager_bwd(g, x + b))},
                        bytes=3 * n * es + 2 * shape[1] * es, target=TARGET, group=f"bias_act {dtype_tag(dtype)}"))
    return out
