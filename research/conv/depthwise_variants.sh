#!/usr/bin/env bash
# Builds the depthwise harness (depthwise_harness.cu: the tree's depthwise launchers timed pass by pass, each pass
# checked against the generic direct kernels) from a patched copy of csrc, one binary a variant, without touching
# the tree: `research/conv/depthwise_variants.sh head wpf v4 ...` writes $PROBES/probe_<name> (default
# /tmp/dw_probes). Needs nvcc and a configured build folder (build/temp.*/build.ninja, for the compile flags); the
# binaries need no torch, so a device call can run them without building the extension:
#   probe_<name> N C H W R stride pad nhwc    e.g. probe_head 64 384 28 28 3 1 1 1
# Variants (any combination in one name):
#   head  the tree as it is
#   wpf   wgrad items software-pipelined (variant_wgrad_prefetch.patch; two blocks an SM)
#   wr    wgrad blocks own every filter row (variant_wgrad_rows*.patch: dy loaded once for all R; square kernels)
#   rows  the forward loads every filter row before any product (variant_fprop_rows.patch; square kernels only)
#   v4    8-byte vectors (half the channels a thread) in all three passes
#   g3    channels-last forward / dgrad grids of three blocks an SM
#   s8    eight outputs a thread along W
set -euo pipefail
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
HERE=$ROOT/research/conv
OUTDIR=${PROBES:-/tmp/dw_probes}
mkdir -p "$OUTDIR"
NINJA=$(ls "$ROOT"/build/temp.*/build.ninja | head -1)
FLAGS0=$(sed -n 's/^cuda_cflags = //p' "$NINJA" | sed 's/ -c$//')
POST=$(sed -n 's/^cuda_post_cflags = //p' "$NINJA" | sed 's/-gencode=arch=compute_80,code=sm_80//; s/-DPy_LIMITED_API=0x030A0000//; s/-DTORCH_EXTENSION_NAME=_C//; s/-DTORCH_API_INCLUDE_EXTENSION_H//')
for v in "$@"; do
  d=/tmp/dwv_$v; rm -rf "$d"; mkdir -p "$d"; cp -r "$ROOT/csrc" "$d/"
  k=$d/csrc/conv/kernels
  plan=$d/csrc/conv/conv_direct_depthwise.cu
  case $v in *s8*) sed -i 's/constexpr int kDwStrip = 4;/constexpr int kDwStrip = 8;/' "$k/conv_depthwise_common.cuh";; esac
  case $v in *wpf*) patch -s "$k/conv_depthwise_wgrad.cuh" < "$HERE/variant_wgrad_prefetch.patch";; esac
  case $v in *wr*) patch -s "$k/conv_depthwise_wgrad.cuh" < "$HERE/variant_wgrad_rows.patch"
                   patch -s "$plan" < "$HERE/variant_wgrad_rows_plan.patch";; esac
  case $v in *rows*) patch -s "$k/conv_depthwise_fprop.cuh" < "$HERE/variant_fprop_rows.patch";; esac
  case $v in *v4*) sed -i 's/constexpr int VV = kVec16<T>;/constexpr int VV = kVec16<T> > 1 ? kVec16<T> \/ 2 : 1;/' "$plan"
                   grep -q "kVec16<T> / 2" "$plan";; esac
  case $v in *g3*) sed -i 's/const int64_t per_sm = p.bx > 1 ? 2 : 8;/const int64_t per_sm = p.bx > 1 ? 3 : 8;/' "$plan"
                   grep -q "p.bx > 1 ? 3 : 8" "$plan";; esac
  F=$(echo "$FLAGS0" | sed "s#-I$ROOT/csrc#-I$d/csrc#")
  eval nvcc $F $POST -Xptxas -v "$HERE/depthwise_harness.cu" -o "$OUTDIR/probe_$v" > "$d/ptx.log" 2>&1
  echo "$v: $OUTDIR/probe_$v ($(grep -c 'spill stores' "$d/ptx.log") kernels, ptxas report in $d/ptx.log)"
done
