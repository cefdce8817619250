"""GPU time of in-place activations under autograd: `python research/activation/probe_inplace.py [--out FILE.md]`.

Rows: a lone relu_ on a non-leaf (clone -> relu_ -> backward with a given gradient), and a ResNet-style block
(conv, BatchNorm2d, ReLU(inplace=True), conv, BatchNorm2d, ReLU(inplace=True)) forward + backward, each as
PyTorch, torch_dnn (convert()ed; in place, the derivative read from the result) and torch_dnn's earlier
write-back form (functional op on a clone, copied back), which apply_inplace keeps for leaves and views.
Times are CUDA-event medians of GPU-bound loops (milliseconds a step)."""
import argparse
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root

import torch

import torch_dnn
import torch_dnn.ops.activation as act_ops
from benchmarks.harness import emit


def median_ms(step, iters=50, warmup=10):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


class write_back:
    """apply_inplace's copy-and-write-back form under autograd, for comparison with the in-place node."""

    def __enter__(self):
        self.orig = act_ops.apply_inplace
        orig = self.orig
        act_ops.apply_inplace = lambda f, g, x, *args: (x.copy_(f(x.clone(), *args)) if x.requires_grad
                                                        else orig(f, g, x, *args))

    def __exit__(self, *exc):
        act_ops.apply_inplace = self.orig


def lone_relu(shape, dtype, memory_format):
    x = torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=memory_format).requires_grad_()
    g = torch.randn_like(x)
    n = x.numel() * x.element_size()

    def make(relu_):
        def step():
            a = x.clone()
            relu_(a)
            torch.autograd.backward(a, g)
        return step

    torch_step = make(torch.relu_)
    ours = make(lambda t: torch_dnn.functional.relu(t, inplace=True))
    # bytes: clone 2n, relu_ 2n, relu backward 3n (grad, result, grad_input) -> 7n in place; write-back adds
    # a clone (2n), the functional op (2n instead of 2n in place) and the copy (2n)
    return torch_step, ours, n


def block(n, c, hw, dtype, memory_format):
    conv = lambda: torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
    model = torch.nn.Sequential(conv(), torch.nn.BatchNorm2d(c), torch.nn.ReLU(inplace=True),
                                conv(), torch.nn.BatchNorm2d(c), torch.nn.ReLU(inplace=True))
    model = model.to("cuda", dtype).to(memory_format=memory_format).train()
    ours, _ = torch_dnn.convert(copy.deepcopy(model))
    x = torch.randn(n, c, hw, hw, device="cuda", dtype=dtype).contiguous(memory_format=memory_format)
    g = torch.randn_like(x)

    def make(m):
        def step():
            y = m(x)
            torch.autograd.backward(y, g)
        return step

    return make(model), make(ours)


def profile_blocks():
    from torch.profiler import ProfilerActivity, profile
    for dtype in (torch.float32, torch.bfloat16):
        for mf in (torch.contiguous_format, torch.channels_last):
            name = f"{str(dtype)[6:]} {'NHWC' if mf is torch.channels_last else 'NCHW'}"
            for label, step in zip(("torch", "torch_dnn"), block(32, 64, 56, dtype, mf)):
                for _ in range(5):
                    step()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        step()
                    torch.cuda.synchronize()
                print(f"== block 32x64x56x56 {name}, {label}: CUDA time of 5 steps")
                print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=90))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--profile", action="store_true", help="per-kernel CUDA time of one block step, each form")
    args = ap.parse_args()
    if args.profile:
        return profile_blocks()
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for mf in (torch.contiguous_format, torch.channels_last):
            name = f"{str(dtype)[6:]} {'NHWC' if mf is torch.channels_last else 'NCHW'}"
            t_step, o_step, _ = lone_relu((256, 64, 56, 56), dtype, mf)
            t = median_ms(t_step)
            o = median_ms(o_step)
            with write_back():
                w = median_ms(o_step)
            rows.append((f"relu_ 256x64x56x56 {name}", t, o, w))
            for n in (32, 128) if dtype is torch.bfloat16 else (32,):  # 32: host-bound on the device's CPU
                t_step, o_step = block(n, 64, 56, dtype, mf)
                t = median_ms(t_step)
                o = median_ms(o_step)
                with write_back():
                    w = median_ms(o_step)
                rows.append((f"block {n}x64x56x56 {name}", t, o, w))
    lines = [f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; GPU-bound loops, median ms a step",
             "", "| case (fwd+bwd) | torch | torch_dnn in place | torch_dnn write-back | in place vs torch |",
             "|---|---|---|---|---|"]
    for case, t, o, w in rows:
        lines.append(f"| {case} | {t:.4f} | {o:.4f} | {w:.4f} | {t / o:.2f}x |")
    emit("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
