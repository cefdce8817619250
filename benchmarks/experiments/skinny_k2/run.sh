#!/bin/bash
# On the device: build the standalone K2 experiment against cuBLAS and time it (graph-free launch loop, weights
# cycled over > 160 MB). Variants are compile-time: bash run.sh "-DTD_K2_SHARE=1" ...
cd "$(dirname "$0")"
NV=$(python3 -c "import nvidia,os;print(os.path.dirname(nvidia.__path__[0]))" 2>/dev/null)/nvidia/cu13
export LD_LIBRARY_PATH=$NV/lib:${LD_LIBRARY_PATH:-}
for flags in "${@:-}"; do
  nvcc -std=c++20 -O3 -arch=sm_90a -I../../../csrc $flags -I"$NV/include" -L"$NV/lib" -Xlinker -rpath="$NV/lib" \
    -o /tmp/k2_bench k2_bench.cu -l:libcublas.so.13 -lcuda || exit 1
  echo "== $flags"; /tmp/k2_bench
done
