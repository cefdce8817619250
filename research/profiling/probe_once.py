"""One call of a benchmark-sized op inside a cudaProfilerStart/Stop window, for Nsight Compute:

    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats python research/profiling/probe_once.py CASE

CASE: gn_fwd_nchw, gn_bwd_nchw (group_norm(32) 64x256x56x56 bf16), max_fwd_nchw, max_bwd_nchw, avg_fwd_nchw,
avg_bwd_nchw (3x3/2 pooling of 64x64x112x112 bf16, max with padding 1), bn_fwd_nchw, bn_bwd_nchw (training
batch_norm of 64x256x56x56 bf16, float32 parameters), the same with _nhwc, or `list`.
Inputs are made and the op warmed up (twice) outside the window; only the op's own launches are profiled."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch

ops = torch.ops.torch_dnn


def _x(shape, cl):
    x = torch.empty(shape, device="cuda", dtype=torch.bfloat16).uniform_(-3, 3)
    return x.contiguous(memory_format=torch.channels_last) if cl else x


def gn(bwd, cl):
    x = _x((64, 256, 56, 56), cl)
    w = torch.rand(256, device="cuda", dtype=torch.bfloat16) + 0.5
    b = torch.randn(256, device="cuda", dtype=torch.bfloat16)
    _, mean, rstd = ops.group_norm(x, 32, w, b, 1e-5)
    g = torch.randn_like(x)
    if bwd:
        return lambda: ops.group_norm_backward(g, x, mean, rstd, w, 32, False, [True, True, True])
    return lambda: ops.group_norm(x, 32, w, b, 1e-5)


def pool(op, bwd, cl):
    x = _x((64, 64, 112, 112), cl)
    K, S = (3, 3), (2, 2)
    if op == "max":
        P = (1, 1)
        y, i = ops.max_pool2d(x, K, S, P, (1, 1), False)
        g = torch.randn_like(y)
        if bwd:
            return lambda: ops.max_pool2d_backward(g, x, i, K, S, P, (1, 1), False)
        return lambda: ops.max_pool2d(x, K, S, P, (1, 1), False)
    y = ops.avg_pool2d(x, K, S, (0, 0), False, True, None)
    g = torch.randn_like(y)
    if bwd:
        return lambda: ops.avg_pool2d_backward(g, x, K, S, (0, 0), False, True, None)
    return lambda: ops.avg_pool2d(x, K, S, (0, 0), False, True, None)


def bn(bwd, cl):
    x = _x((64, 256, 56, 56), cl)
    w = torch.rand(256, device="cuda") + 0.5
    b = torch.randn(256, device="cuda")
    _, mean, invstd = ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
    g = torch.randn_like(x)
    if bwd:
        return lambda: ops.batch_norm_backward(g, x, w, None, None, mean, invstd, True, 1e-5, [True, True, True])
    return lambda: ops.batch_norm(x, w, b, None, None, True, 0.1, 1e-5)


def make(case):
    name, direction, layout = case.split("_")
    bwd, cl = direction == "bwd", layout == "nhwc"
    if name == "bn":
        return bn(bwd, cl)
    return gn(bwd, cl) if name == "gn" else pool(name, bwd, cl)


CASES = [f"{n}_{d}_{l}" for n in ("gn", "max", "avg", "bn") for d in ("fwd", "bwd") for l in ("nchw", "nhwc")]

if __name__ == "__main__":
    import torch_dnn  # noqa: F401  (registers the ops)
    case = sys.argv[1]
    if case == "list":
        print(" ".join(CASES))
        sys.exit(0)
    fn = make(case)
    fn(), fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
