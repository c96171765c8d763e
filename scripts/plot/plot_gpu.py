#!/usr/bin/env python3
"""Plots of a GPU run's numbers, from the JSON scripts/gpu/summarize.py writes (results/gpu/<gpu>_<date>.json):

    /usr/bin/python3 scripts/plot/plot_gpu.py results/gpu/h200_2026-11-27.json      # -> results/gpu/h200_2026-11-27_*.png

  *_steps.png      training steps, img/s: ours, --kernels vendor, PyTorch eager and torch.compile
  *_gemm.png       16-bit GEMMs, TFLOP/s: v2 (mma.sync), v3 (wgmma + TMA, its fastest pipeline), cuBLAS
  *_conv.png       convolutions, speed against cuDNN in the same layout (v2; v3's fastest pipeline), the 0.7 target
  *_attention.png  flash attention, speed against PyTorch's SDPA, forward and backward, the 0.8 target

A plot whose numbers the run does not have is left out (and said). Every title names the GPU, driver and commit.
"""
import argparse
import json
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def best(*xs):
    xs = [x for x in xs if x]
    return max(xs) if xs else None


def hbars(ax, labels, series, xlabel):
    """Grouped horizontal bars: series = [(name, [value or None per label])]."""
    n, k = len(labels), len(series)
    h = 0.8 / k
    for i, (name, values) in enumerate(series):
        ys = [j + (i - (k - 1) / 2) * h for j in range(n)]
        ax.barh(ys, [v or 0 for v in values], height=h, label=name)
    ax.set_yticks(range(n))
    # long labels (the training steps' switches) wrapped, so that they leave the bars their width
    ax.set_yticklabels([textwrap.fill(label, 60) for label in labels], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7, loc="best")
    ax.grid(axis="x", alpha=0.3)


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot_gpu.py: wrote {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="summarize.py's JSON (results/gpu/<gpu>_<date>.json)")
    ap.add_argument("--out", help="prefix of the PNG files (default: the JSON's path less .json)")
    a = ap.parse_args()
    try:
        with open(a.results) as f:
            doc = json.load(f)
        rows = doc["results"]
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_gpu.py: {a.results}: not summarize.py's JSON ({e})", file=sys.stderr)
        return 2
    env = doc.get("environment", {})
    commit = (doc.get("build", {}).get("git_commit") or env.get("git_commit") or "?")[:12]
    where = f"{env.get('gpu', '?')}, driver {env.get('driver', '?')}, CUDA {env.get('cuda', '?')}, hpdt {commit}"
    prefix = a.out or os.path.splitext(a.results)[0]
    by_op = {}
    for r in rows:
        by_op.setdefault(r.get("op"), []).append(r)
    wrote = 0

    steps = [r for r in by_op.get("train_step", []) if r.get("ours_img_s") or r.get("vendor_img_s")]
    if steps:
        fig, ax = plt.subplots(figsize=(11, 0.6 * len(steps) + 1.5))
        hbars(ax, [r["what"] for r in steps],
              [("hpdt, our kernels", [r.get("ours_img_s") for r in steps]),
               ("hpdt --kernels vendor", [r.get("vendor_img_s") for r in steps]),
               ("PyTorch eager (AMP)", [r.get("torch_eager_img_s") for r in steps]),
               ("torch.compile", [r.get("torch_compile_img_s") for r in steps])], "images/s (bf16)")
        ax.set_title(f"Training step, one GPU\n{where}", fontsize=9)
        save(fig, prefix + "_steps.png")
        wrote += 1

    gemm = [r for r in by_op.get("gemm", []) if r.get("dtype") == "bf16->bf16" and r.get("cublas_tflops")]
    if gemm:
        fig, ax = plt.subplots(figsize=(9, 0.45 * len(gemm) + 1.5))
        hbars(ax, [r["shape"] for r in gemm],
              [("v2 (mma.sync)", [r.get("v2_tflops") for r in gemm]),
               ("v3 (wgmma + TMA), fastest pipeline",
                [best(r.get("v3_tflops"), r.get("v3_ws_tflops"), r.get("v3_pingpong_tflops")) for r in gemm]),
               ("cuBLAS", [r.get("cublas_tflops") for r in gemm])], "TFLOP/s (bf16 in and out, f32 accumulation)")
        ax.set_title(f"GEMM\n{where}", fontsize=9)
        save(fig, prefix + "_gemm.png")
        wrote += 1

    conv = [r for r in by_op.get("conv", []) if r.get("ours_over_cudnn")]
    if conv:
        fig, ax = plt.subplots(figsize=(9, 0.3 * len(conv) + 1.5))
        hbars(ax, [f"{r['case']} {r['layout']} {r['dir']}" for r in conv],
              [("v2 (mma.sync)", [r.get("ours_over_cudnn") for r in conv]),
               ("v3 (wgmma + TMA), fastest pipeline", [r.get("best_v3_over_cudnn") for r in conv])],
              "speed against cuDNN in the same layout, its faster of heuristic and Find where both ran (> 1: faster)")
        ax.axvline(0.7, color="k", ls="--", lw=1)
        ax.set_title(f"Convolution, ResNet-50 shapes, bf16, batch 256 (dashed: the 0.7 target)\n{where}", fontsize=9)
        save(fig, prefix + "_conv.png")
        wrote += 1

    att = [r for r in by_op.get("attention", []) if r.get("fwd_ratio") or r.get("bwd_ratio")]
    if att:
        fig, ax = plt.subplots(figsize=(8, 0.5 * len(att) + 1.5))
        hbars(ax, [r["shape"] for r in att],
              [("forward", [r.get("fwd_ratio") for r in att]), ("backward (v2, two passes)", [r.get("bwd_ratio") for r in att]),
               ("backward (v3, one pass)", [r.get("bwd_v3_ratio") for r in att])],
              "speed against PyTorch SDPA (> 1: faster)")
        ax.axvline(0.8, color="k", ls="--", lw=1)
        ax.set_title(f"Flash attention, bf16 (dashed: the 0.8 target)\n{where}", fontsize=9)
        save(fig, prefix + "_attention.png")
        wrote += 1

    missing = [name for name, have in [("steps", steps), ("gemm", gemm), ("conv", conv), ("attention", att)]
               if not have]
    if missing:
        print(f"plot_gpu.py: {a.results} has no {', '.join(missing)} numbers; no plot of them", file=sys.stderr)
    return 0 if wrote else 1


if __name__ == "__main__":
    sys.exit(main())
