"""Benchmark cases of the pooling family: max_pool2d 3x3/2 pad 1 and avg_pool2d 3x3/2 on 64x64x112x112 bf16
(NHWC and NCHW, forward and backward), adaptive_avg_pool2d(1) on 256x2048x7x7 NHWC, against eager and
torch.compile. Bytes are the minimum traffic: each input read once, each output written once."""
import math

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import Case, rand_cuda

ops = torch.ops.torch_dnn
aten = torch.ops.aten

SHAPE = (64, 64, 112, 112)
K, S, P = (3, 3), (2, 2), (1, 1)



def _pool_cases(dtype, layout):
    es = torch.empty((), dtype=dtype).element_size()
    n_in = math.prod(SHAPE)
    oh = (SHAPE[2] + 2 * P[0] - K[0]) // S[0] + 1
    n_out = SHAPE[0] * SHAPE[1] * oh * oh
    tag = f"{'x'.join(map(str, SHAPE))} {layout} bf16"
    group = f"pool {layout}"
    out = []

    # max_pool2d: forward writes values and int64 indices; backward reads grad and indices, writes grad_input
    def max_inputs(d=dtype, lay=layout):
        return (rand_cuda(SHAPE, d, lay),)

    def max_bwd_inputs(d=dtype, lay=layout):
        x = rand_cuda(SHAPE, d, lay)
        y, i = ops.max_pool2d(x, K, S, P, (1, 1), False)
        return torch.randn_like(y), x, i

    eager_max = lambda x: aten.max_pool2d_with_indices(x, K, S, P)  # noqa: E731
    out.append(Case("pool", f"max_pool2d 3x3/2 fwd {tag}", max_inputs, {
        "torch_dnn": lambda x: ops.max_pool2d(x, K, S, P, (1, 1), False),
        "eager": eager_max,
        "compile": torch.compile(eager_max, dynamic=False),
    }, bytes=n_in * es + n_out * (es + 8), target=">=90% copy", group=group))
    eager_max_bwd = lambda g, x, i: aten.max_pool2d_with_indices_backward(g, x, K, S, P, (1, 1), False, i)  # noqa: E731
    out.append(Case("pool", f"max_pool2d 3x3/2 bwd {tag}", max_bwd_inputs, {
        "torch_dnn": lambda g, x, i: ops.max_pool2d_backward(g, x, i, K, S, P, (1, 1), False),
        "eager": eager_max_bwd,
        "compile": torch.compile(eager_max_bwd, dynamic=False),
    }, bytes=n_out * (es + 8) + n_in * es, target=">=90% copy", group=group))

    # avg_pool2d 3x3/2 (no padding: the common "avg 3x3/2" of the design table)
    oh_a = (SHAPE[2] - K[0]) // S[0] + 1
    n_out_a = SHAPE[0] * SHAPE[1] * oh_a * oh_a
    eager_avg = lambda x: TF.avg_pool2d(x, K, S)  # noqa: E731
    out.append(Case("pool", f"avg_pool2d 3x3/2 fwd {tag}", max_inputs, {
        "torch_dnn": lambda x: F.avg_pool2d(x, K, S),
        "eager": eager_avg,
        "compile": torch.compile(eager_avg, dynamic=False),
    }, bytes=(n_in + n_out_a) * es, target=">=90% copy", group=group))

    def avg_bwd_inputs(d=dtype, lay=layout):
        x = rand_cuda(SHAPE, d, lay)
        return torch.randn_like(TF.avg_pool2d(x, K, S)), x

    eager_avg_bwd = lambda g, x: aten.avg_pool2d_backward(g, x, K, S, (0, 0), False, True, None)  # noqa: E731
    out.append(Case("pool", f"avg_pool2d 3x3/2 bwd {tag}", avg_bwd_inputs, {
        "torch_dnn": lambda g, x: ops.avg_pool2d_backward(g, x, K, S, (0, 0), False, True, None),
        "eager": eager_avg_bwd,
        "compile": torch.compile(eager_avg_bwd, dynamic=False),
    }, bytes=(n_in + n_out_a) * es, target=">=90% copy", group=group))
    return out


def _adaptive_cases(dtype):
    shape = (256, 2048, 7, 7)
    es = torch.empty((), dtype=dtype).element_size()
    n_in, n_out = math.prod(shape), shape[0] * shape[1]
    tag = "256x2048x7x7 NHWC bf16"
    eager = lambda x: TF.adaptive_avg_pool2d(x, 1)  # noqa: E731
    fwd = Case("pool", f"adaptive_avg_pool2d(1) fwd {tag}", lambda: (rand_cuda(shape, dtype, "NHWC"),), {
        "torch_dnn": lambda x: F.adaptive_avg_pool2d(x, 1),
        "eager": eager,
        "compile": torch.compile(eager, dynamic=False),
    }, bytes=(n_in + n_out) * es, target=">=90% copy", group="pool adaptive")

    def bwd_inputs():
        x = rand_cuda(shape, dtype, "NHWC")
        return torch.randn_like(TF.adaptive_avg_pool2d(x, 1)), x

    eager_bwd = lambda g, x: aten._adaptive_avg_pool2d_backward(g, x)  # noqa: E731
    bwd = Case("pool", f"adaptive_avg_pool2d(1) bwd {tag}", bwd_inputs, {
        "torch_dnn": lambda g, x: ops.adaptive_avg_pool2d_backward(g, x),
        "eager": eager_bwd,
        "compile": torch.compile(eager_bwd, dynamic=False),
    }, bytes=(n_in + n_out) * es, target=">=90% copy", group="pool adaptive")
    return [fwd, bwd]


def cases(quick: bool = False):
    layouts = ["NHWC"] if quick else ["NHWC", "NCHW"]
    out = [c for lay in layouts for c in _pool_cases(torch.bfloat16, lay)]
    return out + _adaptive_cases(torch.bfloat16)
