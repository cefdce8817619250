"""Host microseconds of one call that records no autograd graph, for every forward op that neither views nor
mutates (tests/op_samples.py's calls, float32 on the CPU, one thread): the op's C++ callable at the Autograd key
against the same call inside `with torch._C._AutoDispatchBelowAutograd()`, in alternating turns, the best of each.
Negative: passing through the Autograd key costs less than the Python-side switch below it.

    PYTHONPATH=. python research/host/probe_no_grad_path.py
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the repository root
import torch_dnn  # noqa: E402,F401
from tests.op_samples import op_samples  # noqa: E402


def per_call_us(fn, n=400):
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main():
    torch.set_num_threads(1)
    below_autograd = torch._C._AutoDispatchBelowAutograd
    rows = []
    for name, (args, kwargs) in op_samples(dtype=torch.float32).items():
        packet = getattr(torch.ops.torch_dnn, name)
        if name.endswith(("_backward", "_")) or packet.overloads() != ["default"]:
            continue
        if any(a.alias_info is not None and a.alias_info.is_write for a in packet.default._schema.arguments):
            continue
        op = packet.default._op

        def at_autograd_key(op=op, args=args, kwargs=kwargs):
            return op(*args, **kwargs)

        def below(op=op, args=args, kwargs=kwargs):
            with below_autograd():
                return op(*args, **kwargs)

        best = {"key": float("inf"), "below": float("inf")}
        for turn in range(12):
            order = (("key", at_autograd_key), ("below", below))
            for k, fn in (order if turn % 2 else order[::-1]):
                best[k] = min(best[k], per_call_us(fn))
        rows.append((best["key"] - best["below"], name, best["key"], best["below"]))
    print(f"{'op':28s} {'Autograd key':>12s} {'below':>8s} {'difference':>10s}")
    for diff, name, key, below_us in sorted(rows):
        print(f"{name:28s} {key:12.2f} {below_us:8.2f} {diff:+10.2f}")


if __name__ == "__main__":
    main()
