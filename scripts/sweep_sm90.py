"""Sweep the Hopper GEMM's run-time knobs on the device: raster order and swizzle, for the issue's GEMM and linear+bias+gelu shapes, against cuBLAS in the same process. Variants are
interleaved over several rounds (the GPU's clock drifts with heat, so back-to-back blocks of one variant bias
the comparison); each cell is the median over all rounds. Writes a table to stdout and JSON to --out.

    python scripts/sweep_sm90.py [--out sweep.json] [--rounds 3]
"""
import argparse
import itertools
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import time_calls, with_env

ops = torch.ops.torch_dnn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="sweep_sm90.json")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    r = lambda *s, dt, lo=-1.0, hi=1.0: torch.empty(s, dtype=dt, device="cuda").uniform_(lo, hi)
    cases = []
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        for m, n, k in ((8192, 8192, 8192), (16384, 16384, 4096)):
            sets = [(r(m, k, dt=dt), r(n, k, dt=dt).t()) for _ in range(2)]
            cases.append((f"mm {m}x{n}x{k} {name}", 2 * m * n * k, sets,
                          lambda x, w: ops.mm(x, w), torch.mm))
    m, k, n = 16384, 4096, 16384
    sets = [(r(m, k, dt=torch.bfloat16), r(n, k, dt=torch.bfloat16, lo=-0.05, hi=0.05), r(n, dt=torch.bfloat16))
            for _ in range(2)]
    cases.append((f"linear+bias+gelu {m}x{k}->{n} bf16", 2 * m * n * k, sets,
                  lambda x, w, b: F.linear_act(x, w, b, "gelu"), lambda x, w, b: TF.gelu(TF.linear(x, w, b))))
    cases.append((f"linear+bias+gelu_tanh {m}x{k}->{n} bf16", 2 * m * n * k, sets,
                  lambda x, w, b: F.linear_act(x, w, b, "gelu_tanh"),
                  lambda x, w, b: TF.gelu(TF.linear(x, w, b), approximate="tanh")))
    cases.append((f"linear+bias {m}x{k}->{n} bf16", 2 * m * n * k, sets,
                  lambda x, w, b: F.linear(x, w, b), TF.linear))

    variants = {}
    for raster, sw in itertools.product(("auto", "m", "n"), (1, 2, 4, 8)):
        env = {"TORCH_DNN_SM90_SWIZZLE": str(sw)}
        if raster != "auto":
            env["TORCH_DNN_SM90_RASTER"] = raster
        else:
            env["TORCH_DNN_SM90_RASTER"] = "auto"
        variants[f"r={raster} s={sw}"] = env

    results = {}
    for cname, flops, sets, ours, peer in cases:
        impls = {"cuBLAS/eager": peer}
        for vname, env in variants.items():
            impls[vname] = with_env(ours, **env)
        times = {k: [] for k in impls}
        for fn in impls.values():  # warm-up (and compile nothing: all kernels are prebuilt)
            fn(*sets[0])
        torch.cuda.synchronize()
        for _ in range(a.rounds):
            for k, fn in impls.items():
                times[k] += time_calls(fn, sets, 0, a.reps)
        med = {k: statistics.median(v) for k, v in times.items()}
        results[cname] = {k: {"ms": v, "tflops": flops / v / 1e9} for k, v in med.items()}
        base = med["cuBLAS/eager"]
        best = min((v, k) for k, v in med.items() if k != "cuBLAS/eager")
        print(f"== {cname}: cuBLAS/eager {base:.4f} ms ({flops / base / 1e9:.0f} TFLOP/s); best {best[1]} "
              f"{best[0]:.4f} ms = {base / best[0]:.3f}x")
        for k, v in sorted(med.items(), key=lambda kv: kv[1]):
            print(f"   {k:<24} {v:.4f} ms {flops / v / 1e9:6.0f} TFLOP/s  x{base / v:.3f}")
    # Skinny (decode-like) problems: host overhead per call against the kernel alone (CUDA-graph replay).
    for m in (16, 64, 256):
        for kn in (4096, 16384):
            x, w = r(m, kn, dt=torch.bfloat16), r(kn, kn, dt=torch.bfloat16, lo=-0.05, hi=0.05)
            row = {}
            for name, fn in (("torch_dnn", lambda: F.linear(x, w)), ("cuBLAS", lambda: TF.linear(x, w))):
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                eager = statistics.median(time_calls(fn, [()], 0, 50))
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    fn()
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(20):
                        fn()
                g.replay()
                torch.cuda.synchronize()
                graph = statistics.median(time_calls(g.replay, [()], 0, 20)) / 20
                row[name] = {"eager_ms": eager, "graph_ms": graph}
            results[f"skinny M={m} K=N={kn}"] = row
            print(f"== skinny M={m} K=N={kn} bf16: torch_dnn {row['torch_dnn']['eager_ms'] * 1e3:.1f} us "
                  f"(graph {row['torch_dnn']['graph_ms'] * 1e3:.1f}), cuBLAS {row['cuBLAS']['eager_ms'] * 1e3:.1f} us "
                  f"(graph {row['cuBLAS']['graph_ms'] * 1e3:.1f})")
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
