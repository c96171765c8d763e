#!/usr/bin/env bash
# Runs the GPU tests and GPU benchmarks of a bundle made by prepare.sh, on a machine with an NVIDIA
# GPU, and writes everything into OUT_DIR:
#   environment.txt  GPU, driver, CUDA, PyTorch versions;  libraries.txt  where each library came from
#   tests/           gtest XML and the log of every test binary (and compute-sanitizer runs)
#   bench/           benchmark JSON;   summary.txt  one line per run and the totals
#
# usage: scripts/gpu/run.sh OUT_DIR [--bundle DIR] [--sanitize] [--no-bench] [--only REGEX]
#   --sanitize   also run every gpu test binary under compute-sanitizer memcheck and racecheck
#   --only RE    run only manifest entries whose executable matches RE
# Exit code: 0 when every test passed (skips are reported, not counted as passes), 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=""; bundle=$root/.gpu-bundle; sanitize=0; bench=1; only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$2; shift 2 ;;
    --sanitize) sanitize=1; shift ;;
    --no-bench) bench=0; shift ;;
    --only) only=$2; shift 2 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
[ -n "$out" ] || { echo "usage: run.sh OUT_DIR [--bundle DIR] [--sanitize] [--no-bench] [--only REGEX]" >&2; exit 2; }
[ -f "$bundle/manifest.tsv" ] || { echo "run.sh: no bundle at $bundle (make one with scripts/gpu/prepare.sh and carry it)" >&2; exit 2; }
mkdir -p "$out/tests" "$out/bench"
summary=$out/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

# --- environment ---------------------------------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"; uname -a
  echo; nvidia-smi 2>&1 || echo "nvidia-smi failed"
  echo; nvcc --version 2>&1 | tail -2
  echo; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
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
export OPAL_PREFIX=$bundle/ompi PMIX_INSTALL_PREFIX=$bundle/ompi/pmix2 PATH=$bundle/ompi/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_mca_base_component_show_load_errors=0
export PMIX_MCA_mca_base_component_path=$bundle/ompi/pmix2/lib/pmix HPDT_LOG_LEVEL=${HPDT_LOG_LEVEL:-warn}
chmod +x "$bundle"/bin/*/* "$bundle"/ompi/bin/* 2>/dev/null

missing=0
: > "$out/libraries.txt"
for f in "$bundle"/bin/*/*; do
  echo "== $f" >> "$out/libraries.txt"
  ldd "$f" >> "$out/libraries.txt" 2>&1
  if ldd "$f" | grep -q "not found"; then
    note "MISSING LIBRARIES for $(basename "$f"): $(ldd "$f" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')"
    missing=1
  fi
done

# --- runs ------------------------------------------------------------------------------------------
failed=0; total_pass=0; total_fail=0; total_skip=0
count() { grep -c "$1" "$2" 2>/dev/null || true; }
run_test() {  # ranks exe
  local ranks=$1 exe=$2 name; name=$(basename "$exe")
  local tag=$name; [ "$ranks" -gt 0 ] && tag=$name.np$ranks
  local xml=$out/tests/$tag.xml log=$out/tests/$tag.log
  local cmd=("$bundle/bin/$exe" "--gtest_output=xml:$xml")
  [ "$ranks" -gt 0 ] && cmd=(mpiexec -n "$ranks" --oversubscribe --bind-to none "${cmd[@]}")
  local t0=$SECONDS
  timeout --kill-after=10 900 "${cmd[@]}" < /dev/null > "$log" 2>&1
  local rc=$?
  local tests fails skips
  tests=$(count '<testcase ' "$xml"); fails=$(count '<failure' "$xml"); skips=$(count 'result="skipped"' "$xml")
  local passes=$(( tests - skips - fails ))
  total_pass=$((total_pass + passes)); total_fail=$((total_fail + fails)); total_skip=$((total_skip + skips))
  if [ $rc -ne 0 ] || [ "$fails" -gt 0 ] || [ ! -s "$xml" ]; then failed=1; st=FAIL; else st=ok; fi
  note "$(printf '%-5s %-40s rc=%-3s cases=%-4s passed=%-4s failed=%-4s skipped=%-4s %4ss' "$st" "$tag" "$rc" "$tests" "$passes" "$fails" "$skips" $((SECONDS - t0)))"
  if [ $sanitize -eq 1 ] && [ "$ranks" -eq 0 ]; then
    for tool in memcheck racecheck; do
      timeout --kill-after=10 1800 compute-sanitizer --tool $tool --error-exitcode 99 --print-limit 20 \
        "$bundle/bin/$exe" < /dev/null > "$out/tests/$tag.$tool.log" 2>&1
      local src=$?
      local summary_line; summary_line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/tests/$tag.$tool.log" | tail -1)
      if [ $src -ne 0 ]; then failed=1; st=FAIL; else st=ok; fi
      note "$(printf '%-5s %-40s %s' "$st" "$tag [$tool]" "${summary_line:-rc=$src}")"
    done
  fi
}
run_bench() {  # exe args
  local exe=$1 args=${2//\{out\}/$out/bench} name; name=$(basename "$exe")
  local t0=$SECONDS
  # shellcheck disable=SC2086
  timeout --kill-after=10 900 "$bundle/bin/$exe" $args < /dev/null > "$out/bench/$name.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && failed=1
  note "$(printf '%-5s %-40s rc=%-3s %4ss' "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "bench $name" "$rc" $((SECONDS - t0)))"
}

run_peer() {  # command line with {root} and {out}
  local cmdline=${1//\{out\}/$out/bench}; cmdline=${cmdline//\{root\}/$root}
  local name; name=$(basename "$(echo "$cmdline" | awk '{print $2}')" .py)
  local t0=$SECONDS
  # shellcheck disable=SC2086
  timeout --kill-after=10 1200 $cmdline < /dev/null > "$out/bench/$name.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && failed=1
  note "$(printf '%-5s %-40s rc=%-3s %4ss' "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "peer $name" "$rc" $((SECONDS - t0)))"
}

run_smoke() {  # ranks exe
  local t0=$SECONDS
  timeout --kill-after=10 300 mpiexec -n "$1" --oversubscribe --bind-to none "$bundle/bin/$2" --dir "$out" < /dev/null > "$out/tests/smoke.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && grep -q "all checks passed" "$out/tests/smoke.log"; then st=ok; else st=FAIL; failed=1; fi
  note "$(printf '%-5s %-40s rc=%-3s %4ss  %s' "$st" "smoke $(basename "$2").np$1" "$rc" $((SECONDS - t0)) "$(grep -E '^CUDA' "$out/tests/smoke.log" | head -1)")"
}

while IFS=$'\t' read -r kind ranks exe args; do
  [ -n "$only" ] && ! [[ "$exe" =~ $only ]] && continue
  case "$kind" in
    smoke) run_smoke "$ranks" "$exe" ;;
    test) run_test "$ranks" "$exe" ;;
    bench) [ $bench -eq 1 ] && run_bench "$exe" "$args" ;;
    peer) [ $bench -eq 1 ] && run_peer "$args" ;;
  esac
done < "$bundle/manifest.tsv"  # (every command below reads /dev/null: mpiexec would eat the manifest)

note "TOTAL gpu test cases: passed=$total_pass failed=$total_fail skipped=$total_skip; missing libraries: $missing"
# On a machine that has a GPU, a skipped GPU test means the GPU was not usable (driver, libraries):
# that is a failure of this run, not a pass.
if nvidia-smi -L > /dev/null 2>&1 && [ $total_skip -gt 0 ]; then
  note "FAIL: $total_skip GPU test case(s) skipped although nvidia-smi sees a GPU (see tests/*.log)"
  failed=1
fi
[ $failed -eq 0 ] && [ $missing -eq 0 ] && [ $total_fail -eq 0 ]
