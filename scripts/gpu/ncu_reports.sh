#!/usr/bin/env bash
# Renders the Nsight Compute reports a GPU run left and moves them out (device.sh, on the device machine):
#   ncu_reports.sh BENCH_DIR OUT_DIR SUMMARY
# For each BENCH_DIR/NAME.ncu-rep: NAME.details.txt (the details page) and NAME.sass.txt (every instruction of its
# kernels with the warps' stall samples: no disassembler travels back, scripts/gpu/ncu_sass.py) stay in BENCH_DIR,
# the hot spots (NAME.sass_summary.txt) are also appended to SUMMARY, and the report itself moves to OUT_DIR first (the
# device tool brings back files of up to 16 MB each). A report ncu cannot render is named in SUMMARY; the rest go on.
# Each ncu rendering gets NCU_RENDER_TIMEOUT seconds (default 60): a lease's minutes are counted.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: ncu_reports.sh BENCH_DIR OUT_DIR SUMMARY" >&2; exit 2; }
bench=$1 out=$2 summary=$3 limit=${NCU_RENDER_TIMEOUT:-60}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for found in "$bench"/*.ncu-rep; do
  [ -f "$found" ] || continue
  base=${found%.ncu-rep} name=$(basename "$found")
  # moved out first: should the caller be cut short while ncu renders, the report is on its way back already
  mv "$found" "$out/" || { echo "ncu_reports.sh: cannot move $name to $out" >> "$summary"; continue; }
  rep=$out/$name
  timeout "$limit" ncu -i "$rep" --page details > "$base.details.txt" 2>&1 ||
    echo "ncu_reports.sh: no details page from $name (or cut at ${limit} s)" >> "$summary"
  if ! timeout "$limit" ncu -i "$rep" --page source --csv --print-source sass > "$base.source.csv" 2> "$base.source.err"; then
    echo "ncu_reports.sh: no SASS from $name: ncu could not print its source page in ${limit} s (see $(basename "$base").source.err)" >> "$summary"
  elif ! python3 "$here/ncu_sass.py" "$base.source.csv" --listing "$base.sass.txt" > "$base.sass_summary.txt" 2>&1; then
    echo "ncu_reports.sh: no SASS from $name: $(tail -1 "$base.sass_summary.txt")" >> "$summary"
  else
    { echo; echo "SASS hot spots of $name:"; cat "$base.sass_summary.txt"; } >> "$summary"
    rm -f "$base.source.err"
  fi
  rm -f "$base.source.csv"  # the listing holds what matters; the raw page is large
done
