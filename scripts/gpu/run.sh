#!/usr/bin/env bash
# Runs the GPU tests, checks and benchmarks of a bundle made by prepare.sh, on a machine with an NVIDIA
# GPU, and writes everything into OUT_DIR:
#   environment.txt  GPU, driver, CUDA, PyTorch versions;  libraries.txt  where each library came from
#   tests/           gtest XML and the log of every test binary, check and compute-sanitizer run
#   bench/           benchmark JSON and logs;   summary.txt  one line per run and the totals
#
# usage: scripts/gpu/run.sh OUT_DIR [--bundle DIR] [--sanitize] [--no-bench] [--no-tests] [--only REGEX]
#                                   [--jobs N] [--deadline SECONDS] [--sanitize-timeout SECONDS]
#                                   [--sanitize-until SECONDS] [--sanitize-tools "memcheck racecheck"]
#   --sanitize   also run every single-process gpu test binary under compute-sanitizer memcheck and racecheck
#                (each at most --sanitize-timeout seconds, default 300; none past --sanitize-until seconds
#                after the start, so that the benchmarks keep their time). scripts/gpu/sanitize.txt (or the
#                file HPDT_SANITIZE_LIST names) lists runs that start first, in its order: a binary's gtest
#                filter per tool, or several, its parts, run side by side; the other binaries run whole after.
#                HPDT_SANITIZER replaces compute-sanitizer (tests/scripts/check_gpu_run.sh gives a stand-in)
#   --no-tests   run neither the smoke nor the test binaries and checks themselves: a call for the sanitizer runs
#                (with --sanitize --no-bench) or the benchmarks alone, after a call that ran the tests
#   --only RE    run only manifest entries whose executable (or check name) matches RE
#   --jobs N     run the correctness phase (tests, checks, sanitizer) N at a time (default 1). The GPU is
#                shared by them; benchmarks always run one at a time, after it, on an otherwise idle GPU
#   --deadline S start nothing new S seconds after the start, and cut a run short where it would end after
#                that; what did not run is listed as NOT RUN (a lease on a GPU machine is short)
# Order: smoke, then tests + checks (+ sanitizer), then benchmarks in the order of benchmarks.txt. A benchmarks.txt
# entry "prewarm NAME COMMAND" starts right after the smoke, in the background (niced, outside the --jobs slots),
# and the benchmark or peer NAME runs once it has ended (the entries after NAME go first while it runs): torch.compile's
# compilation, which fills the inductor caches (TORCHINDUCTOR_CACHE_DIR) while the tests run, so that the timed peer
# finds its graphs compiled.
# Exit code: 0 when every test and check that ran passed and nothing was cut short, 1 otherwise
# (skips are reported, not counted as passes).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=""; bundle=$root/.gpu-bundle; sanitize=0; bench=1; plain_tests=1; only=""; jobs=1; deadline=0; san_timeout=300; san_until=0; san_tools="memcheck racecheck"
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$2; shift 2 ;;
    --sanitize) sanitize=1; shift ;;
    --no-bench) bench=0; shift ;;
    --no-tests) plain_tests=0; shift ;;
    --only) only=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --deadline) deadline=$2; shift 2 ;;
    --sanitize-timeout) san_timeout=$2; shift 2 ;;
    --sanitize-until) san_until=$2; shift 2 ;;
    --sanitize-tools) san_tools=$2; shift 2 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
[ -n "$out" ] || { echo "usage: run.sh OUT_DIR [--bundle DIR] [--sanitize] [--no-bench] [--no-tests] [--only REGEX] [--jobs N] [--deadline S]" >&2; exit 2; }
[ -f "$bundle/manifest.tsv" ] || { echo "run.sh: no bundle at $bundle (make one with scripts/gpu/prepare.sh and carry it)" >&2; exit 2; }
mkdir -p "$out/tests" "$out/bench"
summary=$out/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
start=$SECONDS

[ -d /usr/local/cuda/bin ] && export PATH=$PATH:/usr/local/cuda/bin  # nvcc, compute-sanitizer
command -v ncu > /dev/null || for d in /opt/nvidia/nsight-compute/*/ /usr/local/cuda/nsight-compute*/; do
  [ -x "$d/ncu" ] && export PATH=$PATH:$d && break
done
# --- environment ---------------------------------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"; uname -a; nproc; grep -m1 "model name" /proc/cpuinfo
  echo; nvidia-smi 2>&1 || echo "nvidia-smi failed"
  echo; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv 2>&1
  echo; nvcc --version 2>&1 | tail -2; command -v compute-sanitizer ncu
  echo; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
  echo; cat "$bundle/build.json" 2>/dev/null
} > "$out/environment.txt"

# --- libraries: the bundle's own, then CUDA's from the toolkit and from PyTorch's wheels ----------
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 - <<'PY' 2>/dev/null
import glob, site, sys
paths = set()
for s in site.getsitepackages() + [site.getusersitepackages()]:
    paths.update(glob.glob(s + "/nvidia/*/lib")); paths.update(glob.glob(s + "/nvidia/cu*/lib"))
print("\n".join(sorted(paths)))
PY
); do
  [ -d "$d" ] && cuda_dirs="$cuda_dirs:$d"
done
export LD_LIBRARY_PATH="$bundle/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Open MPI from the bundle, relocated; only the transports a single machine needs.
# (A bundle without its own Open MPI uses the machine's.)
if [ -x "$bundle/ompi/bin/mpiexec" ]; then
  export OPAL_PREFIX=$bundle/ompi PMIX_INSTALL_PREFIX=$bundle/ompi/pmix2 PATH=$bundle/ompi/bin:$PATH
  export PMIX_MCA_mca_base_component_path=$bundle/ompi/pmix2/lib/pmix
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_mca_base_component_show_load_errors=0
export HPDT_LOG_LEVEL=${HPDT_LOG_LEVEL:-warn}
# torch.compile's caches across processes (the prewarm entries compile, the peers load): FX graphs and AOTAutograd's
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/hpdt-torchinductor}
export TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1
chmod +x "$bundle"/bin/*/* "$bundle"/bin/*/*/* "$bundle"/ompi/bin/* 2>/dev/null

missing=0
: > "$out/libraries.txt"
while read -r f; do
  echo "== $f" >> "$out/libraries.txt"
  ldd "$f" >> "$out/libraries.txt" 2>&1
  if ldd "$f" | grep -q "not found"; then
    note "MISSING LIBRARIES for $(basename "$f"): $(ldd "$f" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
    missing=1
  fi
done < <(find -L "$bundle/bin" -type f)

# --- time limits -----------------------------------------------------------------------------------
left() {  # seconds left before the deadline (a large number without one)
  if [ "$deadline" -gt 0 ]; then echo $((deadline - (SECONDS - start))); else echo 100000; fi
}
limit() {  # limit OWN: the smaller of OWN and the time left
  local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"
}
not_run() { note "$(printf '%-9s %-44s (deadline: %ss after the start)' "NOT RUN" "$1" "$deadline")"; echo x >> "$out/.not_run"; }
cut_short() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }
status() { if cut_short "$1"; then echo "CUT SHORT"; elif [ "$1" -ne 0 ]; then echo FAIL; else echo ok; fi; }  # of an exit code
: > "$out/.not_run"

# --- runs ------------------------------------------------------------------------------------------
count() { grep -c "$1" "$2" 2>/dev/null || true; }
run_test() {  # ranks exe
  local ranks=$1 exe=$2 name; name=$(basename "$exe")
  local tag=$name; [ "$ranks" -gt 0 ] && tag=$name.np$ranks
  local xml=$out/tests/$tag.xml log=$out/tests/$tag.log
  local cmd=("$bundle/bin/$exe" "--gtest_output=xml:$xml")
  [ "$ranks" -gt 0 ] && cmd=(mpiexec -n "$ranks" --oversubscribe --bind-to none "${cmd[@]}")
  local t0=$SECONDS
  timeout --kill-after=10 "$(limit 900)" "${cmd[@]}" < /dev/null > "$log" 2>&1
  local rc=$?
  local tests fails skips
  tests=$(count '<testcase ' "$xml"); fails=$(count '<failure' "$xml"); skips=$(count 'result="skipped"' "$xml")
  local passes=$(( tests - skips - fails )) st=ok
  if cut_short $rc; then st="CUT SHORT"; elif [ $rc -ne 0 ] || [ "$fails" -gt 0 ] || [ ! -s "$xml" ]; then st=FAIL; fi
  note "$(printf '%-9s %-44s rc=%-3s cases=%-4s passed=%-4s failed=%-4s skipped=%-4s %4ss' "$st" "$tag" "$rc" "$tests" "$passes" "$fails" "$skips" $((SECONDS - t0)))"
  [ "$st" = ok ] || echo "$tag" >> "$out/.failed"
}
sanitizer=${HPDT_SANITIZER:-compute-sanitizer}
sanitize_list=${HPDT_SANITIZE_LIST:-$root/scripts/gpu/sanitize.txt}
run_sanitizer() {  # tool exe filter part ("": the binary's one run; N/M: part N of M, its own log)
  local tool=$1 exe=$2 filter=$3 part=$4 tag; tag=$(basename "$exe")
  local name="$tag [$tool]" log=$out/tests/$tag.$tool.log t0=$SECONDS own=$san_timeout
  if [ -n "$part" ]; then name="$tag [$tool, part $part]"; log=$out/tests/$tag.$tool.part${part%/*}.log; fi
  if [ "$san_until" -gt 0 ] && [ $((san_until - (SECONDS - start))) -lt "$own" ]; then own=$((san_until - (SECONDS - start))); fi
  if [ "$own" -le 0 ]; then not_run "$name"; return; fi
  local args=()
  [ -n "$filter" ] && args=("--gtest_filter=$filter")
  # (HPDT_UNDER_SANITIZER: the tests that measure time run their code but leave its times unchecked)
  HPDT_UNDER_SANITIZER=$tool timeout --kill-after=10 "$(limit "$own")" "$sanitizer" --tool "$tool" --error-exitcode 99 \
    --print-limit 20 "$bundle/bin/$exe" "${args[@]}" < /dev/null > "$log" 2>&1
  local rc=$? st line vendor
  st=$(status $rc)
  line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
  # racecheck's hazards inside cuDNN's or cuBLAS's kernels alone (the vendor comparisons) are not ours: ok, said so
  if [ "$tool" = racecheck ] && [ $rc -eq 99 ] && vendor=$("$root/scripts/gpu/vendor_races.sh" "$log"); then
    st=ok; line="$line: $vendor"
  fi
  [ -n "$filter" ] && line="$line (cases: $filter)"
  note "$(printf '%-9s %-44s rc=%-3s %4ss %s' "$st" "$name" "$rc" $((SECONDS - t0)) "${line:-}")"
  [ "$st" = ok ] || echo "$name" >> "$out/.failed"
}
expand() {  # the placeholders of checks.txt and benchmarks.txt
  local s=${1//\{out\}/$out/bench}; s=${s//\{root\}/$root}; s=${s//\{bin\}/$bundle/bin}; s=${s//\{data\}/$bundle/data}
  echo "$s"
}
run_check() {  # name command-line
  local name=$1 cmdline; cmdline=$(expand "$2")
  local log=$out/tests/$name.log t0=$SECONDS
  timeout --kill-after=10 "$(limit 600)" bash -c "$cmdline" < /dev/null > "$log" 2>&1
  local rc=$? st
  st=$(status $rc)
  note "$(printf '%-9s %-44s rc=%-3s %4ss  %s' "$st" "check $name" "$rc" $((SECONDS - t0)) "$(tail -1 "$log" | cut -c1-80)")"
  [ "$st" = ok ] || echo "check $name" >> "$out/.failed"
}
# What else had the machine when a benchmark started: the load average, and any process already holding the GPU
# (a prewarm, a test or sanitizer run left behind). On 2026-11-29 two vendor steps with the same kernels as their
# neighbours left the GPU idle half of each step, and nothing in the results said what had taken the host.
machine_load() {
  local apps load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  apps=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2> /dev/null |
    sed 's/, */ /g' | tr '\n' ';' | sed 's/;$//')
  echo "load $load${apps:+; GPU already held by: $apps}"
}
bench_label() {  # kind exe-or-name args: a peer's NAME; a bench's output file (--out, --benchmark_out, -J) without
  # .json, since one executable serves many entries (the training steps), else the executable's name
  local label
  [ "$1" = bench ] && label=$(echo "$3" | grep -oE -- '(--out|--benchmark_out|-J)[= ][^ ]+' | head -1 | sed -E 's/^[^= ]+[= ]//')
  label=$(basename "${label:-$2}"); echo "${label%.json}"
}
run_bench() {  # kind exe-or-name command-line
  local kind=$1 name=$2 cmdline label; cmdline=$(expand "$3"); label=$(bench_label "$1" "$2" "$3")
  [ "$kind" = bench ] && cmdline="$bundle/bin/$name $cmdline"
  local log t0=$SECONDS before
  log=$out/bench/$(basename "$name").log
  [ -f "$log" ] && log=$out/bench/$(basename "$name").$t0.log
  before=$(machine_load)
  timeout --kill-after=10 "$(limit 1200)" bash -c "$cmdline" < /dev/null > "$log" 2>&1
  local rc=$? st
  st=$(status $rc)
  # (started at t0 s after the start: what the next lease's order is planned from)
  note "$(printf '%-9s %-44s rc=%-3s %4ss  %s  (at %ss; load at start: %s)' "$st" "$kind $label" "$rc" $((SECONDS - t0)) "$(basename "$log")" "$((t0 - start))" "$before")"
  [ "$st" = ok ] || echo "$kind $label" >> "$out/.failed"
}
run_smoke() {  # ranks exe
  local t0=$SECONDS
  timeout --kill-after=10 "$(limit 300)" mpiexec -n "$1" --oversubscribe --bind-to none "$bundle/bin/$2" --dir "$out" < /dev/null > "$out/tests/smoke.log" 2>&1
  local rc=$? st=ok
  if [ $rc -ne 0 ] || ! grep -q "all checks passed" "$out/tests/smoke.log"; then st=FAIL; echo smoke >> "$out/.failed"; fi
  note "$(printf '%-9s %-44s rc=%-3s %4ss  %s' "$st" "smoke $(basename "$2").np$1" "$rc" $((SECONDS - t0)) "$(grep -E '^CUDA' "$out/tests/smoke.log" | head -1)")"
}
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done; }
# Prewarms run detached (setsid: a session of their own, not jobs of this shell, so neither throttle nor wait counts
# them): .prewarm/NAME.pid (the session's id), and .prewarm/NAME.rc once they end.
start_prewarm() {  # name command-line
  local name=$1 cmdline; cmdline=$(expand "$2")
  mkdir -p "$out/.prewarm"
  echo "$SECONDS" > "$out/.prewarm/$name.start"
  ( setsid bash -c 'echo $$ > "$1"; timeout --kill-after=10 "$2" nice -n 10 bash -c "$3" < /dev/null > "$4" 2>&1; echo $? > "$5"' \
      _ "$out/.prewarm/$name.pid" "$(limit 900)" "$cmdline" "$out/bench/$name.prewarm.log" "$out/.prewarm/$name.rc" \
      < /dev/null > /dev/null 2>&1 & )
}
finish_prewarm() {  # name [wait]: with wait, until it ends (or the deadline); then its line, once
  local name=$1 pw=$out/.prewarm/$1
  [ -f "$pw.start" ] && [ ! -f "$pw.noted" ] || return 0
  if [ "${2:-}" = wait ]; then
    while [ ! -f "$pw.rc" ] && [ "$(left)" -gt 0 ]; do sleep 1; done
  fi
  local rc st
  if [ -f "$pw.rc" ]; then
    rc=$(cat "$pw.rc"); st=$(status "$rc")
  else  # still running: stopped here (the deadline, or the run's end); the whole session (timeout makes a process
    # group of its own inside it)
    [ -f "$pw.pid" ] && pkill -KILL -s "$(cat "$pw.pid")" 2> /dev/null
    rc=124; st="CUT SHORT"
  fi
  touch "$pw.noted"
  note "$(printf '%-9s %-44s rc=%-3s %4ss  %s' "$st" "prewarm $name" "$rc" $((SECONDS - $(cat "$pw.start"))) "$name.prewarm.log")"
  [ "$st" = ok ] || echo "prewarm $name" >> "$out/.failed"
}
selected() { [ -z "$only" ] || [[ "$1" =~ $only ]]; }
: > "$out/.failed"

manifest=()
while IFS= read -r line; do manifest+=("$line"); done < "$bundle/manifest.tsv"

# 1. smoke, alone (it says at once whether MPI, HDF5 and CUDA work at all)
for line in "${manifest[@]}"; do
  IFS=$'\t' read -r kind ranks exe args <<< "$line"
  [ "$kind" = smoke ] && [ $plain_tests -eq 1 ] && selected "$exe" && run_smoke "$ranks" "$exe"
done
prewarms=()
for line in "${manifest[@]}"; do
  IFS=$'\t' read -r kind ranks exe args <<< "$line"
  [ "$kind" = prewarm ] && [ $bench -eq 1 ] && selected "$exe$args" || continue
  start_prewarm "$exe" "$args"
  prewarms+=("$exe")
done
# 2. correctness: tests and checks, then the sanitizer runs, $jobs at a time (OpenMP threads shared out)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / jobs > 0 ? $(nproc) / jobs : 1 ))}
for line in "${manifest[@]}"; do
  IFS=$'\t' read -r kind ranks exe args <<< "$line"
  case "$kind" in test | check) ;; *) continue ;; esac
  [ $plain_tests -eq 1 ] && selected "$exe" || continue
  if [ "$(left)" -le 0 ]; then not_run "$kind $exe"; continue; fi
  throttle
  if [ "$kind" = test ]; then run_test "$ranks" "$exe" & else run_check "$exe" "$args" & fi
done
if [ $sanitize -eq 1 ]; then
  # The runs: sanitize.txt's lines first, in its order (the long ones head it), then every other single-process
  # test binary whole, tool by tool. A run is "tool<TAB>exe<TAB>filter<TAB>part".
  san_runs=()
  declare -A listed=() parts=()
  sanitized_exe() {  # the manifest's single-process test whose file name is $1, if selected
    local line kind ranks exe args
    for line in "${manifest[@]}"; do
      IFS=$'\t' read -r kind ranks exe args <<< "$line"
      [ "$kind" = test ] && [ "$ranks" -eq 0 ] && [ "$(basename "$exe")" = "$1" ] && selected "$exe" && echo "$exe" && return
    done
  }
  if [ -f "$sanitize_list" ]; then
    while read -r tool bin filter; do
      [[ -z "$tool" || "$tool" == \#* ]] && continue
      [[ " $san_tools " == *" $tool "* ]] || continue
      parts[$tool/$bin]=$(( ${parts[$tool/$bin]:-0} + 1 ))
    done < "$sanitize_list"
    declare -A seen=()
    while read -r tool bin filter; do
      [[ -z "$tool" || "$tool" == \#* ]] && continue
      [[ " $san_tools " == *" $tool "* ]] || continue
      exe=$(sanitized_exe "$bin")
      [ -n "$exe" ] || continue
      listed[$tool/$bin]=1
      seen[$tool/$bin]=$(( ${seen[$tool/$bin]:-0} + 1 ))
      part=""; [ "${parts[$tool/$bin]}" -gt 1 ] && part="${seen[$tool/$bin]}/${parts[$tool/$bin]}"
      san_runs+=("$tool"$'\t'"$exe"$'\t'"$filter"$'\t'"$part")
    done < "$sanitize_list"
  fi
  for tool in $san_tools; do
    for line in "${manifest[@]}"; do
      IFS=$'\t' read -r kind ranks exe args <<< "$line"
      [ "$kind" = test ] && [ "$ranks" -eq 0 ] && selected "$exe" || continue
      [ -n "${listed[$tool/$(basename "$exe")]:-}" ] && continue
      san_runs+=("$tool"$'\t'"$exe"$'\t'$'\t')
    done
  done
  for run in "${san_runs[@]}"; do
    IFS=$'\t' read -r tool exe filter part <<< "$run"
    if [ "$(left)" -le 0 ]; then not_run "$(basename "$exe") [$tool${part:+, part $part}]"; continue; fi
    throttle
    run_sanitizer "$tool" "$exe" "$filter" "$part" &
  done
fi
wait
unset OMP_NUM_THREADS
# 3. benchmarks, one at a time
prewarming() { [ -f "$out/.prewarm/$1.start" ] && [ ! -f "$out/.prewarm/$1.rc" ]; }  # name: started, not ended
run_entry() {  # a manifest line: a benchmark or peer, after its prewarm (waited for) if it has one
  local kind ranks exe args
  IFS=$'\t' read -r kind ranks exe args <<< "$1"
  finish_prewarm "$(basename "$exe")" wait
  if [ "$(left)" -le 0 ]; then not_run "$kind $(bench_label "$kind" "$exe" "$args")"; return; fi
  run_bench "$kind" "$exe" "$args"
  # an Nsight Compute profile (peer ncu_*) is rendered at once, inside the deadline: at the call's end (device.sh)
  # the rendering of many reports would outlast the call's limit
  if [ "$kind" = peer ] && [[ $exe == ncu_* ]] && [ "$(left)" -gt 0 ] && command -v ncu > /dev/null; then
    "$root/scripts/gpu/ncu_reports.sh" render "$out/bench" "$summary"
  fi
}
# An entry whose prewarm is still running when its turn comes waits in `later` while the entries after it run (the
# GPU idled through torch.compile's compilation before, ~5 minutes cold); it runs as soon as an entry ends and its
# prewarm has, and after the last entry it is waited for.
later=()
run_ready_later() {
  local keep=() line exe
  for line in ${later[@]+"${later[@]}"}; do
    exe=$(cut -f3 <<< "$line")
    if prewarming "$(basename "$exe")"; then keep+=("$line"); else run_entry "$line"; fi
  done
  later=(${keep[@]+"${keep[@]}"})
}
if [ $bench -eq 1 ]; then
  for line in "${manifest[@]}"; do
    IFS=$'\t' read -r kind ranks exe args <<< "$line"
    case "$kind" in bench | peer) ;; *) continue ;; esac
    selected "$exe$args" || continue
    if prewarming "$(basename "$exe")"; then
      note "$(printf '%-9s %-44s (its prewarm is still running: the entries after it go first)' "LATER" "$kind $(bench_label "$kind" "$exe" "$args")")"
      later+=("$line")
      continue
    fi
    run_entry "$line"
    run_ready_later
  done
  for line in ${later[@]+"${later[@]}"}; do run_entry "$line"; done
fi
for name in ${prewarms[@]+"${prewarms[@]}"}; do finish_prewarm "$name"; done  # those whose benchmark did not run

# Where each traced training step's GPU time went, by kernel family (the benchmarks' --kernel-trace files and the
# PyTorch peer's): in the summary, which comes back even when the results archive is not read.
if [ $bench -eq 1 ] && ls "$out"/bench/trace_*.json > /dev/null 2>&1; then
  python3 "$root/scripts/gpu/kernel_breakdown.py" "$out" > "$out/bench/step_breakdown.md" 2>&1 ||
    note "kernel_breakdown.py failed: see bench/step_breakdown.md"
  { echo "step breakdown (ms a step by kernel family):"; cat "$out/bench/step_breakdown.md"; } >> "$summary"
fi

# --- totals ----------------------------------------------------------------------------------------
total_pass=0 total_fail=0 total_skip=0
for xml in "$out"/tests/*.xml; do
  [ -f "$xml" ] || continue
  t=$(count '<testcase ' "$xml"); f=$(count '<failure' "$xml"); s=$(count 'result="skipped"' "$xml")
  total_pass=$((total_pass + t - f - s)); total_fail=$((total_fail + f)); total_skip=$((total_skip + s))
done
failed_runs=$(wc -l < "$out/.failed"); not_run_count=$(wc -l < "$out/.not_run")
note "TOTAL gpu test cases: passed=$total_pass failed=$total_fail skipped=$total_skip; runs failed or cut short: $failed_runs; not run (deadline): $not_run_count; missing libraries: $missing; $((SECONDS - start)) s"
[ -s "$out/.failed" ] && note "failed or cut short: $(tr '\n' ';' < "$out/.failed")"
# On a machine that has a GPU, a test skipped for want of one ("no GPU: ...", HPDT_REQUIRE_GPU) means
# the GPU was not usable (driver, libraries): a failure of this run, not a pass. Other skips say what
# this machine lacks (a second GPU, a CUDA-aware MPI) and are listed with their reasons.
skip_fail=0
no_gpu_skips=$(cat "$out"/tests/*.xml 2>/dev/null | grep -c 'skipped message="[^"]*no GPU: ' || true)
if nvidia-smi -L > /dev/null 2>&1 && [ "$no_gpu_skips" -gt 0 ]; then
  note "FAIL: $no_gpu_skips GPU test case(s) skipped for want of a GPU although nvidia-smi sees one (see tests/*.log)"
  skip_fail=1
fi
if [ $total_skip -gt 0 ]; then
  note "skipped, by reason:"
  cat "$out"/tests/*.xml 2>/dev/null | grep -o 'skipped message="[^"]*"' | sed 's/.*&#x0A;//; s/"$//' | sort | uniq -c |
    while read -r line; do note "  $line"; done
fi
[ "$failed_runs" -eq 0 ] && [ $missing -eq 0 ] && [ $total_fail -eq 0 ] && [ $skip_fail -eq 0 ] && [ "$not_run_count" -eq 0 ]
