#!/usr/bin/env python3
"""Checks hpdt-allreduce-perf's output against the nccl-tests all_reduce_perf layout and its side
files: header, one block per algorithm with the exact nccl-tests column header, 13 fields per data
row with nccl-tests' number formats, #wrong = 0 everywhere, busbw = algbw * 2(p-1)/p, the footer,
the best-per-size summary, and the JSON / CSV / tuning files.

With --compress LIST: one block per (compression, algorithm) in that order; compressed blocks carry
two more columns (wire bytes per rank, compression ratio against ring's 2(p-1)/p * size), and from
--wire-smaller-from BYTES on every compressed row must send fewer bytes than uncompressed ring
(ratio > 1). The best-per-size summary and the JSON's "best" use uncompressed rows only. With --device
cuda a compression is two blocks, "on: device" (comm::DeviceCompressor) then "on: host mirror", and the JSON's
compress_on says which.

usage: check_allreduce_output.py STDOUT_FILE RANKS ALGOS [--compress LIST] [--wire-smaller-from B]
                                 [--device cpu|cuda] [--json F] [--csv F] [--tuning F]
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
WIRE_HEAD = ["          wire   ratio", "      (B/rank)        "]
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
    ap.add_argument("--compress", default="none")
    ap.add_argument("--wire-smaller-from", type=int, default=None)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a = ap.parse_args()
    lines = open(a.out).read().splitlines()
    p = a.ranks
    algos = a.algos.split(",")
    compresses = []  # ",noef" belongs to the method before it, as in the tool
    for c in a.compress.split(","):
        if c == "noef" and compresses:
            compresses[-1] += ",noef"
        elif c:
            compresses.append(c)
    def places(c):  # where the tool runs a compression (its `places`)
        if c == "none":
            return ["none"]
        if a.device == "cpu":
            return ["host"]
        return ["device", "host mirror"]

    want_blocks = [(al, c, on) for c in compresses for al in algos for on in places(c)]
    if not lines or not lines[0].startswith("# nThread 1 nGpus 1 minBytes "):
        fail("first line is not the nccl-tests header: %r" % (lines[:1],))
    ranks_listed = [l for l in lines if re.match(r"^#  Rank +\d+ Group  0 Pid +\d+ on ", l)]
    if len(ranks_listed) != p:
        fail(f"expected {p} '#  Rank' device lines, found {len(ranks_listed)}")
    blocks = [i for i, l in enumerate(lines) if l.startswith("# Algorithm: ")]
    got_blocks = []
    for i in blocks:
        m = re.match(r"^# Algorithm: (\S+)(?:  compress: (\S+))?(?:  on: (device|host mirror))?$", lines[i])
        if not m:
            fail(f"malformed block line {lines[i]!r}")
        c = m.group(2) or "none"
        got_blocks.append((m.group(1), c, m.group(3) or ("none" if c == "none" else "host")))
    if got_blocks != want_blocks:
        fail(f"blocks {got_blocks} != requested (algorithm, compression, place) {want_blocks}")
    names = [al if c == "none" else f"{al}+{c}" + ("" if on == "host" else f" on {on}") for al, c, on in got_blocks]
    factor = 2.0 * (p - 1) / p
    nrows = 0
    for bi, i in enumerate(blocks):
        compressed = got_blocks[bi][1] != "none"
        head = HEAD if not compressed else [HEAD[0], HEAD[1] + WIRE_HEAD[0], HEAD[2] + WIRE_HEAD[1]]
        if lines[i + 1:i + 4] != head:
            fail(f"block {names[bi]}: column header differs from the expected one:\n" + "\n".join(lines[i + 1:i + 4]))
        j = i + 4
        if compressed and j < len(lines) and lines[j].startswith("# #wrong: "):
            j += 1  # what #wrong checks in this block
        rows = 0
        while j < len(lines) and not lines[j].startswith("#"):
            l = lines[j]
            if compressed:
                m = re.match(r"^(.*?)  +(\d+)  +([\d.]+)$", l)
                if not m:
                    fail(f"block {names[bi]}: compressed row lacks the wire/ratio columns: {l!r}")
                l, wire, ratio = m.group(1), int(m.group(2)), float(m.group(3))
                size = int(l.split()[0])
                ring = factor * size
                want_ratio = ring / wire if wire > 0 else 0.0
                if abs(ratio - want_ratio) > 0.006 + 0.001 * want_ratio:
                    fail(f"block {names[bi]}: ratio {ratio} != 2(p-1)/p*size/wire {want_ratio:.3f} in {lines[j]!r}")
                if a.wire_smaller_from is not None and size >= a.wire_smaller_from and p > 1 and not wire < ring:
                    fail(f"block {names[bi]}: {wire} wire bytes not below ring's uncompressed {ring:.0f} at {size} B")
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
    if "none" in compresses and not any(l.startswith("# Best algorithm per size (busbw from the mean time per operation") for l in lines):
        fail("best-per-size summary missing")
    doc = json.load(open(a.json)) if a.json else None
    if a.json:
        if doc["ranks"] != p or len(doc["hosts"]) != p:
            fail("JSON ranks/hosts wrong")
        if len(doc["results"]) != 2 * nrows:
            fail(f"JSON has {len(doc['results'])} results, expected {2 * nrows}")
        if any(r["wrong"] != 0 for r in doc["results"]):
            fail("JSON has results with wrong != 0")
        for k in ("machine", "build", "load_average", "fits", "best"):
            if k not in doc:
                fail(f"JSON lacks '{k}'")
        for key in names:
            if key not in doc["fits"]:
                fail(f"JSON lacks the fit of {key}")
        for r in doc["results"]:
            for k in ("wire_bytes", "compression_ratio", "mean_us"):
                if k not in r:
                    fail(f"JSON result lacks '{k}': {r}")
            if r["compress"] != "none" and r["bytes"] > 0 and p > 1 and not r["wire_bytes"] > 0:
                fail(f"JSON: compressed result without wire bytes: {r}")
            if r.get("compress_on") not in places(r["compress"]):
                fail(f"JSON result's compress_on is not one of {places(r['compress'])}: {r}")
        for al, c, on in got_blocks:  # a block's rows carry its place
            if not any(r["algo"] == al and r["compress"] == c and r["compress_on"] == on for r in doc["results"]):
                fail(f"JSON has no results of the block ({al}, {c}, on {on})")
        if "none" in compresses:
            sizes = sorted({r["bytes"] for r in doc["results"] if r["bytes"] > 0})
            # the summary's busbw: from the mean time per operation over both placements' timed loops
            bw = {}
            for x in algos:
                for sz in sizes:
                    mine = [r for r in doc["results"] if r["algo"] == x and r["bytes"] == sz and r["compress"] == "none"]
                    if len(mine) != 2 or not all(r["mean_us"] > 0 for r in mine):
                        fail(f"JSON: {x} at {sz} B needs an out-of-place and an in-place row with mean_us > 0: {mine}")
                    mean_s = sum(r["mean_us"] for r in mine) / 2 * 1e-6
                    bw[(x, sz)] = sz / mean_s / 1e9 * 2 * (p - 1) / p
                    for r in mine:  # a mean over loops is never below their fastest, the median's neighbour
                        if r["mean_us"] < 0.5 * r["time_us"]:
                            fail(f"JSON: mean_us far below the median time_us: {r}")
            if doc.get("best_basis", "").find("mean time per operation") < 0:
                fail(f"JSON best_basis missing or not the mean time per operation: {doc.get('best_basis')}")
            for b in doc["best"]:
                if b["algo"] not in algos or b["bytes"] not in sizes:
                    fail(f"JSON best entry not an uncompressed algorithm: {b}")
                if abs(bw[(b["algo"], b["bytes"])] - b["busbw_GBps"]) > 1e-9 * max(1.0, b["busbw_GBps"]):
                    fail(f"JSON best entry's busbw is not its algorithm's mean over both placements: {b}")
                if p > 1 and any(bw[(x, b["bytes"])] > b["busbw_GBps"] * (1 + 1e-12) for x in algos if x != "auto"):
                    fail(f"JSON best entry is not the fastest by the mean: {b}")
                if "auto" in algos:  # what auto resolves to, and that algorithm's own busbw over the best
                    who = b.get("auto_algo")
                    if not who:
                        fail(f"JSON best entry lacks auto_algo: {b}")
                    want = bw[(who, b["bytes"])] / b["busbw_GBps"] if (who, b["bytes"]) in bw else None
                    got = b.get("auto_algo_over_best")
                    if (want is None) != (got is None) or (want is not None and abs(got - want) > 1e-9):
                        fail(f"JSON best entry: auto_algo_over_best {got}, expected {want}: {b}")
            # the tuned choice: among the algorithms within 10 % of the size's best busbw, the one whose
            # alpha-beta fit predicts the shortest time at that size (model_us of the out-of-place row)
            cands = [x for x in algos if x != "auto"]
            model = {(r["algo"], r["bytes"]): r["model_us"] for r in doc["results"]
                     if r["compress"] == "none" and not r["in_place"]}
            for i, b in enumerate(doc["best"]):
                top = max(bw.get((x, sizes[i]), -1) for x in cands)
                near = [x for x in cands if top > 0 and bw.get((x, sizes[i]), -1) >= 0.9 * top]
                want = min(near, key=lambda x: (model[(x, sizes[i])], cands.index(x)))
                if b.get("tuned_algo") != want:
                    fail(f"JSON best entry at {b['bytes']} B: tuned_algo {b.get('tuned_algo')}, expected {want}")
    if a.csv:
        rows = list(csv.DictReader(open(a.csv)))
        if len(rows) != 2 * nrows:
            fail(f"CSV has {len(rows)} rows, expected {2 * nrows}")
        if rows and not {"wire_bytes", "compression_ratio"} <= set(rows[0]):
            fail("CSV lacks the wire_bytes / compression_ratio columns")
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
        if doc is not None and "best" in doc:
            for b in doc["best"]:
                hit = [e for e in mine if e["min_bytes"] <= b["bytes"] and (e["max_bytes"] == 0 or b["bytes"] < e["max_bytes"])]
                if len(hit) != 1 or hit[0]["algorithm"] != b["tuned_algo"]:
                    fail(f"tuning file gives {hit} at {b['bytes']} B, the tuned choice is {b['tuned_algo']}")
    print(f"check_allreduce_output: {len(blocks)} blocks, {nrows} rows, layout and results OK")


if __name__ == "__main__":
    main()
