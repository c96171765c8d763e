#!/usr/bin/env bash
# Every job script and helper under jobscripts/ parses (bash -n), and, where shellcheck is installed,
# has no shellcheck errors (severity error only: the scripts split HPDT_*_ARGS on purpose).
#   usage: check_job_syntax.sh JOBSCRIPTS_DIR
set -uo pipefail
dir=$1 fail=0 n=0
while IFS= read -r f; do
  n=$((n + 1))
  if ! out=$(bash -n "$f" 2>&1); then echo "FAIL $f: $out"; fail=1; continue; fi
  if command -v shellcheck >/dev/null; then
    if ! out=$(shellcheck -s bash -S error "$f" 2>&1); then echo "FAIL $f (shellcheck):"; echo "$out"; fail=1; continue; fi
  fi
  echo "ok   $f"
done < <(find "$dir" -type f \( -name '*.sh' -o -name '*.sbatch' -o -name '*.pbs' \) | sort)
[ "$n" -gt 0 ] || { echo "no job scripts found under $dir"; exit 1; }
command -v shellcheck >/dev/null || echo "note: shellcheck not installed; checked with bash -n only"
exit $fail
