"""Big GEMMs, fp16 against bf16 (issue 4: our fp16 GEMM is 0.88-0.91x cuBLAS where bf16 on the same kernel
configuration is 0.98-1.00x). For each variant (dtype x {torch_dnn, cuBLAS}) a ~1.5 s stream of GEMMs, timed with
CUDA events, while a thread samples the SM clock and board power (nvidia-smi); then the kernels one call
launches (torch.profiler). `--once VARIANT` runs a few calls of one variant (for ncu at locked clocks).

    python research/gemm/probe_dtype.py [--shape 8192,8192,8192]
    ncu --metrics gpu__time_duration.sum,... python research/gemm/probe_dtype.py --once fp16-ours
"""
import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch

import torch_dnn.functional as F

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def operands(dt, m, n, k, layout="tn", seed=0):
    """x (m, k) and the weight: (n, k) for x @ w.T ("tn", F.linear), (k, n) for x @ w ("nn", torch.mm as the
    benchmark's mm cases call it)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=dt, generator=g)
    b = torch.randn(*((n, k) if layout == "tn" else (k, n)), device="cuda", dtype=dt, generator=g) * k ** -0.5
    return a, b


def fn_of(impl, layout="tn"):
    if layout == "nn":
        return (lambda a, b: F.mm(a, b)) if impl == "ours" else torch.mm
    return (lambda a, b: F.linear(a, b)) if impl == "ours" else (lambda a, b: torch.nn.functional.linear(a, b))


class Sampler(threading.Thread):
    """nvidia-smi samples (SM MHz, W) while `running` is set."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.running, self.stop = [], threading.Event(), threading.Event()

    def run(self):
        while not self.stop.is_set():
            if not self.running.is_set():
                time.sleep(0.01)
                continue
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                                      "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5)
                clk, pw, temp = (float(v) for v in out.stdout.strip().split(","))
                if self.running.is_set():
                    self.samples.append((clk, pw, temp))
            except Exception:  # noqa: BLE001 - a missing sample is not an error
                time.sleep(0.05)


def stream(fn, a, b, seconds, sampler):
    """Median ms of one call over a `seconds`-long stream of calls, and the SM clock / power samples."""
    for _ in range(3):
        fn(a, b)
    torch.cuda.synchronize()
    ev = []
    sampler.samples = []
    sampler.running.set()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn(a, b)
            e.record()
            ev.append((s, e))
        ev[-10][1].synchronize()
    torch.cuda.synchronize()
    sampler.running.clear()
    ms = sorted(s.elapsed_time(e) for s, e in ev[len(ev) // 5:])
    smp = list(sampler.samples)
    return ms, smp


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="8192,8192,8192", help="M,N,K")
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--layout", default="tn", choices=["tn", "nn"], help="tn: F.linear (x @ w.T); nn: mm (x @ w)")
    p.add_argument("--no-profile", action="store_true", help="skip the per-call kernel listing")
    p.add_argument("--once", default="", help="VARIANT (bf16-ours, fp16-cublas, ...): 5 calls, nothing timed")
    args = p.parse_args()
    m, n, k = (int(v) for v in args.shape.split(","))
    if args.once:
        dt, impl = args.once.split("-")
        a, b = operands(DTYPES[dt], m, n, k, args.layout)
        for _ in range(5):
            fn_of(impl, args.layout)(a, b)
        torch.cuda.synchronize()
        return
    flops = 2 * m * n * k
    data = {dt: operands(t, m, n, k, args.layout) for dt, t in DTYPES.items()}
    sampler = Sampler()
    sampler.start()
    print(f"GEMM {m}x{n}x{k} {args.layout}, {args.seconds} s streams, interleaved over {args.rounds} rounds")
    print("| variant | round | median ms | p10-p90 ms | TFLOP/s | SM MHz (median, min-max) | W (median) | samples |")
    print("|---|---|---|---|---|---|---|---|")
    for r in range(args.rounds):
        for dt in DTYPES:
            for impl in ("ours", "cublas"):
                ms, smp = stream(fn_of(impl, args.layout), *data[dt], args.seconds, sampler)
                med = statistics.median(ms)
                p10, p90 = ms[len(ms) // 10], ms[len(ms) * 9 // 10]
                clk = [s[0] for s in smp] or [float("nan")]
                pw = [s[1] for s in smp] or [float("nan")]
                print(f"| {dt}-{impl} | {r} | {med:.4f} | {p10:.4f}-{p90:.4f} | {flops / med / 1e9:.1f} | "
                      f"{statistics.median(clk):.0f} ({min(clk):.0f}-{max(clk):.0f}) | {statistics.median(pw):.0f} | "
                      f"{len(smp)} |", flush=True)
    sampler.stop.set()
    if args.no_profile:
        return
    print("\nkernels of one call (torch.profiler):")
    for dt in DTYPES:
        for impl in ("ours", "cublas"):
            a, b = data[dt]
            fn = fn_of(impl, args.layout)
            fn(a, b)
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                fn(a, b)
                torch.cuda.synchronize()
            names = [f"{e.name[:110]} ({e.device_time:.0f} us)" for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA]
            print(f"  {dt}-{impl}: " + "; ".join(names))


if __name__ == "__main__":
    main()
