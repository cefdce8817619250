"""Ceilings for global average pooling's traffic (256x2048x7x7 bf16 = 51.4 MB): GPU time (CUDA-graph replay, the
harness's time_graph_calls) of a read-only reduction (torch.sum to one value), a pure write (zero_, fill_), a
copy, and a one-element kernel (the per-kernel cost inside a graph), beside our forward and backward.
--ncu runs each of our kernel variants once inside a cudaProfilerStart/Stop window instead:

    python research/pool/probe_global.py [--md FILE]
    ncu --profile-from-start off --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section MemoryWorkloadAnalysis --section WarpStateStats python research/pool/probe_global.py --ncu
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch

import torch_dnn  # noqa: F401
from benchmarks.harness import emit, time_graph_calls

ops = torch.ops.torch_dnn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--md", default=None)
    ap.add_argument("--ncu", action="store_true")
    args = ap.parse_args()
    if args.ncu:
        return profile_once()
    shape = (256, 2048, 7, 7)
    sets = [(torch.empty(shape, device="cuda", dtype=torch.bfloat16).uniform_(-4, 4),) for _ in range(3)]
    cl = [(x.contiguous(memory_format=torch.channels_last),) for (x,) in sets]
    outs = [torch.empty(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    g = torch.randn(256, 2048, 1, 1, device="cuda", dtype=torch.bfloat16)
    tiny = torch.empty(1, device="cuda")
    nbytes = sets[0][0].numel() * 2
    cases = [
        ("one-element kernel (graph overhead)", lambda x: tiny.zero_(), sets, 0),
        ("read: torch.sum(x) to one value", lambda x: x.sum(), sets, nbytes),
        ("read: x.view(-1, 49).sum(1) (NCHW rows)", lambda x: x.view(-1, 49).sum(1), sets, nbytes),
        ("write: zero_", lambda x: outs[x.data_ptr() % 3].zero_(), sets, nbytes),
        ("write: fill_(1)", lambda x: outs[x.data_ptr() % 3].fill_(1.0), sets, nbytes),
        ("copy: out.copy_(x)", lambda x: outs[0].copy_(x), sets, 2 * nbytes),
        ("ours fwd NCHW", lambda x: ops.adaptive_avg_pool2d(x, [1, 1]), sets, nbytes),
        ("ours fwd NHWC", lambda x: ops.adaptive_avg_pool2d(x, [1, 1]), cl, nbytes),
        ("ours bwd NCHW", lambda x: ops.adaptive_avg_pool2d_backward(g, x), sets, nbytes),
        ("ours bwd NHWC", lambda x: ops.adaptive_avg_pool2d_backward(g.contiguous(memory_format=torch.channels_last), x),
         cl, nbytes),
    ]
    lines = ["| kernel | us (GPU, graph) | GB/s |", "|---|---|---|"]
    for name, fn, inputs, b in cases:
        times = []
        for _ in range(3):
            times += time_graph_calls(fn, inputs, 3, 20)
        ms = statistics.median(times)
        lines.append(f"| {name} | {ms * 1e3:.1f} | {b / (ms * 1e-3) / 1e9:.0f} |" if b else
                     f"| {name} | {ms * 1e3:.1f} | |")
    emit("\n".join(lines), args.md)


def profile_once():
    shape = (256, 2048, 7, 7)
    x = torch.empty(shape, device="cuda", dtype=torch.bfloat16).uniform_(-4, 4)
    xc = x.contiguous(memory_format=torch.channels_last)
    g = torch.randn(256, 2048, 1, 1, device="cuda", dtype=torch.bfloat16)
    runs = [  # (environment, callable): each kernel once, in this order
        ({}, lambda: ops.adaptive_avg_pool2d(xc, [1, 1])),
        ({}, lambda: ops.adaptive_avg_pool2d(x, [1, 1])),
        ({}, lambda: ops.adaptive_avg_pool2d_backward(g, x)),
        ({}, lambda: ops.adaptive_avg_pool2d_backward(g.contiguous(memory_format=torch.channels_last), xc)),
    ]
    for env, fn in runs:  # warm-up (and the lazy loads)
        os.environ.update(env)
        fn()
        for k in env:
            del os.environ[k]
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for env, fn in runs:
        os.environ.update(env)
        fn()
        torch.cuda.synchronize()
        for k in env:
            del os.environ[k]
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
