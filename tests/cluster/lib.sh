# shellcheck shell=bash
# What the emulated-cluster tests share (sourced by smoke_jobs.sh and job_scripts.sh).

# cluster_test_start: exit 77 (skipped) unless root with Slurm installed, then take the machine's cluster lock.
# One emulated cluster per MACHINE (network namespaces, /etc/slurm, /etc/hosts are global): ctest's RESOURCE_LOCK
# only orders tests of one ctest run, so concurrent runs (several worktrees) queue here.
cluster_test_start() {
  [ "$(id -u)" -eq 0 ] || { echo "SKIPPED: the emulated cluster needs root"; exit 77; }
  local c
  for c in sbatch slurmctld slurmd munged generate_pbs_nodefile; do
    command -v $c >/dev/null || { echo "SKIPPED: $c not installed (scripts/install-deps.sh installs Slurm)"; exit 77; }
  done
  exec 8>/tmp/hpdt-cluster.lock
  flock -w 240 8 || { echo "FAIL: another emulated cluster held /tmp/hpdt-cluster.lock for 240 s"; exit 1; }
}

# sbatch_wait SECONDS SBATCH_ARGS...: `timeout SECONDS sbatch --wait SBATCH_ARGS...` without sbatch's polls. sbatch
# --wait looks at the job after 2 s, then 8 s later, then every 10 s: a job of 1-3 s here took ~10 s, six of them a
# minute of the test. This looks every 0.2 s. Returns the job's exit code (128 + the signal where a signal ended
# it; 1 where Slurm ended it without one), or 124 after SECONDS (the job cancelled).
sbatch_wait() {
  local seconds=$1; shift
  local id info state code
  id=$(sbatch --parsable "$@") || return 1
  id=${id%%;*}
  local deadline=$((SECONDS + seconds))
  while [ $SECONDS -lt $deadline ]; do
    info=$(scontrol -o show job "$id" 2>/dev/null)
    state=$(grep -o 'JobState=[A-Z_]*' <<< "$info")
    state=${state#JobState=}
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
        code=$(grep -o ' ExitCode=[0-9]*:[0-9]*' <<< "$info")
        code=${code# ExitCode=}
        if [ "${code#*:}" != 0 ]; then return $((128 + ${code#*:})); fi
        [ "$state" = COMPLETED ] || [ "${code%%:*}" != 0 ] || return 1
        return "${code%%:*}"
        ;;
    esac
    sleep 0.2
  done
  scancel "$id" 2>/dev/null
  return 124
}

# sbatch_wait_retry SECONDS SBATCH_ARGS...: sbatch_wait, and once more, loudly, where the job failed and its output
# (the file of SBATCH_ARGS' -o) shows a process killed by a signal. On this emulated cluster an MPI rank now and then
# dies of SIGSEGV at a null PC in its start-up under srun --mpi=pmix, before any hpdt code runs (2 of ~60 runs of
# smoke_jobs.sh, which retries the same way; once in job_scripts.sh's srun allreduce job on 2026-12-02). $HPDT_OUT, if set, is moved
# aside first (the programs refuse to overwrite their outputs).
sbatch_wait_retry() {
  local seconds=$1 out="" prev="" arg rc
  shift
  for arg in "$@"; do
    [ "$prev" = "-o" ] && out=$arg
    prev=$arg
  done
  sbatch_wait "$seconds" "$@"
  rc=$?
  if [ $rc -ne 0 ] && grep -qE "Segmentation fault|Bus error|received signal" "$out" 2>/dev/null; then
    echo "FLAKY: a process of the job died by a signal (exit $rc; its output below); running the job once more"
    sed 's/^/  | /' "$out" | tail -20
    scancel --user "$(id -un)" 2> /dev/null  # whatever is left of the first attempt
    if [ -n "${HPDT_OUT:-}" ] && [ -e "$HPDT_OUT" ]; then
      rm -rf "$HPDT_OUT.flaky"
      mv "$HPDT_OUT" "$HPDT_OUT.flaky"
    fi
    sbatch_wait "$seconds" "$@"
    rc=$?
  fi
  return $rc
}
