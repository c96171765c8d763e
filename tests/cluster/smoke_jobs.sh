#!/usr/bin/env bash
# Brings up an emulated 2-node Slurm cluster (scripts/cluster/cluster.sh) and runs hpdt-smoke in it as
# a SLURM job (srun --mpi=pmix and mpirun) and as a PBS job through sbatch's #PBS handling, checking
# each job's exit code and output. Exit 77 (skipped) when not root or Slurm is not installed.
#   usage: smoke_jobs.sh SOURCE_DIR HPDT_SMOKE_BINARY
set -uo pipefail
src=$1 smoke=$2
# shellcheck source=tests/cluster/lib.sh
. "$(dirname "$0")/lib.sh"
cluster_test_start
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
ulimit -c unlimited
srun --mpi=pmix --kill-on-bad-exit=1 $smoke --dir $work
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
ulimit -c unlimited
cd "\$PBS_O_WORKDIR"
export PBS_NODEFILE=\${PBS_NODEFILE:-\$(generate_pbs_nodefile)}
mpirun --hostfile "\$PBS_NODEFILE" -np \$(wc -l < "\$PBS_NODEFILE") $smoke --dir $work
JOB

# A job whose process died by a signal is run once more, loudly: 2 of ~60 runs on this 2-core machine (one in CI,
# one beside a parallel build, 2026-11-28) had a rank of the srun step die of SIGSEGV at a null instruction
# pointer before its first line of output, inside Open MPI/PMIx start-up as far as the output shows (the same
# binary passed the other ~60 times, and the PMIx start-up races of open-mpi/ompi#12495 and
# openpmix/openpmix#1114 look alike). The jobs keep core files (ulimit -c), and the backtrace of each is printed
# before the rerun, so the next such failure says where it was. Any other failure, or a second one, fails the test.
backtraces() {
  local core
  for core in "$work"/core*; do
    [ -f "$core" ] || continue
    echo "--- $core:"
    if command -v gdb > /dev/null; then
      gdb -batch -ex "info sharedlibrary" -ex "thread apply all bt" "$smoke" "$core" 2>&1 | tail -60
    else
      echo "(gdb not installed: no backtrace)"
    fi
    rm -f "$core"
  done
}
fail=0
for job in slurm.sbatch pbs.sh; do
  out=${job%%.*}.out
  for attempt in 1 2; do
    rm -f "$out"
    sbatch_wait 120 "$job" > /dev/null
    rc=$?
    passes=$(grep -c "all checks passed" "$out" 2>/dev/null || true)
    want=2; [ "$job" = pbs.sh ] && want=1
    hosts=$(grep -m1 "^MPI" "$out" 2>/dev/null)
    echo "$job: exit $rc, $passes of $want runs passed; $hosts"
    if [ $rc -eq 0 ] && [ "$passes" -eq $want ] && grep -q "node1" <<< "$hosts" && grep -q "node2" <<< "$hosts"; then
      break
    fi
    cat "$out" 2>/dev/null
    backtraces
    if [ $attempt -eq 1 ] && grep -qE "Segmentation fault|Bus error|received signal" "$out" 2>/dev/null; then
      echo "FLAKY: $job: a process died by a signal (output and backtraces above); running the job once more"
      scancel --user "$(id -un)" 2> /dev/null  # whatever is left of the first attempt
      continue
    fi
    fail=1
    break
  done
done
exit $fail
