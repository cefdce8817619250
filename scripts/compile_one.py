"""Compile one source file of csrc/ with the build's flags (taken from setup.py), without linking: a quick
check that a .cu or a *_cuda.cpp compiles, and how long it takes, without rebuilding the whole extension.

    python scripts/compile_one.py csrc/pool/pool_forward.cu [--arch 9.0a --arch 8.0] [-o out.o]
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("source")
    p.add_argument("--arch", action="append", help="CUDA archs (default: 8.0 and 9.0a)")
    p.add_argument("-o", default="/tmp/compile_one.o")
    p.add_argument("--extra", action="append", default=[], help="extra compiler flags, e.g. --extra=-Xptxas=-v")
    a = p.parse_args()
    archs = a.arch or ["8.0", "9.0a"]
    env = dict(os.environ, TORCH_DNN_PRINT_FLAGS="1", TORCH_CUDA_ARCH_LIST=";".join(archs))
    out = subprocess.run([sys.executable, "setup.py"], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    f = json.loads(out.stdout.strip().splitlines()[-1])
    os.environ["CUDA_HOME"] = f["cuda_home"]  # before cpp_extension is imported, as setup.py does
    from torch.utils.cpp_extension import include_paths

    incs = [f"-I{d}" for d in f["includes"] + include_paths(device_type="cuda")]
    defs = [f"-D{k}={v}" for k, v in f["defines"]] + ["-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=_C"]
    if a.source.endswith(".cu"):
        gencode = [f"-gencode=arch=compute_{x.replace('.', '')},code=sm_{x.replace('.', '')}" for x in archs]
        cmd = [os.path.join(f["cuda_home"], "bin", "nvcc"), *f["nvcc"], *gencode, "-Xcompiler=-fPIC"]
    else:
        cmd = ["g++", *f["cxx"], "-fPIC"]
    cmd += [*defs, *incs, *a.extra, "-c", a.source, "-o", a.o]
    t = time.time()
    r = subprocess.run(cmd, cwd=ROOT)
    print(f"{a.source}: {'ok' if r.returncode == 0 else 'FAILED'} in {time.time() - t:.1f} s", file=sys.stderr)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
