#!/usr/bin/env python3
"""Where a training step's GPU time goes, by kernel family, for hpdt and PyTorch side by side.

Reads the per-kernel traces of one training step (CUPTI, the GPU's own timestamps):
  - hpdt:    hpdt-bench-train-step --kernel-trace FILE (bench/kernel_trace: "trace" holds the per-step summary)
  - PyTorch: bench/peers/torch_gpu_train_step.py --kernel-trace-steps N (each train_step record's "kernel_trace")
and puts each kernel into a family by its name (FAMILIES: our kernels', cuBLAS's, cuDNN's and PyTorch's names),
then prints, per model, one row per family and one column per trace: milliseconds a step.

    python3 scripts/gpu/kernel_breakdown.py RESULTS_DIR [RESULTS_DIR ...]      (run.sh's out/bench/ is read)
    python3 scripts/gpu/kernel_breakdown.py --traces trace_a.json trace_b.json --torch torch_gpu_train_step.json

scripts/gpu/summarize.py includes these tables. Kernels no rule names are "other", and the largest of them are
listed, so that a family's total is never quietly wrong.
"""
import argparse
import json
import os
import re
import sys

# (family, pattern): the first pattern found in the kernel's name (lower case) names its family. Order matters:
# cuDNN's convolution kernels are implicit GEMMs ("xmma_fprop_implicit_gemm"), our NCHW ones conv_gemm_*.
FAMILIES = [
    ("attention", r"attention_|flash|fmha|sdpa|scaled_dot_product"),
    # cuDNN's algorithms beyond implicit GEMM (Find picks them: --cudnn-algo find, PyTorch's cudnn.benchmark) run
    # Winograd, FFT and filter-flip kernels, and its precomputed implicit GEMM an offsets kernel
    # (our space-to-depth rearrangements of a strided convolution's input, weights and input gradient,
    # kernels/cuda/space_to_depth.cuh)
    ("convolution", r"conv(?!ert)|fprop|dgrad|wgrad|repack_weights|filter_from_krsc|winograd|fft[12]d|flip_filter|"
                    r"computeoffsets|im2col|space_to_depth|depth_to_space"),
    ("GEMM", r"gemm|gemv|nvjet|cutlass|cublas|splitk|matmul|dot_kernel"),
    ("norm (batch, layer)", r"bn_|ln_|batch_norm|layer_norm|batchnorm|layernorm|welford|group_norm"),
    ("pooling", r"pool"),
    ("softmax, loss", r"softmax|cross_entropy|ce_rows|ce_total|nll_loss"),
    ("optimizer", r"fused_step|sgd|adam|multi_tensor_apply|foreach|_amp_"),
    ("layout (transposes)", r"transpose|nchwtonhwc|nhwctonchw|permute"),
    ("cast, copy, fill", r"\[memcpy|\[memset|memcpy|memset|copy|cast_kernel|convert_kernel|fill"),
    ("reduction (bias grads, sums)", r"reduce|column_partials|column_finish|bias_grad|partial_sums|final_sum|"
                                     r"param_grad_finalize|sum_kernel"),
    ("elementwise (activations, adds)", r"elementwise|pointwise|activation|relu|gelu|dropout|axpy|scale_kernel|"
                                        r"accumulate_kernel|divide_kernel|epilogue_only|epilogue_inplace|tokens_|"
                                        r"functor|threshold|clamp"),
]
OTHER = "other"


def base_name(name):
    """The function's own name in a demangled signature: no return type, namespaces, template or call arguments
    ("void hpdt::kernels::cuda::(anonymous namespace)::fill_kernel<float>(float*, long, float)" -> "fill_kernel")."""
    n = name.replace("(anonymous namespace)", "anon")
    out, depth = [], 0
    for ch in n:
        if ch == "(" and depth == 0:
            break
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip().split(" ")[-1].split("::")[-1]


def family_of(text):
    t = text.lower()
    for fam, pat in FAMILIES:
        if re.search(pat, t):
            return fam
    return OTHER


GENERIC = ("elementwise (activations, adds)", OTHER)


def family(name):
    """The family of a kernel: by its own name (our kernels', cuBLAS's and cuDNN's say what they do), else, where
    that is generic (PyTorch's elementwise_kernel<.., FillFunctor>, cutlass::Kernel2<..gemm..>), by the whole name."""
    f = family_of(base_name(name))
    return family_of(name) if f in GENERIC else f


def summarize(activities, steps):
    """The per-step summary of `steps` steps' activities [(name, start_ms, end_ms)], in the layout of hpdt's
    (bench/kernel_trace: summary_json): per name its count and milliseconds a step, largest first; the durations
    added up, their union (busy) and first start to last end (span), a step. For the PyTorch peer's traces."""
    if steps < 1:
        raise ValueError(f"summarize: steps >= 1 (got {steps})")
    totals = {}
    for n, b, e in activities:
        if e < b:
            raise ValueError(f"summarize: '{n}' ends before it starts")
        c, ms = totals.get(n, (0, 0.0))
        totals[n] = (c + 1, ms + (e - b))
    busy, cur = 0.0, None
    for b, e in sorted((b, e) for _, b, e in activities):
        if cur is None or b > cur[1]:
            busy += cur[1] - cur[0] if cur else 0.0
            cur = [b, e]
        else:
            cur[1] = max(cur[1], e)
    busy += cur[1] - cur[0] if cur else 0.0
    span = max(e for _, _, e in activities) - min(b for _, b, _ in activities) if activities else 0.0
    kernels = sorted(({"name": n, "count_per_step": c / steps, "ms_per_step": ms / steps}
                      for n, (c, ms) in totals.items()), key=lambda k: (-k["ms_per_step"], k["name"]))
    return {"steps": steps, "activities": len(activities), "sum_ms_per_step": sum(k["ms_per_step"] for k in kernels),
            "busy_ms_per_step": busy / steps, "span_ms_per_step": span / steps, "kernels": kernels}


def load(path):
    with open(path) as f:
        return json.load(f)


def model_of(key):
    return "resnet50" if key.startswith("resnet50") else "vit_b16" if key.startswith("vit_b") else key


def hpdt_trace(doc, path):
    """The per-step summary of an hpdt-bench-train-step --kernel-trace file."""
    t = doc.get("trace")
    if not isinstance(t, dict) or "kernels" not in t:
        raise ValueError(f"{path}: no 'trace' with 'kernels' (not an hpdt-bench-train-step --kernel-trace file)")
    return t


def torch_traces(doc):
    """[(label, model, trace)] of the PyTorch peer's records that hold a kernel_trace."""
    out = []
    for r in doc.get("train_step", []):
        if isinstance(r.get("kernel_trace"), dict):
            out.append((f"torch {r['mode']}", r["model"], r["kernel_trace"]))
        elif r.get("kernel_trace_error"):  # the peer could not trace: said below the table, not a column
            out.append((f"torch {r['mode']}", r["model"], {"error": r["kernel_trace_error"]}))
    return out


def collect(dirs=(), traces=(), torch=()):
    """{model: {label: trace}}. hpdt's traces: files trace_<key>.json, key as the train_step_<key>.json beside them
    (resnet50_bf16_ours, vit_b16_bf16_vendor, ...), labelled "hpdt" and the key less its model and bf16 ("hpdt ours
    nhwc"); PyTorch's from the peer's JSON ("torch eager", "torch compile"). Later files win."""
    by_model = {}
    files, torch_files = list(traces), list(torch)
    for d in dirs:
        bench = os.path.join(d, "bench") if os.path.isdir(os.path.join(d, "bench")) else d
        for f in sorted(os.listdir(bench)):
            if f.startswith("trace_") and f.endswith(".json"):
                files.append(os.path.join(bench, f))
            elif f.startswith("torch_gpu_train_step") and f.endswith(".json"):
                torch_files.append(os.path.join(bench, f))
    for p in files:
        key = re.sub(r"^trace_", "", os.path.basename(p))[:-len(".json")]
        model = model_of(key)
        rest = key[len(model) + 1:] if key.startswith(model + "_") else key
        label = "hpdt " + re.sub(r"^bf16_", "", rest).replace("_", " ")  # resnet50_bf16_ours_nhwc: "hpdt ours nhwc"
        by_model.setdefault(model, {})[label] = hpdt_trace(load(p), p)
    for p in torch_files:
        for label, model, t in torch_traces(load(p)):
            by_model.setdefault(model, {})[label] = t
    return by_model


def families_of(trace):
    """{family: ms a step}, and the 'other' kernels [(ms, name)] largest first."""
    fams, other = {}, []
    for k in trace["kernels"]:
        f = family(k["name"])
        fams[f] = fams.get(f, 0.0) + k["ms_per_step"]
        if f == OTHER:
            other.append((k["ms_per_step"], k["name"]))
    return fams, sorted(other, reverse=True)


def fmt(x, nd=2):
    return "—" if x is None else f"{x:.{nd}f}"


def tables(by_model, rows, numbers, top_other=5):
    """Markdown rows (appended to `rows`) and records (to `numbers`): per model, family x trace, ms a step."""
    names = {"resnet50": "ResNet-50", "vit_b16": "ViT-B/16"}
    for model in sorted(by_model):
        failed = {lb: t["error"] for lb, t in by_model[model].items() if "error" in t}
        traces = {lb: t for lb, t in by_model[model].items() if "error" not in t}
        if not traces:
            rows.extend([f"- {names.get(model, model)}, {lb}: no kernel trace ({e})" for lb, e in failed.items()] + [""])
            continue
        labels = sorted(traces, key=lambda s: (s.startswith("torch"), s))
        fams = {lb: families_of(traces[lb]) for lb in labels}
        order = [f for f, _ in FAMILIES] + [OTHER]
        rows.append(f"| {names.get(model, model)}: ms a step | " + " | ".join(labels) + " |")
        rows.append("|---|" + "---:|" * len(labels))
        for f in order:
            vals = [fams[lb][0].get(f) for lb in labels]
            if all(v is None for v in vals):
                continue
            rows.append(f"| {f} | " + " | ".join(fmt(v) for v in vals) + " |")
        for what, key in (("all kernels, added up", "sum_ms_per_step"), ("GPU busy (their union)", "busy_ms_per_step"),
                          ("first kernel to last", "span_ms_per_step")):
            rows.append(f"| **{what}** | " + " | ".join(fmt(traces[lb].get(key)) for lb in labels) + " |")
        # the GPU waiting between kernels inside the step (launch overhead, host work): span less busy
        idle = [traces[lb]["span_ms_per_step"] - traces[lb]["busy_ms_per_step"]
                if "span_ms_per_step" in traces[lb] and "busy_ms_per_step" in traces[lb] else None for lb in labels]
        rows.append("| **GPU idle inside the step** | " + " | ".join(fmt(v) for v in idle) + " |")
        rows.append("")
        for lb in labels:
            numbers.append({"op": "step_breakdown", "model": model, "trace": lb, "families_ms": fams[lb][0],
                            "busy_ms": traces[lb].get("busy_ms_per_step"), "span_ms": traces[lb].get("span_ms_per_step")})
            other = fams[lb][1][:top_other]
            if other:
                rows.append(f"- {lb}, largest kernels no family names: " +
                            "; ".join(f"{ms:.3f} ms `{n[:100]}`" for ms, n in other))
        for lb, e in failed.items():
            rows.append(f"- {lb}: no kernel trace ({e})")
        if failed or any(fams[lb][1] for lb in labels):
            rows.append("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", help="result directories of scripts/gpu/run.sh (their bench/ is read)")
    ap.add_argument("--traces", nargs="*", default=[], help="hpdt-bench-train-step --kernel-trace files")
    ap.add_argument("--torch", nargs="*", default=[], help="torch_gpu_train_step.py output with kernel traces")
    ap.add_argument("--json", help="also write the numbers to this file")
    a = ap.parse_args()
    try:
        by_model = collect(a.dirs, a.traces, a.torch)
    except (OSError, ValueError, KeyError) as e:
        print(f"kernel_breakdown.py: {e}", file=sys.stderr)
        return 1
    if not by_model:
        print("kernel_breakdown.py: no kernel traces found (hpdt-bench-train-step --kernel-trace, "
              "torch_gpu_train_step.py --kernel-trace-steps)", file=sys.stderr)
        return 1
    rows, numbers = [], []
    tables(by_model, rows, numbers)
    print("\n".join(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(numbers, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
