"""Run layer_norm / rms_norm forward + backward over the kernel-variant shapes of tests/test_norm.py, one case
at a time with a synchronize after each, printing the case first: under compute-sanitizer this names the
kernel (and line) of a bad access and the case that made it.

    compute-sanitizer --print-limit 3 python scripts/norm_sanitize.py [dtype ...]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

import torch

import torch_dnn.functional as F

dtypes = [getattr(torch, d) for d in sys.argv[1:]] or [torch.float64, torch.float32, torch.bfloat16, torch.float16]
for dtype in dtypes:
    for shape in [(1500, 4096), (300, 16384), (700, 8192), (200, 12288), (999, 2056), (9, 4104)]:
        n = shape[-1]
        for kind in ("layer", "rms"):
            print(f"case {kind} {shape} {dtype}", flush=True)
            x = torch.randn(shape, dtype=dtype, device="cuda", requires_grad=True)
            w = torch.randn(n, dtype=dtype, device="cuda", requires_grad=True)
            b = torch.randn(n, dtype=dtype, device="cuda", requires_grad=True)
            y = F.layer_norm(x, [n], w, b) if kind == "layer" else F.rms_norm(x, [n], w, 1e-6)
            torch.cuda.synchronize()
            y.backward(torch.randn_like(y))
            torch.cuda.synchronize()
print("all cases ran", flush=True)
