# Host time of one depthwise fwd+bwd through our op against cuDNN's (needs the build): the CPU time a call (the
# host's side alone: no GPU waits, 200 iterations back to back without sync, then one sync), and torch.profiler's
# per-op CPU self times for ours. bench conv's 3x3 384 @28 fwd+bwd row is ~30 us above our kernels' sum.
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from torch.profiler import profile, ProfilerActivity
import torch_dnn.functional as TF

torch.backends.cudnn.benchmark = True
x = torch.randn(64, 384, 28, 28, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last).requires_grad_()
w = torch.randn(384, 1, 3, 3, device="cuda", dtype=torch.bfloat16).requires_grad_()
g = torch.randn(64, 384, 28, 28, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
for name, fn in (("cuDNN", F.conv2d), ("torch_dnn", TF.conv2d)):
    def step():
        y = fn(x, w, None, 1, 1, 1, 384)
        x.grad = w.grad = None
        y.backward(g)
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(200):
        step()
    host = (time.perf_counter() - t) / 200 * 1e6
    torch.cuda.synchronize()
    total = (time.perf_counter() - t) / 200 * 1e6
    print(f"{name}: host {host:.1f} us a step (enqueue), {total:.1f} us a step with the GPU")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))
