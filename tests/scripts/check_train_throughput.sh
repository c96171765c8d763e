#!/usr/bin/env bash
# usage: check_train_throughput.sh SOURCE_DIR BUILD_DIR
# scripts/gpu/train_throughput.sh (the lease's hpdt-train runs) over this build for one step: where no GPU is usable,
# each model's hpdt-train must stop at "no usable GPU" (exit 2), which it checks after its flags, so a flag it does not
# take fails here and not on the GPU; where one is, each run must finish and write its summary.
# env: HPDT_MPIEXEC (as for train_throughput.sh)
set -uo pipefail
src=$1 build=$2
out=$(mktemp -d /tmp/hpdt-throughput-check.XXXXXX)
trap 'rm -rf "$out"' EXIT
HPDT_THROUGHPUT_STEPS=1 "$src/scripts/gpu/train_throughput.sh" "$build" "$out" > "$out/log" 2>&1
rc=$?
fail() { cat "$out/log"; echo "FAIL: $*"; exit 1; }
runs=$(grep -c "^== hpdt-train" "$out/log")
[ "$runs" -eq 2 ] || fail "expected 2 hpdt-train runs, saw $runs"
if [ $rc -eq 2 ]; then
  refused=$(grep -c "no usable GPU on rank 0" "$out/log")
  [ "$refused" -eq 2 ] || fail "each run should stop at \"no usable GPU\" (flags accepted): $refused of 2 did"
  grep "hpdt-train: error" "$out/log" | grep -v "no usable GPU" && fail "hpdt-train refused a run for another reason"
  echo "PASS: both runs' flags accepted; no usable GPU here"
  exit 0
fi
[ $rc -eq 0 ] || fail "train_throughput.sh: exit $rc"
for m in resnet50 vit-b; do
  grep -q '"type":"summary"' "$out/train_hpdt_train_$m.jsonl" || fail "$m: no summary in train_hpdt_train_$m.jsonl"
done
echo "PASS: both runs trained on the GPU"
