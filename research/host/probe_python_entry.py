"""The functional wrappers with and without torch_dnn._entry, in one process: each op's functional call timed with
the wrappers' op handles resolved through the C++ entry (the default) and through torch.ops (as with
TORCH_DNN_PYTHON_ENTRY=0), swapped between samples so that the same inputs, process and machine state serve both;
PyTorch's own op beside them. Tiny tensors, forward only (no graph recorded), then with inputs that require grad
(a node recorded, no backward). CUDA when present (launch included; queue drained around each 200-call sample),
best of 15 interleaved turns, us a call; one intra-op thread.

    python research/host/probe_python_entry.py
"""
import time

import torch
import torch.nn.functional as TF

import torch_dnn.functional as F
import torch_dnn.nn as N
from torch_dnn.ops import _registry as reg
from torch_dnn.ops import pool


def handles(use_entry):
    saved = reg._ENTRY_OP
    if not use_entry:
        reg._ENTRY_OP = None
    reg.ops.__dict__.clear()
    for names in reg.FAMILIES.values():
        for n in names:
            getattr(reg.ops, n)
    reg._ENTRY_OP = saved
    return dict(reg.ops.__dict__)


def per_call_us(fn, sync, n=200):
    sync()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t) / n * 1e6


def main():
    assert reg.python_entry_active(), "torch_dnn._entry is not loaded"
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_num_threads(1)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    with_entry, without = handles(True), handles(False)

    def use(d):
        reg.ops.__dict__.clear()
        reg.ops.__dict__.update(d)
        for kind, r, b in pool._OPS:  # pooling's wrappers keep their handles in a table of their own
            pool._OPS[kind, r, b] = d[f"{kind}{r}d{'_backward' if b else ''}"]

    for grad in (False, True):
        x = torch.randn(4, 64, device=dev, requires_grad=grad)
        p = torch.randn(2, 4, 8, 8, device=dev, requires_grad=grad)
        w = torch.randn(64, 64, device=dev, requires_grad=grad)
        v = torch.randn(64, device=dev, requires_grad=grad)
        q = torch.randn(1, 2, 8, 16, device=dev, requires_grad=grad)
        rm, rv = torch.zeros(4, device=dev), torch.ones(4, device=dev)
        cw, cb = torch.randn(4, 4, 3, 3, device=dev, requires_grad=grad), torch.randn(4, device=dev)
        conv = torch.nn.Conv2d(4, 4, 3, padding=1).to(dev).requires_grad_(grad)
        our_conv = N.Conv2d(4, 4, 3, padding=1).to(dev).requires_grad_(grad)
        our_conv.load_state_dict(conv.state_dict())
        rows = {
            "relu": (lambda: F.relu(x), lambda: TF.relu(x)),
            "gelu": (lambda: F.gelu(x), lambda: TF.gelu(x)),
            "softmax": (lambda: F.softmax(x, -1), lambda: TF.softmax(x, -1)),
            "layer_norm": (lambda: F.layer_norm(x, (64,), v, v), lambda: TF.layer_norm(x, (64,), v, v)),
            "rms_norm": (lambda: F.rms_norm(x, (64,), v), lambda: TF.rms_norm(x, (64,), v)),
            "max_pool2d 3/2": (lambda: F.max_pool2d(p, 3, 2), lambda: TF.max_pool2d(p, 3, 2)),
            "avg_pool2d 2": (lambda: F.avg_pool2d(p, 2), lambda: TF.avg_pool2d(p, 2)),
            "batch_norm train": (lambda: F.batch_norm(p, rm, rv, training=True),
                                 lambda: TF.batch_norm(p, rm, rv, training=True)),
            "conv2d 3x3": (lambda: F.conv2d(p, cw, cb, padding=1), lambda: TF.conv2d(p, cw, cb, padding=1)),
            "Conv2d 3x3 module": (lambda: our_conv(p), lambda: conv(p)),
            "linear": (lambda: F.linear(x, w, v), lambda: TF.linear(x, w, v)),
            "matmul": (lambda: F.matmul(x, w), lambda: torch.matmul(x, w)),
            "sdpa": (lambda: F.scaled_dot_product_attention(q, q, q),
                     lambda: TF.scaled_dot_product_attention(q, q, q)),
        }
        impls = ("entry", "torch.ops", "PyTorch")
        best = {(r, i): float("inf") for r in rows for i in impls}
        for turn in range(15):
            for r, (ours, theirs) in rows.items():
                order = impls if turn % 2 == 0 else impls[::-1]
                for i in order:
                    if i == "entry":
                        use(with_entry)
                    elif i == "torch.ops":
                        use(without)
                    best[r, i] = min(best[r, i], per_call_us(theirs if i == "PyTorch" else ours, sync))
        use(with_entry)
        print(f"device {dev}, inputs {'require grad (a node recorded)' if grad else 'need no grad'}: us a call")
        print("| op | entry | torch.ops | PyTorch | entry / PyTorch | torch.ops / PyTorch |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            e, o, t = best[r, "entry"], best[r, "torch.ops"], best[r, "PyTorch"]
            print(f"| {r} | {e:.2f} | {o:.2f} | {t:.2f} | {e / t:.2f}x | {o / t:.2f}x |")
        print()


if __name__ == "__main__":
    main()
