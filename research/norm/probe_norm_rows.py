"""Norm backward error per path and shape: for each case (the row-path shapes that overran the partial-sum
workspace, and the block-path shapes of tests/test_norm.py's kernel-variant test), the relative max error of
y, dx, dw, db against float64 PyTorch, with the default kernels and with TORCH_DNN_NORM_BWD=block. The case is
printed before it runs and every case synchronizes, so under compute-sanitizer the last line names the case of
a bad access:

    [compute-sanitizer --print-limit 3] python research/norm/probe_norm_rows.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F

ROW_PATH = [(torch.float64, (200, 12288)), (torch.float64, (64, 9000)), (torch.float64, (64, 12290)),
            (torch.float32, (64, 20000)), (torch.bfloat16, (64, 40000)), (torch.float64, (2, 12288))]
VARIANT_SHAPES = [(1500, 4096), (300, 16384), (700, 8192), (200, 12288), (999, 2056), (9, 4104)]
cases = ROW_PATH + [(dt, s) for dt in (torch.float64, torch.float32, torch.bfloat16, torch.float16)
                    for s in VARIANT_SHAPES]
for dtype, shape in cases:
    n = shape[-1]
    for env in ("", "block"):
        os.environ["TORCH_DNN_NORM_BWD"] = env
        print(f"{str(dtype):15} {str(shape):14} bwd={env or 'default':8}", end=" ", flush=True)
        x = torch.randn(shape, dtype=dtype, device="cuda", requires_grad=True)
        w = torch.randn(n, dtype=dtype, device="cuda", requires_grad=True)
        b = torch.randn(n, dtype=dtype, device="cuda", requires_grad=True)
        dy = torch.randn(shape, dtype=dtype, device="cuda")
        y = F.layer_norm(x, [n], w, b)
        ours = torch.autograd.grad(y, [x, w, b], dy)
        torch.cuda.synchronize()
        yr = TF.layer_norm(x.double(), [n], w.double(), b.double())
        ref = torch.autograd.grad(yr, [x, w, b], dy.double())
        errs = [((o.double() - r).abs().max() / r.abs().max()).item() for o, r in zip(ours, ref)]
        ey = ((y.double() - yr).abs().max() / yr.abs().max()).item()
        print(f"y {ey:.1e} dx {errs[0]:.1e} dw {errs[1]:.1e} db {errs[2]:.1e}", flush=True)
print("all cases ran", flush=True)
