#!/bin/bash
# Node-count sweep: one job per node count, then a collector job (after all of them, whatever their
# outcome) that turns the runs into a scaling table and plots.
#   jobscripts/slurm/sweep.sh [--nodes 1,2,4,8] [--global-batch 1024 | --batch 128] [--wait]
#                             [--job jobscripts/slurm/train.sbatch] [--out DIR] [-- extra sbatch options]
# --global-batch: strong scaling (per-rank batch = global / ranks); --batch: weak scaling.
# --wait: block until the collector finishes and exit with its code (CI, scripts).
set -euo pipefail
root=${HPDT_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
nodes=1,2,4 job=$root/jobscripts/slurm/train.sbatch out=$root/runs/sweep-$(date -u +%Y%m%d-%H%M%S) wait=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --global-batch) export HPDT_GLOBAL_BATCH=$2; unset HPDT_BATCH; shift 2 ;;
    --batch) export HPDT_BATCH=$2; unset HPDT_GLOBAL_BATCH; shift 2 ;;
    --job) job=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --wait) wait=(--wait); shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "sweep.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$job" ] || { echo "sweep.sh: no job script $job" >&2; exit 2; }
command -v sbatch >/dev/null || { echo "sweep.sh: sbatch not found (is Slurm loaded?)" >&2; exit 2; }
mkdir -p "$out"
export HPDT_ROOT=$root
ids=()
IFS=, read -ra counts <<< "$nodes"
for n in "${counts[@]}"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "sweep.sh: --nodes: '$n' is not a node count" >&2; exit 2; }
  id=$(HPDT_OUT=$out/nodes$n sbatch --parsable -N "$n" -J "hpdt-sweep-n$n" -o "$out/nodes$n.out" "${extra[@]}" "$job")
  ids+=("${id%%;*}")
  echo "submitted $n node(s): job ${id%%;*} -> $out/nodes$n"
done
dep=$(IFS=:; echo "afterany:${ids[*]}")
echo "collector after $dep"
HPDT_SWEEP_DIR=$out sbatch "${wait[@]}" --parsable --dependency="$dep" -o "$out/collect.out" "${extra[@]}" \
  "$root/jobscripts/slurm/collect.sbatch"
