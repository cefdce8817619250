"""Which swapped module type makes a converted network's train step slower? (issue: converted models' speed)

Part 1 times a bf16-autocast train step (forward, sum, backward) of a native model against copies with one
module type swapped at a time (and all of them), interleaved step by step, by the wall clock (queue drained
around each step): the median of ours over native, and the range of that ratio over blocks of steps.
Part 2 times BatchNorm2d alone (training forward + backward, bf16 autocast, weight and bias requiring grad) at
ResNet-50's batch-16 shapes, ours and native in turns: wall clock per call over 20 calls in a row, so the queue
shows whether the host or the GPU bounds it. Both parts also time ours with the environment of --with (e.g.
TORCH_DNN_BN_CHANNEL_KB=256: the launchers read their knobs at every call), in the same turns.

    python research/models/swap_speed.py resnet50 [--batch 16] [--steps 40]
"""
import argparse
import copy
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
from benchmarks.harness import with_env  # noqa: E402
from grad_bisect import build, swap  # noqa: E402  (same folder)
from host_profile import step  # noqa: E402  (same folder)

TYPES = ["BatchNorm2d", "ReLU", "MaxPool2d", "AdaptiveAvgPool2d", "Linear"]
WITH = {}  # --with's environment


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def models_part(a, mf):
    torch.manual_seed(0)
    base = build(a.model).cuda().train().to(memory_format=mf)
    x = torch.randn(a.batch, 3, 224, 224, device="cuda").contiguous(memory_format=mf)
    variants = {"native": base}
    for t in TYPES + ["all"]:
        variants[t] = swap(copy.deepcopy(base), [] if t == "all" else [t])
    fns = {k: with_env(lambda m=m: step(m, x)) for k, m in variants.items()}
    if WITH:
        fns["all, with"] = with_env(lambda m=variants["all"]: step(m, x), **WITH)
    for fn in fns.values():
        for _ in range(3):
            fn()
    times = {k: [] for k in fns}
    names = list(fns)
    for i in range(a.steps):
        for k in names if i % 2 == 0 else names[::-1]:
            times[k].append(timed(fns[k]))
    nat = statistics.median(times["native"])
    print(f"## {a.model} b{a.batch} {'channels_last' if mf == torch.channels_last else 'NCHW'}: native "
          f"{nat * 1e3:.2f} ms a step")
    block = max(1, a.steps // 5)
    for k in names[1:]:
        ratios = [statistics.median(times[k][j:j + block]) / statistics.median(times["native"][j:j + block])
                  for j in range(0, a.steps, block)]
        print(f"  swapped {k:<18} {statistics.median(times[k]) * 1e3:7.2f} ms  ours/native "
              f"{statistics.median(times[k]) / nat:.3f} (blocks {min(ratios):.3f}-{max(ratios):.3f})")


def bn_part(mf):
    import torch_dnn

    shapes = [(16, 64, 112, 112), (16, 256, 56, 56), (16, 128, 28, 28), (16, 1024, 14, 14), (16, 2048, 7, 7)]
    print(f"## BatchNorm2d training fwd+bwd, bf16 autocast, {'channels_last' if mf == torch.channels_last else 'NCHW'}:"
          " us a call (20 calls in a row, queue drained around them; over native's in brackets)")
    for s in shapes:
        nat = torch.nn.BatchNorm2d(s[1]).cuda()
        ours = torch_dnn.convert(copy.deepcopy(nat))[0]
        x = torch.randn(s, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=mf).requires_grad_()
        g = torch.randn(s, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=mf)

        def run(m):
            for _ in range(20):
                with torch.autocast("cuda", torch.bfloat16):
                    y = m(x)
                y.backward(g)

        impls = {"native": with_env(lambda: run(nat)), "ours": with_env(lambda: run(ours))}
        if WITH:
            impls["ours with"] = with_env(lambda: run(ours), **WITH)
        res = {k: [] for k in impls}
        for fn in impls.values():
            fn()
        names = list(impls)
        for i in range(10):
            for k in names if i % 2 == 0 else names[::-1]:
                res[k].append(timed(impls[k]) / 20 * 1e6)
        n = statistics.median(res["native"])
        cells = "  ".join(f"{k} {statistics.median(res[k]):8.1f} ({statistics.median(res[k]) / n:.3f})"
                          for k in names[1:])
        print(f"  {str(list(s)):<22} native {n:8.1f}  {cells}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--with", dest="with_env", nargs="*", default=[], help="KEY=VALUE: also ours in this environment")
    a = p.parse_args()
    WITH.update(kv.split("=", 1) for kv in a.with_env)
    for mf in (torch.contiguous_format, torch.channels_last):
        models_part(a, mf)
    for mf in (torch.contiguous_format, torch.channels_last):
        bn_part(mf)


if __name__ == "__main__":
    main()
