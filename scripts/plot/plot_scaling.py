#!/usr/bin/python3
"""Plots of an hpdt-scaling report (scaling.json): speedup and efficiency vs ranks with the ideal
line and the fitted Amdahl/Gustafson law, and step-time breakdown bars per rank count.
PNGs are written next to the JSON (or into --out).

usage: /usr/bin/python3 scripts/plot/plot_scaling.py results/.../scaling.json [--out DIR]
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label(t):
    return f"{t['model']} {t['algo']}" + ("" if t["compress"] == "none" else f" {t['compress']}") + f" ({t['mode']})"


def plot_speedup(tables, path):
    fig, (ax_s, ax_e) = plt.subplots(1, 2, figsize=(11, 4.2))
    max_w = 1
    for t in tables:
        w = [r["ranks"] for r in t["rows"]]
        max_w = max(max_w, max(w))
        line, = ax_s.plot(w, [r["speedup"] for r in t["rows"]], "o-", label=label(t))
        ax_s.plot(w, [r["law_speedup"] for r in t["rows"]], ":", color=line.get_color(),
                  label=f"  {'Amdahl' if t['mode'] == 'strong' else 'Gustafson'} f={t['parallel_fraction']:.3f}")
        ax_e.plot(w, [r["efficiency"] for r in t["rows"]], "o-", color=line.get_color(), label=label(t))
    ideal = [1, max_w]
    ax_s.plot(ideal, ideal, "k--", lw=1, label="ideal S = W")
    ax_e.axhline(1.0, color="k", ls="--", lw=1, label="ideal E = 1")
    for ax, name in ((ax_s, "speedup S(W)"), (ax_e, "efficiency E(W) = S/W")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks W")
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    ax_e.set_ylim(0, 1.1)
    ax_s.legend(fontsize=7)
    ax_e.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_breakdown(tables, path):
    parts = [("forward_s", "forward"), ("backward_s", "backward"), ("exposed_comm_s", "exposed comm"),
             ("optimizer_s", "optimizer"), ("data_wait_s", "data wait")]
    bars, names = [], []
    for t in tables:
        for r in t["rows"]:
            bars.append(r)
            names.append(f"{t['algo']}" + ("" if t["compress"] == "none" else f"/{t['compress']}") + f"\nW={r['ranks']}")
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(bars) + 2), 4.2))
    bottom = [0.0] * len(bars)
    for key, name in parts:
        vals = [1e3 * r.get(key, 0.0) for r in bars]
        ax.bar(range(len(bars)), vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    other = [max(0.0, 1e3 * r["step_time_s"] - b) for r, b in zip(bars, bottom)]
    ax.bar(range(len(bars)), other, bottom=bottom, label="other", color="lightgrey")
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels(names, fontsize=7)
    ax.set_ylabel("time per step (ms)")
    ax.set_title("step-time breakdown (median step)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="scaling.json written by hpdt-scaling report --json")
    ap.add_argument("--out", help="output directory (default: next to the JSON)")
    a = ap.parse_args()
    try:
        with open(a.json) as f:
            doc = json.load(f)
        tables = doc["tables"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plot_scaling.py: cannot read {a.json}: {e}")
    if not tables:
        sys.exit(f"plot_scaling.py: {a.json} has no tables")
    out = a.out or os.path.dirname(os.path.abspath(a.json))
    os.makedirs(out, exist_ok=True)
    stem = os.path.splitext(os.path.basename(a.json))[0]
    for kind, fn in (("speedup", plot_speedup), ("breakdown", plot_breakdown)):
        path = os.path.join(out, f"{stem}_{kind}.png")
        fn(tables, path)
        print(path)


if __name__ == "__main__":
    main()
