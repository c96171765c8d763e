#!/usr/bin/env python3
"""Summarises one or more result directories of scripts/gpu/run.sh (unpacked gpu-results.tgz) into the
tables results/gpu/README.md shows: ours beside cuBLAS / cuDNN / PyTorch, measured in the same run.

    python3 scripts/gpu/summarize.py RESULTS_DIR [RESULTS_DIR ...] --out results/gpu/h100_DATE

Later directories win where two hold the same benchmark (a re-run after a fix). Writes OUT.md (tables)
and OUT.json (every number the tables show, with the GPU, driver, versions and commits).
"""
import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_breakdown  # noqa: E402


def load(path):
    with open(path) as f:
        return json.load(f)


def gbench_salvage(text):
    """The complete records of a Google Benchmark JSON file whose writer was stopped (run.sh cuts a benchmark at the
    lease's deadline): the reporter writes each benchmark's records as they finish, so every record before the cut
    is whole. {"context": ..., "benchmarks": [...]}, or None where not even the list began."""
    start = re.search(r'"benchmarks"\s*:\s*\[', text)
    if not start:
        return None
    dec, pos, recs = json.JSONDecoder(), start.end(), []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            rec, pos = dec.raw_decode(text, pos)
        except ValueError:  # the record the cut went through, or the list's end
            break
        if not isinstance(rec, dict):
            break
        recs.append(rec)
    context = {}
    m = re.search(r'"context"\s*:\s*', text)
    if m:
        try:
            context = dec.raw_decode(text, m.end())[0]
        except ValueError:
            pass
    return {"context": context, "benchmarks": recs}


def gbench_medians(path, cut=None):
    """name (without /manual_time...) -> median aggregate record of a Google Benchmark JSON file. A file cut short
    keeps the benchmarks that finished before the cut (gbench_salvage), and adds (path, records kept) to `cut`."""
    out = {}
    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = gbench_salvage(text)
        if doc is None:  # empty: the benchmark ran nothing (its log says why)
            print(f"summarize.py: {path} holds no JSON; skipped", file=sys.stderr)
            return out
        if cut is not None:
            cut.append((path, len(doc["benchmarks"])))
        print(f"summarize.py: {path} was cut short; {len(doc['benchmarks'])} whole records kept", file=sys.stderr)
    for b in doc.get("benchmarks", []):
        if b.get("aggregate_name") != "median":
            continue
        out[re.sub(r"(/(manual_time|min_time:[0-9.]+|real_time))+$", "", b["run_name"])] = b
    return out


def collect(dirs):
    found = {"gemm": {}, "conv": {}, "attention": {}, "layers": {}, "elementwise": {}, "train": {}, "torch": {},
             "torch_prewarm": {},
             "hpdt_train": {}, "compress": [], "summary": [], "environment": "", "cut": []}
    for d in dirs:
        bench = os.path.join(d, "bench")
        for key, fname in [("gemm", "bench_gemm_cuda.json"), ("conv", "bench_conv_cuda.json"),
                           ("conv", "bench_conv_census.json"),
                           ("attention", "bench_attention_cuda.json"), ("layers", "bench_layers_cuda.json"),
                           ("elementwise", "bench_elementwise.json")]:
            p = os.path.join(bench, fname)
            if os.path.exists(p):
                found[key].update(gbench_medians(p, found["cut"]))
        for f in sorted(os.listdir(bench)) if os.path.isdir(bench) else []:
            if f.startswith("train_step_") and f.endswith(".json"):
                key = f[len("train_step_"):-5]
                doc = load(os.path.join(bench, f))
                trace = os.path.join(bench, f"trace_{key}.json")  # its --kernel-trace: GPU busy and idle a step
                if os.path.exists(trace) and "trace" not in doc:
                    doc["trace"] = load(trace).get("trace", {})
                found["train"][key] = doc
            if f.startswith("train_hpdt_train_") and f.endswith(".jsonl"):  # scripts/gpu/train_throughput.sh
                for line in open(os.path.join(bench, f)):
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("type") == "summary":
                        found["hpdt_train"][f[len("train_hpdt_train_"):-6]] = rec
            if f.startswith("allreduce_compress_cuda") and f.endswith(".json"):  # hpdt-allreduce-perf --compress
                found["compress"].append(load(os.path.join(bench, f)))
            if f == "prewarm_torch_compile.json":  # run.sh's prewarm: torch.compile's cold compilation, one step
                for r in load(os.path.join(bench, f)).get("train_step", []):
                    if "first_step_s" in r:
                        found["torch_prewarm"][r["model"]] = r
            if f.startswith("torch_gpu_train_step") and f.endswith(".json"):
                doc = load(os.path.join(bench, f))
                for r in doc.get("train_step", []):
                    if "img_per_s_median" in r:
                        found["torch"][(r["model"], r["mode"])] = r
                if doc.get("attention"):
                    found["torch"]["attention"] = doc["attention"]
                found["torch"]["environment"] = doc.get("environment", {})
        s = os.path.join(d, "summary.txt")
        if os.path.exists(s):
            found["summary"].append((d, open(s).read()))
        e = os.path.join(d, "environment.txt")
        if os.path.exists(e):
            found["environment"] = open(e).read()
    return found


def fmt(x, nd=1):
    return "—" if x is None else f"{x:.{nd}f}"


def ran_as(r, variant):
    """The benchmark record r if the variant it names is the one that ran (its label; none on older runs): a v3 row
    that fell back to v2 (off Hopper, unaligned operands) is not v3's."""
    return r if r and r.get("label") in (None, variant) else None


V3_PIPELINES = ("v3_wgmma", "v3_wgmma_ws", "v3_wgmma_pingpong")


def v3_pipeline_rows(g, key, counter, suffix=""):
    """A shape's v3 rows on its three pipelines (key: "gemm/DT/SHAPE", suffix: the rows' suffix): their TFLOP/s and
    their counter, None where a row is missing or fell back to v2; None where no row has the counter."""
    recs = [ran_as(g.get(f"{key}/{v}{suffix}"), "v3_wgmma") for v in V3_PIPELINES]
    xs = [r.get(counter) if r else None for r in recs]
    if not any(x is not None for x in xs):
        return None
    return [r["TFLOP/s"] if r else None for r in recs], xs


def pipeline_row(sh, tf, xs):
    return f"| {sh} | " + " | ".join(fmt(t) for t in tf) + " | " + " | ".join(fmt(x, 2) for x in xs) + " |"


def gemm_table(g, rows, numbers):
    rows.append("| GEMM (bf16 in, bf16 out, f32 accumulate) | v1 SIMT TFLOP/s | v2 mma.sync TFLOP/s | v3 wgmma TFLOP/s "
                "| v3 ws TFLOP/s | v3 pingpong TFLOP/s | v3 ws, a block per tile TFLOP/s | v3 ws, direct stores TFLOP/s "
                "| cuBLAS TFLOP/s | v2 / cuBLAS | v3 / cuBLAS | v3 ws / cuBLAS | v3 pingpong / cuBLAS "
                "| unfused / fused (v2, v3) |")
    rows.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    shapes = sorted({k.split("/")[2] for k in g if k.startswith("gemm/")}, key=lambda s: (not s[0].isdigit(), s))
    shapes = [sh for sh in shapes if not sh.startswith("ksweep_")]  # gemm_k_table's
    for dt in ("bf16->bf16", "f32->f32"):
        for sh in shapes:
            # v3_wgmma_ws is persistent (a block per SM); v3_wgmma_ws_per_tile the same kernels with a block per tile;
            # v3_wgmma_ws_direct with the direct-store epilogue instead of the staged one (runs before 2026-11-28: both
            # epilogues were replaced by band_epilogue.cuh's)
            # v3_wgmma_pingpong: the pingpong pipeline (since 2026-11-28)
            v1, v2, v3, v3ws, v3pp, v3pt, v3d, cu = (g.get(f"gemm/{dt}/{sh}/{v}")
                                                     for v in ("v1_simt", "v2_mma", "v3_wgmma", "v3_wgmma_ws",
                                                               "v3_wgmma_pingpong", "v3_wgmma_ws_per_tile",
                                                               "v3_wgmma_ws_direct", "vendor"))
            if not cu:
                continue
            # v3 only where it really ran (its label is the variant that ran: v2 off Hopper or for unaligned operands)
            v3, v3ws, v3pp, v3pt, v3d = (ran_as(r, "v3_wgmma") for r in (v3, v3ws, v3pp, v3pt, v3d))
            tf = lambda b: b["TFLOP/s"] if b else None  # noqa: E731
            ratio = tf(v2) / tf(cu) if v2 and cu else None
            ratio3 = tf(v3) / tf(cu) if v3 and cu else None
            ratio3ws = tf(v3ws) / tf(cu) if v3ws and cu else None
            ratio3pp = tf(v3pp) / tf(cu) if v3pp and cu else None
            # the GELU-epilogue rows: (the plain GEMM + the separate GELU kernel) / the fused GEMM, same run
            xu = lambda b: b.get("x_unfused") if b else None  # noqa: E731
            unfused = f"{fmt(xu(v2), 2)}, {fmt(xu(v3), 2)}" if xu(v2) or xu(v3) else "—"
            rows.append(f"| {sh} ({dt}) | {fmt(tf(v1))} | {fmt(tf(v2))} | {fmt(tf(v3))} | {fmt(tf(v3ws))} "
                        f"| {fmt(tf(v3pp))} | {fmt(tf(v3pt))} | {fmt(tf(v3d))} | {fmt(tf(cu))} "
                        f"| {fmt(ratio, 2)} | {fmt(ratio3, 2)} | {fmt(ratio3ws, 2)} | {fmt(ratio3pp, 2)} | {unfused} |")
            numbers.append({"op": "gemm", "dtype": dt, "shape": sh, "v1_tflops": tf(v1), "v2_tflops": tf(v2),
                            "v3_tflops": tf(v3), "v3_ws_tflops": tf(v3ws), "v3_pingpong_tflops": tf(v3pp),
                            "v3_pingpong_over_cublas": ratio3pp,
                            "v3_ws_per_tile_tflops": tf(v3pt), "v3_ws_direct_tflops": tf(v3d), "cublas_tflops": tf(cu),
                            "v2_over_cublas": ratio, "v3_over_cublas": ratio3, "v3_ws_over_cublas": ratio3ws,
                            "v2_x_unfused": xu(v2), "v3_x_unfused": xu(v3)})
    # GEMM v3's block tile (rows v3_wgmma_wide / v3_wgmma_narrow, since 2026-11-28): the tile its wave model chose
    # (row v3_wgmma) against the better of the two pinned, same run
    tiles = []
    for sh in shapes:
        key = lambda v: g.get(f"gemm/bf16->bf16/{sh}/{v}")  # noqa: E731
        auto, wide, narrow = key("v3_wgmma"), key("v3_wgmma_wide"), key("v3_wgmma_narrow")
        if not (auto and wide and narrow):
            continue
        best = max(wide["TFLOP/s"], narrow["TFLOP/s"])
        tiles.append(f"| {sh} | {auto['TFLOP/s']:.1f} | {wide['TFLOP/s']:.1f} | {narrow['TFLOP/s']:.1f} "
                     f"| {auto['TFLOP/s'] / best:.2f} |")
        numbers.append({"op": "gemm_v3_tile", "shape": sh, "chosen_tflops": auto["TFLOP/s"],
                        "wide_tflops": wide["TFLOP/s"], "narrow_tflops": narrow["TFLOP/s"]})
    if tiles:
        rows.append("")
        rows.append("| GEMM v3 block tile (bf16, barrier pipeline) | as chosen TFLOP/s | wide (128x256) TFLOP/s "
                    "| narrow (128x128) TFLOP/s | chosen / best |")
        rows.append("|---|---:|---:|---:|---:|")
        rows.extend(tiles)
    # Batch norm's reduction in GEMM v3's epilogue (rows ..._bn_stats / ..._bn_grad_sums, since 2026-11-28: ResNet-50's
    # 1x1 convolutions as NHWC GEMMs): TFLOP/s with it, and x_plain = the plain GEMM's time / this row's, same run
    v3_counter_table(g, [(sh, f"gemm/bf16->bf16/{sh}", {"shape": sh}) for sh in shapes if "_bn_" in sh], "x_plain", "",
                     "gemm_bn_epilogue", "| GEMM v3 with batch norm's reduction (bf16) | barrier TFLOP/s | ws TFLOP/s "
                     "| pingpong TFLOP/s | plain / with (barrier) | (ws) | (pingpong) |", rows, numbers)
    # GEMM v3's prefetch of its epilogue's inputs into L2 (2026-11-29, band_epilogue.cuh): x_no_prefetch = the row's
    # time with HPDT_EPILOGUE_PREFETCH=off / its time, same run, on every v3 row whose epilogue reads inputs
    v3_counter_table(g, [(f"{sh} ({dt})", f"gemm/{dt}/{sh}", {"dtype": dt, "shape": sh})
                         for dt in ("bf16->bf16", "f32->f32") for sh in shapes], "x_no_prefetch", "",
                     "gemm_epilogue_prefetch", "| GEMM v3, the epilogue's inputs prefetched into L2 | barrier TFLOP/s "
                     "| ws TFLOP/s | pingpong TFLOP/s | without / with (barrier) | (ws) | (pingpong) |", rows, numbers)
    # ... and the persistent pipelines' lookahead (2026-11-30, prefetch.cuh): x_prefetch_unit = the row's time with
    # HPDT_EPILOGUE_PREFETCH=unit (each unit's own inputs only) / its time (the next unit's too), same run
    v3_counter_table(g, [(f"{sh} ({dt})", f"gemm/{dt}/{sh}", {"dtype": dt, "shape": sh})
                         for dt in ("bf16->bf16", "f32->f32") for sh in shapes], "x_prefetch_unit", "",
                     "gemm_prefetch_ahead", "| GEMM v3, the next unit's inputs prefetched too | barrier TFLOP/s "
                     "| ws TFLOP/s | pingpong TFLOP/s | own only / ahead (barrier) | (ws) | (pingpong) |", rows, numbers)
    # GEMM v3's TMA-store epilogue (rows ..._tma_store, since 2026-11-30: HPDT_GEMM_V3_STORE=tma): TFLOP/s with it, and
    # x_direct = the direct stores' time / the TMA stores', same run (above 1: the TMA stores are faster); the K sweep's
    # shapes too (their t0 in the K table)
    all_shapes = sorted({k.split("/")[2] for k in g if k.startswith("gemm/bf16->bf16/")},
                        key=lambda s: (not s[0].isdigit(), s))
    v3_counter_table(g, [(sh, f"gemm/bf16->bf16/{sh}", {"shape": sh}) for sh in all_shapes], "x_direct", "_tma_store",
                     "gemm_tma_store", "| GEMM v3 by TMA stores (bf16) | barrier TFLOP/s | ws TFLOP/s | pingpong TFLOP/s "
                     "| direct / TMA (barrier) | (ws) | (pingpong) |", rows, numbers)


def v3_counter_table(g, entries, counter, suffix, op, header, rows, numbers):
    """A table of v3's three pipelines beside one counter of theirs: entries (label, key, fields of the number), the
    rows g[key/PIPELINE + suffix]; numbers op with {v3, v3_ws, v3_pingpong}_tflops and _COUNTER. None where no row has
    the counter."""
    body = []
    for label, key, fields in entries:
        got = v3_pipeline_rows(g, key, counter, suffix)
        if not got:
            continue
        tf, xs = got
        body.append(pipeline_row(label, tf, xs))
        rec = {"op": op, **fields}
        for pipe, t, x in zip(("v3", "v3_ws", "v3_pingpong"), tf, xs):
            rec[f"{pipe}_tflops"], rec[f"{pipe}_{counter}"] = t, x
        numbers.append(rec)
    if body:
        rows.extend(["", header, "|---|---:|---:|---:|---:|---:|---:|"] + body)


def fit_line(points):
    """Least squares t = t0 + slope x through [(x, t)]: (t0, slope), or None below 3 points or with one x only."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    mt = sum(t for _, t in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (t - mt) for x, t in points) / sxx
    return mt - slope * mx, slope


KSWEEP_VARIANTS = [("v3_wgmma", "v3 barrier"), ("v3_wgmma_ws", "v3 ws"), ("v3_wgmma_pingpong", "v3 pingpong"),
                   # since 2026-11-30: the TMA-store epilogue (HPDT_GEMM_V3_STORE=tma), whose t0 says what it saves
                   ("v3_wgmma_tma_store", "v3 barrier, TMA stores"), ("v3_wgmma_ws_tma_store", "v3 ws, TMA stores"),
                   ("v3_wgmma_pingpong_tma_store", "v3 pingpong, TMA stores"),
                   ("vendor", "cuBLAS")]


def gemm_k_table(g, rows, numbers, gpu=None):
    """hpdt-bench-gemm-cuda's ksweep_* rows (2026-11-29): one M x N GEMM (NT, bf16) at several K, per variant and
    epilogue the line t = t0 + K / rate through its times (least squares). t0 is what no k tile pays for (launch,
    prologue, pipeline fill, the epilogue; for cuBLAS's GELU rows also the separate GELU pass), rate the k loop's
    FLOP/s (2 M N a unit of K), against the GPU's nominal peak where known. "fixed at K = 768" is t0 over the
    measured time there: the share of ViT-B/16's K = 768 GEMMs that is not the k loop."""
    series = {}
    for key, rec in g.items():
        m = re.fullmatch(r"gemm/bf16->bf16/ksweep_(gelu_)?(\d+)x(\d+)_k(\d+)/(\w+)", key)
        if not m or not rec or not rec.get("TFLOP/s"):
            continue
        gelu, M, N, K, variant = bool(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5)
        if variant not in dict(KSWEEP_VARIANTS) or not ran_as(rec, "vendor" if variant == "vendor" else "v3_wgmma"):
            continue
        seconds = 2.0 * M * N * K / (rec["TFLOP/s"] * 1e12)
        series.setdefault((gelu, M, N, variant), {})[K] = (seconds, rec.get("x_unfused"))
    if not series:
        rows.append("(no ksweep rows: hpdt-bench-gemm-cuda before 2026-11-29)")
        return
    ks = sorted({k for pts in series.values() for k in pts})
    peak = peaks_of(gpu)
    rows.append("| epilogue (M x N, NT, bf16) | variant | " + " | ".join(f"K {k} ms" for k in ks) +
                " | fixed t0 µs | k loop TFLOP/s | k loop / peak | fixed at K = 768 | worst fit error | "
                "unfused / fused at K = 768 |")
    rows.append("|---|---|" + "---:|" * (len(ks) + 6))
    for gelu in (False, True):
        for M, N in sorted({(k[1], k[2]) for k in series}):
            for variant, label in KSWEEP_VARIANTS:
                pts = series.get((gelu, M, N, variant))
                if not pts:
                    continue
                line = fit_line([(k, t) for k, (t, _) in sorted(pts.items())])
                t0 = rate = share = err = None
                if line:
                    err = max(abs(line[0] + line[1] * k - t) / t for k, (t, _) in pts.items())
                if line and line[1] > 0:  # time falling with K: no k loop to speak of (the fit error says why)
                    t0, slope = line
                    rate = 2.0 * M * N / slope
                    share = t0 / pts[768][0] if 768 in pts else None
                unfused = pts[768][1] if 768 in pts else None
                cells = " | ".join(fmt(pts[k][0] * 1e3, 3) if k in pts else "—" for k in ks)
                of_peak = rate / peak[1] if rate and peak else None
                rows.append(f"| {'GELU (erf), kept input' if gelu else 'plain'} ({M}x{N}) | {label} | {cells} "
                            f"| {fmt(t0 * 1e6 if t0 is not None else None)} | {fmt(rate / 1e12 if rate else None)} "
                            f"| {fmt(of_peak, 2)} | {fmt(share, 2)} | {fmt(err, 2)} | {fmt(unfused, 2)} |")
                numbers.append({"op": "gemm_k_sweep", "gelu": gelu, "M": M, "N": N, "variant": variant,
                                "ms": {str(k): pts[k][0] * 1e3 for k in sorted(pts)}, "fixed_us":
                                t0 * 1e6 if t0 is not None else None, "k_loop_tflops": rate / 1e12 if rate else None,
                                "k_loop_over_peak": of_peak, "fixed_share_k768": share, "worst_fit_error": err,
                                "x_unfused_k768": unfused})
    rows.append("")
    rows.append("t0 and the k loop's rate from a least-squares line through each variant's times against K; t0 "
                "negative or a large fit error means the time is not linear in K (then read the ms columns).")


# The GEMMs of a ViT-B/16 training step (batch 64, the default fused GELU): each encoder block runs each once.
VIT_STEP_GEMMS = ["qkv_fwd", "qkv_dx", "qkv_dw", "proj_fwd", "proj_dx", "proj_dw", "fc1_fwd_gelu", "fc1_dx", "fc1_dw",
                  "fc2_fwd", "fc2_dx_gelu_grad", "fc2_dw"]
VIT_BLOCKS = 12


def vit_gemm_step_table(g, rows, numbers):
    """A ViT-B/16 step's GEMMs added up (hpdt-bench-gemm-cuda's vitb16_b64_* rows, bf16; each x 12 blocks): ms a step
    on GEMM v3 as the step runs it (barrier pipeline), on its best pipeline, and on cuBLAS, from each row's TFLOP/s and
    its shape's FLOPs (2 a b c for a x b -> c, in every direction). The attention, the patch convolution and the head
    are not GEMMs here."""
    per = []
    for name in VIT_STEP_GEMMS:
        found = [k for k in g if re.fullmatch(rf"gemm/bf16->bf16/vitb16_b64_{name}_\d+x\d+->\d+/vendor", k)]
        if not found:
            continue
        sh = found[0].split("/")[2]
        a, b, c = map(int, re.search(r"_(\d+)x(\d+)->(\d+)$", sh).groups())
        flop = 2.0 * a * b * c

        def ms(variant):
            r = ran_as(g.get(f"gemm/bf16->bf16/{sh}/{variant}"), "vendor" if variant == "vendor" else "v3_wgmma")
            return flop / (r["TFLOP/s"] * 1e12) * 1e3 if r and r.get("TFLOP/s") else None
        v3 = ms("v3_wgmma")
        pipelines = [t for t in (v3, ms("v3_wgmma_ws"), ms("v3_wgmma_pingpong")) if t is not None]
        per.append((name, v3, min(pipelines) if pipelines else None, ms("vendor")))
    if not per:
        rows.append("(no vitb16_b64 GEMM rows)")
        return
    rows.append("| GEMM of a ViT-B/16 block (bf16, batch 64) | a step runs it | v3 ms | v3, best pipeline ms "
                "| cuBLAS ms | v3 − cuBLAS, a step ms |")
    rows.append("|---|---:|---:|---:|---:|---:|")
    for name, v3, best, cu in per:
        diff = VIT_BLOCKS * (v3 - cu) if v3 is not None and cu is not None else None
        rows.append(f"| {name} | {VIT_BLOCKS} | {fmt(v3, 3)} | {fmt(best, 3)} | {fmt(cu, 3)} | {fmt(diff, 2)} |")
        numbers.append({"op": "vit_gemm_step", "gemm": name, "per_step": VIT_BLOCKS, "v3_ms": v3, "v3_best_ms": best,
                        "cublas_ms": cu})

    def total(i):
        vals = [e[i] for e in per]
        return None if any(v is None for v in vals) else VIT_BLOCKS * sum(vals)
    t3, tb, tc = total(1), total(2), total(3)
    complete = len(per) == len(VIT_STEP_GEMMS)
    label = f"**a step, {len(per)} of {len(VIT_STEP_GEMMS)} GEMMs**"
    rows.append(f"| {label} | {VIT_BLOCKS * len(per)} | {fmt(t3, 2)} | {fmt(tb, 2)} | {fmt(tc, 2)} "
                f"| {fmt(t3 - tc if t3 is not None and tc is not None else None, 2)} |")
    numbers.append({"op": "vit_gemm_step_total", "gemms": len(per), "complete": complete, "v3_ms": t3,
                    "v3_best_ms": tb, "cublas_ms": tc})
    rows.append("")
    rows.append("Each GEMM timed alone (its TFLOP/s), times the 12 encoder blocks; the fused-GELU rows are what the "
                "default step runs (cuBLAS's: its GEMM and a separate GELU pass).")


def conv_table(c, rows, numbers):
    # v3: `--gemm v3` (conv v3 / GEMM v3, NHWC only, where they take the case), ws: the same on the ws pipeline.
    # cuDNN twice: its heuristic's algorithm (the vendor backend's default) and Find's fastest (cudnn_find rows, since
    # 2026-11-28: --cudnn-algo find, PyTorch's cudnn.benchmark); the ratios are against the faster of the two.
    rows.append("| convolution (bf16, batch 256) | layout | direction | ours v2 (tensor cores) ms | v3 ms | v3 ws ms "
                "| v3 pingpong ms | v3 im2col ms | v3 TMA stores ms | cuDNN heuristic ms | cuDNN Find ms "
                "| v2 / best cuDNN speed | best v3 / best cuDNN speed |")
    rows.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k in sorted(c):
        parts = k.split("/")
        if len(parts) != 5 or parts[4] != "v2_tensor_core" or parts[2] != "bf16":
            continue
        layout = "NHWC" if parts[0] == "conv_nhwc" else "NCHW"
        get = lambda impl: c.get("/".join(parts[:4] + [impl]))  # noqa: E731
        cu, cuf = get("cudnn"), get("cudnn_find")
        v3, v3ws, v3pp = get("v3_wgmma"), get("v3_wgmma_ws"), get("v3_wgmma_pingpong")  # pingpong: since 2026-11-28
        v3i = get("v3_wgmma_im2col")  # HPDT_CONV_V3_LOAD=im2col: since 2026-11-30
        v3t = get("v3_wgmma_tma_store")  # HPDT_CONV_V3_STORE=tma (and GEMM v3's): since 2026-11-30, fourth session
        ours = c[k]
        cudnn_times = [r["real_time"] for r in (cu, cuf) if r]
        best_cudnn = min(cudnn_times) if cudnn_times else None
        ratio = best_cudnn / ours["real_time"] if best_cudnn else None
        v3_times = [r["real_time"] for r in (v3, v3ws, v3pp, v3i, v3t) if r]
        v3_ratio = best_cudnn / min(v3_times) if best_cudnn and v3_times else None
        ms = lambda r: fmt(r["real_time"] if r else None, 3)  # noqa: E731
        rows.append(f"| {parts[1]} | {layout} | {parts[3]} | {ours['real_time']:.3f} | {ms(v3)} | {ms(v3ws)} | {ms(v3pp)} "
                    f"| {ms(v3i)} | {ms(v3t)} | {ms(cu)} | {ms(cuf)} | {fmt(ratio, 2)} | {fmt(v3_ratio, 2)} |")
        numbers.append({"op": "conv", "case": parts[1], "layout": layout, "dir": parts[3], "ours_ms": ours["real_time"],
                        "v3_ms": v3["real_time"] if v3 else None, "v3_ws_ms": v3ws["real_time"] if v3ws else None,
                        "v3_pingpong_ms": v3pp["real_time"] if v3pp else None,
                        "v3_im2col_ms": v3i["real_time"] if v3i else None,
                        "v3_tma_store_ms": v3t["real_time"] if v3t else None,
                        "cudnn_ms": cu["real_time"] if cu else None, "cudnn_find_ms": cuf["real_time"] if cuf else None,
                        "ours_over_cudnn": ratio, "best_v3_over_cudnn": v3_ratio})


def conv_epilogue_table(c, rows, numbers):
    """v2 with its 4-wide epilogue (8-byte stores; the default since 2026-11-28) against the scalar one
    (HPDT_CONV_V2_EPILOGUE=scalar: the v2_scalar_epilogue rows), on the spotlight shapes."""
    found = False
    for k in sorted(c):
        parts = k.split("/")
        if len(parts) != 5 or parts[4] != "v2_scalar_epilogue":
            continue
        vec = c.get("/".join(parts[:4] + ["v2_tensor_core"]))
        if vec is None:
            continue
        if not found:
            rows.append("| convolution (batch 256) | layout | dtype | direction | v2 ms | v2, scalar epilogue ms "
                        "| scalar / 4-wide time |")
            rows.append("|---|---|---|---|---:|---:|---:|")
            found = True
        layout = "NHWC" if parts[0] == "conv_nhwc" else "NCHW"
        scalar = c[k]["real_time"]
        rows.append(f"| {parts[1]} | {layout} | {parts[2]} | {parts[3]} | {vec['real_time']:.3f} | {scalar:.3f} "
                    f"| {fmt(scalar / vec['real_time'], 2)} |")
        numbers.append({"op": "conv_epilogue", "case": parts[1], "layout": layout, "dtype": parts[2], "dir": parts[3],
                        "v2_ms": vec["real_time"], "v2_scalar_epilogue_ms": scalar})
    if not found:
        rows.append("(no v2_scalar_epilogue rows: hpdt-bench-conv-cuda before 2026-11-28)")


def conv_space_to_depth_table(c, rows, numbers):
    """v2's stem on space-to-depth (the default since 2026-11-29; NCHW and NHWC; forward and backward-filter, and the
    backward-data since the day's second session) against the direct kernels (HPDT_CONV_SPACE_TO_DEPTH=off): the
    x_direct counter, the direct time over the space-to-depth time, same run."""
    found = False
    for k in sorted(c):
        parts = k.split("/")
        if len(parts) != 5 or parts[4] != "v2_tensor_core" or "x_direct" not in c[k]:
            continue  # (v3_wgmma_tma_store rows carry an x_direct of their own: conv_tma_store_table)
        if not found:
            rows.append("| convolution (batch 256) | layout | dtype | direction | v2 on space-to-depth ms | v2 direct ms "
                        "| direct / space-to-depth time |")
            rows.append("|---|---|---|---|---:|---:|---:|")
            found = True
        ms, x = c[k]["real_time"], c[k]["x_direct"]
        layout = "NHWC" if parts[0] == "conv_nhwc" else "NCHW"
        rows.append(f"| {parts[1]} | {layout} | {parts[2]} | {parts[3]} | {ms:.3f} | {ms * x:.3f} | {fmt(x, 2)} |")
        numbers.append({"op": "conv_space_to_depth", "case": parts[1], "layout": layout, "dtype": parts[2],
                        "dir": parts[3], "v2_ms": ms, "x_direct": x})
    if not found:
        rows.append("(no x_direct counters: hpdt-bench-conv-cuda before 2026-11-29)")


def conv_v3_ab_table(c, rows, numbers, impl, counter, since, labels, op, keys):
    """conv v3's `impl` rows against --conv v3's default by their `counter` (the default's time over the row's, same
    run, back to back); with each shape's per_step, how much a step's --conv v3 convolutions would gain. labels: the
    default's and the row's columns and their ratio's, keys: their numbers' keys, op: the numbers' op."""
    found = []
    for k in sorted(c):
        parts = k.split("/")
        if len(parts) != 5 or parts[4] != impl or counter not in c[k]:
            continue
        ms, x = c[k]["real_time"], c[k][counter]
        found.append((parts, ms, x, c[k].get("per_step")))
    if not found:
        rows.append(f"(no {counter} counters: hpdt-bench-conv-cuda before {since})")
        return
    rows.append(f"| convolution (batch 256) | dtype | direction | a step runs it | v3 {labels[0]} ms | v3 {labels[1]} ms "
                f"| {labels[2]} time | a step's gain ms |")
    rows.append("|---|---|---|---:|---:|---:|---:|---:|")
    total, complete = 0.0, True
    for parts, ms, x, per_step in found:
        gain = per_step * (ms * x - ms) if per_step is not None else None
        complete = complete and gain is not None
        total += gain or 0.0
        rows.append(f"| {parts[1]} | {parts[2]} | {parts[3]} | {fmt(per_step, 0)} | {ms * x:.3f} | {ms:.3f} "
                    f"| {fmt(x, 2)} | {fmt(gain, 3)} |")
        numbers.append({"op": op, "case": parts[1], "dtype": parts[2], "dir": parts[3], "per_step": per_step,
                        keys[0]: ms * x, keys[1]: ms, counter: x})
    rows.append(f"| **a step, {len(found)} directions** | | | | | | | {fmt(total if complete else None, 2)} |")
    numbers.append({"op": op + "_total", "directions": len(found), "gain_ms": total if complete else None})


def conv_im2col_table(c, rows, numbers):
    """conv v3 loading its pixels by TMA's im2col mode (HPDT_CONV_V3_LOAD=im2col, since 2026-11-30) against boxes
    (the default): the v3_wgmma_im2col rows' x_box counter, the boxes' time over the im2col time."""
    conv_v3_ab_table(c, rows, numbers, "v3_wgmma_im2col", "x_box", "2026-11-30",
                     ("by boxes", "by im2col", "boxes / im2col"), "conv_im2col", ("v3_box_ms", "v3_im2col_ms"))


def conv_tma_store_table(c, rows, numbers):
    """--conv v3's forwards and backward-datas storing by TMA (HPDT_CONV_V3_STORE=tma and HPDT_GEMM_V3_STORE=tma:
    conv v3's and, for the 1x1 stride-1 convolutions, GEMM v3's TMA-store epilogue; since 2026-11-30, fourth session)
    against the direct stores (the default): the v3_wgmma_tma_store rows' x_direct, the direct time over the TMA
    one (no rows where they cannot apply: a strided backward-data's phases, the backward-filter)."""
    conv_v3_ab_table(c, rows, numbers, "v3_wgmma_tma_store", "x_direct", "2026-11-30 (fourth session)",
                     ("direct stores", "TMA stores", "direct / TMA"), "conv_tma_store",
                     ("v3_direct_ms", "v3_tma_store_ms"))


# Nominal dense bf16 tensor-core FLOP/s and HBM bytes/s (datasheets), by a substring of the GPU's name, first match
# wins: the roofline of "ResNet-50's convolutions, a step".
PEAKS = [("H100 PCIe", 756e12, 2.0e12), ("H100 NVL", 835e12, 3.9e12), ("H100", 989e12, 3.35e12),
         ("H200", 989e12, 4.8e12)]


def peaks_of(gpu):
    """(name, FLOP/s, bytes/s) of the first PEAKS entry in the GPU's name, or None."""
    for name, flops, bw in PEAKS:
        if gpu and name in gpu:
            return name, flops, bw
    return None


def conv_step_table(c, rows, numbers, gpu=None):
    """ResNet-50's convolutions added up, a step's worth: per shape the three directions' medians, each times how often
    a step runs it (the per_step counter, bench/kernels/resnet50_convs.h; since 2026-11-28), in each layout: ours v2,
    what --conv v3 runs (v3 where it takes the direction, v2 elsewhere), cuDNN (per direction the faster of its
    heuristic's and Find's algorithms, where both ran). With the GPU's peaks (PEAKS) and the rows' flop and bytes
    counters (since 2026-11-28), a roofline column: each direction at the larger of its FLOPs at the peak FLOP/s and
    its least traffic (input, weights, output once each) at the peak bandwidth."""
    shapes = {}  # shape -> {(layout, dir, impl): (ms, per_step)}
    work = {}  # (shape, dir) -> (flop, bytes) of one call, per_step
    for k, r in c.items():
        parts = k.split("/")
        if len(parts) != 5 or parts[2] != "bf16" or "per_step" not in r:
            continue
        shapes.setdefault(parts[1], {})[(parts[0], parts[3], parts[4])] = (r["real_time"], r["per_step"])
        if "flop" in r and "bytes" in r:
            work[(parts[1], parts[3])] = (r["flop"], r["bytes"], r["per_step"])
    peaks = peaks_of(gpu)
    if not shapes:
        rows.append("(no run with per_step counters: hpdt-bench-conv-cuda before 2026-11-28)")
        return
    cols = [("conv", "v2_tensor_core"), ("conv", "cudnn"), ("conv_nhwc", "v2_tensor_core"), ("conv_nhwc", "v3"),
            ("conv_nhwc", "v3_im2col"), ("conv_nhwc", "cudnn")]

    def roofline_ms(name):
        """ms a step of this shape at the GPU's peaks, or None without peaks or counters for every direction."""
        if peaks is None:
            return None
        total = 0.0
        for d in ("fwd", "bwd_data", "bwd_filter"):
            if (name, d) not in work:
                return None
            flop, nbytes, per_step = work[(name, d)]
            total += per_step * max(flop / peaks[1], nbytes / peaks[2]) * 1e3
        return total

    rows.append("| convolution (bf16, batch 256) | a step runs it | NCHW v2 ms | NCHW cuDNN ms | NHWC v2 ms "
                "| NHWC --conv v3 ms | NHWC --conv v3, im2col ms | NHWC cuDNN ms | NCHW v2 / cuDNN speed "
                "| NHWC v2 / cuDNN speed | roofline ms |")
    rows.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    have_im2col = any(k.endswith("/v3_wgmma_im2col") for k in c)

    def step_ms(t, layout, impl):
        """ms a step of this shape, three directions, or None where a direction was not timed."""
        total = 0.0
        for d in ("fwd", "bwd_data", "bwd_filter"):
            got = t.get((layout, d, "v3_wgmma" if impl == "v3" else impl))
            if impl == "v3_im2col":  # HPDT_CONV_V3_LOAD=im2col (since 2026-11-30): conv v3's forward and
                # backward-data; elsewhere what --conv v3 runs
                if not have_im2col:
                    return None  # a run before 2026-11-30
                got = t.get((layout, d, "v3_wgmma_im2col")) or t.get((layout, d, "v3_wgmma"))
            if got is None and impl in ("v3", "v3_im2col"):  # --conv v3 runs v2 where v3 does not take the direction
                got = t.get((layout, d, "v2_tensor_core"))
            if impl == "cudnn":  # the faster of the heuristic's and Find's (cudnn_find: since 2026-11-28)
                found = [r for r in (got, t.get((layout, d, "cudnn_find"))) if r is not None]
                got = min(found) if found else None
            if got is None:
                return None
            total += got[0] * got[1]
        return total

    def speed(ours, cudnn):
        return cudnn / ours if ours and cudnn else None

    def row(name, per_step, ms, nd):
        return (f"| {name} | {per_step} | " + " | ".join(fmt(ms[col], nd) for col in cols) +
                f" | {fmt(speed(ms[cols[0]], ms[cols[1]]), 2)} | {fmt(speed(ms[cols[2]], ms[cols[5]]), 2)} "
                f"| {fmt(ms['roofline'], nd)} |")

    keys = ["nchw_v2_ms", "nchw_cudnn_ms", "nhwc_v2_ms", "nhwc_conv_v3_ms", "nhwc_conv_v3_im2col_ms",
            "nhwc_cudnn_ms"]  # cols' order
    per_shape = sorted(((name, int(max(n for _, n in t.values())),
                         {**{col: step_ms(t, *col) for col in cols}, "roofline": roofline_ms(name)})
                        for name, t in shapes.items()), key=lambda e: (-e[1], e[0]))  # (name, per_step, {col: ms})
    for name, per_step, ms in per_shape:
        rows.append(row(name, per_step, ms, 3))
        numbers.append({"op": "conv_step", "case": name, "per_step": per_step,
                        **{k: ms[col] for k, col in zip(keys, cols)}, "roofline_ms": ms["roofline"]})
    # a total only where every shape has the column
    tot = {col: None if any(ms[col] is None for _, _, ms in per_shape) else sum(ms[col] for _, _, ms in per_shape)
           for col in cols + ["roofline"]}
    rows.append(row(f"**a step, {len(per_shape)} shapes**", sum(n for _, n, _ in per_shape), tot, 2))
    numbers.append({"op": "conv_step_total", "shapes": len(per_shape), **{k: tot[col] for k, col in zip(keys, cols)},
                    "roofline_ms": tot["roofline"]})
    rows.append("")
    rows.append("Each convolution timed alone, its medians times how often a step runs it (the stem's backward-data: "
                "never); cuDNN: per direction the faster of its heuristic's and Find's algorithms; a total is shown "
                "only where every shape and direction ran. Roofline: " +
                (f"{peaks[0]}'s nominal {peaks[1] / 1e12:.0f} TFLOP/s (dense bf16) and {peaks[2] / 1e12:.2f} TB/s, "
                 "each direction at the larger of its FLOPs' and its least traffic's time (input, weights and output "
                 "once each)." if peaks else f"no peaks for this GPU ({gpu or 'unknown'}: summarize.py's PEAKS)."))


def attention_table(a, torch_att, rows, numbers):
    sdpa = {}
    for r in torch_att or []:
        if "forward" not in r:
            continue
        key = f"b{r['b']}_h{r['heads']}_t{r['t']}_d{r['dh']}"
        fl = 4.0 * r["b"] * r["heads"] * r["t"] ** 2 * r["dh"]
        f = r["forward"]["s_median"]
        bwd = r["forward_backward"]["s_median"] - f
        sdpa[key] = (f * 1e3, bwd * 1e3, fl)
    # narrow: v2's one-m-tile-a-warp tiles where they differ from the default (HPDT_ATTENTION_V2_TILES=narrow, rows
    # v2_narrow: the dh-128 forward, the dh 32/64 backward), timed in the same run
    # v3: the one-pass backward (rows attention_bwd/v3, since 2026-11-28; its dQ adds in key order until 2026-11-30,
    # rotated since where the GPU holds a head's key blocks at once: the row's `rotated` counter, "(r)" after the
    # time); v3 keys: the same in key order (HPDT_ATTENTION_V3_ORDER=keys, rows attention_bwd/v3_keys, since 2026-11-30)
    # step 64: v2's backward with the dh-128 dK/dV pass at 64 queries a step (HPDT_ATTENTION_V2_DKDV_STEP=64, rows
    # attention_bwd/v2_step64, since 2026-11-30; dh 128 only)
    rows.append("| attention (bf16) | ours v2 fwd ms | fwd narrow ms | SDPA fwd ms | fwd: ours / SDPA speed | ours v2 bwd ms | bwd narrow ms | v3 bwd (one pass) ms | SDPA bwd ms | bwd: ours / SDPA speed | v3 bwd: ours / SDPA speed | v2 bwd, 64 a step ms | 64 a step: ours / SDPA speed | v3 bwd, key order ms | v3 key order / SDPA speed |")
    rows.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in sorted({k.split("/")[3] for k in a if k.startswith("attention_fwd/v2/bf16/")}):
        f = a.get(f"attention_fwd/v2/bf16/{key}")
        fn = a.get(f"attention_fwd/v2_narrow/bf16/{key}")
        b = a.get(f"attention_bwd/v2/bf16/{key}")
        bn = a.get(f"attention_bwd/v2_narrow/bf16/{key}")
        b3 = a.get(f"attention_bwd/v3/bf16/{key}")
        b64 = a.get(f"attention_bwd/v2_step64/bf16/{key}")
        b3k = a.get(f"attention_bwd/v3_keys/bf16/{key}")
        s = sdpa.get(key)
        fr = s[0] / f["real_time"] if s and f else None
        br = s[1] / b["real_time"] if s and b else None
        br3 = s[1] / b3["real_time"] if s and b3 else None
        br64 = s[1] / b64["real_time"] if s and b64 else None
        br3k = s[1] / b3k["real_time"] if s and b3k else None
        ms = lambda r: fmt(r["real_time"] if r else None, 3)
        rotated = b3 is not None and b3.get("rotated") == 1
        rows.append(f"| {key} | {ms(f)} | {ms(fn)} | {fmt(s[0] if s else None, 3)} | {fmt(fr, 2)} | "
                    f"{ms(b)} | {ms(bn)} | {ms(b3)}{' (r)' if rotated else ''} | {fmt(s[1] if s else None, 3)} | "
                    f"{fmt(br, 2)} | {fmt(br3, 2)} | {ms(b64)} | {fmt(br64, 2)} | {ms(b3k)} | {fmt(br3k, 2)} |")
        numbers.append({"op": "attention", "shape": key, "ours_fwd_ms": f["real_time"] if f else None,
                        "ours_fwd_narrow_ms": fn["real_time"] if fn else None,
                        "sdpa_fwd_ms": s[0] if s else None, "fwd_ratio": fr, "ours_bwd_ms": b["real_time"] if b else None,
                        "ours_bwd_narrow_ms": bn["real_time"] if bn else None,
                        "ours_bwd_v3_ms": b3["real_time"] if b3 else None,
                        "sdpa_bwd_ms": s[1] if s else None, "bwd_ratio": br, "bwd_v3_ratio": br3,
                        "ours_bwd_step64_ms": b64["real_time"] if b64 else None, "bwd_step64_ratio": br64,
                        "bwd_v3_rotated": rotated, "ours_bwd_v3_keys_ms": b3k["real_time"] if b3k else None,
                        "bwd_v3_keys_ratio": br3k})


COPY_GBS = 3000.0  # H100 SXM device-to-device copy, bytes read + written (KINDS.md of the device tool, 2026-11-13)


def layers_table(layers, rows, numbers):
    rows.append("| memory-bound op (batch 64) | bf16 GB/s | f32 GB/s | bf16 / copy | f32 / copy | bf16: unfused ops' time / fused "
                "| bf16: per-channel apply's time / flat (HPDT_BN_FLAT=off) "
                "| bf16: one value a thread's time / vector (HPDT_POOL_VECTOR=off) |")
    rows.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    ops = sorted({k.split("/", 2)[2] for k in layers if k.count("/") >= 2 and k.split("/")[1] in ("bf16", "f32")})
    for op in ops:
        bf, f32 = layers.get(f"layers/bf16/{op}"), layers.get(f"layers/f32/{op}")
        if bf is None and f32 is None:
            continue
        g = lambda b: b.get("GB/s") if b else None  # noqa: E731
        r = lambda v: v / COPY_GBS if v else None  # noqa: E731
        unfused = bf.get("x_unfused") if bf else None
        per_channel = bf.get("x_per_channel") if bf else None  # since 2026-11-29: narrow planes' flat apply
        scalar = bf.get("x_scalar") if bf else None  # since 2026-11-29 (second): max pool's vector kernels
        rows.append(f"| {op} | {fmt(g(bf), 0)} | {fmt(g(f32), 0)} | {fmt(r(g(bf)), 2)} | {fmt(r(g(f32)), 2)} | "
                    f"{fmt(unfused, 2)} | {fmt(per_channel, 2)} | {fmt(scalar, 2)} |")
        numbers.append({"op": "layer", "name": op, "bf16_gbs": g(bf), "f32_gbs": g(f32), "bf16_x_unfused": unfused,
                        "bf16_x_per_channel": per_channel, "bf16_x_scalar": scalar})


def elementwise_table(e, rows, numbers):
    """hpdt-bench-elementwise's GPU rows (each call then a synchronize): GB/s (bytes read + written) and the time of
    a call; the image decode's channels-last rows (since 2026-12-02) with x_nchw_then_transpose, the time of the NCHW
    decode and the transpose they replace over theirs (both back to back, the same run)."""
    recs = [(k, b) for k, b in sorted(e.items()) if "/cuda" in k]
    if not recs:
        rows.append("(no bench_elementwise.json, or no GPU rows in it)")
        return
    unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    rows.append("| row | GB/s | ms a call | x_nchw_then_transpose |")
    rows.append("|---|---:|---:|---:|")
    for k, b in recs:
        gbs = b["bytes_per_second"] / 1e9 if b.get("bytes_per_second") else None
        ms = b["real_time"] * unit.get(b.get("time_unit", "ns"), 1e-6) if "real_time" in b else None
        x = b.get("x_nchw_then_transpose")
        rows.append(f"| {k} | {fmt(gbs, 0)} | {fmt(ms, 3)} | {fmt(x, 2)} |")
        numbers.append({"op": "elementwise", "name": k, "gbs": gbs, "ms": ms, "x_nchw_then_transpose": x})


def launch_gaps_table(found, torch_attention, rows, numbers):
    """The per-op rows whose calls were not all timed on the GPU alone (their launch_gaps counter, since 2026-11-30:
    iterations whose start event the GPU reached before the host had issued the call; bench/kernels/gpu_timing.h),
    and SDPA's. 0 is expected but for calls that synchronise with the host (the optimizer's unfused peer)."""
    recs = [(k, b) for fam in ("gemm", "conv", "attention", "layers") for k, b in sorted(found[fam].items())
            if "launch_gaps" in b]
    sdpa = [(f"sdpa/b{r['b']}_h{r['heads']}_t{r['t']}_d{r['dh']}/{what}", r[what])
            for r in (torch_attention or []) for what in ("forward", "forward_backward")
            if isinstance(r.get(what), dict) and "launch_gaps" in r[what]]
    if not recs and not sdpa:
        rows.append("(no launch_gaps counters: runs before 2026-11-30, whose rows timed each call with its launch gap)")
        return
    gapped = [(k, b["launch_gaps"], b.get("iterations")) for k, b in recs if b["launch_gaps"] > 0]
    gapped += [(k, r["launch_gaps"], None) for k, r in sdpa if r["launch_gaps"] > 0]
    rows.append(f"{len(recs) + len(sdpa)} rows carry the counter; {len(gapped)} of them had iterations timed with "
                "their launch gap (the median over repetitions; SDPA's: over its timed calls).")
    if gapped:
        rows.append("")
        rows.append("| row | launch_gaps | iterations |")
        rows.append("|---|---:|---:|")
        for k, g, it in gapped:
            rows.append(f"| {k} | {fmt(g, 0)} | {fmt(it, 0)} |")
            numbers.append({"op": "launch_gaps", "row": k, "launch_gaps": g, "iterations": it})


def compress_table(docs, rows, numbers):
    """hpdt-allreduce-perf --device cuda --compress: each compression's out-of-place time on the GPU
    (comm::DeviceCompressor) beside the host mirror's (copied down, compressed on the host, copied back up), per size;
    x_mirror = the mirror's time / the device's."""
    if not docs:
        rows.append("(no allreduce_compress_cuda*.json)")
        return
    rows.append("| ranks | compression | size (MB) | device (ms) | host mirror (ms) | x_mirror | wire (KB/rank) "
                "| #wrong device / mirror |")
    rows.append("|---:|---|---:|---:|---:|---:|---:|---|")
    for doc in docs:
        out = [r for r in doc.get("results", []) if not r["in_place"] and r.get("compress", "none") != "none"]
        keys = sorted({(r["compress"], r["bytes"]) for r in out}, key=lambda k: (k[0], k[1]))
        for c, b in keys:
            at = {r.get("compress_on"): r for r in out if r["compress"] == c and r["bytes"] == b}
            dev, mir = at.get("device"), at.get("host mirror")
            t = lambda r: r["time_us"] / 1e3 if r else None  # noqa: E731
            x = t(mir) / t(dev) if dev and mir and t(dev) > 0 else None
            wire = (dev or mir or {}).get("wire_bytes")
            wrong = " / ".join("—" if r is None else str(r["wrong"]) for r in (dev, mir))
            rows.append(f"| {doc.get('ranks', '?')} | {c} | {b / 1e6:.1f} | {fmt(t(dev), 3)} | {fmt(t(mir), 3)} | "
                        f"{fmt(x, 2)} | {fmt(wire / 1e3 if wire and wire > 0 else None, 1)} | {wrong} |")
            numbers.append({"op": "compressed allreduce", "ranks": doc.get("ranks"), "compress": c, "bytes": b,
                            "device_ms": t(dev), "host_mirror_ms": t(mir), "x_mirror": x,
                            "wrong_device": dev["wrong"] if dev else None, "wrong_mirror": mir["wrong"] if mir else None})


UNSTEADY = 1.10   # slowest / fastest timed step above this: the row is marked
IDLE_SHARE = 0.25  # GPU idle inside a traced step above this share of the step: marked as well


def unsteady_mark(doc):
    """Why a training-step row is not a steady measurement ("" when it is): its timed steps' spread, or how long
    its traced steps (--kernel-trace, the same run) left the GPU idle. On the H200 of 2026-11-29 the vendor NHWC
    step ran 57 ms for 7 steps, then 61, 80 and 87 ms, and the next row (cuDNN's Find) 93-102 ms with the very same
    kernels: the GPU idle half of each traced step."""
    why = []
    steps = [s for s in doc.get("step_s") or [] if s and s > 0]
    if len(steps) >= 2 and max(steps) / min(steps) > UNSTEADY:
        why.append(f"steps {min(steps) * 1e3:.0f}-{max(steps) * 1e3:.0f} ms")
    trace = doc.get("trace") or {}
    busy, span = trace.get("busy_ms_per_step"), trace.get("span_ms_per_step")
    if busy and span and span > 0 and 1 - busy / span > IDLE_SHARE:
        why.append(f"GPU idle {span - busy:.1f} of {span:.1f} ms a traced step")
    return "; ".join(why)


def train_table(t, torch, rows, numbers):
    rows.append("| training step (bf16, f32 master weights) | hpdt ours img/s | hpdt --kernels vendor img/s | PyTorch eager img/s | PyTorch compile img/s | ours / eager | ours / compile | vendor / eager |")
    rows.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    unsteady = []
    for label, key, tmodel in [("ResNet-50, 224², batch 256, NCHW", "resnet50_bf16_{}", "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC", "resnet50_bf16_{}_nhwc", "resnet50"),
                               ("ResNet-50, 224², batch 256, NCHW, CUDA graph", "resnet50_bf16_{}_graph", "resnet50"),
                               # since 2026-11-28: cuDNN's algorithms by Find, as the PyTorch peer's cudnn.benchmark
                               ("ResNet-50, 224², batch 256, NHWC, vendor with --cudnn-algo find",
                                "resnet50_bf16_{}_nhwc_cudnn_find", "resnet50"),
                               # until 2026-11-27 --gemm v3 chose the NHWC convolutions' kernels too
                               ("ResNet-50, 224², batch 256, NHWC, --gemm v3 (conv v3 and GEMM v3)",
                                "resnet50_bf16_{}_nhwc_gemm_v3", "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, --gemm v3, ws pipeline",
                                "resnet50_bf16_{}_nhwc_gemm_v3ws", "resnet50"),
                               # since 2026-11-28: each convolution on the faster of v2 and v3, GEMM v3 by Find
                               ("ResNet-50, 224², batch 256, NCHW, batch norm's statistics and sums in their own "
                                "passes (HPDT_CONV_BN_STATS=separate)", "resnet50_bf16_{}_bn_stats_separate",
                                "resnet50"),
                               # since 2026-11-29: the epilogues' inputs not prefetched into L2 (the A/B)
                               ("ResNet-50, 224², batch 256, NCHW, epilogue inputs not prefetched "
                                "(HPDT_EPILOGUE_PREFETCH=off)", "resnet50_bf16_{}_no_prefetch", "resnet50"),
                               # since 2026-11-29: batch norm's apply on 14² and 7² planes per channel (the A/B)
                               ("ResNet-50, 224², batch 256, NCHW, batch norm's apply passes per channel on narrow "
                                "planes (HPDT_BN_FLAT=off)", "resnet50_bf16_{}_bn_per_channel", "resnet50"),
                               # since 2026-11-29: the projection shortcuts' batch norms in passes of their own
                               # (forward apply; backward reduce, since the sixth session)
                               ("ResNet-50, 224², batch 256, NCHW, projection shortcuts' batch norms in passes of "
                                "their own (HPDT_BN_RESIDUAL=separate: forward apply, backward reduce)",
                                "resnet50_bf16_{}_bn_residual_separate",
                                "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, --conv find --gemm-tuning find",
                                "resnet50_bf16_{}_nhwc_conv_find", "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3 (conv v3, 1×1 on GEMM v3)",
                                "resnet50_bf16_{}_nhwc_conv_v3", "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, ws pipeline",
                                "resnet50_bf16_{}_nhwc_conv_v3ws", "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, pingpong pipeline",
                                "resnet50_bf16_{}_nhwc_conv_v3pingpong", "resnet50"),
                               # since 2026-11-28: conv v3's and GEMM v3's batch-norm statistics off (the A/B)
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, batch norm's statistics and sums in "
                                "their own passes", "resnet50_bf16_{}_nhwc_conv_v3_bn_stats_separate", "resnet50"),
                               # since 2026-11-29: the v3 epilogues' inputs not prefetched into L2 (the A/B)
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, epilogue inputs not prefetched "
                                "(HPDT_EPILOGUE_PREFETCH=off)", "resnet50_bf16_{}_nhwc_conv_v3_no_prefetch", "resnet50"),
                               # since 2026-11-30: each unit's own inputs only, no lookahead (the A/B)
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, each unit's epilogue inputs prefetched "
                                "as it starts, not the next one's (HPDT_EPILOGUE_PREFETCH=unit)",
                                "resnet50_bf16_{}_nhwc_conv_v3_prefetch_unit", "resnet50"),
                               # since 2026-11-29 (ninth session): the switches together, which chose the defaults
                               ("ResNet-50, 224², batch 256, NCHW, batch norm's reductions in their own passes, "
                                "epilogue inputs not prefetched", "resnet50_bf16_{}_bn_stats_separate_no_prefetch",
                                "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, batch norm's reductions in their own passes",
                                "resnet50_bf16_{}_nhwc_bn_stats_separate", "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, batch norm's reductions in their own "
                                "passes, epilogue inputs not prefetched",
                                "resnet50_bf16_{}_nhwc_conv_v3_bn_stats_separate_no_prefetch", "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, --conv find --gemm-tuning find, batch norm's "
                                "reductions in their own passes", "resnet50_bf16_{}_nhwc_conv_find_bn_stats_separate",
                                "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, batch norm's reductions in their own "
                                "passes, CUDA graph", "resnet50_bf16_{}_nhwc_conv_v3_bn_stats_separate_graph",
                                "resnet50"),
                               # since 2026-11-29 (ninth session): the A/B rows of the new defaults
                               ("ResNet-50, 224², batch 256, NCHW, batch norm's reductions in the convolutions' "
                                "epilogues (HPDT_CONV_BN_STATS=epilogue)", "resnet50_bf16_{}_bn_stats_epilogue",
                                "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, batch norm's reductions in the "
                                "epilogues (HPDT_CONV_BN_STATS=epilogue)", "resnet50_bf16_{}_nhwc_conv_v3_bn_stats_epilogue",
                                "resnet50"),
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, CUDA graph",
                                "resnet50_bf16_{}_nhwc_conv_v3_graph", "resnet50"),
                               # since 2026-11-30: the fused ReLUs' masks from their outputs (the A/B)
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, the fused ReLUs' backward masks from "
                                "their outputs (HPDT_BN_RELU_MASK=output)",
                                "resnet50_bf16_{}_nhwc_conv_v3_relu_mask_output", "resnet50"),
                               # since 2026-11-30: the v3 pipelines by the old rule, barrier throughout (the A/B)
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, GEMM v3 and conv v3 on the barrier "
                                "pipeline throughout (HPDT_GEMM_V3_PIPELINE=barrier)",
                                "resnet50_bf16_{}_nhwc_conv_v3_barrier", "resnet50"),
                               # since 2026-11-30: conv v3's A tiles by TMA's im2col mode (the candidate default)
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, conv v3's A tiles by im2col "
                                "(HPDT_CONV_V3_LOAD=im2col)", "resnet50_bf16_{}_nhwc_conv_v3_im2col", "resnet50"),
                               # since 2026-11-30: GEMM v3's plain GEMMs by TMA stores (the A/B)
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, GEMM v3 by TMA stores "
                                "(HPDT_GEMM_V3_STORE=tma)", "resnet50_bf16_{}_nhwc_conv_v3_tma_store", "resnet50"),
                               # since 2026-12-01: the loss and skip flag read inside the step, as hpdt-train (the A/B)
                               ("ResNet-50, 224², batch 256, NHWC, --conv v3, the loss and skip flag read inside the "
                                "step (--sync-loss)", "resnet50_bf16_{}_nhwc_conv_v3_sync_loss", "resnet50"),
                               ("ViT-B/16, 224², batch 64", "vit_b16_bf16_{}", "vit_b16"),
                               ("ViT-B/16, 224², batch 64, CUDA graph", "vit_b16_bf16_{}_graph", "vit_b16"),
                               ("ViT-B/16, 224², batch 64, the loss and skip flag read inside the step (--sync-loss)",
                                "vit_b16_bf16_{}_sync_loss", "vit_b16"),
                               ("ViT-B/16, 224², batch 64, --gemm v2", "vit_b16_bf16_{}_gemm_v2", "vit_b16"),
                               # until 2026-11-27 v2 was the default and v3 a row of its own
                               ("ViT-B/16, 224², batch 64, --gemm v3", "vit_b16_bf16_{}_gemm_v3", "vit_b16"),
                               ("ViT-B/16, 224², batch 64, GEMM v3, ws pipeline", "vit_b16_bf16_{}_gemm_v3ws",
                                "vit_b16"),
                               ("ViT-B/16, 224², batch 64, GEMM v3, pingpong pipeline",
                                "vit_b16_bf16_{}_gemm_v3pingpong", "vit_b16"),
                               # since 2026-11-28
                               ("ViT-B/16, 224², batch 64, --gemm-tuning find (GEMM v3's plan per shape, timed)",
                                "vit_b16_bf16_{}_gemm_find", "vit_b16"),
                               ("ViT-B/16, 224², batch 64, --gelu separate (GELU not in the GEMMs' epilogues)",
                                "vit_b16_bf16_{}_gelu_separate", "vit_b16"),
                               # since 2026-11-29 (ninth session) separate is the default, and fused the A/B row
                               ("ViT-B/16, 224², batch 64, --gelu fused (GELU in the GEMMs' epilogues)",
                                "vit_b16_bf16_{}_gelu_fused", "vit_b16"),
                               ("ViT-B/16, 224², batch 64, attention's one-pass backward (HPDT_ATTENTION_BACKWARD=v3)",
                                "vit_b16_bf16_{}_attention_v3", "vit_b16"),
                               ("ViT-B/16, 224², batch 64, GEMM v3 by TMA stores (HPDT_GEMM_V3_STORE=tma)",
                                "vit_b16_bf16_{}_tma_store", "vit_b16"),
                               ("ViT-B/16, 224², batch 64, epilogue inputs not prefetched (HPDT_EPILOGUE_PREFETCH=off)",
                                "vit_b16_bf16_{}_no_prefetch", "vit_b16"),
                               ("ViT-B/16, 224², batch 64, --gelu fused, GELU as a pass after GEMM v3 (HPDT_GEMM_V3_ACTIVATION=pass)",
                                "vit_b16_bf16_{}_activation_pass", "vit_b16"),
                               ("ViT-B/16, 224², batch 64, --gelu fused, GELU as a pass after GEMM v3, --gemm-tuning find",
                                "vit_b16_bf16_{}_activation_pass_find", "vit_b16")]:
        ours = t.get(key.format("ours"), {}).get("img_per_s_median")
        vend = t.get(key.format("vendor"), {}).get("img_per_s_median")
        if ours is None and vend is None:
            continue  # a row that run did not time
        eager = torch.get((tmodel, "eager"), {}).get("img_per_s_median")
        comp = torch.get((tmodel, "compile"), {}).get("img_per_s_median")
        r = lambda a, b: a / b if a and b else None  # noqa: E731
        marks = {side: unsteady_mark(t.get(key.format(side), {})) for side in ("ours", "vendor")}
        for side in ("ours", "vendor"):
            if marks[side]:
                unsteady.append(f"{label}, {side}: {marks[side]}")
        rows.append(f"| {label} | {fmt(ours)}{'†' if marks['ours'] else ''} | {fmt(vend)}{'†' if marks['vendor'] else ''} | "
                    f"{fmt(eager)} | {fmt(comp)} | {fmt(r(ours, eager), 2)} | "
                    f"{fmt(r(ours, comp), 2)} | {fmt(r(vend, eager), 2)} |")
        numbers.append({"op": "train_step", "what": label, "ours_img_s": ours, "vendor_img_s": vend,
                        "torch_eager_img_s": eager, "torch_compile_img_s": comp,
                        "unsteady": {k: v for k, v in marks.items() if v} or None})
    if unsteady:
        rows.append("")
        rows.append(f"† Not a steady measurement: its timed steps differ by more than {UNSTEADY - 1:.0%} (slowest / "
                    "fastest), or its traced steps left the GPU idle more than "
                    f"{IDLE_SHARE:.0%} of a step. Something else had the host or the GPU (the summary's \"at start\" "
                    "notes say what ran then), or the step waits on its host; read it again before acting on it.")
        for u in unsteady:
            rows.append(f"- {u}")


# hpdt-train's model name -> the benchmark's step of the same configuration (its defaults)
HPDT_TRAIN_BENCH_STEP = {"resnet50": ("ResNet-50, batch 256", "resnet50_bf16_ours_nhwc_conv_v3"),
                         "vit-b": ("ViT-B/16, batch 64", "vit_b16_bf16_ours")}


def hpdt_train_table(runs, steps, rows, numbers):
    """hpdt-train's own runs (scripts/gpu/train_throughput.sh: 224x224 synthetic data, bf16, its defaults) beside
    hpdt-bench-train-step's step of the same model: the summary's median step and its breakdown (ms), and x_bench =
    the trainer's img/s over the benchmark's (what the reader, the copy up and the trainer's bookkeeping cost)."""
    if not runs:
        rows.append("(no train_hpdt_train_*.jsonl)")
        return
    rows.append("| hpdt-train (bf16, 224², synthetic data) | img/s | step (ms) | data wait | forward | backward | "
                "exposed comm | optimizer | gradients | benchmark step img/s | x_bench |")
    rows.append("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for model in sorted(runs):
        r = runs[model]
        base, _, tag = model.partition("_")  # train_throughput.sh's HPDT_THROUGHPUT_TAG: model_tag
        label, key = HPDT_TRAIN_BENCH_STEP.get(base, (base, None))
        if tag:
            label += f" ({tag})"
        if isinstance(r.get("cuda_graph"), dict):  # one launch: its forward column holds forward and backward
            label += " [forward = forward + backward, one graph]"
        ips = r.get("throughput_img_s")
        bench = steps.get(key, {}).get("img_per_s_median") if key else None
        x = ips / bench if ips and bench else None
        ms = lambda k: r[k] * 1e3 if isinstance(r.get(k), (int, float)) else None  # noqa: E731
        rows.append(f"| {label} | {fmt(ips, 0)} | {fmt(ms('step_time_s'))} | {fmt(ms('data_wait_s'))} | "
                    f"{fmt(ms('forward_s'))} | {fmt(ms('backward_s'))} | {fmt(ms('exposed_comm_s'))} | "
                    f"{fmt(ms('optimizer_s'))} | {r.get('grad_sync', '?')} | {fmt(bench, 0)} | {fmt(x, 2)} |")
        numbers.append({"op": "hpdt-train", "model": model, "img_s": ips, "step_ms": ms("step_time_s"),
                        "data_wait_ms": ms("data_wait_s"), "bench_step_img_s": bench, "x_bench": x})


def compile_time_table(torch, prewarm, rows, numbers):
    """torch.compile's first step, cold (the prewarm that run.sh starts while the tests run, since 2026-11-29) and
    in the timed peer (warm if the inductor caches carried over between the processes), beside its img/s."""
    models = [m for m in ("resnet50", "vit_b16") if m in prewarm or (m, "compile") in torch]
    if not models:
        rows.append("(no torch.compile record: no prewarm_torch_compile.json or compile peer in these runs)")
        return
    rows.append("| model | cold first step s (prewarm) | first step s (timed peer) | compile img/s |")
    rows.append("|---|---:|---:|---:|")
    for m in models:
        cold = prewarm.get(m, {}).get("first_step_s")
        peer = torch.get((m, "compile"), {})
        warm, ips = peer.get("first_step_s"), peer.get("img_per_s_median")
        rows.append(f"| {m} | {fmt(cold)} | {fmt(warm)} | {fmt(ips)} |")
        numbers.append({"op": "torch_compile_time", "model": m, "cold_first_step_s": cold, "peer_first_step_s": warm,
                        "img_s": ips})


def gemm_found_table(t, rows, numbers):
    """GEMM v3's Find in the training steps run with --gemm-tuning find (their JSON's gemm_v3_found, since
    2026-11-28): per GEMM shape, the plan taken and every candidate's time, against the heuristic's plan (by rule:
    the barrier pipeline, the tile by whole waves, which the step without the flag runs)."""
    runs = [(k, r) for k, r in sorted(t.items()) if r.get("gemm_v3_found")]
    if not runs:
        rows.append("(no step run with --gemm-tuning find: hpdt-bench-train-step before 2026-11-28)")
        return
    plans = []
    for _, r in runs:
        for f in r["gemm_v3_found"]:
            plans += [p for p in f.get("ms", {}) if p not in plans]
    # plans with another way of moving data (since 2026-11-30): conv v3 loading by im2col ("+im2col") and GEMM v3
    # (since the fourth session, conv v3 too) storing by TMA ("+tma store"), a plan possibly both
    # ("barrier/slim+im2col+tma store"); for each kind present, a column of the other plans' best over theirs
    kinds = [(suffix, head, note) for suffix, head, note in
             (("+im2col", "boxes' best / im2col's best", "conv v3 loading by im2col"),
              ("+tma store", "direct stores' best / TMA stores' best", "storing by TMA"))
             if any(suffix in p for p in plans)]
    rows.append("| step | GEMM (M x N x K, A/B transposed, dtypes, epilogue) | plan taken | "
                + " | ".join(f"{p} ms" for p in plans) + " | best / barrier's best |"
                + "".join(f" {head} |" for _, head, _ in kinds))
    rows.append("|---|---|---|" + "---:|" * (len(plans) + 1 + len(kinds)))
    for key, r in runs:
        for f in r["gemm_v3_found"]:
            ms = f.get("ms", {})
            best = ms.get(f["plan"])
            barrier = [v for p, v in ms.items()
                       if p.startswith("barrier/") and "+im2col" not in p and "+tma store" not in p]
            gain = min(barrier) / best if best and barrier else None
            row = (f"| {key} | {f['call']} | {f['plan']} | " + " | ".join(fmt(ms.get(p), 3) for p in plans)
                   + f" | {fmt(gain, 2)} |")
            for suffix, _, _ in kinds:
                others = [v for p, v in ms.items() if suffix not in p]
                these = [v for p, v in ms.items() if suffix in p]
                row += f" {fmt(min(others) / min(these) if others and these else None, 2)} |"
            rows.append(row)
            numbers.append({"op": "gemm_v3_found", "step": key, "call": f["call"], "plan": f["plan"], "ms": ms})
    rows.append("")
    rows.append("Each candidate timed once per shape at its first call (median of 5 after a warm-up, on scratch "
                "outputs); best / barrier's best: how much faster the plan taken is than the barrier pipeline's best "
                "tile (loading by boxes, storing directly)"
                + "".join(f"; {head}: above 1, {note} was faster" for _, head, note in kinds) + ".")


def conv_found_table(t, rows, numbers):
    """The NHWC convolutions' kernels in the training steps run with --conv find (their JSON's conv_found, since
    2026-11-28): per convolution, v2 or v3 and both times; v2 untimed where v3 does not take it. Then what the
    choice saves a step against v2 alone and v3 alone (each convolution timed once, as the step runs it)."""
    runs = [(k, r) for k, r in sorted(t.items()) if r.get("conv_found")]
    if not runs:
        rows.append("(no step run with --conv find: hpdt-bench-train-step before 2026-11-28)")
        return
    rows.append("| step | convolution (direction, kernel, channels, input, dtypes, fused epilogue) | taken | v2 ms | v3 ms "
                "| v2 / v3 time |")
    rows.append("|---|---|---|---:|---:|---:|")
    for key, r in runs:
        tot = {"v2": 0.0, "v3": 0.0, "taken": 0.0}
        for f in r["conv_found"]:
            ms = f.get("ms", {})
            v2, v3 = ms.get("v2"), ms.get("v3")
            rows.append(f"| {key} | {f['call']} | {f['choice']} | {fmt(v2, 3)} | {fmt(v3, 3)} | "
                        f"{fmt(v2 / v3 if v2 and v3 else None, 2)} |")
            numbers.append({"op": "conv_found", "step": key, "call": f["call"], "choice": f["choice"], "ms": ms})
            if v2 and v3:
                tot["v2"] += v2
                tot["v3"] += v3
                tot["taken"] += min(v2, v3)
        rows.append(f"| {key} | **the timed ones, each once** | | {fmt(tot['v2'], 3)} | {fmt(tot['v3'], 3)} | "
                    f"taken: {fmt(tot['taken'], 3)} |")
    rows.append("")
    rows.append("Each convolution timed once at its first call (median of 5 after a warm-up, on a scratch output); a "
                "step runs some of them several times (ResNet-50's bottlenecks repeat), so the totals are not a step's.")


def breakdown_section(dirs, rows, numbers):
    by_model = kernel_breakdown.collect(dirs)
    if not by_model:
        rows.append("No kernel traces in these runs (hpdt-bench-train-step --kernel-trace and the PyTorch peer's "
                    "--kernel-trace-steps, since 2026-11-28).")
        return
    rows.append("One column per traced step (hpdt: the key of its train_step_*.json; torch: eager, compile): GPU time "
                "by kernel family (scripts/gpu/kernel_breakdown.py names them), then the step's busy time and span.")
    rows.append("")
    kernel_breakdown.tables(by_model, rows, numbers)


def sass_section(dirs, rows):
    """The profiled kernels' machine code, as device.sh's ncu_reports.sh summarised it (bench/*.sass_summary.txt:
    size, stall reasons, opcode mix, hottest instructions), one block per report; the full listings stay in the
    results (bench/*.sass.txt)."""
    found = [(d, p) for d in dirs for p in sorted(glob.glob(os.path.join(d, "bench", "*.sass_summary.txt")))]
    if not found:
        rows.append("No SASS in these runs (device.sh renders each Nsight Compute report's source page since "
                    "2026-11-28).")
        return
    for d, p in found:
        name = os.path.basename(p)[:-len(".sass_summary.txt")]
        rows.append(f"{name} ({os.path.basename(os.path.normpath(d))}; every instruction: bench/{name}.sass.txt):")
        rows.append("")
        rows.append("```")
        with open(p, errors="replace") as f:
            rows.extend(line.rstrip("\n") for line in f)
        rows.append("```")
        rows.append("")


def gpu_name(f):
    """The GPU's name: the PyTorch peer's environment, else a training-step record's."""
    gpu = f["torch"].get("environment", {}).get("gpu")
    for r in f["train"].values():
        gpu = gpu or r.get("gpu")
    return gpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    f = collect(a.dirs)
    rows, numbers = [], []
    env = f["torch"].get("environment", {})
    build = {}
    for d in a.dirs:
        m = re.search(r"\{.*\}", open(os.path.join(d, "environment.txt")).read(), re.S) if os.path.exists(
            os.path.join(d, "environment.txt")) else None
        if m:
            try:
                build = json.loads(m.group(0))
            except ValueError:
                pass
    rows.append(f"GPU: {env.get('gpu', '?')}, driver {env.get('driver', '?')}, CUDA {env.get('cuda', '?')}, "
                f"cuDNN {env.get('cudnn', '?')}, PyTorch {env.get('torch', '?')}; hpdt built at {build.get('git_commit', '?')[:12]} "
                f"(nvcc {' '.join(build.get('nvcc', []))}). Medians; every ratio is of two numbers from the same run.")
    rows.append("")
    for path, kept in f["cut"]:
        rows.append(f"Cut short (the lease's deadline): `{os.path.relpath(path)}`, the {kept} records written before "
                    "the cut are read; its other rows did not run.")
        rows.append("")
    sections = [("Training step", lambda: train_table(f["train"], f["torch"], rows, numbers)),
                ("hpdt-train on the GPU: its own steps beside the benchmark's (scripts/gpu/train_throughput.sh)",
                 lambda: hpdt_train_table(f["hpdt_train"], f["train"], rows, numbers)),
                ("torch.compile's compilation (the peer's first step)",
                 lambda: compile_time_table(f["torch"], f["torch_prewarm"], rows, numbers)),
                ("Where a training step's GPU time goes (kernel traces, ms a step, by kernel family)",
                 lambda: breakdown_section(a.dirs, rows, numbers)),
                ("GEMM", lambda: gemm_table(f["gemm"], rows, numbers)),
                ("GEMM time against K: the fixed part of a call and the k loop's rate",
                 lambda: gemm_k_table(f["gemm"], rows, numbers, gpu_name(f))),
                ("GEMM v3's plans by Find, in a training step (--gemm-tuning find)",
                 lambda: gemm_found_table(f["train"], rows, numbers)),
                ("ViT-B/16's GEMMs, a step (ms; each timed alone, times the 12 encoder blocks)",
                 lambda: vit_gemm_step_table(f["gemm"], rows, numbers)),
                ("Convolution", lambda: conv_table(f["conv"], rows, numbers)),
                ("NHWC convolutions' kernels by Find, in a training step (--conv find)",
                 lambda: conv_found_table(f["train"], rows, numbers)),
                ("Convolution v2's epilogue: 4 outputs a store against 1 (same bits)",
                 lambda: conv_epilogue_table(f["conv"], rows, numbers)),
                ("The stem on space-to-depth (x_direct: HPDT_CONV_SPACE_TO_DEPTH=off against on)",
                 lambda: conv_space_to_depth_table(f["conv"], rows, numbers)),
                ("conv v3 by im2col against boxes (x_box: HPDT_CONV_V3_LOAD=im2col against the default)",
                 lambda: conv_im2col_table(f["conv"], rows, numbers)),
                ("--conv v3 by TMA stores against direct ones (x_direct: HPDT_CONV_V3_STORE=tma against the default)",
                 lambda: conv_tma_store_table(f["conv"], rows, numbers)),
                ("ResNet-50's convolutions, a step (ms; each shape's three directions, times how often a step runs it)",
                 lambda: conv_step_table(f["conv"], rows, numbers, gpu_name(f))),
                ("Attention", lambda: attention_table(f["attention"], f["torch"].get("attention"), rows, numbers)),
                (f"Memory-bound layers (against a {COPY_GBS:.0f} GB/s device copy)",
                 lambda: layers_table(f["layers"], rows, numbers)),
                ("Elementwise kernels and the image decode (hpdt-bench-elementwise)",
                 lambda: elementwise_table(f["elementwise"], rows, numbers)),
                ("Per-op rows timed with their launch gap (launch_gaps; results/gpu/README.md, item 16)",
                 lambda: launch_gaps_table(f, f["torch"].get("attention"), rows, numbers)),
                ("Gradient compression on the GPU against the host mirror (hpdt-allreduce-perf, out of place)",
                 lambda: compress_table(f["compress"], rows, numbers)),
                ("Machine code of the profiled kernels (Nsight Compute's source page: stall samples per instruction)",
                 lambda: sass_section(a.dirs, rows))]
    for title, fn in sections:
        rows.append(f"### {title}")
        rows.append("")
        fn()
        rows.append("")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".md", "w") as fo:
        fo.write("\n".join(rows) + "\n")
    with open(a.out + ".json", "w") as fo:
        json.dump({"environment": env, "build": build, "results": numbers,
                   "runs": [{"dir": os.path.basename(os.path.normpath(d)), "summary": s} for d, s in f["summary"]]},
                  fo, indent=1)
    print("\n".join(rows))


if __name__ == "__main__":
    sys.exit(main())
