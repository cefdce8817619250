"""linear + bias + gelu at 16384x4096 -> 16384 bf16 (issue 4's fused-epilogue case), forward and backward, timed
with the impls alternating turn by turn: torch_dnn, eager, torch.compile, each turn N back-to-back calls between
CUDA events, R rounds, the median turn per impl. A cross-check of the harness (whose turns are 150 ms of
warm-up and then the timed calls, four rounds, the odd ones in reverse order), since these GEMMs run at the power cap and the SM clock follows
what ran before (docs/benchmarking.md). Prints the SM clock and power after each
turn of the first round.

    python research/gemm/probe_linear_gelu.py [--turns 10,60] [--rounds 5]
"""
import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import time_calls

ops = torch.ops.torch_dnn


def smi():
    r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader"],
                       capture_output=True, text=True)
    return r.stdout.strip()


def turn_ms(fn, n):
    """Mean ms of n back-to-back calls (the harness's per-call events)."""
    return statistics.fmean(time_calls(fn, [()], 0, n))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--turns", default="10,60")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    m, k, n = 16384, 4096, 16384
    dt = torch.bfloat16
    x = torch.empty(m, k, device="cuda", dtype=dt).uniform_(-1, 1)
    w = torch.empty(n, k, device="cuda", dtype=dt).uniform_(-0.05, 0.05)
    b = torch.empty(n, device="cuda", dtype=dt).uniform_(-1, 1)
    g = torch.empty(m, n, device="cuda", dtype=dt).uniform_(-1, 1)
    pre = ops.linear_act(x, w, b, "none")[0]

    def eager_fwd(x, w, b):
        return TF.gelu(TF.linear(x, w, b))

    def eager_bwd(g, x, w, pre):
        d = torch.ops.aten.gelu_backward(g, pre)
        return d @ w, d.t() @ x, d.sum(0)

    fwd_c, bwd_c = torch.compile(eager_fwd, dynamic=False), torch.compile(eager_bwd, dynamic=False)
    cases = {
        "fwd": {"torch_dnn": lambda: F.linear_act(x, w, b, "gelu"), "eager": lambda: eager_fwd(x, w, b),
                "compile": lambda: fwd_c(x, w, b)},
        "bwd": {"torch_dnn": lambda: ops.linear_act_backward(g, x, w, pre, "gelu", None, None, None, [True, True, True]),
                "eager": lambda: eager_bwd(g, x, w, pre), "compile": lambda: bwd_c(g, x, w, pre)},
    }
    print("| case | calls a turn | impl | median ms (turns) | vs torch_dnn |")
    print("|---|---|---|---|---|")
    for case, impls in cases.items():
        for fn in impls.values():  # compile and warm up
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        for calls in (int(v) for v in a.turns.split(",")):
            times = {name: [] for name in impls}
            for r in range(a.rounds):
                for name, fn in impls.items():
                    times[name].append(turn_ms(fn, calls))
                    if r == 0:
                        print(f"  ({case} {calls} {name}: {times[name][-1]:.3f} ms, then {smi()})", file=sys.stderr)
            ours = statistics.median(times["torch_dnn"])
            for name, t in times.items():
                med = statistics.median(t)
                print(f"| {case} | {calls} | {name} | {med:.3f} ({', '.join(f'{v:.3f}' for v in t)}) | "
                      f"{med / ours:.3f}x |", flush=True)


if __name__ == "__main__":
    main()
