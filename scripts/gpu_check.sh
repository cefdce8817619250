#!/usr/bin/env bash
# The one command for the GPU machine: build in place, run the CUDA tests and the self-check, run the
# benchmarks; logs, JSON and the results table go under $OUT (default ./.out).
#
#   scripts/gpu_check.sh [-k PYTEST_EXPR] [--tests all|cuda|none] [--bench FAMILY,...|all|none] [--quick] [--no-sm90]
#                        [--per-file SECONDS] [--ab-patch FILE]
# --per-file runs each tests/test_*.py in its own pytest (-v, log tests-<file>.log) stopped by SIGINT after
# SECONDS, so that one slow file cannot eat the call's time and the last test started is named in its log.
# --no-sm90 leaves the CUTLASS headers uninstalled, so the Hopper GEMM (the longest compile) is not built: for
# runs that do not touch matmul.
# --ab-patch FILE (repeatable) also builds a tree for a same-run A/B: a copy of this tree in /tmp/ab-NAME (NAME:
# FILE's name less .patch) with FILE reverse-applied (make it here with `git diff BASE -- csrc > .ab/base.patch`;
# .ab/ is ignored, so carry it), built at the same time as this one. scripts/ab_probe.py times the builds in turns.
#
# On a warm machine (a call within seconds of the last) only what changed is rebuilt (scripts/source_stamp.py).
# Carried wheels (.whl/*.whl, e.g. expecttest) are installed first. Build: MAX_JOBS=16, TORCH_CUDA_ARCH_LIST=9.0a
# unless set. Exit status: non-zero if the build, a test or the self-check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
KEXPR="" TESTS=cuda BENCH=all QUICK="" NO_SM90="" PER_FILE="" AB_PATCHES=()
while [ $# -gt 0 ]; do
  case "$1" in
    -k) KEXPR="$2"; shift 2 ;;
    --tests) TESTS="$2"; shift 2 ;;
    --bench) BENCH="$2"; shift 2 ;;
    --quick) QUICK="--quick"; shift ;;
    --no-sm90) NO_SM90=1; shift ;;
    --per-file) PER_FILE="$2"; shift 2 ;;
    --ab-patch) AB_PATCHES+=("$(realpath "$2")"); shift 2 ;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

wheels=()
for w in .whl/*.whl; do
  [ -e "$w" ] || continue
  [ -n "$NO_SM90" ] && [[ "$(basename "$w")" == nvidia_cutlass* ]] && continue
  wheels+=("$w")
done
# A warm machine keeps /tmp/site and build/ between calls: wheels already installed there are not installed again,
# since fresh header mtimes (CUTLASS's) would make ninja rebuild every object that includes them.
if [ ${#wheels[@]} -gt 0 ]; then
  if ! sha1sum "${wheels[@]}" | cmp -s - /tmp/site/.wheels; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}" \
      && sha1sum "${wheels[@]}" > /tmp/site/.wheels
  fi
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi

status=0
# The system compiler, whose libstdc++ is the one loaded at run time: the device's environment and Python's
# sysconfig name another (/opt/gcc), and its inline stream code then crashes inside torch error messages.
# So CC/CXX are overridden even when already set.
if [ -x /usr/bin/g++ ]; then export CC=/usr/bin/gcc CXX=/usr/bin/g++; else export CC=gcc CXX=g++; fi
echo "compiler: $($CXX --version | head -1)"
export MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
echo "== build (MAX_JOBS=$MAX_JOBS TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST)"
start=$(date +%s)
ab_pids=()
for patch in "${AB_PATCHES[@]}"; do
  tree=/tmp/ab-$(basename "$patch" .patch)
  rm -rf "$tree" && mkdir -p "$tree" && cp -r . "$tree"/ && rm -f "$tree"/torch_dnn/_C*.so
  (cd "$tree" && git apply -R "$patch" && python3 setup.py build_ext --inplace > "$OUT/build-$(basename "$tree").log" 2>&1) &
  ab_pids+=($!)
done
# Each call copies the tree with fresh mtimes, so a warm machine's kept objects would all look stale: sources whose
# content is the same as at the last successful build get that build's mtimes back (build/.source_stamp). The stamp
# is removed before building, so a failed build leaves none and the next call rebuilds what changed since.
python3 scripts/source_stamp.py restore build/.source_stamp
rm -f build/.source_stamp
if ! python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  tail -60 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "build: $(( $(date +%s) - start )) s; warnings in our code: $(grep -c 'csrc/.*warning' "$OUT/build.log")"
python3 scripts/source_stamp.py save build/.source_stamp
for i in "${!ab_pids[@]}"; do
  tree=/tmp/ab-$(basename "${AB_PATCHES[$i]}" .patch)
  if ! wait "${ab_pids[$i]}"; then tail -40 "$OUT/build-$(basename "$tree").log"; echo "A/B BUILD FAILED: $tree"; exit 1; fi
  echo "A/B tree $tree built: $(( $(date +%s) - start )) s"
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1

if [ "$TESTS" != "none" ]; then
  echo "== tests ($TESTS${KEXPR:+, -k $KEXPR})"
  marker=(); [ "$TESTS" = "cuda" ] && marker=(-m cuda)
  kargs=(); [ -n "$KEXPR" ] && kargs=(-k "$KEXPR")
  if [ -n "$PER_FILE" ]; then
    for f in tests/test_*.py; do
      n=$(basename "$f" .py)
      s=$(date +%s)
      timeout -s INT "$PER_FILE" python3 -m pytest "$f" -v --tb=short -p no:cacheprovider "${marker[@]}" "${kargs[@]}" \
        > "$OUT/tests-$n.log" 2>&1
      rc=$?
      [ $rc -ne 0 ] && [ $rc -ne 5 ] && status=1  # 5: no test selected
      echo "$n: rc=$rc $(( $(date +%s) - s )) s $(grep -E '(passed|failed|deselected|skipped|no tests ran)' "$OUT/tests-$n.log" | tail -1)"
      grep -E "^FAILED|^ERROR" "$OUT/tests-$n.log" | head -5
    done
  else
    python3 -m pytest tests -q --maxfail=25 --tb=short -p no:cacheprovider "${marker[@]}" "${kargs[@]}" > "$OUT/tests.log" 2>&1 || status=1
    tail -25 "$OUT/tests.log"
  fi
  echo "== self-check (python -m torch_dnn)"
  python3 -m torch_dnn > "$OUT/selfcheck.log" 2>&1 || status=1
  grep -E "FAIL|ERROR|demo|native|swapped|self-check" "$OUT/selfcheck.log" | tail -15
fi

if [ "$BENCH" != "none" ]; then
  fams=(); [ "$BENCH" != "all" ] && IFS=, read -r -a fams <<< "$BENCH"
  echo "== benchmarks (${BENCH})"
  python3 -m torch_dnn bench "${fams[@]}" $QUICK --out "$OUT" --md "$OUT/results.md" > "$OUT/bench.log" 2>&1 || status=1
  tail -5 "$OUT/bench.log"
  python3 - "$OUT/bench.json" <<'PY' || true
import json, sys
d = json.load(open(sys.argv[1]))
print(f"copy ceiling {d['copy_ceiling_gbps']:.0f} GB/s; torch_dnn rows (GB/s, % copy, speedup over each peer):")
rows = d["rows"]
for r in rows:
    if r["impl"] != "torch_dnn" or "ms" not in r:
        continue
    peers = [p for p in rows if p["case"] == r["case"] and p["impl"] != "torch_dnn" and "ours_speedup" in p]
    sp = " ".join(f"{p['impl']} x{p['ours_speedup']:.2f}" for p in peers)
    print(f"{r['case']:<44} {r.get('gbps', 0):6.0f} {r.get('pct_copy', 0):5.1f}%  {sp}")
PY
fi
exit $status
