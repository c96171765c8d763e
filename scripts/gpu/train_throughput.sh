#!/usr/bin/env bash
# hpdt-train's own throughput on one GPU (since 2026-12-01): ResNet-50 (batch 256) and ViT-B/16 (batch 64), bf16, on
# 224x224 synthetic data (hpdt-prepare-data --synthetic, no augmentation), the trainer's defaults otherwise (NHWC and
# --conv v3 for the ResNet, one rank: gradients not averaged). hpdt-bench-train-step times the step alone, the
# model's own random batch on the GPU; this times what a user runs: the reader, the copy up, the loss and accuracy,
# the step. summarize.py's "hpdt-train on the GPU" puts each run's summary (img/s, the median step's breakdown) beside
# the benchmark's step of the same model.
# usage: train_throughput.sh BIN OUT   BIN: a build directory or the GPU bundle's bin; OUT: where the metrics go
#        (train_hpdt_train_<model>.jsonl); the data and checkpoints go to a temporary directory, removed after.
# env:   HPDT_THROUGHPUT_STEPS (12: optimizer steps a run; the summary's medians leave the first out)
#        HPDT_THROUGHPUT_ARGS (more hpdt-train flags for both runs, e.g. "--decode host": the f32 batches decoded by the
#        reader, against the default's u8 batches decoded on the GPU) and HPDT_THROUGHPUT_TAG (then say which: the
#        metrics go to train_hpdt_train_<model>_<tag>.jsonl, a row of their own in summarize.py's table)
#        HPDT_MPIEXEC (the launcher of one rank; default "mpiexec -n 1 --bind-to none")
# Where no GPU is usable hpdt-train stops at "no usable GPU" (exit 2) after its flags are checked: the ctest
# scripts.train_throughput runs this script so, to check the lines a lease would run.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: train_throughput.sh BIN OUT" >&2; exit 2; }
bin=$1 out=$2 steps=${HPDT_THROUGHPUT_STEPS:-12}
read -r -a extra <<< "${HPDT_THROUGHPUT_ARGS:-}"
tag=${HPDT_THROUGHPUT_TAG:-}
[ -z "$tag" ] || [[ $tag =~ ^[A-Za-z0-9-]+$ ]] || { echo "train_throughput.sh: HPDT_THROUGHPUT_TAG '$tag': letters, digits and '-' only" >&2; exit 2; }
[ ${#extra[@]} -eq 0 ] || [ -n "$tag" ] || { echo "train_throughput.sh: HPDT_THROUGHPUT_ARGS needs HPDT_THROUGHPUT_TAG (its runs' file names)" >&2; exit 2; }
read -r -a mpiexec <<< "${HPDT_MPIEXEC:-mpiexec -n 1 --bind-to none}"
for exe in apps/prepare-data/hpdt-prepare-data apps/train/hpdt-train; do
  [ -x "$bin/$exe" ] || { echo "train_throughput.sh: $bin/$exe: not found (BIN is a build directory or the bundle's bin)" >&2; exit 2; }
done
mkdir -p "$out"
d=$(mktemp -d "${TMPDIR:-/tmp}/hpdt-throughput.XXXXXX")
trap 'rm -rf "$d"' EXIT
# Enough samples for the larger batch's steps and two more (an epoch drops its last partial batch).
"$bin/apps/prepare-data/hpdt-prepare-data" --synthetic $((256 * (steps + 2))) --shape 3,224,224 --classes 1000 \
  --out "$d/synthetic-train.h5"
rc=0  # each model runs whatever the other's outcome; the last failure's exit code is the script's
while read -r model batch; do
  echo "== hpdt-train --model $model --batch $batch ${extra[*]}"
  "${mpiexec[@]}" "$bin/apps/train/hpdt-train" --data "$d/synthetic-train.h5" --model "$model" --batch "$batch" \
    --precision bf16 --device cuda --max-steps "$steps" --eval false --augment false --progress lines \
    --metrics "$out/train_hpdt_train_$model${tag:+_$tag}.jsonl" --force "${extra[@]}" < /dev/null || rc=$?
done <<< "resnet50 256
vit-b 64"
exit $rc
