"""Skinny (decode-sized) linear on the device: GPU time per call from CUDA-graph replay (the weight cycled over
enough copies that it streams from DRAM, as in the benchmark harness) and host time per call (a launch loop on
a tiny problem: the CPU is then the bottleneck), for torch_dnn's default choice, its mma.sync skinny kernel,
the Hopper skinny kernels (TORCH_DNN_GEMM_SKINNY=0: swap-AB or narrow tiles, a split-K sweep by
TORCH_DNN_SM90_SKINNY_SPLITS), the Hopper 128x128 stream-K kernel (TORCH_DNN_SM90_SKINNY=0) and cuBLAS (F.linear).

    python research/gemm/probe_skinny.py [--out probe_skinny.json]
    ncu --kernel-name regex:skinny python research/gemm/probe_skinny.py --once M,KN    (a few calls of one shape)
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import with_env


def graph_us(fn, sets, calls=64):
    """Mean GPU time of one call, replaying a graph of `calls` calls over the input sets in turn."""
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(*sets[i % len(sets)])
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(*sets[i % len(sets)])
    g.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) * 1e3 / calls)
    return best


def host_us(fn, args, n=3000):
    for _ in range(50):
        fn(*args)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn(*args)
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / n * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="probe_skinny.json")
    p.add_argument("--once", default="", help="M,KN: three calls of torch_dnn then of cuBLAS, nothing timed")
    p.add_argument("--shapes", default="", help="'M,KN M,KN ...': only these, only the default, the forced "
                   "Hopper kernels and cuBLAS, no host timing")
    a = p.parse_args()
    dt = torch.bfloat16
    if a.once:
        m, kn = (int(v) for v in a.once.split(","))
        x = torch.empty(m, kn, dtype=dt, device="cuda").uniform_(-1, 1)
        w = torch.empty(kn, kn, dtype=dt, device="cuda").uniform_(-0.05, 0.05)
        for fn in (F.linear, TF.linear):
            for _ in range(3):
                fn(x, w)
        torch.cuda.synchronize()
        return
    rows = []
    brief = [tuple(int(v) for v in s.split(",")) for s in a.shapes.split()]
    print("| M | K=N | impl | graph us/call | GB/s |")
    print("|---|---|---|---|---|")
    for kn in sorted({kn for _, kn in brief}) if brief else (4096, 16384):
        n_sets = max(2, -(-160 * 2**20 // (kn * kn * 2)))  # > 3x the 50 MB L2
        ws = [torch.empty(kn, kn, dtype=dt, device="cuda").uniform_(-0.05, 0.05) for _ in range(n_sets)]
        for m in [m for m, k in brief if k == kn] if brief else (1, 16, 64, 256):
            sets = [(torch.empty(m, kn, dtype=dt, device="cuda").uniform_(-1, 1), w) for w in ws]
            lin = lambda x, w: F.linear(x, w)  # noqa: E731
            if brief:
                impls = {"torch_dnn": lin}
                for k in (("swap16", "swap64x64") if m <= 16 else ("mid12", "swap256", "narrow") if m > 64
                          else ("swap64", "swap64x64")):
                    impls[f"Hopper {k}"] = with_env(lin, TORCH_DNN_GEMM_SKINNY="0", TORCH_DNN_SM90_SKINNY_KERNEL=k)
                if m > 64:
                    impls["stream-K 128x128"] = with_env(lin, TORCH_DNN_SM90_SKINNY="0")
                    for sw in ("1", "2"):
                        impls[f"Hopper narrow swizzle={sw}"] = with_env(lin, TORCH_DNN_SM90_SKINNY_KERNEL="narrow",
                                                                       TORCH_DNN_SM90_SWIZZLE=sw)
                impls["cuBLAS"] = TF.linear
            else:
                impls = {
                    "torch_dnn": lin,
                    "mma.sync skinny": with_env(lin, TORCH_DNN_GEMM_SKINNY="1"),
                    "Hopper skinny": with_env(lin, TORCH_DNN_GEMM_SKINNY="0"),
                }
                for sp in ((1, 2, 4) if kn == 4096 else (1, 2)):
                    impls[f"Hopper skinny splits={sp}"] = with_env(lin, TORCH_DNN_GEMM_SKINNY="0",
                                                                   TORCH_DNN_SM90_SKINNY_SPLITS=str(sp))
                for k in (("swap16", "swap64") if m <= 16 else ("swap64", "swap256", "narrow") if m > 64
                          else ("swap64", "swap64x64")):
                    impls[f"Hopper {k}"] = with_env(lin, TORCH_DNN_GEMM_SKINNY="0", TORCH_DNN_SM90_SKINNY_KERNEL=k)
                    if m <= 64 and kn == 4096:
                        for sp in (1, 2, 4):
                            impls[f"Hopper {k} splits={sp}"] = with_env(lin, TORCH_DNN_GEMM_SKINNY="0",
                                                                        TORCH_DNN_SM90_SKINNY_KERNEL=k,
                                                                        TORCH_DNN_SM90_SKINNY_SPLITS=str(sp))
                impls["stream-K 128x128"] = with_env(lin, TORCH_DNN_GEMM_SKINNY="0", TORCH_DNN_SM90_SKINNY="0")
                impls["cuBLAS"] = TF.linear
            nbytes = (2 * m * kn + kn * kn) * 2
            for name, fn in impls.items():
                us = graph_us(fn, sets)
                rows.append({"M": m, "KN": kn, "impl": name, "graph_us": us, "gbps": nbytes / us / 1e3})
                print(f"| {m} | {kn} | {name} | {us:.2f} | {nbytes / us / 1e3:.0f} |")
        del ws
        torch.cuda.empty_cache()
    if brief:
        return
    x, w = torch.randn(1, 64, dtype=dt, device="cuda"), torch.randn(64, 64, dtype=dt, device="cuda")
    op = torch.ops.torch_dnn.linear_act
    host = {
        "F.linear (torch_dnn)": host_us(lambda x, w: F.linear(x, w), (x, w)),
        "torch.ops.torch_dnn.linear_act (Python autograd layer)": host_us(lambda x, w: op(x, w, None, "none"), (x, w)),
        "F.linear (torch)": host_us(TF.linear, (x, w)),
        "F.relu (torch_dnn)": host_us(F.relu, (x,)),
        "F.relu (torch)": host_us(TF.relu, (x,)),
    }
    print("\n| host us/call | |\n|---|---|")
    for k, v in host.items():
        print(f"| {k} | {v:.2f} |")
    with open(a.out, "w") as f:
        json.dump({"graph": rows, "host_us": host}, f, indent=1)


if __name__ == "__main__":
    main()
