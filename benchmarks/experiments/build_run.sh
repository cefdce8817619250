#!/bin/bash
# On the device: build one standalone experiment (a .cu with its own main, linked against cuBLAS) for sm_90a and
# run it, once per set of compile-time flags: bash build_run.sh DIR/SOURCE.cu "-DFLAG=1" "-DFLAG=2" ...
# (no flags: one plain build). The experiments' run.sh call it.
src=$(realpath "$1"); shift
cd "$(dirname "$src")"
NV=$(python3 -c "import nvidia,os;print(os.path.dirname(nvidia.__path__[0]))" 2>/dev/null)/nvidia/cu13
export LD_LIBRARY_PATH=$NV/lib:${LD_LIBRARY_PATH:-}
bin=/tmp/$(basename "$src" .cu)
for flags in "${@:-}"; do
  nvcc -std=c++20 -O3 -arch=sm_90a -I../../../csrc $flags -I"$NV/include" -L"$NV/lib" -Xlinker -rpath="$NV/lib" \
    -o "$bin" "$(basename "$src")" -l:libcublas.so.13 -lcuda || exit 1
  echo "== $flags"; "$bin"
done
