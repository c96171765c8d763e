#!/usr/bin/env bash
# Gradient compression on the emulated cluster (issue target: topk 1 % with error feedback on 1 Gbit/s
# links makes the training step >= 3x shorter than uncompressed). Brings up NODES emulated nodes (one
# rank each, scripts/cluster/cluster.sh) with links shaped to RATE, trains MODEL for a few steps with
# each compression and writes results/train/compress_cluster_<model>_<nodes>x1_<rate>.{jsonl,txt} per
# compression plus a summary table (.md); tears the cluster down on exit.
#
# usage: scripts/bench/compress_cluster.sh [MODEL] [PER_RANK_BATCH] [BUILD_DIR]
#   defaults: resnet50 4 build/ci; env NODES (2), RATE (1gbit), STEPS (12), COMPRESS ("none topk:0.01
#   fp16 powersgd:4"), EXTRA (more hpdt-train options, e.g. "--patch 7"), HPDT_DATA (directory with
#   fashion-mnist-{train,test}.h5; default the trainer's cache)
# Needs root (network namespaces). The accuracy half of the target does not depend on the link (the
# same arithmetic runs on any network): scripts/bench/train_accuracy.sh resnet20-topk runs it.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-resnet50} batch=${2:-4} build=${3:-build/ci}
nodes=${NODES:-2} rate=${RATE:-1gbit} steps=${STEPS:-12}
read -r -a compressions <<< "${COMPRESS:-none topk:0.01 fp16 powersgd:4}"
read -r -a extra <<< "${EXTRA:-}"
train=$PWD/$build/apps/train/hpdt-train
[ -x "$train" ] || { echo "compress_cluster.sh: $train not built" >&2; exit 2; }
data_dir=${HPDT_DATA:-${HPDT_CACHE:-$HOME/.cache/hpdt}}
[ -f "$data_dir/fashion-mnist-train.h5" ] || { echo "compress_cluster.sh: no $data_dir/fashion-mnist-train.h5 (run hpdt-train once, or set HPDT_DATA)" >&2; exit 2; }
cluster=scripts/cluster/cluster.sh
tag=compress_cluster_${model}_${nodes}x1_${rate}
out=results/train
mkdir -p "$out"

$cluster up "$nodes" --rate "$rate"
trap '$cluster down > /dev/null 2>&1 || true' EXIT
summary=$out/$tag.md
{
  echo "# $model, $nodes emulated nodes x 1 rank, links shaped to $rate (tc tbf), per-rank batch $batch"
  echo
  echo "Commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $steps steps each, median step time (hpdt-train summary);"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg). Command: scripts/bench/compress_cluster.sh $model $batch $build (NODES=$nodes RATE=$rate STEPS=$steps EXTRA=\"${EXTRA:-}\")."
  echo
  echo "| compress | step time ms | exposed comm ms | bytes sent per rank per step | step time vs none |"
  echo "|---|---|---|---|---|"
} > "$summary"
base=""
for c in "${compressions[@]}"; do
  name=${c//:/-}
  log=$out/${tag}_$name.txt
  HPDT_CLUSTER_SLOTS=1 $cluster mpirun -n "$nodes" -x OMP_NUM_THREADS=1 "$train" --data "$data_dir/fashion-mnist-train.h5" \
    --model "$model" --batch "$batch" --max-steps "$steps" --eval false --threads 1 --algo ring --compress "$c" \
    "${extra[@]}" --progress off --metrics "$out/${tag}_$name.jsonl" --force > "$log" 2>&1 || { cat "$log"; exit 1; }
  # prints "MS|ROW": the median step time, then the table row
  line=$(/usr/bin/python3 - "$out/${tag}_$name.jsonl" "$c" "$base" <<'EOF'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
ms, base = s["step_time_s"] * 1e3, sys.argv[3]
ratio = f"{float(base) / ms:.2f}x shorter" if base else "1.00x"
print(f"{ms:.3f}|| {sys.argv[2]} | {ms:.1f} | {s['exposed_comm_s'] * 1e3:.1f} | {s['bytes_sent_per_step']:,} | {ratio} |")
EOF
)
  [ -z "$base" ] && base=${line%%|*}
  echo "${line#*|}" >> "$summary"
  grep -E "step time|communication" "$log"
done
cat "$summary"
