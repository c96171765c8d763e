#!/usr/bin/env bash
# hpdt-bench-train-step's command line: a short CPU run writes its JSON (--out), and every combination the
# benchmark refuses exits non-zero with a message naming the flag, before any step and without writing --out.
#   usage: train_step_cli.sh HPDT_BENCH_TRAIN_STEP_BINARY
set -uo pipefail
bin=$1
work=$(mktemp -d /tmp/hpdt-train-step-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1

# A CPU step of a small ResNet: one JSON line on stdout, the same record in --out with the run's choices.
out=$("$bin" --model resnet20 --batch 4 --image 8 --steps 1 --warmup 0 --out "$work/r.json" 2>"$work/err") ||
  fail "the CPU run failed: $(cat "$work/err")"
echo "$out"
grep -q '"img_per_s_median"' <<< "$out" || fail "no img_per_s_median on stdout"
/usr/bin/python3 - "$work/r.json" <<'PY' || fail "--out JSON lacks the run's record"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["model"] == "resnet20" and r["kernels"] == "cpu" and r["cudnn_algo"] == "-", r
assert r["gemm_tuning"] == "-" and "gemm_v3_found" not in r and "conv_found" not in r, r
assert r["img_per_s_median"] > 0, r
PY

# Refused combinations: message, non-zero exit, no --out file.
expect_error() {  # expect_error MESSAGE ARGS...
  local want=$1
  shift
  rm -f "$work/bad.json"
  if "$bin" --model resnet20 --batch 4 --image 8 --steps 1 --warmup 0 "$@" --out "$work/bad.json" > "$work/out" 2>&1; then
    cat "$work/out"
    fail "accepted: $*"
  fi
  grep -qF -- "$want" "$work/out" || { cat "$work/out"; fail "'$*' did not say '$want'"; }
  [ ! -e "$work/bad.json" ] || fail "'$*' wrote --out"
}
expect_error "--kernels vendor needs --device cuda" --kernels vendor
expect_error "--gemm v2 needs --device cuda and --kernels ours" --gemm v2
expect_error "--conv v3 needs --device cuda and --kernels ours" --conv v3
expect_error "--conv find needs --device cuda and --kernels ours" --conv find
expect_error "--conv find needs --warmup 1 or more" --device cuda --conv find
expect_error "--conv" --conv v4
expect_error "--cudnn-algo find needs --device cuda and --kernels vendor" --cudnn-algo find
expect_error "--cudnn-algo find needs --device cuda and --kernels vendor" --device cuda --kernels ours --cudnn-algo find
expect_error "--cudnn-algo" --cudnn-algo fastest
expect_error "--cudnn-algo find needs --warmup 1 or more" --device cuda --kernels vendor --cudnn-algo find
expect_error "--gemm-tuning find needs --device cuda and --kernels ours" --gemm-tuning find
expect_error "--gemm-tuning find needs --device cuda and --kernels ours" --device cuda --kernels vendor --gemm-tuning find
expect_error "--gemm-tuning find tunes GEMM v3, not --gemm v2" --device cuda --gemm v2 --gemm-tuning find
expect_error "--gemm-tuning find needs --warmup 1 or more" --device cuda --gemm-tuning find
expect_error "--gemm-tuning" --gemm-tuning fastest
expect_error "--gelu separate is for the ViTs" --gelu separate
expect_error "--cuda-graph needs --device cuda" --cuda-graph
expect_error "--sync-loss needs --device cuda" --sync-loss
expect_error "--sync-loss: not with --cuda-graph" --device cuda --cuda-graph --sync-loss
expect_error "--kernel-trace needs --device cuda" --kernel-trace "$work/t.json"
expect_error "--trace-steps needs --kernel-trace" --trace-steps 3
expect_error "--model" --model resnet9000
# On a GPU build without a usable GPU (this machine), --device cuda stops with the reason, not a crash.
if "$bin" --model resnet20 --batch 4 --image 8 --steps 1 --device cuda > "$work/out" 2>&1; then
  echo "a GPU is usable here: --device cuda ran"
else
  grep -qE "no usable GPU|built without CUDA|CUDA" "$work/out" || { cat "$work/out"; fail "--device cuda without a GPU: no reason given"; }
fi
echo "PASS: train_step_cli"
