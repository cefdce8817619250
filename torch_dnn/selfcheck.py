"""The self-check of `python -m torch_dnn`: every public op against PyTorch on small random inputs, forward
and backward, on each available device, printed as a pass/fail table. The cases are each family's
(selfcheck_cases() in torch_dnn/ops/<family>.py)."""
import importlib

import torch

from torch_dnn.family_table import TABLE


def _checks():
    """(family, op, callable(device, dtype) -> list of Verdicts): each family's selfcheck_cases(), in the table's
    order."""
    return [(family.name, op, fn) for family in TABLE
            for op, fn in importlib.import_module(family.ops_module).selfcheck_cases()]


def run_selfcheck(devices) -> int:
    # float32 without TF32, as the tests: with the flags at PyTorch's defaults our convolutions take TF32 as
    # cudnn.allow_tf32 permits, while cuDNN picks full-precision kernels at these sizes, so the error rule would
    # compare two precisions
    from torch_dnn.testing import no_tf32

    with no_tf32():
        return _run(devices)


def _run(devices) -> int:
    dtypes = [torch.float32, torch.bfloat16]
    header = f"{'family':<11} {'op':<34} " + " ".join(f"{d + ' ' + str(t).split('.')[-1]:>17}" for d in devices for t in dtypes)
    print(header)
    print("-" * len(header))
    failures = 0
    for family, op, fn in _checks():
        cells = []
        for d in devices:
            for t in dtypes:
                try:
                    verdicts = fn(d, t)
                    ok = all(verdicts)
                    worst = max((max(v.ours) if v.ours else 0.0) for v in verdicts)
                    cells.append(f"{'pass' if ok else 'FAIL'} {worst:9.1e}")
                    if not ok:
                        failures += 1
                        print("   ", "; ".join(v.message for v in verdicts if not v))
                except Exception as e:  # an exception is a failed check, reported, not a crash
                    failures += 1
                    cells.append("ERROR")
                    print(f"    {op} on {d} {t}: {type(e).__name__}: {e}")
        print(f"{family:<11} {op:<34} " + " ".join(f"{c:>17}" for c in cells))
    print(f"(cells: result and the worst error of ours against float64, max-norm; float32 without TF32; {failures} failed)")
    return failures
