"""Where does a converted network's train step spend host time? (issue: converted models' speed)

Times one bf16-autocast train step (forward + backward) of native and converted copies, interleaved, and prints
torch.profiler's top host-side entries (self CPU time) and GPU kernels of each.

    python research/models/host_profile.py resnet50 --batch 64 [--channels-last] [--only BatchNorm2d]
"""
import argparse
import copy
import time

import torch
from torch.profiler import ProfilerActivity, profile

from grad_bisect import build, swap  # noqa: E402  (same folder)


def step(model, x):
    with torch.autocast("cuda", torch.bfloat16):
        y = model(x)
    y.float().sum().backward()
    for p in model.parameters():
        p.grad = None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--rows", type=int, default=25)
    a = p.parse_args()
    mf = torch.channels_last if a.channels_last else torch.contiguous_format
    torch.manual_seed(0)
    base = build(a.model).cuda().train().to(memory_format=mf)
    nat, ours = copy.deepcopy(base), swap(copy.deepcopy(base), a.only)
    x = torch.randn(a.batch, 3, a.size, a.size, device="cuda").contiguous(memory_format=mf)
    for m in (nat, ours):
        for _ in range(3):
            step(m, x)
    torch.cuda.synchronize()
    times = {"native": [], "ours": []}
    for _ in range(a.reps):
        for name, m in (("native", nat), ("ours", ours)):
            t0 = time.perf_counter()
            step(m, x)
            torch.cuda.synchronize()
            times[name].append(time.perf_counter() - t0)
    med = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in times.items()}
    print(f"# {a.model} batch {a.batch} {'channels_last' if a.channels_last else 'NCHW'}: native {med['native']:.2f} ms, "
          f"ours {med['ours']:.2f} ms, speedup {med['native'] / med['ours']:.3f}x")
    for name, m in (("native", nat), ("ours", ours)):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step(m, x)
            torch.cuda.synchronize()
        ka = prof.key_averages()
        cpu_total = sum(e.self_cpu_time_total for e in ka) / 3e3
        gpu_total = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) for e in ka) / 3e3
        print(f"## {name}: host self time {cpu_total:.2f} ms/step, GPU kernels {gpu_total:.2f} ms/step")
        print(ka.table(sort_by="self_cpu_time_total", row_limit=a.rows, max_name_column_width=60))
        print(ka.table(sort_by="self_cuda_time_total", row_limit=a.rows, max_name_column_width=60))


if __name__ == "__main__":
    main()
