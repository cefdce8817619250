"""The `torch.ops` entry's host cost on its own: PyTorch's own ops called through `torch.ops.aten.<op>.default`
(the path every torch_dnn op takes: a boxed OpOverload call, arguments parsed against the schema) against the same
ops through `torch.nn.functional` / `torch.*` (generated bindings), one call each on tiny tensors, CUDA when present
(the launch included; queue drained around each 200-call sample), best of 15 interleaved turns. Needs no torch_dnn
build: it measures the floor our forward-only calls stand on.

    python research/host/probe_entry.py
"""
import time

import torch
import torch.nn.functional as TF


def per_call_us(fn, sync, n=200):
    sync()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - start) / n * 1e6


def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    x = torch.randn(4, 64, device=dev)
    p = torch.randn(2, 4, 8, 8, device=dev)
    aten = torch.ops.aten
    pairs = {
        "relu": (lambda: torch.relu(x), lambda: aten.relu.default(x)),
        "softmax": (lambda: TF.softmax(x, -1), lambda: aten._softmax.default(x, -1, False)),
        "max_pool2d 3/2": (lambda: TF.max_pool2d(p, 3, 2),
                           lambda: aten.max_pool2d_with_indices.default(p, [3, 3], [2, 2], [0, 0], [1, 1], False)),
        "avg_pool2d 2": (lambda: TF.avg_pool2d(p, 2),
                         lambda: aten.avg_pool2d.default(p, [2, 2], [2, 2], [0, 0], False, True, None)),
    }
    with torch.no_grad():
        best = {(k, i): float("inf") for k in pairs for i in range(2)}
        for turn in range(15):
            for k, fns in pairs.items():
                for i in (0, 1) if turn % 2 else (1, 0):
                    best[k, i] = min(best[k, i], per_call_us(fns[i], sync))
    print(f"device {torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'}, torch {torch.__version__}")
    print(f"{'op':16s} {'binding us':>10s} {'torch.ops us':>12s} {'ratio':>6s}")
    for k in pairs:
        print(f"{k:16s} {best[k, 0]:10.2f} {best[k, 1]:12.2f} {best[k, 1] / best[k, 0]:6.2f}")


if __name__ == "__main__":
    main()
