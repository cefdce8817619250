#!/bin/bash
# On the device: build the standalone TF32 producer-rounding experiment against cuBLAS and time it.
# Variants are compile-time: bash run.sh "-DTD_STAGES=3" "-DTD_ROUND=0" ...
exec "$(dirname "$0")/../build_run.sh" "$(dirname "$0")/tf32p.cu" "$@"
