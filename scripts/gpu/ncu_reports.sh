#!/usr/bin/env bash
# The Nsight Compute reports of a GPU run: rendered into text beside them, and packed into one archive that comes back.
#   ncu_reports.sh render BENCH_DIR SUMMARY            (run.sh, right after each ncu_* benchmark line)
#   ncu_reports.sh BENCH_DIR OUT_DIR SUMMARY           (device.sh, at the end: archive, render the rest, clear)
# render: for each BENCH_DIR/NAME.ncu-rep not rendered yet (no NAME.details.txt): NAME.details.txt (the details page)
#   and NAME.sass.txt (every instruction of its kernels with the warps' stall samples: no disassembler travels back,
#   scripts/gpu/ncu_sass.py) beside it, and its hot spots (NAME.sass_summary.txt) appended to SUMMARY. A report ncu
#   cannot render is named in SUMMARY; the rest go on. Each ncu rendering gets NCU_RENDER_TIMEOUT seconds (default
#   60): a lease's minutes are counted, and run.sh renders each report inside its deadline, so that none waits for
#   the end of the call.
# The three-argument form first packs the reports into OUT_DIR/ncu-reports.tar, so that they come back even if a
#   rendering is cut short. One file: the device tool brings back 8 files at most (summary.txt and gpu-results.tgz
#   among them), 16 MiB each; so reports go in by name until the archive would pass NCU_ARCHIVE_MAX_BYTES (default
#   15 MiB), and those left out are named in SUMMARY (their rendered pages still come back). Then it renders what is
#   left and removes the reports from BENCH_DIR.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
limit=${NCU_RENDER_TIMEOUT:-60} max=${NCU_ARCHIVE_MAX_BYTES:-15728640}

render() {  # bench summary
  local bench=$1 summary=$2 found base name
  for found in "$bench"/*.ncu-rep; do
    [ -f "$found" ] || continue
    base=${found%.ncu-rep} name=$(basename "$found")
    [ -f "$base.details.txt" ] && continue
    timeout "$limit" ncu -i "$found" --page details > "$base.details.txt" 2>&1 ||
      echo "ncu_reports.sh: no details page from $name (or cut at ${limit} s)" >> "$summary"
    if ! timeout "$limit" ncu -i "$found" --page source --csv --print-source sass > "$base.source.csv" 2> "$base.source.err"; then
      echo "ncu_reports.sh: no SASS from $name: ncu could not print its source page in ${limit} s (see $(basename "$base").source.err)" >> "$summary"
    elif ! python3 "$here/ncu_sass.py" "$base.source.csv" --listing "$base.sass.txt" > "$base.sass_summary.txt" 2>&1; then
      echo "ncu_reports.sh: no SASS from $name: $(tail -1 "$base.sass_summary.txt")" >> "$summary"
    else
      { echo; echo "SASS hot spots of $name:"; cat "$base.sass_summary.txt"; } >> "$summary"
      rm -f "$base.source.err"
    fi
    rm -f "$base.source.csv"  # the listing holds what matters; the raw page is large
  done
}

archive() {  # bench out summary
  local bench=$1 archive=$2/ncu-reports.tar summary=$3 size=1024 found name need
  rm -f "$archive"
  # size: the archive's end, two zero blocks (512-byte records, -b 1: no padding to tar's default 10 KiB)
  for found in "$bench"/*.ncu-rep; do
    [ -f "$found" ] || continue
    name=$(basename "$found")
    need=$(( size + 512 + ($(stat -c %s "$found") + 511) / 512 * 512 ))  # a header and the size in whole blocks
    if [ "$need" -gt "$max" ]; then
      echo "ncu_reports.sh: $name left out of ncu-reports.tar (it would pass $max bytes); its rendered pages still come back" >> "$summary"
      continue
    fi
    if [ -f "$archive" ]; then tar -b 1 -rf "$archive" -C "$bench" "$name"; else tar -b 1 -cf "$archive" -C "$bench" "$name"; fi &&
      size=$need || echo "ncu_reports.sh: cannot add $name to ncu-reports.tar" >> "$summary"
  done
}

if [ $# -eq 3 ] && [ "$1" = render ]; then
  render "$2" "$3"
elif [ $# -eq 3 ]; then
  archive "$1" "$2" "$3"
  render "$1" "$3"
  rm -f "$1"/*.ncu-rep
else
  echo "usage: ncu_reports.sh render BENCH_DIR SUMMARY | ncu_reports.sh BENCH_DIR OUT_DIR SUMMARY" >&2
  exit 2
fi
