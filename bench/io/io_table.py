#!/usr/bin/python3
"""Markdown table of hpdt-io-bench JSON files: io_table.py run1.json [run2.json ...] > table.md"""
import json
import sys


def main():
    docs = [json.load(open(p)) for p in sys.argv[1:]]
    print("| file | layout | np | kind | transfer | order | MB/s | vs raw | samples/s | wait/wall | fallbacks | cached before | page cache | load avg start / end |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in docs:
        load = f"{d.get('load_average_start', '?')} / {d.get('load_average_end', '?')}"
        cache = d["config"].get("page_cache", "?")
        raw = {}
        for r in d["results"]:
            name = r["file"].rsplit("/", 1)[-1]
            cached = max(r.get("cached_fraction_before", [0]))
            if r["kind"] == "raw":
                raw[r["file"]] = r["MBps_median"]
                cells = ["pread", "seq", f"{r['MBps_median']:.0f}", "1.00", "-", "-", "-"]
            elif r["kind"] == "hdf5":
                cells = [r["transfer"], r["order"], f"{r['MBps_median']:.0f}", f"{r['vs_raw']:.2f}", "-", "-",
                         str(r["independent_fallbacks"])]
            else:
                mbps = r["pipeline_MBps_median"]
                wait = sorted(r["wait_fraction"])[len(r["wait_fraction"]) // 2]
                cells = [r["transfer"], r["order"], f"{mbps:.0f}", f"{mbps / raw[r['file']]:.2f}",
                         f"{r['samples_per_s_median']:.0f}", f"{wait:.2f}", str(r["independent_fallbacks"])]
            print("| " + " | ".join([name, r["layout"], str(r["np"]), r["kind"]] + cells + [f"{cached:.2f}", cache, load]) + " |")


if __name__ == "__main__":
    main()
