"""Same-run A/B of two builds on one GPU: the benchmark harness's cases, timed in a process that imports
torch_dnn (and the case definitions) from --root, so that a base build and the working tree can take turns.

    python scripts/ab_probe.py --root /tmp/ab-base --tag base --out base-1.json softmax activation -k bf16
    python scripts/ab_probe.py --root .            --tag new  --out new-1.json  softmax activation -k bf16
    python scripts/ab_probe.py --compare base-1.json new-1.json base-2.json new-2.json [--md ab.md]

Only the impls named by --impls are timed (default torch_dnn and eager: the peer's rows show the run's noise,
since its code is the same in both builds). --compare prints each case's median over the runs of each tag and
the ratio of the first tag's time to each other tag's (> 1: the other tag is faster). `scripts/gpu_check.sh
--ab-patch FILE` builds the base trees (/tmp/ab-NAME); the caller runs the turns (README, "GPU tests").
A run stopped by its time limit keeps the cases it finished: the JSON is rewritten after every case."""
import argparse
import json
import os
import statistics
import sys


def probe(a):
    sys.path.insert(0, os.path.abspath(a.root))
    import torch

    from benchmarks.harness import measure_copy_ceiling, run_case
    from benchmarks.run import FAMILIES

    import torch_dnn

    impls = a.impls.split(",")
    ceiling = measure_copy_ceiling()
    rows = []
    out = {"tag": a.tag, "root": os.path.abspath(a.root), "torch_dnn": os.path.dirname(torch_dnn.__file__),
           "device": torch.cuda.get_device_name(), "copy_ceiling_gbps": ceiling, "rows": rows}
    for fam in a.families:
        for case in FAMILIES[fam].cases(False):
            if not all(k in case.name for k in a.match):
                continue
            case.impls = {k: v for k, v in case.impls.items() if k in impls}
            for r in run_case(case, ceiling):
                keep = ("case", "impl", "ms", "p10_ms", "p90_ms", "pct_copy", "error")
                rows.append({k: r[k] for k in keep if k in r})
                print(f"{a.tag:6} {r['case']:<44} {r['impl']:<10} {r.get('ms', float('nan')):.4f} ms "
                      f"{r.get('pct_copy', 0):5.1f}% copy", flush=True)
            with open(a.out, "w") as f:
                json.dump(out, f, indent=1)


def compare(a):
    runs = [json.load(open(p)) for p in a.compare]
    tags = list(dict.fromkeys(r["tag"] for r in runs))
    times = {}  # (case, impl) -> tag -> [ms]
    for r in runs:
        for row in r["rows"]:
            if "ms" in row:
                times.setdefault((row["case"], row["impl"]), {}).setdefault(r["tag"], []).append(row["ms"])
    dev = sorted({r["device"] for r in runs})
    per_case = sorted({len(v) for by in times.values() for v in by.values()})
    n = str(per_case[0]) if len(per_case) == 1 else f"{per_case[0]}-{per_case[-1]}"
    head = [f"A/B on {', '.join(dev)}: median ms over {n} runs a tag and case, runs taking turns; "
            f"ratio = {tags[0]} ms / tag ms (> 1: faster than {tags[0]}).", "",
            "| case | impl | " + " | ".join(f"{t} ms (runs)" for t in tags) + " | " +
            " | ".join(f"{tags[0]}/{t}" for t in tags[1:]) + " |",
            "|---|---|" + "---|" * (2 * len(tags) - 1)]
    lines = []
    for (case, impl), by in times.items():
        med = {t: statistics.median(by[t]) for t in tags if t in by}
        cells = [f"{med[t]:.4f} ({', '.join(f'{x:.4f}' for x in by[t])})" if t in med else "-" for t in tags]
        ratios = [f"{med[tags[0]] / med[t]:.3f}" if tags[0] in med and t in med else "-" for t in tags[1:]]
        lines.append(f"| {case} | {impl} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    text = "\n".join(head + lines)
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("families", nargs="*")
    p.add_argument("--root", default=".")
    p.add_argument("--tag", default="new")
    p.add_argument("--out")
    p.add_argument("-k", dest="match", action="append", default=[], help="case names containing all these texts")
    p.add_argument("--impls", default="torch_dnn,eager")
    p.add_argument("--compare", nargs="+")
    p.add_argument("--md")
    a = p.parse_args()
    compare(a) if a.compare else probe(a)


if __name__ == "__main__":
    main()
