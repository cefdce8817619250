"""Norm forward variants on long rows against torch.compile, by event timing (the harness's time_calls, median of
50 calls, 3 rounds in turn): `python research/norm/probe_norm_fwd.py [--out FILE.md]`.

Variants are the launcher's knobs (csrc/norm/kernels/norm_common.cuh), set around each call:
  default                  the shipped choice
  block                    TORCH_DNN_NORM_FWD=block (the register kernel, 4 vectors a thread)
  staged                   TORCH_DNN_NORM_FWD=staged (the next row streamed into shared memory)
  block fused rows         ... with one reduction for the statistics and a block per row
and "no affine" rows (weight and bias None) to see what the parameters' loads cost."""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import emit, time_calls, with_env
from torch_dnn.reference import add_rms_norm_reference

VARIANTS = {
    "default": {},
    "block": {"TORCH_DNN_NORM_FWD": "block"},
    "block fused rows": {"TORCH_DNN_NORM_FWD": "block", "TORCH_DNN_NORM_FWD_STATS": "fused",
                         "TORCH_DNN_NORM_FWD_GRID": "rows"},
    "staged": {"TORCH_DNN_NORM_FWD": "staged"},
}


def cases():
    def r(*s, dtype, lo=-2.0, hi=2.0):
        return torch.empty(s, device="cuda", dtype=dtype).uniform_(lo, hi)

    out = []
    for dtype, (m, n) in ((torch.bfloat16, (8192, 16384)), (torch.bfloat16, (32768, 4096)),
                          (torch.float16, (8192, 16384))):
        x, w, b, res = r(m, n, dtype=dtype), r(n, dtype=dtype, lo=0.5, hi=1.5), r(n, dtype=dtype), r(m, n, dtype=dtype)
        d = str(dtype)[6:]
        nbytes = 2 * x.numel() * x.element_size()
        ln_vars = (["default", "block asm", "block fused rows", "staged"]
                   if dtype is torch.bfloat16 else ["default", "staged"])
        out.append((f"layer_norm {m}x{n} {d}", nbytes, lambda x, w, b, n=n: TF.layer_norm(x, [n], w, b),
                    lambda x, w, b, n=n: F.layer_norm(x, [n], w, b), (x, w, b), ln_vars))
        out.append((f"layer_norm {m}x{n} {d} no affine", nbytes, lambda x, n=n: TF.layer_norm(x, [n]),
                    lambda x, n=n: F.layer_norm(x, [n]), (x,), ["default", "block asm", "staged"]))
        if dtype is torch.float16:
            continue  # the selection's fp16 rows only
        rms_vars = ["default", "block asm"]
        out.append((f"rms_norm {m}x{n} {d}", nbytes, lambda x, w, n=n: TF.rms_norm(x, [n], w, 1e-6),
                    lambda x, w, n=n: F.rms_norm(x, [n], w, 1e-6), (x, w), rms_vars))
        if dtype is torch.bfloat16:
            out.append((f"add_rms_norm {m}x{n} {d}", 2 * nbytes,
                        lambda x, r, w, n=n: add_rms_norm_reference(x, r, [n], w, 1e-6),
                        lambda x, r, w, n=n: F.add_rms_norm(x, r, [n], w, 1e-6), (x, res, w), rms_vars))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    built = []
    for name, nbytes, ref, ours, inputs, variants in cases():
        comp = torch.compile(ref, dynamic=False)  # static per case (a shared code object went dynamic)
        comp(*inputs)
        impls = [("compile", comp)] + [(v, with_env(ours, **VARIANTS[v])) for v in variants]
        built.append((name, nbytes, impls, inputs))
    times = {}
    for _ in range(3):  # rounds in turn, so that clock drift falls on every impl alike
        for name, _, impls, inputs in built:
            for label, fn in impls:
                t = statistics.median(time_calls(fn, [inputs], warmup=5, reps=50))
                times.setdefault((name, label), []).append(t)
    lines = [f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; median of 50 calls a round, "
             "best of 3 rounds (spread in brackets)", "",
             "| case | impl | ms | TB/s | vs compile |", "|---|---|---|---|---|"]
    for name, nbytes, impls, _ in built:
        tc = min(times[(name, "compile")])
        for label, _ in impls:
            ts = times[(name, label)]
            t = min(ts)
            lines.append(f"| {name} | {label} | {t:.4f} ({min(ts):.4f}-{max(ts):.4f}) | {nbytes / t / 1e9:.2f} | "
                         f"{tc / t:.3f}x |")
    emit("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
