#!/bin/bash
# On the device: build the standalone global-average read experiment and time it (global_read.cu's header).
exec "$(dirname "$0")/../build_run.sh" "$(dirname "$0")/global_read.cu" "$@"
