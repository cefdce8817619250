"""SASS and resource usage of the built extension's kernels whose (demangled) name matches a pattern, for the
device machine (the workstation has no cuobjdump): `python scripts/dump_sass.py REGEX [--out DIR]`.
Writes one file a matching kernel (DIR/<n>.sass, its demangled name on the first line) and prints a summary: the
registers, spills and the count of each instruction class (LDG, STG, BAR, SHFL, F2F, PRMT, ...)."""
import argparse
import collections
import glob
import os
import re
import subprocess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pattern")
    ap.add_argument("--out", default=os.environ.get("OUT", ".out"))
    ap.add_argument("--lib", default=None)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lib = args.lib or glob.glob(os.path.join(root, "torch_dnn", "_C*.so"))[0]
    sass = subprocess.run(["cuobjdump", "-sass", lib], capture_output=True, text=True, check=True).stdout
    res = subprocess.run(["cuobjdump", "-res-usage", lib], capture_output=True, text=True).stdout
    usage = {}
    for m in re.finditer(r"Function (\S+):\s*\n\s*(REG:\d+.*)", res):
        usage[m.group(1)] = m.group(2).strip()
    pat = re.compile(args.pattern)
    os.makedirs(args.out, exist_ok=True)
    blocks = re.split(r"\n\s*Function : ", sass)[1:]
    names = [b.split("\n", 1)[0].strip() for b in blocks]
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    n = 0
    for block, name, dem in zip(blocks, names, demangled):
        if not pat.search(dem):
            continue
        ops = collections.Counter(re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", block))
        n += 1
        with open(os.path.join(args.out, f"{n}.sass"), "w") as f:
            f.write(dem + "\n" + block)
        top = ", ".join(f"{k} {v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:24])
        print(f"[{n}] {dem}\n    {usage.get(name, '?')}\n    {sum(ops.values())} instructions: {top}")
    if n == 0:
        print(f"no kernel matches {args.pattern!r}")


if __name__ == "__main__":
    main()
