"""avg_pool2d 3x3/2 on 64x64x112x112 bf16 channels-last: our op against torch.compile's kernel, for Nsight Compute
(torch.compile's GPU time was 0.88x ours in the fifteenth session's graph rows). Prints Inductor's kernel source
(TORCH_LOGS=output_code does the same, louder), then runs each once inside a cudaProfilerStart/Stop window:

    ncu --profile-from-start off --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section MemoryWorkloadAnalysis python research/pool/probe_avg_compile.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch
import torch.nn.functional as TF

import torch_dnn  # noqa: F401

ops = torch.ops.torch_dnn


def main():
    x = torch.empty((64, 64, 112, 112), device="cuda", dtype=torch.bfloat16).uniform_(-3, 3)
    x = x.contiguous(memory_format=torch.channels_last)
    eager = lambda t: TF.avg_pool2d(t, (3, 3), (2, 2))  # noqa: E731
    compiled = torch.compile(eager, dynamic=False)
    ours = lambda t: ops.avg_pool2d(t, (3, 3), (2, 2), (0, 0), False, True, None)  # noqa: E731
    for _ in range(2):
        compiled(x), ours(x)
    torch.cuda.synchronize()
    try:
        from torch._inductor.utils import run_and_get_code

        _, codes = run_and_get_code(torch.compile(eager, dynamic=False), x)
        for code in codes:
            start = code.find("@triton.jit")
            print(code[start:start + 4000] if start >= 0 else code[:2000])
    except Exception as e:  # the dump is a convenience: the profile below is the point
        print("no Inductor code dump:", e)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    ours(x)
    compiled(x)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
