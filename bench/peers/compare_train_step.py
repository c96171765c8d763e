#!/usr/bin/python3
"""hpdt vs PyTorch 1.13 CPU training steps, interleaved so machine noise hits both.

    /usr/bin/python3 bench/peers/compare_train_step.py --hpdt build/cpu/bench/train_step/hpdt-bench-train-step \
        [--rounds 3] [--steps 8] [--out results/train_step_cpu]

Each round runs, per model, hpdt (its default layout: NHWC for ResNets on the CPU), for ResNets hpdt
with --layout nchw (the im2col oracle path, for reference), then PyTorch (NCHW) and, for ResNets,
PyTorch channels_last, all on the same 2 OpenMP threads. The ratio is hpdt's default against the best
PyTorch setup. Writes OUT.json (every run, medians, ratios, machine, load average,
versions, BLAS in use) and OUT.md (a short table).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def run(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, shell=True).stdout.strip()
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpdt", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="resnet20,vit_ti")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--vit-batch", type=int, default=0, help="ViT batch when it must differ (0: --batch)")
    ap.add_argument("--vit-rounds", type=int, default=0, help="rounds for ViT (0: --rounds)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "train_step_cpu"))
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    def common(model):
        b = a.vit_batch if (model.startswith("vit") and a.vit_batch) else a.batch
        return ["--batch", str(b), "--image", "28", "--channels", "1", "--patch", "4", "--classes", "10",
                "--steps", str(a.steps), "--warmup", str(a.warmup)]
    load_before = os.getloadavg()
    runs = []
    for r in range(a.rounds):
        for model in a.models.split(","):
            if model.startswith("vit") and a.vit_rounds and r >= a.vit_rounds:
                continue
            hpdt = [a.hpdt, "--model", model] + common(model)
            torch = ["/usr/bin/python3", os.path.join(HERE, "torch_train_step.py"), "--model", model,
                     "--threads", str(a.threads)] + common(model)
            variants = [("hpdt", hpdt)]
            if model.startswith("resnet"):
                variants.append(("hpdt-nchw", hpdt + ["--layout", "nchw"]))
            variants.append(("pytorch", torch))
            if model.startswith("resnet"):
                variants.append(("pytorch-channels_last", torch + ["--channels-last"]))
            for impl, cmd in variants:
                res = run(cmd, env)
                res["impl"] = impl
                res["round"] = r
                res["loadavg_1m_at_end"] = os.getloadavg()[0]
                runs.append(res)
                print(f"round {r} {model:9s} {impl:22s} {res['img_per_s_median']:8.1f} img/s", file=sys.stderr)
    load_after = os.getloadavg()
    summary = {}
    for model in a.models.split(","):
        s = {}
        for impl in sorted({x["impl"] for x in runs if x["model"] == model}):
            vals = [x["img_per_s_median"] for x in runs if x["model"] == model and x["impl"] == impl]
            s[impl] = {"img_per_s_median_of_rounds": statistics.median(vals), "per_round": vals}
        best_torch = max(v["img_per_s_median_of_rounds"] for k, v in s.items() if k.startswith("pytorch"))
        s["ratio_hpdt_over_best_pytorch"] = s["hpdt"]["img_per_s_median_of_rounds"] / best_torch
        summary[model] = s
    doc = {
        "benchmark": "train_step_cpu", "date_utc": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
        "git_commit": sh(f"git -C {ROOT} rev-parse HEAD"), "host": platform.node(),
        "cpu": sh("lscpu | grep 'Model name' | sed 's/.*: *//'"), "threads": a.threads,
        "vector_isa": "avx512" if "avx512f" in sh("grep -m1 '^flags' /proc/cpuinfo").split() else
                      "avx2" if "avx2" in sh("grep -m1 '^flags' /proc/cpuinfo").split() else "other",
        "setup": f"batch {a.batch} (ViT {a.vit_batch or a.batch}), 1x28x28 random images, 10 classes, SGD nesterov momentum 0.9 wd 5e-4, ViT patch 4, {a.warmup} warm-up steps",
        "loadavg_before": load_before, "loadavg_after": load_after,
        "load_note": "runs interleaved (hpdt, then PyTorch, per round) so both sides see the same machine; the load averages say how quiet it was",
        "torch_version": sh("/usr/bin/python3 -c 'import torch; print(torch.__version__)'"),
        "blas_alternative": sh("update-alternatives --display libblas.so.3-x86_64-linux-gnu | head -3"),
        "rounds": a.rounds, "steps_per_run": a.steps, "summary": summary, "runs": runs,
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".json.tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(a.out + ".json.tmp", a.out + ".json")
    lines = ["# CPU training step: hpdt vs PyTorch 1.13 (1x28x28, %d threads)" % a.threads, "",
             doc["setup"] + ".", "",
             "| model | implementation | img/s (median over rounds) | per round |", "|---|---|---|---|"]
    for model, s in summary.items():
        for impl, v in s.items():
            if isinstance(v, dict):
                rounds = ", ".join(f"{x:.1f}" for x in v["per_round"])
                lines.append(f"| {model} | {impl} | {v['img_per_s_median_of_rounds']:.1f} | {rounds} |")
        lines.append(f"| {model} | **hpdt / best PyTorch** | **{s['ratio_hpdt_over_best_pytorch']:.2f}x** | |")
    lines += ["", f"Load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}; {a.threads} threads each; "
              f"CPU {doc['cpu']} ({doc['vector_isa']}). Commit {doc['git_commit'][:10]}. JSON: {os.path.basename(a.out)}.json."]
    with open(a.out + ".md.tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(a.out + ".md.tmp", a.out + ".md")


if __name__ == "__main__":
    main()
