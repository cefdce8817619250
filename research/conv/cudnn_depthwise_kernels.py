# cuDNN's depthwise kernels at the harness's shapes, per kernel (torch.profiler), fwd + bwd of F.conv2d, bf16 NHWC;
# with torch_dnn importable (after a build) the same through torch_dnn.functional.conv2d
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from torch.profiler import ProfilerActivity, profile, schedule

torch.backends.cudnn.benchmark = True
shapes = [(64, 384, 28, 28, 3, 1, 1), (64, 144, 56, 56, 5, 2, 2), (64, 96, 112, 112, 3, 2, 1), (64, 672, 14, 14, 5, 1, 2),
          (64, 96, 56, 56, 7, 1, 3), (64, 384, 14, 14, 7, 1, 3)]
impls = [("cuDNN", F.conv2d)]
try:
    import torch_dnn
    impls.append(("torch_dnn", torch_dnn.functional.conv2d))
except Exception as e:  # noqa: BLE001
    print("torch_dnn not importable:", e)
for N, C, H, W, R, s, p in shapes:
    x = torch.randn(N, C, H, W, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(C, 1, R, R, device="cuda", dtype=torch.bfloat16).requires_grad_()
    for name, fn in impls:
        def step():
            y = fn(x, w, None, s, p, 1, C)
            y.backward(torch.ones_like(y))
        # 5 warm-up steps, then 10 recorded
        with profile(activities=[ProfilerActivity.CUDA], schedule=schedule(wait=0, warmup=5, active=10)) as prof:
            for _ in range(15):
                step()
                torch.cuda.synchronize()
                prof.step()
        print(f"== {name} N{N} C{C} {H}x{W} k{R} s{s}")
        for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:8]:
            if e.device_time_total > 0:
                print(f"  {e.device_time_total / 10:9.1f} us/step  x{e.count // 10}  {e.key[:110]}")
