#!/usr/bin/python3
"""Replay rules for the tuning file's choice on recorded pairs of hpdt-allreduce-perf JSON.

Each pair is a "measure" run (every algorithm, from which the tuning file is written) and a later
"check" run (every algorithm again). For each rule this picks an algorithm per size from the measure
run and reports, per size, the check run's busbw of that pick over the check run's best busbw: what
`--algo auto` would reach if it matched the algorithm it resolves to. Sizes at >= 0.9 count as hits.

  scripts/bench/replay_tuning.py [--check-tuned] MEASURE.json CHECK.json [MEASURE.json CHECK.json ...]

--check-tuned: also require that the `model` rule replayed here picks, at every size, what the measure
run's own summary wrote to its tuning file (`best[].tuned_algo`): the replay and hpdt-allreduce-perf
implement the same rule (for files written since the rule, 2026-11-26). Exit status 1 if not.

Rules:
  raw        the measure run's best busbw
  neighbour  among algorithms within 10 % of the best, the best sum of log busbw over the size and
             its two neighbours (hpdt-allreduce-perf's rule until 2026-11-26)
  model      among algorithms within 10 % of the best, the shortest time the algorithm's alpha-beta
             fit predicts at the size (model_us; hpdt-allreduce-perf's rule since then)

busbw is taken from the mean time per operation over both placements (mean_us) where the JSON has
it, else from the median times (time_us) that older runs recorded.
"""
import json
import math
import sys


def load(path):
    doc = json.load(open(path))
    p = doc["ranks"]
    times, model = {}, {}
    for r in doc["results"]:
        if r["compress"] != "none" or r["bytes"] <= 0:
            continue
        key = (r["algo"], r["bytes"])
        times.setdefault(key, []).append(r.get("mean_us", r["time_us"]))
        if not r["in_place"]:
            model[key] = r["model_us"]
    bw = {k: k[1] / (sum(t) / len(t) * 1e-6) / 1e9 * 2 * (p - 1) / p for k, t in times.items()}
    algos = [a for a in doc["config"]["algos"] if a != "auto"]
    return algos, bw, model


def picks(rule, algos, bw, model, sizes):
    out = {}
    for k, s in enumerate(sizes):
        top = max(bw.get((a, s), -1) for a in algos)
        near = [a for a in algos if bw.get((a, s), -1) >= 0.9 * top]
        if rule == "raw":
            out[s] = max(algos, key=lambda a: bw.get((a, s), -1))
        elif rule == "neighbour":
            def score(a):
                v = math.log(bw[(a, s)])
                for j in (k - 1, k + 1):
                    if 0 <= j < len(sizes):
                        v += math.log(bw[(a, sizes[j])]) if bw.get((a, sizes[j]), -1) > 0 else -1e9
                return v
            out[s] = max(near, key=lambda a: (score(a), -algos.index(a)))
        else:
            out[s] = min(near, key=lambda a: (model[(a, s)], algos.index(a)))
    return out


def main():
    args = sys.argv[1:]
    check_tuned = "--check-tuned" in args
    args = [a for a in args if a != "--check-tuned"]
    if not args or len(args) % 2:
        sys.exit("usage: replay_tuning.py [--check-tuned] MEASURE.json CHECK.json [MEASURE.json CHECK.json ...]")
    mismatches = 0
    totals = {}
    for m_path, c_path in zip(args[::2], args[1::2]):
        algos, bw, model = load(m_path)
        c_algos, c_bw, _ = load(c_path)
        sizes = sorted({s for (_, s) in bw})
        if set(algos) != set(c_algos) or sizes != sorted({s for (_, s) in c_bw}):
            sys.exit(f"{m_path} and {c_path} measure different algorithms or sizes")
        print(f"{m_path} -> {c_path}")
        if check_tuned:
            recorded = {b["bytes"]: b.get("tuned_algo") for b in json.load(open(m_path)).get("best", [])}
            mine = picks("model", algos, bw, model, sizes)
            for s in sizes:
                if recorded.get(s) != mine[s]:
                    mismatches += 1
                    print(f"  MISMATCH at {s} B: the measure run's tuning file has {recorded.get(s)}, the replayed "
                          f"model rule picks {mine[s]}")
        for rule in ("raw", "neighbour", "model"):
            chosen = picks(rule, algos, bw, model, sizes)
            ratios = [c_bw[(chosen[s], s)] / max(c_bw[(a, s)] for a in algos) for s in sizes]
            hits = sum(r >= 0.9 for r in ratios)
            got = totals.setdefault(rule, [0, 0])
            got[0] += hits
            got[1] += len(sizes)
            print(f"  {rule:<9} {hits:2d}/{len(sizes)}  " + " ".join(f"{chosen[s]}:{r:.2f}" for s, r in zip(sizes, ratios)))
    print("total: " + ", ".join(f"{rule} {h}/{n}" for rule, (h, n) in totals.items()))
    if check_tuned:
        print(f"check-tuned: {mismatches} mismatches")
        if mismatches:
            sys.exit(1)


if __name__ == "__main__":
    main()
