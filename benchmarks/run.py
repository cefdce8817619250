"""Entry point: python -m benchmarks.run [family ...] [--out DIR] [--md PATH] [--quick] [-k TEXT]
(also reachable as python -m torch_dnn bench ...)."""
import argparse
import importlib

from benchmarks import cases_host, cases_models
from benchmarks.harness import run
from torch_dnn.family_table import TABLE

# name -> module whose cases(quick) lists its benchmark cases: each family of torch_dnn/family_table.py that has
# benchmarks/cases_<family>.py, in the table's order, then the benchmark-only entries (no op family of their own)
FAMILIES = {f.name: importlib.import_module(f.benchmark_module) for f in TABLE if f.benchmark_module}
FAMILIES["models"] = cases_models
FAMILIES["host"] = cases_host


def main(argv=None):
    p = argparse.ArgumentParser(prog="torch_dnn bench")
    p.add_argument("families", nargs="*", help=f"any of {sorted(FAMILIES)} (default: all)")
    p.add_argument("--out", help="directory for bench.json")
    p.add_argument("--md", help="path of the markdown results table")
    p.add_argument("--quick", action="store_true", help="one shape per case")
    p.add_argument("-k", dest="match", default="", help="only the cases whose name contains this text")
    a = p.parse_args(argv)
    fams = a.families or list(FAMILIES)
    unknown = [f for f in fams if f not in FAMILIES]
    if unknown:
        p.error(f"unknown family {unknown}; known: {sorted(FAMILIES)}")
    cases = [c for f in fams for c in FAMILIES[f].cases(a.quick) if a.match in c.name]
    run(cases, a.out, a.md, title=f"torch_dnn benchmarks: {', '.join(fams)}")


if __name__ == "__main__":
    main()
