#!/bin/bash
# On the device: build the standalone K2 experiment against cuBLAS and time it (graph-free launch loop, weights
# cycled over > 160 MB). Variants are compile-time: bash run.sh "-DTD_K2_SHARE=1" ...
exec "$(dirname "$0")/../build_run.sh" "$(dirname "$0")/k2_bench.cu" "$@"
