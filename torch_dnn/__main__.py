"""python -m torch_dnn            self-check of every op against PyTorch, then a side-by-side demo
python -m torch_dnn bench ...   the benchmarks (needs a CUDA device and a repository checkout)"""
import os
import sys
import time

import torch


def _devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def print_facts():
    import torch_dnn

    info = torch_dnn.build_info()
    print("torch_dnn", torch_dnn.__version__)
    print(f"  torch {torch.__version__} (CUDA {torch.version.cuda}); extension built against torch {info['torch']}")
    print(f"  extension: {'CUDA' if info['with_cuda'] else 'CPU-only'} build"
          + (f", archs {info['cuda_archs']}" if info["with_cuda"] else ""))
    from torch_dnn.ops._registry import python_entry_active
    print("  functional wrappers call the ops through "
          + ("torch_dnn._entry (C++)" if python_entry_active() else "torch.ops (torch_dnn._entry not loaded)"))
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        print(f"  GPU: {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB")
    else:
        print("  GPU: none visible (CPU kernels only)")
    for fam, names in torch_dnn.families().items():
        n_cuda = sum(torch_dnn.has_cuda_kernel(n) for n in names)
        print(f"  family {fam:<11} {len(names):3d} ops, CUDA kernels for {n_cuda}")


def main_check() -> int:
    import torch_dnn
    from torch_dnn.selfcheck import run_selfcheck

    print_facts()
    print()
    failures = run_selfcheck(_devices())
    print()
    failures += demo()
    print()
    print("self-check:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


def _time(fn, device, reps=20):
    for _ in range(3):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps * 1e3


def demo() -> int:
    import torch_dnn
    from torch_dnn.demo import SmallNet
    from torch_dnn.testing import compare

    failures = 0
    print("demo: SmallNet, native vs torch_dnn.convert(SmallNet) (forward + backward)")
    for device in _devices():
        torch.manual_seed(0)
        model = SmallNet(channels=32).to(device).eval()
        converted, report = torch_dnn.convert(model)
        x = torch.rand(16 if device == "cpu" else 256, 3, 32, 32, device=device) * 2 - 1
        y_native, y_ours = model(x), converted(x)
        y64 = SmallNet(channels=32).to(device).double().eval()
        y64.load_state_dict(model.state_dict())
        v = compare(y_ours, y_native, y64(x.double()), name=f"{device} SmallNet output")
        failures += not v

        def step(m):
            xi = x.clone().requires_grad_()
            m(xi).sum().backward()

        t_native = _time(lambda: step(model), device)
        t_ours = _time(lambda: step(converted), device)
        print(f"  {device}: {len(report.swapped)} modules swapped, {len(report.left)} left "
              f"({', '.join(sorted({t for _, t, _ in report.left}))}); outputs {'match' if v else 'DIFFER'} "
              f"({v.message.split(': ', 1)[1]})")
        print(f"  {device}: native {t_native:.2f} ms, torch_dnn {t_ours:.2f} ms per step")
    return failures


def main(argv):
    if argv and argv[0] == "bench":
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if not os.path.isdir(os.path.join(root, "benchmarks")):
            print("torch_dnn bench: run from a repository checkout (benchmarks/ not found)", file=sys.stderr)
            return 2
        sys.path.insert(0, root)
        from benchmarks.run import main as bench_main

        bench_main(argv[1:])
        return 0
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    return main_check()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
