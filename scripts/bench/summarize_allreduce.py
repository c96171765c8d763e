#!/usr/bin/python3
"""Markdown summary of hpdt-allreduce-perf JSON files (for results/README.md): per run, the
out-of-place busbw of each algorithm at selected sizes, the best algorithm and its ratio to mpi,
auto's ratio to the best, what auto runs there and that algorithm's ratio to the best, and the alpha-beta fits. The best, best/mpi and auto/best columns compare
as the tool's own summary does: by the mean time per operation over the timed loops of both
placements (rows with `mean_us`); files from before that field compare out-of-place medians.

usage: summarize_allreduce.py FILE.json... > summary.md
"""
import json
import sys

SIZES = [1 << 10, 4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def human(n):
    for u in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:g} {u}"
        n /= 1024
    return f"{n:g} TiB"


def nearest(rows, size):
    sizes = sorted({r["bytes"] for r in rows})
    best = min(sizes, key=lambda s: abs(s - size)) if sizes else None
    return best if best is not None and 0.5 <= best / size <= 2 else None


def main():
    for path in sys.argv[1:]:
        d = json.load(open(path))
        rows = [r for r in d["results"] if not r["in_place"] and r["compress"] == "none"]
        # one rank: busbw is 0 by definition (nothing crosses a link); show algbw instead
        key = "busbw_GBps" if d["ranks"] > 1 else "algbw_GBps"
        algos = list(dict.fromkeys(r["algo"] for r in rows))
        la = d.get("load_average", {})
        print(f"### {d.get('label') or path}\n")
        print(f"`{path.split('/')[-1]}`: {d['ranks']} ranks on {d['nodes']} node(s) ({d.get('topology', '')}), "
              f"hosts {', '.join(sorted(set(d['hosts'])))}; load average at start {la.get('start', '?')}, "
              f"at end {la.get('end', '?')}; commit {d.get('build', {}).get('git_commit', '?')}.\n")
        both = [r for r in d["results"] if r["compress"] == "none"]
        pooled = all("mean_us" in r for r in both)
        factor = 2 * (d["ranks"] - 1) / d["ranks"] if d["ranks"] > 1 else 1  # algbw on one rank

        def compare_bw(s):  # per algorithm at size s: what best/auto are decided on
            if not pooled:
                return {r["algo"]: r[key] for r in rows if r["bytes"] == s}
            out = {}
            for a in algos:
                m = [r["mean_us"] for r in both if r["algo"] == a and r["bytes"] == s]
                if m and sum(m) > 0:
                    out[a] = s / (sum(m) / len(m) * 1e-6) / 1e9 * factor
            return out
        sizes = [s for s in (nearest(rows, s) for s in SIZES) if s]
        sizes = list(dict.fromkeys(sizes))
        have_is = any("auto_algo" in b for b in d.get("best", []))
        print("| size | " + " | ".join(algos) + " | best | best/mpi | auto/best |" + (" auto runs | its/best |" if have_is else ""))
        print("|---|" + "---|" * (len(algos) + 3 + (2 if have_is else 0)))
        for s in sizes:
            bw = {r["algo"]: r[key] for r in rows if r["bytes"] == s}
            cmp = compare_bw(s)
            cand = {a: v for a, v in cmp.items() if a != "auto"}
            best = max(cand, key=cand.get) if cand else "-"
            mpi = cmp.get("mpi")
            auto = cmp.get("auto")
            cells = [f"{bw[a]:.3f}" if a in bw else "-" for a in algos]
            r_mpi = f"{cand[best] / mpi:.2f}" if mpi and best != "-" else "-"
            r_auto = f"{auto / cand[best]:.2f}" if auto is not None and best != "-" and cand[best] > 0 else "-"
            line = f"| {human(s)} | " + " | ".join(cells) + f" | {best} | {r_mpi} | {r_auto} |"
            if have_is:
                b = next((b for b in d["best"] if b["bytes"] == s), {})
                its = b.get("auto_algo_over_best")
                line += f" {b.get('auto_algo', '-')} | " + (f"{its:.2f}" if its is not None else "-") + " |"
            print(line)
        basis = ("best, best/mpi and auto/best from the mean time per operation over the timed loops of both "
                 "placements" if pooled else "best and the ratios from these medians")
        print(f"\n{key.split('_')[0]} in GB/s, out of place, median of the repetitions ({basis}); alpha-beta fits: " + "; ".join(
            f"{k} {v['alpha_us']:.1f} us, {v['bandwidth_GBps']:.3f} GB/s (rms {100 * v['rms_rel_error']:.0f} %)"
            for k, v in d.get("fits", {}).items()) + f". Out of bounds: {d.get('out_of_bounds', '?')}.\n")


if __name__ == "__main__":
    main()
