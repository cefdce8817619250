"""Our norm forwards against torch.compile's kernels, for Nsight Compute and by the harness's event timing:

    python research/norm/probe_norm_compile.py code OUTDIR   # write Inductor's generated code per case, then time both
    ncu --profile-from-start off --section SpeedOfLight --section LaunchStats --section Occupancy \
        --section WarpStateStats python research/norm/probe_norm_compile.py profile

Cases (bf16): layer_norm and rms_norm at 8192x16384 and 32768x4096, add_rms_norm at 8192x16384. `profile` calls
each case's compiled function once, then ours once, inside one cudaProfilerStart/Stop window (compilation and
warm-up outside it), so ncu lists them in that order."""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from benchmarks.harness import time_calls
from torch_dnn.reference import add_rms_norm_reference

CASES = [("ln", 8192, 16384), ("rms", 8192, 16384), ("ln", 32768, 4096), ("rms", 32768, 4096),
         ("add_rms", 8192, 16384)]


def make(kind, m, n):
    def r(*s, lo=-2.0, hi=2.0):
        return torch.empty(s, device="cuda", dtype=torch.bfloat16).uniform_(lo, hi)

    x, w, b, res = r(m, n), r(n, lo=0.5, hi=1.5), r(n), r(m, n)
    if kind == "ln":
        return (lambda x, w, b: TF.layer_norm(x, [n], w, b)), (lambda x, w, b: F.layer_norm(x, [n], w, b)), (x, w, b)
    if kind == "rms":
        return (lambda x, w: TF.rms_norm(x, [n], w, 1e-6)), (lambda x, w: F.rms_norm(x, [n], w, 1e-6)), (x, w)
    return ((lambda x, r, w: add_rms_norm_reference(x, r, [n], w, 1e-6)),
            (lambda x, r, w: F.add_rms_norm(x, r, [n], w, 1e-6)), (x, res, w))


def median_ms(fn, args):
    return statistics.median(time_calls(fn, [args], warmup=3, reps=50))


def main():
    mode = sys.argv[1]
    outdir = sys.argv[2] if len(sys.argv) > 2 else "."
    from torch._inductor.utils import run_and_get_code

    built = []
    for kind, m, n in CASES:
        ref, ours, args = make(kind, m, n)
        comp = torch.compile(ref)
        _, code = run_and_get_code(comp, *args)
        if mode == "code":
            with open(os.path.join(outdir, f"inductor_{kind}_{m}x{n}.py"), "w") as f:
                f.write("\n\n# ----\n".join(code))
        built.append((f"{kind} {m}x{n}", comp, ours, args))
    if mode == "profile":
        for _, comp, ours, args in built:
            comp(*args), ours(*args), comp(*args), ours(*args)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for _, comp, ours, args in built:
            comp(*args)
            ours(*args)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        return
    for name, comp, ours, args in built:
        tc, to = median_ms(comp, args), median_ms(ours, args)
        print(f"{name:22} compile {tc:.4f} ms  ours {to:.4f} ms  ours/compile {to / tc:.3f}")


if __name__ == "__main__":
    main()
