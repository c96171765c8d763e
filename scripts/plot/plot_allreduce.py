#!/usr/bin/python3
"""Plots of hpdt-allreduce-perf JSON: bus bandwidth vs message size per algorithm (log-x), and the
measured time beside the alpha-beta model's prediction. Several JSON files (e.g. np 2 and np 4, or
unshaped and 1 Gbit/s) make one panel each. PNGs are written next to the first JSON (or into --out).

usage: /usr/bin/python3 scripts/plot/plot_allreduce.py results/.../allreduce.json [more.json ...] [--out DIR]
       [--in-place] [--name STEM]
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:g}{unit}"
        n /= 1024
    return f"{n:g}TiB"


def series(doc, in_place):
    out = {}
    for r in doc["results"]:
        if r["in_place"] != in_place:
            continue
        key = r["algo"] + ("" if r.get("compress", "none") == "none" else f"+{r['compress']}")
        if r.get("compress_on") in ("device", "host mirror"):  # --device cuda: the GPU path and the host mirror
            key += f" on {r['compress_on']}"
        out.setdefault(key, []).append(r)
    for rows in out.values():
        rows.sort(key=lambda r: r["bytes"])
    return out


def title(doc):
    t = f"{doc['ranks']} ranks on {doc.get('nodes', 1)} node(s), {doc.get('device', 'cpu')}"
    if doc.get("label"):
        t = f"{doc['label']}: " + t
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+")
    ap.add_argument("--out")
    ap.add_argument("--name", help="file stem of the PNGs (default: the first JSON's)")
    ap.add_argument("--in-place", action="store_true", help="plot the in-place block (default out-of-place)")
    a = ap.parse_args()
    docs = []
    for p in a.json:
        try:
            with open(p) as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as e:
            sys.exit(f"plot_allreduce.py: cannot read {p}: {e}")
    out = a.out or os.path.dirname(os.path.abspath(a.json[0]))
    os.makedirs(out, exist_ok=True)
    stem = a.name or os.path.splitext(os.path.basename(a.json[0]))[0]

    n = len(docs)
    fig, axes = plt.subplots(1, n, figsize=(6 * n, 4.4), squeeze=False)
    for ax, doc in zip(axes[0], docs):
        for key, rows in sorted(series(doc, a.in_place).items()):
            ax.plot([r["bytes"] for r in rows], [r["busbw_GBps"] for r in rows], "o-", ms=3, label=key)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes of f32)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(title(doc), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    p = os.path.join(out, f"{stem}_busbw.png")
    fig.savefig(p, dpi=120)
    plt.close(fig)
    print(p)

    fig, axes = plt.subplots(1, n, figsize=(6 * n, 4.4), squeeze=False)
    for ax, doc in zip(axes[0], docs):
        for key, rows in sorted(series(doc, a.in_place).items()):
            if "+" in key:
                continue
            line, = ax.plot([r["bytes"] for r in rows], [r["time_us"] for r in rows], "o", ms=3, label=key)
            model = [(r["bytes"], r["model_us"]) for r in rows if r.get("model_us")]
            if model:
                ax.plot(*zip(*model), "-", color=line.get_color(), lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("time (us): measured (dots), alpha-beta fit (lines)")
        ax.set_title(title(doc), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    p = os.path.join(out, f"{stem}_model.png")
    fig.savefig(p, dpi=120)
    plt.close(fig)
    print(p)


if __name__ == "__main__":
    main()
