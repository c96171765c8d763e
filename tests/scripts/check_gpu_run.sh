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
  bench 0 bench/kernels/hpdt-bench-elementwise "--benchmark_filter=NONE --benchmark_out={out}/bench_fake.json" \
  peer 0 late "true" \
  peer 0 ncu_fake "echo report > {out}/ncu_fake.ncu-rep" \
  prewarm 0 late "sleep 1; echo warmed > {out}/late.warm" \
  prewarm 0 slow_warm "trap '' TERM; sleep 300.$$" > "$w/bundle/manifest.tsv"
# --sanitize through a stand-in for compute-sanitizer (it says which tool and runs the binary with the rest of its
# arguments), a list that gives memcheck two parts of the GPU test and racecheck none (it runs whole)
cat > "$w/sanitizer" <<'EOS'
#!/usr/bin/env bash
tool=$2; shift 6
echo "stand-in sanitizer: $tool $* (HPDT_UNDER_SANITIZER=${HPDT_UNDER_SANITIZER:-unset})"
"$@"; rc=$?
if [ "$tool" = racecheck ] && [ $rc -eq 0 ]; then  # a hazard inside a cuDNN kernel, as on the H200 (2026-11-29)
  echo "========= Error: Race reported between Write access at sm90_xmma_dgrad_kernel__5x_cudnn+0x8c30"
  echo "=========     and Read access at sm90_xmma_dgrad_kernel__5x_cudnn+0xb0a0 [64 hazards]"
  echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings) ($tool)"
  exit 99
fi
echo "========= ERROR SUMMARY: 0 errors ($tool)"
exit $rc
EOS
chmod +x "$w/sanitizer"
printf '%s\n' '# a comment' 'memcheck test_elementwise_cuda ElementwiseCuda.*' 'memcheck test_elementwise_cuda -ElementwiseCuda.*' \
  'memcheck not_in_the_bundle Foo.*' > "$w/sanitize.txt"
# (the deadline leaves the smoke and the GPU test time on a loaded 2-core machine; the slow check outlasts it)
HPDT_SANITIZER=$w/sanitizer HPDT_SANITIZE_LIST=$w/sanitize.txt \
  "$src/scripts/gpu/run.sh" "$w/out" --bundle "$w/bundle" --jobs 3 --deadline 20 --sanitize > "$w/log" 2>&1
rc=$?
cat "$w/log"
fail() { echo "check_gpu_run: $*" >&2; exit 1; }
[ $rc -ne 0 ] || fail "run.sh exited 0 although a check was cut short and two runs did not start"
s=$w/out/summary.txt
grep -qE '^ok +smoke hpdt-smoke.np2' "$s" || fail "no smoke line"
if ! nvidia-smi -L > /dev/null 2>&1; then
  grep -qE '^ok +test_elementwise_cuda +rc=0 +cases=([1-9][0-9]*) +passed=0 +failed=0 +skipped=\1 ' "$s" || fail "the GPU test should be skipped, not passed"
fi
grep -qE '^ok +check fast' "$s" || fail "check fast"
# the listed parts, each with its own log and filter, and racecheck, not listed, on the whole binary
for part in 1 2; do
  grep -qE "^ok +test_elementwise_cuda \[memcheck, part $part/2\] .*ERROR SUMMARY: 0 errors \(memcheck\) \(cases: -?ElementwiseCuda" "$s" ||
    fail "memcheck part $part of 2"
  grep -q -- "--gtest_filter=" "$w/out/tests/test_elementwise_cuda.memcheck.part$part.log" || fail "the log of memcheck part $part"
  grep -q "HPDT_UNDER_SANITIZER=memcheck" "$w/out/tests/test_elementwise_cuda.memcheck.part$part.log" ||
    fail "memcheck part $part: the binary was not told it runs under the sanitizer (HPDT_UNDER_SANITIZER)"
done
# (its one hazard lies inside a cuDNN kernel: ok, and said so; scripts/gpu/vendor_races.sh)
grep -qE '^ok +test_elementwise_cuda \[racecheck\] .*RACECHECK SUMMARY: 1 hazard .*: 1 hazard reports, all inside vendor kernels' "$s" ||
  fail "racecheck, whole, with a hazard inside a vendor kernel only"
grep -q "not_in_the_bundle" "$s" && fail "a listed binary that is not in the bundle ran"
[ "$(grep -c 'test_elementwise_cuda \[memcheck' "$s")" -eq 2 ] || fail "memcheck should run as its two parts only"
grep -qE '^CUT SHORT check slow +rc=124' "$s" || fail "the slow check was not cut at the deadline"
# (a benchmark's line names its output file: one executable serves many entries)
grep -qE '^NOT RUN +bench bench_fake ' "$s" || fail "the benchmark after the deadline, by its output's name"
grep -qE '^NOT RUN +peer late' "$s" || fail "the peer after the deadline"
grep -qE "^NOT RUN +peer ncu_fake" "$s" || fail "the ncu peer after the deadline"
# the prewarms started after the smoke, in the background: the quick one ended (its peer was not run: noted at the
# end), the slow one, deaf to timeout's TERM at the deadline, was killed at the run's end, its processes too
grep -qE '^ok +prewarm late +rc=0' "$s" && [ -s "$w/out/bench/late.warm" ] || fail "the quick prewarm"
grep -qE '^CUT SHORT +prewarm slow_warm +rc=124' "$s" || fail "the slow prewarm was not stopped"
# (its sleep is this run's own, 300.PID seconds: a machine-wide "sleep 300", another shell's, once failed this)
pgrep -f "sleep 300\.$$" > /dev/null && fail "the slow prewarm's process outlived the run"
grep -qE '^TOTAL .*runs failed or cut short: 2; not run \(deadline\): 3' "$s" || fail "totals"
[ -s "$w/out/environment.txt" ] && [ -s "$w/out/libraries.txt" ] || fail "environment.txt / libraries.txt missing"
# A benchmark's line says what else the machine had when it started (the load, and other processes on the GPU):
# a second, short run of the peer alone, after its prewarm.
"$src/scripts/gpu/run.sh" "$w/out2" --bundle "$w/bundle" --only '^late|bench_fake' > "$w/log2" 2>&1 || { cat "$w/log2"; fail "the peer-only run"; }
grep -qE '^ok +bench bench_fake +rc=0 .*hpdt-bench-elementwise\.log' "$w/out2/summary.txt" ||
  { cat "$w/out2/summary.txt"; fail "the benchmark's line, named by its output file"; }
# (and when it started, in seconds after the run's: the order of the next lease is planned from these)
grep -qE '^ok +peer late +rc=0 .*late\.log  \(at [0-9]+s; load at start: load [0-9.]+ [0-9.]+ [0-9.]+' "$w/out2/summary.txt" ||
  { cat "$w/out2/summary.txt"; fail "the benchmark line without its start or the machine's load at its start"; }
# An Nsight Compute peer's report is rendered right after it, inside the run (scripts/gpu/ncu_reports.sh render),
# by a stand-in ncu here: its details page, and its source page refused
mkdir -p "$w/fakebin"
printf '%s\n' '#!/bin/sh' '[ "$4" = details ] && { echo "details of $2"; exit 0; }' 'echo "no source" >&2; exit 1' > "$w/fakebin/ncu"
chmod +x "$w/fakebin/ncu"
PATH=$w/fakebin:$PATH NCU_RENDER_TIMEOUT=5 "$src/scripts/gpu/run.sh" "$w/out4" --bundle "$w/bundle" --only '^ncu_fake' > "$w/log4" 2>&1 ||
  { cat "$w/log4"; fail "the ncu peer's run"; }
grep -q "details of .*ncu_fake.ncu-rep" "$w/out4/bench/ncu_fake.details.txt" 2>/dev/null &&
  grep -q "no SASS from ncu_fake.ncu-rep: ncu could not print its source page" "$w/out4/summary.txt" ||
  { cat "$w/out4/summary.txt"; fail "the ncu peer's report was not rendered inside run.sh"; }
# --no-tests --no-bench --sanitize: the sanitizer runs alone (a lease's second call), no smoke, no plain test runs
HPDT_SANITIZER=$w/sanitizer HPDT_SANITIZE_LIST=$w/sanitize.txt \
  "$src/scripts/gpu/run.sh" "$w/out3" --bundle "$w/bundle" --jobs 3 --deadline 40 --no-tests --no-bench --sanitize > "$w/log3" 2>&1 ||
  { cat "$w/log3"; fail "the sanitizer-only run"; }
s3=$w/out3/summary.txt
grep -qE 'smoke|check fast|^ok +test_elementwise_cuda +rc=' "$s3" && { cat "$s3"; fail "--no-tests ran a plain test, check or the smoke"; }
[ "$(grep -cE '^ok +test_elementwise_cuda \[(memcheck, part [12]/2|racecheck)\]' "$s3")" -eq 3 ] ||
  { cat "$s3"; fail "--no-tests: the three sanitizer runs"; }
# A peer whose prewarm is still running at its turn waits while the entries after it run (the GPU idled through
# torch.compile's compilation before): here the prewarm takes 3 s, the next peer 5, so the peer runs right after that
# one, before the last.
mkdir -p "$w/bundle5"
ln -s "$w/bundle/bin" "$w/bundle5/bin"
printf '%s\t%s\t%s\t%s\n' \
  prewarm 0 warm_first "sleep 3" \
  peer 0 warm_first "echo ran > {out}/warm_first.ran" \
  peer 0 meanwhile "sleep 5" \
  peer 0 last "true" > "$w/bundle5/manifest.tsv"
"$src/scripts/gpu/run.sh" "$w/out5" --bundle "$w/bundle5" --no-tests > "$w/log5" 2>&1 || { cat "$w/log5"; fail "the run with a late prewarm"; }
order=$(grep -oE '^(LATER|ok) +(peer|prewarm) [a-z_]+' "$w/out5/summary.txt" | sed -E 's/ +/ /g' | paste -sd, -)
[ "$order" = "LATER peer warm_first,ok peer meanwhile,ok prewarm warm_first,ok peer warm_first,ok peer last" ] &&
  [ -s "$w/out5/bench/warm_first.ran" ] || { cat "$w/out5/summary.txt"; fail "the late prewarm's peer: order $order"; }
echo "PASS: run.sh phases, deadline and totals"
