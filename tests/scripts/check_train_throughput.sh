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
# The runs with more flags (HPDT_THROUGHPUT_ARGS, named by HPDT_THROUGHPUT_TAG): here the reader's f32 batches
HPDT_THROUGHPUT_STEPS=1 HPDT_THROUGHPUT_ARGS="--decode host" HPDT_THROUGHPUT_TAG=decode-host \
  "$src/scripts/gpu/train_throughput.sh" "$build" "$out" > "$out/log-host" 2>&1
rc_host=$?
# ... and with --cuda-graph (benchmarks.txt's train_hpdt_train_cuda_graph)
HPDT_THROUGHPUT_STEPS=1 HPDT_THROUGHPUT_ARGS="--cuda-graph" HPDT_THROUGHPUT_TAG=cuda-graph \
  "$src/scripts/gpu/train_throughput.sh" "$build" "$out" > "$out/log-graph" 2>&1
rc_graph=$?
refused() {  # refused LOG MESSAGE ENV...: train_throughput.sh under ENV exits 2 with MESSAGE
  local log=$1 message=$2; shift 2
  env "$@" "$src/scripts/gpu/train_throughput.sh" "$build" "$out" > "$log" 2>&1
  if [ $? -ne 2 ] || ! grep -q "$message" "$log"; then cat "$log"; fail "$*: expected exit 2 with \"$message\""; fi
}
refused "$out/log-untagged" "needs HPDT_THROUGHPUT_TAG" HPDT_THROUGHPUT_ARGS="--decode host"
refused "$out/log-badtag" "letters, digits" HPDT_THROUGHPUT_TAG="a/b"
if [ $rc -eq 2 ]; then
  refused=$(grep -c "no usable GPU on rank 0" "$out/log")
  [ "$refused" -eq 2 ] || fail "each run should stop at \"no usable GPU\" (flags accepted): $refused of 2 did"
  grep "hpdt-train: error" "$out/log" | grep -v "no usable GPU" && fail "hpdt-train refused a run for another reason"
  if [ $rc_host -ne 2 ] || [ "$(grep -c "no usable GPU on rank 0" "$out/log-host")" -ne 2 ]; then
    cat "$out/log-host"; fail "the --decode host runs should stop at \"no usable GPU\" too"
  fi
  if [ $rc_graph -ne 2 ] || [ "$(grep -c "no usable GPU on rank 0" "$out/log-graph")" -ne 2 ]; then
    cat "$out/log-graph"; fail "the --cuda-graph runs should stop at \"no usable GPU\" too"
  fi
  echo "PASS: both runs' flags accepted, also with --decode host and with --cuda-graph; no usable GPU here"
  exit 0
fi
[ $rc_host -eq 0 ] || { cat "$out/log-host"; fail "train_throughput.sh with --decode host: exit $rc_host"; }
for m in resnet50 vit-b; do
  grep -q '"type":"summary"' "$out/train_hpdt_train_${m}_decode-host.jsonl" || fail "$m: no summary with --decode host"
done
[ $rc_graph -eq 0 ] || { cat "$out/log-graph"; fail "train_throughput.sh with --cuda-graph: exit $rc_graph"; }
for m in resnet50 vit-b; do
  grep -q '"type":"summary"' "$out/train_hpdt_train_${m}_cuda-graph.jsonl" || fail "$m: no summary with --cuda-graph"
done
[ $rc -eq 0 ] || fail "train_throughput.sh: exit $rc"
for m in resnet50 vit-b; do
  grep -q '"type":"summary"' "$out/train_hpdt_train_$m.jsonl" || fail "$m: no summary in train_hpdt_train_$m.jsonl"
done
echo "PASS: both runs trained on the GPU"
