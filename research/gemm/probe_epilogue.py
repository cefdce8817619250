"""The fused-epilogue GEMM on the Hopper path, cooperative against ping-pong (issue 4's linear+bias+gelu case):
`python research/gemm/probe_epilogue.py` times each variant with CUDA events, interleaved over rounds, against
F.linear + gelu and the plain GEMM; `python research/gemm/probe_epilogue.py --once VARIANT` runs one variant a few
times (for ncu). Variants: coop-gelu, pp-gelu, coop-none, pp-none (pp: TORCH_DNN_SM90_KERNEL=pingpong)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F

M, K, N = 16384, 4096, 16384
VARIANTS = {"coop-gelu": ({}, "gelu"), "pp-gelu": ({"TORCH_DNN_SM90_KERNEL": "pingpong"}, "gelu"),
            "coop-none": ({}, "none"), "pp-none": ({"TORCH_DNN_SM90_KERNEL": "pingpong"}, "none"),
            "coop-relu": ({}, "relu"), "pp-relu": ({"TORCH_DNN_SM90_KERNEL": "pingpong"}, "relu")}


def tensors():
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * K ** -0.5
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    return x, w, b


def run(variant, x, w, b):
    env, act = VARIANTS[variant]
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return F.linear_act(x, w, b, act)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def time_ms(fn, reps=20):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main():
    x, w, b = tensors()
    with torch.no_grad():
        if sys.argv[1:2] == ["--once"]:
            for _ in range(3):
                run(sys.argv[2], x, w, b)
            torch.cuda.synchronize()
            return
        ref = TF.gelu(TF.linear(x, w, b).float())
        for v in VARIANTS:
            if v.endswith("gelu"):
                err = (run(v, x, w, b).float() - ref).abs().max().item()
                print(f"{v}: max |err| vs F.gelu(F.linear) {err:.3g}")
        fns = {v: (lambda v=v: run(v, x, w, b)) for v in VARIANTS}
        fns["eager linear+gelu"] = lambda: TF.gelu(TF.linear(x, w, b))
        fns["cuBLAS linear"] = lambda: TF.linear(x, w, b)
        times = {k: [] for k in fns}
        for _ in range(5):
            for k, fn in fns.items():
                times[k].append(time_ms(fn))
        flops = 2 * M * N * K
        for k, t in times.items():
            best = min(t)
            print(f"{k:20s} min {best:.4f} ms  median {sorted(t)[2]:.4f} ms  {flops / best / 1e9:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
