#!/usr/bin/env bash
# hpdt-bench-train-step --device cuda on an emulated GPU (hpdt-bench-train-step-emu: the benchmark against the CUDA
# emulator's libraries, docs/cuda-emulator.md): a bf16 ResNet-20 on 16x16 images, 2 warm-up and 2 timed steps,
#   - the default step (queued whole, the loss and the fused step's skip flag read after its one wait),
#   - --sync-loss (the loss read after the forward, the flag after the optimizer, as before 2026-12-01),
#   - --cuda-graph (one step captured after the warm-up, replayed; the warm-up runs E more steps until one allocates
#     nothing new: its JSON's extra_warmup),
# each writing its JSON (--out). They run the same kernels in the same order, so the same final loss is expected,
# bit for bit (the graph's against the default step with E more warm-up steps), and again with the streams' work
# deferred (CUDA_EMU_STREAMS=lazy, random).
#   usage: train_step_emu.sh BINARY
set -uo pipefail
bin=$1
work=$(mktemp -d /tmp/hpdt-train-step-emu.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--device cuda --model resnet20 --channels 3 --image 16 --classes 10 --batch 4 --precision bf16 --steps 2)
field() { grep -o "\"$1\": *[-+0-9.eE]*" "$2" | head -1 | cut -d: -f2 | tr -d ' '; }
step() {  # step STREAMS OUT ARGS...: one run, its JSON at OUT
  local streams=$1 out=$2; shift 2
  CUDA_EMU_STREAMS=$streams CUDA_EMU_STREAMS_SEED=2 timeout --kill-after=10 120 "$bin" "${common[@]}" "$@" --out "$out" \
    > "$work/log" 2>&1 || { cat "$work/log"; fail "CUDA_EMU_STREAMS=$streams $*: exit non-zero"; }
  [ -n "$(field loss "$out")" ] || { cat "$out"; fail "$streams $*: no loss in its JSON"; }
}
step eager "$work/ref.json" --warmup 2
ref=$(field loss "$work/ref.json")
grep -q '"device": *"cuda:0"' "$work/ref.json" || { cat "$work/ref.json"; fail "not on the emulated GPU"; }
for streams in eager lazy random; do
  for variant in default sync_loss; do
    [ $streams/$variant = eager/default ] && continue  # (the reference itself)
    extra=(); [ $variant = sync_loss ] && extra=(--sync-loss)
    step $streams "$work/$streams-$variant.json" --warmup 2 "${extra[@]}"
    loss=$(field loss "$work/$streams-$variant.json")
    echo "$streams $variant: loss $loss"
    [ "$loss" = "$ref" ] || fail "$streams $variant: loss $loss, the eager default step's $ref"
  done
  step $streams "$work/$streams-graph.json" --warmup 2 --cuda-graph
  e=$(field extra_warmup "$work/$streams-graph.json")
  [ -f "$work/ref$e.json" ] || step eager "$work/ref$e.json" --warmup $((2 + e))
  loss=$(field loss "$work/$streams-graph.json") want=$(field loss "$work/ref$e.json")
  echo "$streams cuda-graph (extra warm-up $e): loss $loss"
  [ "$loss" = "$want" ] || fail "$streams --cuda-graph: loss $loss, the eager default step's $want after $((2 + e)) warm-up steps"
done
echo "PASS: the benchmark's GPU step, --sync-loss and --cuda-graph give one loss, in every stream order"
