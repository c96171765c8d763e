#!/usr/bin/env bash
# usage: check_gpu_run.sh SOURCE_DIR BUILD_DIR
# scripts/gpu/run.sh on a bundle whose bin/ is this build tree and whose manifest is small: the phases
# run, a GPU test without a GPU shows as skipped (never passed), a check past the deadline is CUT SHORT,
# what would start after it is NOT RUN, and the exit code says the run was incomplete. (On the GPU
# machine run.sh gets one chance per lease: its bookkeeping is checked here.)
set -uo pipefail
src=$1 build=$2
w=$(mktemp -d /tmp/hpdt-gpu-run-test.XXXXXX)
trap 'rm -rf "$w"' EXIT
for exe in apps/smoke/hpdt-smoke tests/kernels/test_elementwise_cuda bench/kernels/hpdt-bench-elementwise; do
  mkdir -p "$w/bundle/bin/$(dirname "$exe")"
  ln -s "$build/$exe" "$w/bundle/bin/$exe"
done
printf '%s\t%s\t%s\t%s\n' \
  smoke 2 apps/smoke/hpdt-smoke "" \
  test 0 tests/kernels/test_elementwise_cuda "" \
  check 0 fast "echo fine" \
  check 0 slow "sleep 120" \
  bench 0 bench/kernels/hpdt-bench-elementwise "--benchmark_filter=NONE" \
  peer 0 late "true" > "$w/bundle/manifest.tsv"
# (the deadline leaves the smoke and the GPU test time on a loaded 2-core machine; the slow check outlasts it)
"$src/scripts/gpu/run.sh" "$w/out" --bundle "$w/bundle" --jobs 3 --deadline 20 > "$w/log" 2>&1
rc=$?
cat "$w/log"
fail() { echo "check_gpu_run: $*" >&2; exit 1; }
[ $rc -ne 0 ] || fail "run.sh exited 0 although a check was cut short and two runs did not start"
s=$w/out/summary.txt
grep -qE '^ok +smoke hpdt-smoke.np2' "$s" || fail "no smoke line"
if ! nvidia-smi -L > /dev/null 2>&1; then
  grep -qE '^ok +test_elementwise_cuda +rc=0 +cases=6 +passed=0 +failed=0 +skipped=6' "$s" || fail "the GPU test should be skipped, not passed"
fi
grep -qE '^ok +check fast' "$s" || fail "check fast"
grep -qE '^CUT SHORT check slow +rc=124' "$s" || fail "the slow check was not cut at the deadline"
grep -qE '^NOT RUN +bench bench/kernels/hpdt-bench-elementwise' "$s" || fail "the benchmark after the deadline"
grep -qE '^NOT RUN +peer late' "$s" || fail "the peer after the deadline"
grep -qE '^TOTAL .*runs failed or cut short: 1; not run \(deadline\): 2' "$s" || fail "totals"
[ -s "$w/out/environment.txt" ] && [ -s "$w/out/libraries.txt" ] || fail "environment.txt / libraries.txt missing"
echo "PASS: run.sh phases, deadline and totals"
