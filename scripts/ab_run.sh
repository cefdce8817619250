#!/bin/bash
# One device call of a same-run A/B: builds the working tree and a base tree for each .ab/*.patch (reverse-applied,
# scripts/gpu_check.sh --ab-patch), runs the CUDA tests of TESTFILES (none: no tests) under a time limit, then
# ROUNDS rounds of scripts/ab_probe.py turns (every tree, one process each) over the lines of PROBES (each line:
# ab_probe arguments, e.g. `norm -k fwd -k bf16 --impls torch_dnn,eager`), starting no probe past DEADLINE seconds,
# and writes $OUT/ab.md (base trees first: the ratios' reference) and the runs' JSON in $OUT/json.tgz.
#   bash scripts/ab_run.sh PROBES [TESTFILES|none] [ROUNDS=2] [DEADLINE=540] [TEST_LIMIT=150]
# On a warm machine, trees from an earlier call are still in /tmp/ab-*: remove them first (rm -rf /tmp/ab-*).
PROBES=$1; TESTFILES=${2:-none}; ROUNDS=${3:-2}; DEADLINE=${4:-540}; TEST_LIMIT=${5:-150}
T0=$(date +%s)
[ -f "$PROBES" ] || { echo "no probe file: $PROBES"; exit 2; }
# shellcheck disable=SC2046
bash scripts/gpu_check.sh --no-sm90 --tests none --bench none $(shopt -s nullglob; for p in .ab/*.patch; do echo --ab-patch "$p"; done) \
  > "$OUT/check.log" 2>&1 || { tail -30 "$OUT/check.log"; exit 1; }
grep -E "build|A/B" "$OUT/check.log"
export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
if [ "$TESTFILES" != none ]; then
  s=$(date +%s)
  # shellcheck disable=SC2086
  timeout -s INT "$TEST_LIMIT" python3 -m pytest $TESTFILES -q -m cuda --tb=short -p no:cacheprovider > "$OUT/tests.log" 2>&1
  echo "tests rc=$? $(( $(date +%s) - s )) s"
  tail -2 "$OUT/tests.log"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head
fi
files=()
for i in $(seq 1 "$ROUNDS"); do
  n=0
  while read -r line; do
    [ -z "$line" ] && continue; n=$((n+1))
    for t in $(ls -d /tmp/ab-* 2>/dev/null | sort) .; do
      [ $(( $(date +%s) - T0 )) -gt "$DEADLINE" ] && break 3
      tag=$(basename "$t" | sed 's/^ab-//'); [ "$t" = . ] && tag=new
      # shellcheck disable=SC2086
      python3 scripts/ab_probe.py --root "$t" --tag "$tag" --out "$OUT/p$n-$tag-$i.json" $line > /dev/null 2>> "$OUT/probe.err"
      files+=("$OUT/p$n-$tag-$i.json")
    done
  done < "$PROBES"
  echo "round $i done at $(( $(date +%s) - T0 )) s"
done
ref=(); rest=()
for f in "${files[@]}"; do [ -e "$f" ] || continue; if [[ $f == *-new-* ]]; then rest+=("$f"); else ref+=("$f"); fi; done
if [ $(( ${#ref[@]} + ${#rest[@]} )) -gt 0 ]; then
  python3 scripts/ab_probe.py --compare "${ref[@]}" "${rest[@]}" --md "$OUT/ab.md" > /dev/null 2>> "$OUT/probe.err" && cat "$OUT/ab.md"
fi
tail -3 "$OUT/probe.err" 2>/dev/null
mkdir -p "$OUT/j" && mv "$OUT"/p*.json "$OUT/j/" 2>/dev/null; tar czf "$OUT/json.tgz" -C "$OUT" j && rm -rf "$OUT/j"
echo "total $(( $(date +%s) - T0 )) s"
