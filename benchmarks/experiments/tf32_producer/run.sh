#!/bin/bash
# On the device: build the standalone TF32 producer-rounding experiment against cuBLAS and time it.
# Variants are compile-time: bash run.sh "-DTD_STAGES=3" "-DTD_ROUND=0" ...
cd "$(dirname "$0")"
NV=$(python3 -c "import nvidia,os;print(os.path.dirname(nvidia.__path__[0]))" 2>/dev/null)/nvidia/cu13
export LD_LIBRARY_PATH=$NV/lib:${LD_LIBRARY_PATH:-}
for flags in "${@:-}"; do
  nvcc -std=c++20 -O3 -arch=sm_90a -I../../../csrc $flags -I"$NV/include" -L"$NV/lib" -Xlinker -rpath="$NV/lib" \
    -o /tmp/tf32p tf32p.cu -l:libcublas.so.13 -lcuda || exit 1
  echo "== $flags"; /tmp/tf32p
done
