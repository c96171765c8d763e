#!/bin/bash
# Node-count sweep under PBS: one job per node count (the script's `select=` rewritten), then a
# collector job that runs after all of them (depend=afterany) and builds the scaling table and plots.
#   jobscripts/pbs/sweep.sh [--nodes 1,2,4,8] [--global-batch 1024 | --batch 128]
#                           [--job jobscripts/pbs/train.pbs] [--out DIR] [--wait]
# --wait polls until the collector has finished (qstat) and exits 0 when its table exists.
# HPDT_PBS_SUBMIT=sbatch submits through Slurm's #PBS support instead of qsub (the emulated cluster).
set -euo pipefail
root=${HPDT_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
nodes=1,2,4 job=$root/jobscripts/pbs/train.pbs out=$root/runs/sweep-$(date -u +%Y%m%d-%H%M%S) wait=0
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) nodes=$2; shift 2 ;;
    --global-batch) export HPDT_GLOBAL_BATCH=$2; unset HPDT_BATCH; shift 2 ;;
    --batch) export HPDT_BATCH=$2; unset HPDT_GLOBAL_BATCH; shift 2 ;;
    --job) job=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --wait) wait=1; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "sweep.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -f "$job" ] || { echo "sweep.sh: no job script $job" >&2; exit 2; }
grep -q '^#PBS -l select=[0-9]*:' "$job" || { echo "sweep.sh: $job has no '#PBS -l select=N:...' line to rewrite" >&2; exit 2; }
submit=${HPDT_PBS_SUBMIT:-qsub}
command -v "$submit" >/dev/null || { echo "sweep.sh: $submit not found" >&2; exit 2; }
mkdir -p "$out"
export HPDT_ROOT=$root
vars="HPDT_ROOT=$root${HPDT_GLOBAL_BATCH:+,HPDT_GLOBAL_BATCH=$HPDT_GLOBAL_BATCH}${HPDT_BATCH:+,HPDT_BATCH=$HPDT_BATCH}"
[ -n "${HPDT_TRAIN_ARGS:-}" ] && export HPDT_TRAIN_ARGS   # qsub -v cannot carry spaces portably; -V below
ids=()
IFS=, read -ra counts <<< "$nodes"
for n in "${counts[@]}"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "sweep.sh: --nodes: '$n' is not a node count" >&2; exit 2; }
  script=$out/$(basename "$job" .pbs).nodes$n.pbs
  sed "s/^#PBS -l select=[0-9]*:/#PBS -l select=$n:/; s/^#PBS -N .*/#PBS -N hpdt-sweep-n$n/" "$job" > "$script"
  if [ "$submit" = sbatch ]; then
    id=$(HPDT_OUT=$out/nodes$n sbatch --parsable -o "$out/nodes$n.out" ${HPDT_SBATCH_ARGS:-} "$script")
  else
    id=$(qsub -V -v "$vars,HPDT_OUT=$out/nodes$n" -o "$out/nodes$n.out" "$script")
  fi
  ids+=("${id%%;*}")
  echo "submitted $n node(s): job ${id%%;*} -> $out/nodes$n"
done
if [ "$submit" = sbatch ]; then
  cid=$(HPDT_SWEEP_DIR=$out sbatch --parsable --dependency="afterany:$(IFS=:; echo "${ids[*]}")" \
        -o "$out/collect.out" ${HPDT_SBATCH_ARGS:-} "$root/jobscripts/pbs/collect.pbs")
else
  cid=$(qsub -V -v "$vars,HPDT_SWEEP_DIR=$out" -W depend=afterany:"$(IFS=:; echo "${ids[*]}")" \
        -o "$out/collect.out" "$root/jobscripts/pbs/collect.pbs")
fi
echo "collector: job ${cid%%;*} -> $out/scaling.csv"
[ "$wait" = 1 ] || exit 0
while :; do
  if [ "$submit" = sbatch ]; then squeue -h -j "${cid%%;*}" 2>/dev/null | grep -q . || break
  else qstat "${cid%%;*}" >/dev/null 2>&1 || break; fi
  sleep 2
done
[ -s "$out/scaling.csv" ] || { echo "sweep.sh: the collector produced no table; see $out/collect.out" >&2; exit 1; }
cat "$out/scaling.csv"
