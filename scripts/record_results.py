"""Append a benchmark run to the results history: `python scripts/record_results.py .out/bench.json [--commit HASH]`.

Reads the bench.json that `python -m torch_dnn bench ... --out DIR` (or scripts/gpu_check.sh, into $OUT) writes and
appends one row per measured value to benchmarks/results/history.csv (columns commit, gpu, date, family, case, impl,
metric, value; metrics ms, p10_ms, p90_ms, GB/s, TFLOP/s). The file is append-only: rows already there are not
written twice, and nothing is rewritten. --commit names the tree that ran when the run's own stamp is wrong (the
device's copy of the tree can carry a stale HEAD; the stamp then says "+ uncommitted changes"). The per-family
tables (benchmarks/results/<gpu>-<family>.md) are updated by hand from the run's results.md: docs/benchmarking.md.
"""
import argparse
import csv
import json
import os

HISTORY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "results",
                       "history.csv")
COLUMNS = ["commit", "gpu", "date", "family", "case", "impl", "metric", "value"]
METRICS = (("ms", "ms"), ("p10_ms", "p10_ms"), ("p90_ms", "p90_ms"), ("gbps", "GB/s"), ("tflops", "TFLOP/s"))


def family_of(row: dict) -> str:
    # local_response_norm's cases live in the group_norm case file but are their own family (csrc/lrn, docs/lrn.md)
    return "lrn" if row["case"].startswith("local_response_norm") else row["family"]


def rows_of(bench: dict, commit: str | None) -> list[dict]:
    env = bench["env"]
    commit = commit or env["commit"].split()[0]
    gpu = env["device"].removeprefix("NVIDIA ")
    date = env["date"].replace(" UTC", "Z").replace(" ", "T")
    out = []
    for r in bench["rows"]:
        for key, metric in METRICS:
            if key in r:
                out.append({"commit": commit, "gpu": gpu, "date": date, "family": family_of(r), "case": r["case"],
                            "impl": r["impl"], "metric": metric, "value": f"{r[key]:.6g}"})
    return out


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("bench_json", nargs="+")
    p.add_argument("--commit", help="the commit that ran (when the run's stamp is stale)")
    p.add_argument("--history", default=HISTORY)
    a = p.parse_args(argv)
    have = set()
    if os.path.exists(a.history):
        with open(a.history, newline="") as f:
            have = {tuple(r[c] for c in COLUMNS) for r in csv.DictReader(f)}
    new = []
    for path in a.bench_json:
        with open(path) as f:
            new += [r for r in rows_of(json.load(f), a.commit) if tuple(r[c] for c in COLUMNS) not in have]
    write_header = not os.path.exists(a.history)
    with open(a.history, "a", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        if write_header:
            w.writeheader()
        w.writerows(new)
    print(f"{len(new)} rows appended to {a.history}")


if __name__ == "__main__":
    main()
