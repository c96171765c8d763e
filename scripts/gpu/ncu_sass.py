#!/usr/bin/env python3
"""The machine code of the profiled kernels and where their warps stalled, from Nsight Compute's source page.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > REPORT.source.csv
    ncu_sass.py REPORT.source.csv [--listing FILE] [--top N]

No disassembler travels to the development machines (docs/gpu-machine.md), so this is how the SASS of our kernels
comes back from a lease: device.sh runs it on every report. It prints, per kernel (the most-sampled of its profiled
launches): its size in SASS instructions, the warp instructions it executed, its stall samples by reason, the
executed instructions by opcode, its loops (from its backward branches: which hold the samples, which hold the
MMAs, and how much runs outside every loop: a GEMM's k loop against its prologue and epilogue), and its hottest
instructions (share of the samples, their main stall reason, the instruction). --listing writes every instruction of every kernel: address, times executed, samples, SASS.

The CSV's column names differ between Nsight Compute versions; the ones read: "Address" and "Source" (the header
row), "Instructions Executed" (or "Warp Instructions Executed"), the samples ("Warp Stall Sampling (All Samples)",
or "# Samples"), and the stall reasons ("stall_*" or "smsp__pcsamp_warps_issue_stalled_*"). A kernel's rows follow a
"Kernel Name" (or "Function Name") row. Exit status 2, with a message naming the file, when it holds no SASS rows.
"""
import argparse
import csv
import re
import sys

EXECUTED = ("Instructions Executed", "Warp Instructions Executed")
SAMPLES = ("Warp Stall Sampling (All Samples)", "# Samples", "Sampling Data (All)")
STALL_PREFIXES = ("smsp__pcsamp_warps_issue_stalled_", "stall_")
PREDICATE = re.compile(r"^@!?\w+\s+")


class Kernel:
    def __init__(self, name):
        self.name = name
        self.rows = []  # (address, executed, samples, {reason: samples}, source)
        self.labels = {}  # label (".L_x_3") -> index in rows of the instruction it names
        self.launches = 1

    @property
    def samples(self):
        return sum(r[2] for r in self.rows)

    @property
    def executed(self):
        return sum(r[1] for r in self.rows)


def number(text):
    text = (text or "").strip().replace(",", "")
    if text in ("", "-", "n/a"):
        return 0
    try:
        return int(float(text))
    except ValueError:
        return 0


def reason_name(column):
    for p in STALL_PREFIXES:
        if column.startswith(p):
            return column[len(p):]
    return column


def opcode(source):
    s = PREDICATE.sub("", source.strip())
    if not s or s.endswith(":"):
        return None
    return s.split(None, 1)[0].split(".", 1)[0]


def parse(lines):
    """Kernels in file order, one per profiled launch."""
    kernels, current, header = [], None, None
    for row in csv.reader(lines):
        if not row or not any(c.strip() for c in row):
            continue
        first = row[0].strip()
        if first in ("Kernel Name", "Function Name"):
            current = Kernel(row[1].strip() if len(row) > 1 else "?")
            kernels.append(current)
            header = None
            continue
        if "Source" in row and "Address" in row:
            header = row
            cols = {name: i for i, name in enumerate(row)}
            ex = next((cols[c] for c in EXECUTED if c in cols), None)
            sa = next((cols[c] for c in SAMPLES if c in cols), None)
            stalls = [(reason_name(c), i) for i, c in enumerate(row)
                      if c.startswith(STALL_PREFIXES) and not c.endswith("_not_issued")]
            addr, src = cols["Address"], len(row) - 1 - row[::-1].index("Source")  # SASS: the last "Source"
            if current is None:
                current = Kernel("(unnamed kernel)")
                kernels.append(current)
            continue
        if header is None or len(row) != len(header):
            continue
        source = row[src]
        if opcode(source) is None:
            label = source.strip()
            if label.endswith(":"):
                current.labels[label[:-1]] = len(current.rows)
            continue
        current.rows.append((row[addr].strip(), number(row[ex]) if ex is not None else 0,
                             number(row[sa]) if sa is not None else 0,
                             {r: number(row[i]) for r, i in stalls}, source.strip()))
    return [k for k in kernels if k.rows]


MMA_OPS = ("HGMMA", "HMMA", "QGMMA", "IMMA")
TARGET = re.compile(r"(\.L\w+)|\b(0x[0-9a-fA-F]+)\s*(?:\)|`|$)")


def loops(k):
    """The kernel's loops, from its backward branches: (first, last) instruction indices, a branch at `last`
    to `first` <= last. Targets are labels (.L_x_N) or addresses."""
    by_address = {}
    for i, r in enumerate(k.rows):
        try:
            by_address[int(r[0], 16)] = i
        except ValueError:
            pass
    found = set()
    for i, r in enumerate(k.rows):
        if opcode(r[4]) not in ("BRA", "JMP"):
            continue
        rest = PREDICATE.sub("", r[4]).split(None, 1)
        m = TARGET.search(rest[1]) if len(rest) > 1 else None
        if not m:
            continue
        j = k.labels.get(m.group(1)) if m.group(1) else by_address.get(int(m.group(2), 16))
        if j is not None and j <= i:
            found.add((j, i))
    return sorted(found)


def loop_lines(k, total_samples, total_executed, out, top=4):
    """The loops that hold the most samples, and what runs outside every loop."""
    ls = loops(k)
    if not ls:
        return
    def share(v, total):
        return f"{100.0 * v / total:.0f}%" if total else "-"
    stats = []
    inside = set()
    for a, b in ls:
        rows = k.rows[a:b + 1]
        inside.update(range(a, b + 1))
        mma = any(opcode(r[4]) in MMA_OPS for r in rows)
        stats.append((sum(r[2] for r in rows), sum(r[1] for r in rows), a, b, mma))
    print(f"  loops (backward branches; {len(ls)} in all), most-sampled first:", file=out)
    for smp, ex, a, b, mma in sorted(stats, key=lambda x: (-x[0], -x[1]))[:top]:
        print(f"    {k.rows[a][0]}..{k.rows[b][0]}: {b - a + 1} instructions{', MMAs' if mma else ''}; "
              f"{share(smp, total_samples)} of the samples, {share(ex, total_executed)} of the executed", file=out)
    out_s = sum(r[2] for i, r in enumerate(k.rows) if i not in inside)
    out_e = sum(r[1] for i, r in enumerate(k.rows) if i not in inside)
    print(f"    outside every loop: {len(k.rows) - len(inside)} instructions; {share(out_s, total_samples)} of the "
          f"samples, {share(out_e, total_executed)} of the executed", file=out)


def distinct(kernels):
    """One entry per kernel name, in order of first appearance: the launch with the most samples (the last of equals),
    with the number of launches profiled."""
    best, count = {}, {}
    for k in kernels:
        count[k.name] = count.get(k.name, 0) + 1
        if k.name not in best or k.samples >= best[k.name].samples:
            best[k.name] = k
    for name, k in best.items():
        k.launches = count[name]
    return list(best.values())


def short(name, width=150):
    return name if len(name) <= width else name[:width - 3] + "..."


def shares(counter, total, top):
    items = sorted(((v, k) for k, v in counter.items() if v > 0), reverse=True)[:top]
    return ", ".join(f"{k} {100.0 * v / total:.0f}%" for v, k in items) if total else "none"


def summarize(k, top, out):
    n = len(k.rows)
    total_samples, total_executed = k.samples, k.executed
    print(f"kernel: {short(k.name)}" + (f"  (profiled {k.launches} times; the most-sampled shown)"
                                         if k.launches > 1 else ""), file=out)
    print(f"  SASS: {n:,} instructions ({n * 16 / 1024:.0f} KiB); executed {total_executed:,} warp instructions; "
          f"{total_samples:,} stall samples", file=out)
    reasons = {}
    for r in k.rows:
        for name, v in r[3].items():
            reasons[name] = reasons.get(name, 0) + v
    print(f"  stall reasons: {shares(reasons, sum(reasons.values()), 8)}", file=out)
    by_op = {}
    for r in k.rows:
        op = opcode(r[4])
        by_op[op] = by_op.get(op, 0) + r[1]
    print(f"  executed by opcode: {shares(by_op, total_executed, 10)}", file=out)
    loop_lines(k, total_samples, total_executed, out)
    if total_samples:
        print(f"  hottest instructions (share of the samples, main stall reason):", file=out)
        for r in sorted(k.rows, key=lambda r: -r[2])[:top]:
            if r[2] == 0:
                break
            main = max(r[3].items(), key=lambda kv: kv[1]) if r[3] else None
            why = f"{main[0]} {100.0 * main[1] / r[2]:.0f}%" if main and main[1] else ""
            print(f"    {r[0]:>8} {100.0 * r[2] / total_samples:5.1f}%  {why:<28} {r[4]}", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--listing", help="write every instruction of every kernel here")
    ap.add_argument("--top", type=int, default=15, help="hottest instructions per kernel (default 15)")
    args = ap.parse_args(argv)
    try:
        with open(args.csv, newline="", errors="replace") as f:
            kernels = distinct(parse(f))
    except OSError as e:
        print(f"ncu_sass.py: cannot read {args.csv}: {e.strerror}", file=sys.stderr)
        return 2
    if not kernels:
        print(f"ncu_sass.py: {args.csv} holds no SASS rows (expected ncu --page source --csv --print-source sass "
              f"output: a header row with \"Address\" and \"Source\")", file=sys.stderr)
        return 2
    for k in kernels:
        summarize(k, args.top, sys.stdout)
    if args.listing:
        with open(args.listing, "w") as out:
            for k in kernels:
                print(f"# kernel: {k.name}", file=out)
                print(f"# {'address':>8} {'executed':>12} {'samples':>9}  SASS", file=out)
                for r in k.rows:
                    print(f"  {r[0]:>8} {r[1]:>12} {r[2]:>9}  {r[4]}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
