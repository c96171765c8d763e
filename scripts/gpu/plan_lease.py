#!/usr/bin/env python3
"""When each entry of scripts/gpu/benchmarks.txt would start in a lease's call, and which the deadline would cut or
leave unrun, from the seconds each took in earlier runs (their summary.txt lines) or an estimate.

    python3 scripts/gpu/plan_lease.py scripts/gpu/benchmarks.txt [--summary RUN/summary.txt ...]
        [--deadline 480] [--tests-end 80] [--rows NAME=COUNT ...]

run.sh runs the benchmarks one at a time after the tests; a prewarm starts at the run's start, in the background,
and its peer runs once it has ended (the entries after the peer go first while it runs). An entry's seconds: the
latest summary line of that name (since 2026-11-30 a benchmark's line names it by its output file, a peer by its
NAME; before, a benchmark's line named its executable, used where one line has it), else an estimate by kind: a training step 5 s (12 with Find), a Google Benchmark binary 0.4 s a row (the row
count from --rows, which wins over a measurement, else 60 s in all), an Nsight Compute peer 40 s, another peer 25 s, a prewarm 330 s (the cold
torch.compile of 2026-11-29). Prints one line an entry: its start, its seconds and where they came from, and "cut"
or "not run" where the deadline falls. An estimate: the order is what it helps to choose.
"""
import argparse
import re
import sys

LINE = re.compile(r"^(ok|FAIL)\s+(bench|peer|prewarm) (\S+)\s+rc=\S+\s+(\d+)s")
STEP_S, STEP_FIND_S, ROW_S, GBENCH_S, NCU_S, PEER_S, PREWARM_S = 5, 12, 0.4, 60, 40, 25, 330


def label(line):
    """(kind, name) of a benchmarks.txt entry, named as run.sh's summary names it (bench_label)."""
    if line.startswith(("peer ", "prewarm ")):
        kind, name = line.split()[:2]
        return kind, name
    m = re.search(r"(?:--out|--benchmark_out|-J)[= ](\S+)", line)
    name = m.group(1) if m else line.split()[0]
    name = name.rsplit("/", 1)[-1]
    return "bench", name[:-5] if name.endswith(".json") else name


def entries(path):
    with open(path) as f:
        return [(label(s), s) for s in (ln.strip() for ln in f) if s and not s.startswith("#")]


def measured(paths):
    """{(kind, name): seconds} from summary.txt files, later files winning. A name that one file gives several lines
    (before 2026-11-30 a benchmark's line named its executable, hpdt-bench-train-step for every step) is left out, and so
    is a run cut short (its seconds are not the whole run's)."""
    out = {}
    for p in paths:
        found, count = {}, {}
        with open(p) as f:
            for ln in f:
                m = LINE.match(ln)
                if m:
                    key = (m.group(2), m.group(3))
                    found[key] = int(m.group(4))
                    count[key] = count.get(key, 0) + 1
        out.update({k: v for k, v in found.items() if count[k] == 1})
    return out


def seconds_of(kind, name, line, seconds, rows):
    """An entry's seconds and their source: --rows first (the entry changed since it was measured), then a summary
    line of its name, or of its executable's (summaries before 2026-11-30), then the estimate by kind."""
    if kind == "bench" and name in rows:
        return rows[name] * ROW_S, f"estimate, {rows[name]} rows"
    exe = line.split()[0].rsplit("/", 1)[-1]
    for key in ((kind, name), (kind, exe)):
        if key in seconds:
            return seconds[key], "measured"
    return estimate(kind, name, line)


def estimate(kind, name, line):
    if kind == "prewarm":
        return PREWARM_S, "estimate"
    if "hpdt-bench-train-step" in line:
        return (STEP_FIND_S if "find" in line else STEP_S), "estimate"
    if kind == "peer" and name.startswith("ncu_"):
        return NCU_S, "estimate"
    if kind == "peer":
        return PEER_S, "estimate"
    return GBENCH_S, "estimate"


def plan(items, seconds, deadline, tests_end, rows):
    """[(kind, name, start, secs, source, status)] in run.sh's order (status: ok, cut, not run, prewarm)."""
    out, t = [], tests_end
    prewarm_end, later = {}, []
    for (kind, name), line in items:
        if kind != "prewarm":
            continue
        secs, src = seconds_of(kind, name, line, seconds, rows)
        prewarm_end[name] = secs
        out.append((kind, name, 0, secs, src, "prewarm" if secs <= deadline else "cut"))

    def run(kind, name, line):
        nonlocal t
        secs, src = seconds_of(kind, name, line, seconds, rows)
        if t >= deadline:
            out.append((kind, name, t, secs, src, "not run"))
            return
        out.append((kind, name, t, secs, src, "ok" if t + secs <= deadline else "cut"))
        t = min(t + secs, deadline)

    for (kind, name), line in items:
        if kind == "prewarm":
            continue
        if prewarm_end.get(name, 0) > t and t < deadline:
            later.append((kind, name, line))
            continue
        run(kind, name, line)
        for entry in [e for e in later if prewarm_end[e[1]] <= t]:
            later.remove(entry)
            run(*entry)
    for kind, name, line in later:
        t = max(t, min(prewarm_end[name], deadline))
        run(kind, name, line)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("benchmarks")
    ap.add_argument("--summary", action="append", default=[], help="a run's summary.txt (repeatable; later wins)")
    ap.add_argument("--deadline", type=int, default=480, help="run.sh's --deadline (call 1 of the two-call plan: 480)")
    ap.add_argument("--tests-end", type=int, default=80, help="when the tests end and the benchmarks start (s)")
    ap.add_argument("--rows", action="append", default=[], metavar="NAME=COUNT",
                    help="a Google Benchmark entry's row count (its --benchmark_list_tests with its filter)")
    a = ap.parse_args()
    rows = {}
    for r in a.rows:
        name, _, count = r.partition("=")
        if not count.isdigit():
            sys.exit(f"plan_lease.py: --rows {r}: expected NAME=COUNT")
        rows[name] = int(count)
    try:
        items = entries(a.benchmarks)
        seconds = measured(a.summary)
    except OSError as e:
        sys.exit(f"plan_lease.py: {e}")
    print(f"{'start':>6} {'secs':>5}  {'status':<8} entry (source)")
    for kind, name, start, secs, src, status in plan(items, seconds, a.deadline, a.tests_end, rows):
        print(f"{start:6.0f} {secs:5.0f}  {status:<8} {kind} {name} ({src})")


if __name__ == "__main__":
    main()
