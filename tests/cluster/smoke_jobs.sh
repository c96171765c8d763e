#!/usr/bin/env bash
# Brings up an emulated 2-node Slurm cluster (scripts/cluster/cluster.sh) and runs hpdt-smoke in it as
# a SLURM job (srun --mpi=pmix and mpirun) and as a PBS job through sbatch's #PBS handling, checking
# each job's exit code and output. Exit 77 (skipped) when not root or Slurm is not installed.
#   usage: smoke_jobs.sh SOURCE_DIR HPDT_SMOKE_BINARY
set -uo pipefail
src=$1 smoke=$2
[ "$(id -u)" -eq 0 ] || { echo "SKIPPED: the emulated cluster needs root"; exit 77; }
for c in sbatch slurmctld slurmd munged generate_pbs_nodefile; do
  command -v $c >/dev/null || { echo "SKIPPED: $c not installed (scripts/install-deps.sh installs Slurm)"; exit 77; }
done
# One emulated cluster per MACHINE (network namespaces, /etc/slurm, /etc/hosts are global): ctest's
# RESOURCE_LOCK only orders tests of one ctest run, so concurrent runs (several worktrees) queue here.
exec 8>/tmp/hpdt-cluster.lock
flock -w 240 8 || { echo "FAIL: another emulated cluster held /tmp/hpdt-cluster.lock for 240 s"; exit 1; }
cluster=$src/scripts/cluster/cluster.sh
work=$(mktemp -d /tmp/hpdt-cluster-test.XXXXXX)
export HPDT_CLUSTER_DIR=$work/state
trap '"$cluster" down > /dev/null 2>&1; rm -rf "$work"' EXIT
"$cluster" up 2 --cpus 2 --gpus 1 || exit 1
eval "$("$cluster" env)"
cd "$work"

cat > slurm.sbatch <<JOB
#!/bin/bash
#SBATCH -J hpdt-smoke
#SBATCH -N 2
#SBATCH --ntasks-per-node=2
#SBATCH -t 00:02:00
#SBATCH -o $work/slurm.out
set -e
srun --mpi=pmix $smoke --dir $work
mpirun $smoke --dir $work
JOB
cat > pbs.sh <<JOB
#!/bin/bash
#PBS -N hpdt-smoke-pbs
#PBS -l select=2:ncpus=2:mpiprocs=1
#PBS -l walltime=00:02:00
#PBS -q debug
#SBATCH -o $work/pbs.out
set -e
cd "\$PBS_O_WORKDIR"
export PBS_NODEFILE=\${PBS_NODEFILE:-\$(generate_pbs_nodefile)}
mpirun --hostfile "\$PBS_NODEFILE" -np \$(wc -l < "\$PBS_NODEFILE") $smoke --dir $work
JOB

fail=0
for job in slurm.sbatch pbs.sh; do
  out=${job%%.*}.out
  timeout 120 sbatch --wait "$job" > /dev/null
  rc=$?
  passes=$(grep -c "all checks passed" "$out" 2>/dev/null || true)
  want=2; [ "$job" = pbs.sh ] && want=1
  hosts=$(grep -m1 "^MPI" "$out" 2>/dev/null)
  echo "$job: exit $rc, $passes of $want runs passed; $hosts"
  if [ $rc -ne 0 ] || [ "$passes" -ne $want ] || ! grep -q "node1" <<< "$hosts" || ! grep -q "node2" <<< "$hosts"; then
    fail=1; cat "$out" 2>/dev/null
  fi
done
exit $fail
