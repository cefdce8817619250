"""Which norm backward cases disagree with PyTorch (relative max error of dx, dw, db), for the row path
(rows too long for a block in registers) and the block paths; one line per case."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch
import torch.nn.functional as TF

import torch_dnn.functional as F

for dtype, shape in [(torch.float64, (200, 12288)), (torch.float64, (64, 9000)), (torch.float64, (300, 8192)),
                     (torch.float64, (64, 12290)), (torch.float32, (64, 20000)), (torch.float32, (200, 12288)),
                     (torch.bfloat16, (64, 40000)), (torch.float64, (2, 12288)), (torch.float64, (200, 4096))]:
    n = shape[-1]
    for env in ("", "block"):
        os.environ["TORCH_DNN_NORM_BWD"] = env
        x = torch.randn(shape, dtype=dtype, device="cuda", requires_grad=True)
        w = torch.randn(n, dtype=dtype, device="cuda", requires_grad=True)
        b = torch.randn(n, dtype=dtype, device="cuda", requires_grad=True)
        dy = torch.randn(shape, dtype=dtype, device="cuda")
        y = F.layer_norm(x, [n], w, b)
        ours = torch.autograd.grad(y, [x, w, b], dy)
        yr = TF.layer_norm(x.double(), [n], w.double(), b.double())
        ref = torch.autograd.grad(yr, [x, w, b], dy.double())
        errs = [((o.double() - r).abs().max() / r.abs().max()).item() for o, r in zip(ours, ref)]
        ey = ((y.double() - yr).abs().max() / yr.abs().max()).item()
        torch.cuda.synchronize()
        print(f"{str(dtype):15} {str(shape):14} bwd={env or 'default':8} y {ey:.1e} dx {errs[0]:.1e} dw {errs[1]:.1e} db {errs[2]:.1e}",
              flush=True)
