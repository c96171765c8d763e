#!/usr/bin/python3
"""Markdown table of hpdt-io-bench JSON files: io_table.py run1.json [run2.json ...] > table.md

"vs raw" is the median over repetitions of (case / the raw read taken just before it) where the
JSON has it (hpdt-io-bench since the block order), else case / the raw row of the same file.
"steady" (reader rows, where the JSON has it): the pipeline after its first batch, ÷ the same raw.
A run with a non-default MPI-IO selection (config "mpiio", e.g. fcoll=individual) says so in "transfer".
"""
import json
import statistics
import sys


def med(v):
    return statistics.median(v) if v else float("nan")


def main():
    docs = [json.load(open(p)) for p in sys.argv[1:]]
    print("MB/s: image bytes of all ranks / slowest rank's wall time, median of the repetitions. \"÷ raw row\": that over "
          "the raw row of the same file and run. \"vs raw\": median over repetitions of (case / the raw read taken just "
          "before it), when the JSON has one (else the same as ÷ raw row). The disk's speed drifts, so both are given. "
          "\"steady\": the reader after its first batch (start-up left out), MB/s and ÷ raw row; \"first\": seconds to the first batch.\n")
    print("| file | layout | np | kind | transfer | order | MB/s | ÷ raw row | vs raw | adjacent raw MB/s | samples/s | wait/wall "
          "| steady MB/s (÷ raw row) | first (s) | ms/batch read (cpu) | ms/batch decode (cpu) | runs/step | fallbacks | cached before | page cache "
          "| load avg start / end |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in docs:
        load = f"{d.get('load_average_start', '?')} / {d.get('load_average_end', '?')}"
        cache = d["config"].get("page_cache", "?")
        mpiio = d["config"].get("mpiio", "default")
        raw = {}
        for r in d["results"]:
            name = r["file"].rsplit("/", 1)[-1]
            cached = max(r.get("cached_fraction_before", [0]))
            adj = f"{med(r['raw_MBps_adjacent']):.0f}" if "raw_MBps_adjacent" in r else "-"
            if r["kind"] == "raw":
                raw[r["file"]] = r["MBps_median"]
                cells = ["pread", "seq", f"{r['MBps_median']:.0f}", "1.00", "1.00", "-", "-", "-", "-", "-", "-", "-", "-", "-"]
            elif r["kind"] == "hdf5":
                cells = [r["transfer"], r["order"], f"{r['MBps_median']:.0f}", f"{r['MBps_median'] / raw[r['file']]:.2f}",
                         f"{r['vs_raw']:.2f}", adj, "-", "-", "-", "-", "-", "-", "-", str(r["independent_fallbacks"])]
            else:
                mbps = r["pipeline_MBps_median"]
                ratio = r.get("vs_raw", mbps / raw[r["file"]])
                wait = med(r["wait_fraction"])
                pb = r.get("per_batch_ms")
                rd = f"{med(pb['read']):.1f} ({med(pb['read_cpu']):.1f})" if pb else "-"
                dc = f"{med(pb['decode']):.1f} ({med(pb['decode_cpu']):.1f})" if pb else "-"
                runs = f"{med(r['runs_per_batch_all_ranks']):.1f}" if "runs_per_batch_all_ranks" in r else "-"
                steady = (f"{r['steady_MBps_median']:.0f} ({r['steady_MBps_median'] / raw[r['file']]:.2f})"
                          if "steady_MBps_median" in r else "-")
                first = f"{med(r['first_batch_seconds']):.2f}" if "first_batch_seconds" in r else "-"
                transfer = r["transfer"] + ("" if mpiio == "default" else f" ({mpiio})")
                cells = [transfer, r["order"], f"{mbps:.0f}", f"{mbps / raw[r['file']]:.2f}", f"{ratio:.2f}", adj,
                         f"{r['samples_per_s_median']:.0f}",
                         f"{wait:.2f}", steady, first, rd, dc, runs, str(r["independent_fallbacks"])]
            print("| " + " | ".join([name, r["layout"], str(r["np"]), r["kind"]] + cells + [f"{cached:.2f}", cache, load]) + " |")


if __name__ == "__main__":
    main()
