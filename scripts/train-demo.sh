#!/usr/bin/env bash
# README command (1): train ResNet-20 on Fashion-MNIST with 2 MPI ranks for a short run on the CPU,
# then the same steps on 1 rank, and print accuracy, throughput and the speedup S = T1/T2 and
# efficiency E = S/2 (strong scaling: the same global batch of 128 on both).
#   usage: scripts/train-demo.sh [BUILD_DIR]      (default build/default)
#   env:   STEPS (default 150), MODEL (resnet20), OUT (results dir, default /tmp/hpdt-demo)
set -euo pipefail
build=${1:-build/default}
steps=${STEPS:-150} model=${MODEL:-resnet20} out=${OUT:-/tmp/hpdt-demo}
train=$build/apps/train/hpdt-train scaling=$build/bench/scaling/hpdt-scaling
for b in "$train" "$scaling"; do [ -x "$b" ] || { echo "train-demo.sh: $b not built (cmake --build --preset default)" >&2; exit 1; }; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mkdir -p "$out"
rm -f "$out"/np1.jsonl "$out"/np2.jsonl
common=(--model "$model" --max-steps "$steps" --lr 0.2 --warmup-epochs 0.05 --bucket-mb 0.25 --cache-dir "$out/data")
echo "== 2 ranks, batch 64 each (global 128), $steps steps"
mpiexec -n 2 --oversubscribe --bind-to none "$train" "${common[@]}" --batch 64 --metrics "$out/np2.jsonl"
echo "== 1 rank, batch 128, the same $steps steps"
mpiexec -n 1 --bind-to none "$train" "${common[@]}" --batch 128 --threads 2 --metrics "$out/np1.jsonl" --eval false --progress lines --log-every 50
echo "== speedup and efficiency (hpdt-scaling report $out)"
"$scaling" report "$out" --mode strong
