#!/usr/bin/env python3
"""Checks hpdt-allreduce-perf's output against the nccl-tests all_reduce_perf layout and its side
files: header, one block per algorithm with the exact nccl-tests column header, 13 fields per data
row with nccl-tests' number formats, #wrong = 0 everywhere, busbw = algbw * 2(p-1)/p, the footer,
the best-per-size summary, and the JSON / CSV / tuning files.

usage: check_allreduce_output.py STDOUT_FILE RANKS ALGOS [--json F] [--csv F] [--tuning F]
"""
import argparse
import csv
import json
import re
import sys

HEAD = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
]
ROW = re.compile(r"^ {0,11}\d+  +\d+  +(float|half|bfloat16)  +(sum|avg)  +-1(  +[\d.]+  +[\d.]+  +[\d.]+  +(\d+|N/A)){2}$")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("ranks", type=int)
    ap.add_argument("algos")
    ap.add_argument("--json")
    ap.add_argument("--csv")
    ap.add_argument("--tuning")
    a = ap.parse_args()
    lines = open(a.out).read().splitlines()
    p = a.ranks
    algos = a.algos.split(",")
    if not lines or not lines[0].startswith("# nThread 1 nGpus 1 minBytes "):
        fail("first line is not the nccl-tests header: %r" % (lines[:1],))
    ranks_listed = [l for l in lines if re.match(r"^#  Rank +\d+ Group  0 Pid +\d+ on ", l)]
    if len(ranks_listed) != p:
        fail(f"expected {p} '#  Rank' device lines, found {len(ranks_listed)}")
    blocks = [i for i, l in enumerate(lines) if l.startswith("# Algorithm: ")]
    names = [lines[i].split()[2] for i in blocks]
    if names != algos:
        fail(f"blocks {names} != requested algorithms {algos}")
    factor = 2.0 * (p - 1) / p
    nrows = 0
    for bi, i in enumerate(blocks):
        if lines[i + 1:i + 4] != HEAD:
            fail(f"block {names[bi]}: column header differs from nccl-tests':\n" + "\n".join(lines[i + 1:i + 4]))
        j = i + 4
        rows = 0
        while j < len(lines) and not lines[j].startswith("#"):
            l = lines[j]
            if not ROW.match(l):
                fail(f"block {names[bi]}: row does not match the nccl-tests format: {l!r}")
            f = l.split()
            if len(f) != 13:
                fail(f"row has {len(f)} fields, not 13: {l!r}")
            for k in (8, 12):
                if f[k] != "0":
                    fail(f"block {names[bi]}: #wrong = {f[k]} in {l!r}")
            for t, alg, bus in ((f[5], f[6], f[7]), (f[9], f[10], f[11])):
                size, tus = int(f[0]), float(t)
                if tus <= 0:
                    fail(f"non-positive time in {l!r}")
                want_alg = size / (tus * 1e-6) / 1e9
                if abs(float(alg) - want_alg) > 0.011 + 0.02 * want_alg:
                    fail(f"algbw {alg} != bytes/time {want_alg:.3f} in {l!r}")
                if abs(float(bus) - float(alg) * factor) > 0.011 + 0.01 * float(bus):
                    fail(f"busbw {bus} != algbw * 2(p-1)/p in {l!r}")
            rows += 1
            j += 1
        if rows == 0:
            fail(f"block {names[bi]} has no rows")
        if not lines[j].startswith("# alpha-beta fit (" + names[bi]):
            fail(f"block {names[bi]}: no alpha-beta fit line after the rows: {lines[j]!r}")
        nrows += rows
    if "# Out of bounds values : 0 OK" not in lines:
        fail("footer 'Out of bounds values : 0 OK' missing")
    if not any(re.match(r"^# Avg bus bandwidth    : [\d.e+-]+ $", l) for l in lines):
        fail("footer 'Avg bus bandwidth' missing or misformatted")
    if "# Best algorithm per size (out-of-place busbw, GB/s)" not in lines:
        fail("best-per-size summary missing")
    if a.json:
        doc = json.load(open(a.json))
        if doc["ranks"] != p or len(doc["hosts"]) != p:
            fail("JSON ranks/hosts wrong")
        if len(doc["results"]) != 2 * nrows:
            fail(f"JSON has {len(doc['results'])} results, expected {2 * nrows}")
        if any(r["wrong"] != 0 for r in doc["results"]):
            fail("JSON has results with wrong != 0")
        for k in ("machine", "build", "load_average", "fits", "best"):
            if k not in doc:
                fail(f"JSON lacks '{k}'")
        for algo in algos:
            if algo not in doc["fits"]:
                fail(f"JSON lacks the fit of {algo}")
    if a.csv:
        rows = list(csv.DictReader(open(a.csv)))
        if len(rows) != 2 * nrows:
            fail(f"CSV has {len(rows)} rows, expected {2 * nrows}")
    if a.tuning:
        t = json.load(open(a.tuning))
        if t.get("format") != "hpdt-allreduce-tuning" or not t.get("entries"):
            fail("tuning file is not in the hpdt-allreduce-tuning format or has no entries")
        mine = [e for e in t["entries"] if e.get("world_size") == p]
        if not mine or mine[0]["min_bytes"] != 0 or mine[-1]["max_bytes"] != 0:
            fail(f"tuning entries for {p} ranks must cover [0, inf): {mine}")
        for x, y in zip(mine, mine[1:]):
            if x["max_bytes"] != y["min_bytes"]:
                fail(f"tuning ranges not contiguous: {x} {y}")
    print(f"check_allreduce_output: {len(blocks)} blocks, {nrows} rows, layout and results OK")


if __name__ == "__main__":
    main()
