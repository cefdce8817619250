"""Host time per call of small-tensor CUDA ops (the GPU work is microseconds, so a launch loop measures the
host path): `python scripts/probe_host.py [bn]`. Prints microseconds per call for torch_dnn and PyTorch, and
the CPU-side operators of one torch_dnn step (torch.profiler), to see where the host time goes."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
from scripts.profile_kernels import bn_tensors


def per_call_us(fn, n=300):
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def bn_steps():
    x, w, b, rm, rv, g = bn_tensors((4, 64, 4, 4), "NHWC")

    def fwd(fn):
        return lambda: fn(x.detach(), rm, rv, w.detach(), b.detach(), True, 0.1, 1e-5)

    def fb(fn):
        return lambda: torch.autograd.grad(fn(x, rm, rv, w, b, True, 0.1, 1e-5), [x, w, b], g)

    return {"bn fwd torch_dnn": fwd(F.batch_norm), "bn fwd torch": fwd(TF.batch_norm),
            "bn fwd+bwd torch_dnn": fb(F.batch_norm), "bn fwd+bwd torch": fb(TF.batch_norm)}


if __name__ == "__main__":
    steps = bn_steps()
    for name, fn in steps.items():
        print(f"{name:28s} {per_call_us(fn):8.1f} us/call")
    os.environ["TORCH_DNN_BN_PERSIST"] = "0"
    print(f"{'bn fwd+bwd td separate':28s} {per_call_us(steps['bn fwd+bwd torch_dnn']):8.1f} us/call")
    del os.environ["TORCH_DNN_BN_PERSIST"]
    from torch.profiler import ProfilerActivity, profile
    fn = steps["bn fwd+bwd torch_dnn"]
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(20):
            fn()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
