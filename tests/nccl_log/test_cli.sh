#!/usr/bin/env bash
# The hpdt-nccl-log CLI: exit codes and messages on good, bad and empty input.
#   test_cli.sh HPDT_NCCL_LOG CORPUS_DIR
set -u
bin=$1 corpus=$2 src=${3:-}
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect NAME WANT_RC PATTERN -- command...
  local name=$1 want=$2 pat=$3; shift 4
  "$@" > "$tmp/out" 2>&1; local rc=$?
  if [ "$rc" != "$want" ] || ! grep -qE -- "$pat" "$tmp/out"; then
    echo "FAIL $name: rc=$rc (want $want), pattern '$pat'"; sed 's/^/  | /' "$tmp/out" | head -20; fail=1
  else
    echo "ok   $name"
  fi
}
printf 'hello\nno nccl here\n' > "$tmp/plain.txt"
expect missing-file 1 "cannot read '.*nope.log': no such file" -- "$bin" report "$tmp/nope.log"
expect directory    1 "is a directory"                         -- "$bin" report "$tmp"
expect non-nccl     2 "no NCCL debug lines found"             -- "$bin" report "$tmp/plain.txt"
expect no-args      1 "no input"                               -- "$bin" report
expect bad-flag     109 "not expected|following argument"     -- "$bin" report --bogus x
if [ "$(id -u)" != 0 ]; then
  printf 'x\n' > "$tmp/locked.log"; chmod 000 "$tmp/locked.log"
  expect unreadable 1 "cannot open '.*locked.log'" -- "$bin" report "$tmp/locked.log"
fi
expect env 0 "export NCCL_DEBUG_FILE='/scratch/x/nccl.%h.%p.log'" -- env -u NCCL_DEBUG_FILE "$bin" env /scratch/x
line='h:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 1 cudaDev 0 busId 1000 - Init COMPLETE'
expect stdin 0 "ranks        : 1" -- bash -c "echo '$line' | '$bin' report -"
mkdir "$tmp/dir" && echo "$line" > "$tmp/dir/nccl.h.1.log"
expect dir-option 0 "Communicator" -- "$bin" report --dir "$tmp/dir" --json-out "$tmp/r.json" --dot "$tmp/r.dot"
grep -q '"schema": "hpdt-nccl-log/1"' "$tmp/r.json" || { echo "FAIL json-out"; fail=1; }
grep -q '^digraph nccl' "$tmp/r.dot" || { echo "FAIL dot"; fail=1; }
# the job scripts' end-of-job hook (jobscripts/lib/common.sh): report into $HPDT_OUT/nccl, twice
if [ -n "$src" ] && [ -f "$src/jobscripts/lib/common.sh" ]; then
  mkdir -p "$tmp/job/nccl" && echo "$line" > "$tmp/job/nccl/nccl.h.1.log"
  for pass in 1 2; do
    expect job-hook-$pass 0 "NCCL report: .*nccl-report.txt \(0 diagnoses\)" -- bash -c \
      ". '$src/jobscripts/lib/common.sh' && HPDT_OUT='$tmp/job' HPDT_BUILD=/nonexistent PATH='$(dirname "$bin")':\$PATH hpdt_nccl_report"
    grep -q "Communicator" "$tmp/job/nccl/nccl-report.txt" || { echo "FAIL job-hook-$pass: no report"; fail=1; }
    grep -q '"sources": \[' "$tmp/job/nccl/nccl-report.json" && [ "$(grep -c nccl.h.1.log "$tmp/job/nccl/nccl-report.json")" = 1 ] \
      || { echo "FAIL job-hook-$pass: JSON should list the one log only"; fail=1; }
    rm -f "$tmp/job/nccl/nccl-report.json"  # pass 2 runs the report again (over the logs only)
  done
fi
if [ -d "$corpus" ]; then
  expect corpus-014-json 0 '"id": "0xb4d6ac1c5ff8674d"' -- "$bin" report --json "$corpus"/014_*.log
  expect corpus-022 2 "remote-error" -- "$bin" report "$corpus"/022_*.log
  expect corpus-all 0 "Communicator" -- "$bin" report "$corpus"/0*.log
  if command -v dot > /dev/null; then
    expect png 0 "Communicator" -- "$bin" report --png "$tmp/r.png" "$corpus"/014_*.log
    [ -s "$tmp/r.png" ] && head -c 8 "$tmp/r.png" | grep -q PNG || { echo "FAIL png not written"; fail=1; }
  else
    echo "skip png: graphviz dot not installed"
  fi
else
  echo "skip corpus cases: $corpus not found"
fi
exit $fail
