# Sourced by every hpdt job script (SLURM and PBS). Sets up modules, paths, the output directory and
# NCCL_DEBUG capture, and provides the launcher and the preemption/requeue handling.
#
# Environment (all optional; the defaults suit a site where the repository is the submit directory):
#   HPDT_ROOT        repository root                    (default: $SLURM_SUBMIT_DIR / $PBS_O_WORKDIR / pwd)
#   HPDT_BUILD       build directory with the binaries  (default: $HPDT_ROOT/build/default)
#   HPDT_OUT         where this job writes              (default: $HPDT_ROOT/runs/<job name>-<job id>)
#   HPDT_MODULES     modules to load, e.g. "gcc/12 openmpi/4.1 cuda/12.4 nccl hdf5/1.14-mpi"
#   HPDT_LAUNCH      srun | mpirun | mpiexec            (default: srun under Slurm, mpiexec under PBS)
#   HPDT_NCCL_DEBUG  NCCL_DEBUG level to capture per rank, or "off" (default: INFO)
#   HPDT_REQUEUE_EXIT the trainer's "checkpointed, please requeue" exit code (default: 75, EX_TEMPFAIL)

hpdt_log() { echo "[hpdt-job $(date -u +%H:%M:%S)] $*"; }
hpdt_die() { echo "[hpdt-job] error: $*" >&2; exit 1; }

hpdt_setup() {
  local job_id=${SLURM_JOB_ID:-${PBS_JOBID:-local$$}} job_name=${SLURM_JOB_NAME:-${PBS_JOBNAME:-hpdt}}
  job_id=${job_id%%.*}
  HPDT_ROOT=${HPDT_ROOT:-${SLURM_SUBMIT_DIR:-${PBS_O_WORKDIR:-$PWD}}}
  HPDT_BUILD=${HPDT_BUILD:-$HPDT_ROOT/build/default}
  HPDT_OUT=${HPDT_OUT:-$HPDT_ROOT/runs/$job_name-$job_id}
  HPDT_REQUEUE_EXIT=${HPDT_REQUEUE_EXIT:-75}
  export HPDT_ROOT HPDT_BUILD HPDT_OUT HPDT_REQUEUE_EXIT
  if [ -n "${HPDT_MODULES:-}" ]; then
    if ! command -v module >/dev/null 2>&1 && [ -f /etc/profile.d/modules.sh ]; then . /etc/profile.d/modules.sh; fi
    # shellcheck disable=SC2086
    module load $HPDT_MODULES || hpdt_die "module load $HPDT_MODULES failed"
  fi
  mkdir -p "$HPDT_OUT" || hpdt_die "cannot create $HPDT_OUT"
  if [ "${HPDT_NCCL_DEBUG:-INFO}" != off ]; then
    # one file per rank process: NCCL expands %h (host) and %p (pid)
    mkdir -p "$HPDT_OUT/nccl"
    export NCCL_DEBUG=${HPDT_NCCL_DEBUG:-INFO} NCCL_DEBUG_FILE=$HPDT_OUT/nccl/nccl.%h.%p.log
  fi
  # each script says which scheduler wrote it (HPDT_SCHEDULER): a PBS script run through Slurm's
  # #PBS support (or on a site with both) must still use PBS_NODEFILE and mpiexec
  local sched=${HPDT_SCHEDULER:-}
  [ -z "$sched" ] && { [ -n "${SLURM_JOB_ID:-}" ] && sched=slurm || { [ -n "${PBS_JOBID:-}" ] && sched=pbs; }; }
  if [ "$sched" = slurm ]; then
    HPDT_NODES=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
    HPDT_RANKS=${SLURM_NTASKS:-$HPDT_NODES}
    HPDT_LAUNCH=${HPDT_LAUNCH:-srun}
  elif [ "$sched" = pbs ]; then
    export PBS_NODEFILE=${PBS_NODEFILE:-$(generate_pbs_nodefile 2>/dev/null)}
    [ -s "$PBS_NODEFILE" ] || hpdt_die "PBS_NODEFILE is empty or missing"
    HPDT_RANKS=$(wc -l < "$PBS_NODEFILE")
    HPDT_NODES=$(sort -u "$PBS_NODEFILE" | wc -l)
    HPDT_LAUNCH=${HPDT_LAUNCH:-mpiexec}
  else
    HPDT_NODES=1 HPDT_RANKS=${HPDT_RANKS:-1} HPDT_LAUNCH=${HPDT_LAUNCH:-mpirun}
  fi
  export HPDT_NODES HPDT_RANKS HPDT_LAUNCH
  hpdt_log "job $job_name ($job_id): $HPDT_RANKS ranks on $HPDT_NODES nodes, launcher $HPDT_LAUNCH, out $HPDT_OUT"
  {
    echo "job_id=$job_id"; echo "job_name=$job_name"; echo "nodes=$HPDT_NODES"; echo "ranks=$HPDT_RANKS"
    echo "launcher=$HPDT_LAUNCH"; echo "started=$(date -u +%FT%TZ)"
    echo "git_commit=$(git -C "$HPDT_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  } > "$HPDT_OUT/job.env"
}

# hpdt_run BINARY ARGS...: one rank per task, through the chosen launcher, in the background so
# that the batch shell can forward preemption signals; returns the launcher's exit code.
hpdt_run() {
  local -a launch
  case "$HPDT_LAUNCH" in
    srun) launch=(srun --mpi=pmix --kill-on-bad-exit=1) ;;
    mpirun) launch=(mpirun -np "$HPDT_RANKS") ;;
    mpiexec) launch=(mpiexec --hostfile "$PBS_NODEFILE" -np "$HPDT_RANKS") ;;
    *) hpdt_die "HPDT_LAUNCH must be srun, mpirun or mpiexec, got '$HPDT_LAUNCH'" ;;
  esac
  hpdt_log "${launch[*]} $*"
  "${launch[@]}" "$@" &
  HPDT_CHILD=$!
  local rc=0
  # wait returns early (>128) when a trapped signal arrives; keep waiting for the real exit
  while :; do
    wait "$HPDT_CHILD"; rc=$?
    kill -0 "$HPDT_CHILD" 2>/dev/null || break
  done
  HPDT_CHILD=
  return $rc
}

# Preemption: the scheduler signals the batch shell (SLURM --signal=B:USR1@T, PBS SIGTERM before
# the kill); we forward it to the launcher, which forwards it to every rank. hpdt-train then
# finishes its step, writes a checkpoint and exits with $HPDT_REQUEUE_EXIT.
hpdt_forward_signals() {
  trap 'hpdt_log "got SIGUSR1: asking the ranks to checkpoint"; [ -n "${HPDT_CHILD:-}" ] && kill -USR1 "$HPDT_CHILD"' USR1
  trap 'hpdt_log "got SIGTERM: asking the ranks to checkpoint"; [ -n "${HPDT_CHILD:-}" ] && kill -TERM "$HPDT_CHILD"' TERM
}

# hpdt_requeue_or_exit RC: the trainer's requeue code puts the job back in the queue (it resumes
# from the checkpoint); any other code is the job's exit code.
hpdt_requeue_or_exit() {
  local rc=$1
  if [ "$rc" -eq "$HPDT_REQUEUE_EXIT" ]; then
    if [ "${HPDT_SCHEDULER:-slurm}" = slurm ] && [ -n "${SLURM_JOB_ID:-}" ]; then
      hpdt_log "trainer checkpointed (exit $rc): requeueing job $SLURM_JOB_ID"
      scontrol requeue "$SLURM_JOB_ID" && exit 0
    elif [ -n "${PBS_JOBID:-}" ] && command -v qrerun >/dev/null 2>&1; then
      hpdt_log "trainer checkpointed (exit $rc): rerunning job $PBS_JOBID"
      qrerun "$PBS_JOBID" && exit 0
    fi
    hpdt_log "trainer checkpointed (exit $rc) but the job cannot requeue itself here; resubmit to resume"
  fi
  exit "$rc"
}

# hpdt_nccl_report: after the launch, the hpdt-nccl-log report over this job's per-rank NCCL_DEBUG
# files: $HPDT_OUT/nccl/nccl-report.txt, nccl-report.json and nccl.dot (docs/nccl-log.md). Skipped when
# capture is off, nothing was captured, or the app already wrote one (hpdt-train --nccl-debug). Never
# changes the job's exit code.
hpdt_nccl_report() {
  [ "${HPDT_NCCL_DEBUG:-INFO}" != off ] || return 0
  local dir=$HPDT_OUT/nccl tool=$HPDT_BUILD/apps/nccl-log/hpdt-nccl-log
  [ -n "$(ls -A "$dir" 2>/dev/null)" ] || return 0
  if [ ! -e "$dir/nccl-report.json" ]; then
    [ -x "$tool" ] || tool=$(hpdt_bin hpdt-nccl-log 2>/dev/null) || { hpdt_log "hpdt-nccl-log not built: no NCCL report"; return 0; }
    "$tool" report --dir "$dir" --json-out "$dir/nccl-report.json" --dot "$dir/nccl.dot" > "$dir/nccl-report.txt" 2>&1
  fi
  local n
  n=$(grep -c '^  \[' "$dir/nccl-report.txt" 2>/dev/null)
  hpdt_log "NCCL report: $dir/nccl-report.txt (${n:-0} diagnoses)"
  return 0
}

# Binaries, checked before launching so that a missing build is one clear line, not N rank errors.
# The build puts each tool in its folder: apps/train/hpdt-train, bench/allreduce/hpdt-allreduce-perf, ...
hpdt_bin() {
  local name=$1 path
  for path in "$HPDT_BUILD"/apps/*/"$name" "$HPDT_BUILD"/bench/*/"$name" "$HPDT_BUILD/$name" \
              "$(command -v "$name" 2>/dev/null)"; do
    [ -n "$path" ] && [ -x "$path" ] && { echo "$path"; return 0; }
  done
  hpdt_die "$name not found under $HPDT_BUILD (build it: cmake --preset default && cmake --build --preset default), or set HPDT_BUILD"
}
