"""Which kernels store 16-byte vectors in pieces: compiles csrc/ .cu files to PTX (sm_90a, the build's flags, via
scripts/compile_one.py) and counts each kernel's global stores by width (research/codegen/README.md:
NVVM can split a vector store into element stores, which ptxas merges only in pairs). No GPU needed.

    python research/codegen/ptx_store_survey.py csrc/norm/norm_forward.cu [more.cu ...] [--all | --split] [--grep TEXT]

Prints, for each kernel with 16- or 32-bit global stores (or every kernel with --all): the counts of
st.global.v4 / v2 / 64 / 32 / 16-bit stores, and the demangled name. 32-bit stores include scalar float stores
(partial sums, statistics); a split 16-byte vector of 16-bit elements shows as 16b:6 32b:1 (or 32b:4).
"pieces" counts scalar stores at an offset from their base register that is not a multiple of 16 bytes: the parts
of a split vector (--split lists only kernels that have some). Example (eighteenth session): norm_block_fwd bf16
stored its first two vectors a thread as v4 and the other two in pieces (16b:36); a 32-bit column index fixed it
(nineteenth session)."""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ptx_of(source: str, keep: str) -> str:
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compile_one.py"), source, "--arch", "9.0a",
                    "--extra=--keep", f"--extra=--keep-dir={keep}", "-o", os.path.join(keep, "out.o")],
                   cwd=ROOT, check=True, capture_output=True)
    name = os.path.basename(source).rsplit(".", 1)[0] + ".ptx"
    with open(os.path.join(keep, name)) as f:
        return f.read()


def store_counts(ptx: str) -> dict:
    kernels, cur = {}, None
    for line in ptx.splitlines():
        m = re.match(r"\.visible \.entry (\S+)\(", line) or re.match(r"\.entry (\S+)\(", line)
        if m:
            cur = kernels.setdefault(m.group(1), collections.Counter())
            continue
        m = re.search(r"\bst\.global(?:\.[a-z]+)*?\.(v[24])?\.?([busf])(\d+)", line)
        if cur is not None and m:
            vec, bits = m.group(1), int(m.group(3))
            cur[vec or f"{bits}b"] += 1
            # a scalar store at [reg+k], k not a multiple of 16: a piece of a split 16-byte vector (a scalar tail
            # loop stores at [reg] with no offset; per-row statistics are not stored at such offsets either)
            off = re.search(r"\[%\w+\+(\d+)\]", line)
            if not vec and off and int(off.group(1)) % 16:
                cur["pieces"] += 1
    return kernels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("sources", nargs="+")
    p.add_argument("--all", action="store_true")
    p.add_argument("--grep", default="")
    p.add_argument("--split", action="store_true", help="only kernels with pieces of split 16-byte vectors")
    a = p.parse_args()
    for src in a.sources:
        with tempfile.TemporaryDirectory() as keep:
            kernels = store_counts(ptx_of(src, keep))
        names = list(kernels)
        demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
        print(f"== {src}")
        for mangled, name in zip(names, demangled):
            c = kernels[mangled]
            show = c["pieces"] if a.split else (c["16b"] + c["32b"] or a.all)
            if show and a.grep in name:
                counts = " ".join(f"{k}:{c[k]}" for k in ("v4", "v2", "64b", "32b", "16b", "pieces") if c[k])
                print(f"  {counts:<32} {name.replace('torch_dnn::', '')[:150]}")


if __name__ == "__main__":
    main()
