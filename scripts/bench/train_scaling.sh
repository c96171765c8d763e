#!/usr/bin/env bash
# Training measurements on this machine (results/train/ and results/scaling/):
#   overlap    ResNet-20 at np 2, gradient buckets of 0.25 MiB, overlap on and off: exposed
#              communication share of the step (issue target: <= 10 % with overlap on)
#   scaling    ResNet-20 weak scaling at np 1, 2, 4 (per-rank batch 64; np 1 uses both cores, np 2 one
#              thread per rank, np 4 oversubscribes the 2 cores) with hpdt-scaling run/report + plots
# usage: scripts/bench/train_scaling.sh [overlap|scaling|all] [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
which=${1:-all} build=${2:-build/cpu}
train=$build/apps/train/hpdt-train scaling=$build/bench/scaling/hpdt-scaling
[ -x "$train" ] && [ -x "$scaling" ] || { echo "train_scaling.sh: build $build first (cmake --workflow --preset cpu)" >&2; exit 2; }
export OMPI_MCA_mpi_yield_when_idle=1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=()
[ -n "${HPDT_DATA:-}" ] && data=(--data "$HPDT_DATA/fashion-mnist-train.h5")
mkdir -p results/train results/scaling

if [ "$which" = overlap ] || [ "$which" = all ]; then
  for ov in true false; do
    out=results/train/overlap_resnet20_np2_$ov
    echo "load before: $(cat /proc/loadavg)" > "$out.txt"
    mpirun -n 2 --oversubscribe "$train" "${data[@]}" --model resnet20 --batch 64 --max-steps 80 --eval false \
      --bucket-mb 0.25 --overlap $ov --threads 1 --progress off --metrics "$out.jsonl" --force >> "$out.txt" 2>&1
    echo "load after: $(cat /proc/loadavg)" >> "$out.txt"
    grep -E "step time|communication" "$out.txt"
  done
fi
if [ "$which" = scaling ] || [ "$which" = all ]; then
  out=results/scaling/local_resnet20_weak
  rm -rf "$out"
  "$scaling" run --ranks 1,2,4 --out "$out" --launcher "mpirun --oversubscribe -n {ranks}" -- \
    "$train" "${data[@]}" --model resnet20 --batch 64 --max-steps 60 --eval false --progress off
  "$scaling" report "$out" --mode weak --json "$out/scaling.json" --csv "$out/scaling.csv" | tee "$out/scaling.txt"
  /usr/bin/python3 scripts/plot/plot_scaling.py "$out/scaling.json"
fi
