#!/usr/bin/python3
"""Training curves from hpdt-train --metrics JSON-lines: training loss per step (and its moving
average) and train/test accuracy per epoch; one PNG per metrics file, or several runs overlaid.
Also prints a one-line summary per run (final test accuracy, best test accuracy, epochs, wall time).

usage: /usr/bin/python3 scripts/plot/plot_training.py run.jsonl [more.jsonl ...] [--out FILE.png] [--title TEXT]
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    cfg, steps, epochs, summary = None, [], [], None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")
            t = r.get("type")
            if t == "config" and cfg is None:
                cfg = r
            elif t == "step":
                steps.append(r)
            elif t == "epoch":
                epochs.append(r)
            elif t == "summary":
                summary = r
    if not steps:
        sys.exit(f"{path}: no step records (is this an hpdt-train --metrics file?)")
    return cfg or {}, steps, epochs, summary


def label_of(path, cfg):
    bits = [cfg.get("model", "?"), f"np {cfg.get('ranks', '?')}"]
    if cfg.get("compress", "none") != "none":
        bits.append(cfg["compress"])
    return " ".join(bits) + f" ({os.path.basename(path)})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics", nargs="+")
    ap.add_argument("--out", help="PNG to write (default: next to the first metrics file, .png)")
    ap.add_argument("--title")
    a = ap.parse_args()
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(12, 4.5))
    for path in a.metrics:
        cfg, steps, epochs, summary = load(path)
        lab = label_of(path, cfg)
        spe = max(1, int(cfg.get("steps_per_epoch", 1)))
        x = [s["step"] / spe for s in steps]
        y = [s["loss"] for s in steps]
        k = max(1, spe // 10)
        avg = [sum(y[max(0, i - k + 1):i + 1]) / (i + 1 - max(0, i - k + 1)) for i in range(len(y))]
        ax_loss.plot(x, y, alpha=0.2, linewidth=0.6)
        ax_loss.plot(x, avg, label=lab, linewidth=1.2, color=ax_loss.lines[-1].get_color())
        if epochs:
            ex = [e["epoch"] + 1 for e in epochs]
            ax_acc.plot(ex, [100 * e["train_accuracy"] for e in epochs], "--", label=f"train, {lab}")
            if "test_accuracy" in epochs[0]:
                ax_acc.plot(ex, [100 * e["test_accuracy"] for e in epochs], "o-", label=f"test, {lab}",
                            color=ax_acc.lines[-1].get_color())
        tests = [e["test_accuracy"] for e in epochs if "test_accuracy" in e]
        wall = summary.get("wall_s") if summary else sum(e.get("seconds", 0) for e in epochs)
        print(f"{path}: {lab}: {len(epochs)} epochs, {len(steps)} steps, "
              + (f"final test accuracy {100 * tests[-1]:.2f}%, best {100 * max(tests):.2f}%, " if tests else "")
              + f"wall {wall:.0f} s")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("training loss (per step; line: moving average)")
    ax_loss.set_yscale("log")
    ax_loss.grid(True, which="both", alpha=0.3)
    ax_loss.legend(fontsize=7)
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.grid(True, alpha=0.3)
    ax_acc.legend(fontsize=7)
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    out = a.out or os.path.splitext(a.metrics[0])[0] + ".png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
