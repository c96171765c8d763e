#!/usr/bin/python3
"""Hot CPU kernels on this machine: our SGEMM beside OpenBLAS, and the 3x3 convolution at ResNet-20
shapes in both layouts (NCHW im2col + SGEMM, NHWC direct), at 1 and 2 OpenMP threads.

    /usr/bin/python3 scripts/bench/cpu_kernels_results.py BUILD_DIR OUT_PREFIX
    e.g. scripts/bench/cpu_kernels_results.py build/ci results/cpu_kernels_zen3

Runs hpdt-bench-layers-cpu (Google Benchmark; median of 5 repetitions) and writes OUT_PREFIX.json
(both runs' raw output, machine, vector ISA, load averages, git commit, OpenBLAS package) and
OUT_PREFIX.md (GFLOP/s tables with the ratios).
"""
import datetime
import json
import os
import subprocess
import sys


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def run(binary, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run([binary, "--benchmark_filter=sgemm|conv3x3", "--benchmark_min_time=0.3",
                          "--benchmark_repetitions=5", "--benchmark_report_aggregates_only=true",
                          "--benchmark_format=json"], env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def medians(doc):
    """{benchmark name without /real_time: GFLOP/s} of the median aggregates."""
    res = {}
    for b in doc["benchmarks"]:
        if b.get("aggregate_name") == "median":
            res[b["run_name"].replace("/real_time", "")] = b["FLOP/s"] / 1e9
    return res


def main():
    build, prefix = sys.argv[1], sys.argv[2]
    binary = os.path.join(build, "bench", "kernels", "hpdt-bench-layers-cpu")
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    flags = sh("grep -m1 '^flags' /proc/cpuinfo").split()
    doc = {
        "benchmark": "cpu_kernels", "date_utc": datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
        "command": f"OMP_NUM_THREADS=T OPENBLAS_NUM_THREADS=T {binary} --benchmark_filter='sgemm|conv3x3' "
                   "--benchmark_min_time=0.3 --benchmark_repetitions=5 --benchmark_report_aggregates_only=true "
                   "(T = 1, then 2)",
        "git_commit": sh(f"git -C {root} rev-parse HEAD") + ("-dirty" if sh(f"git -C {root} status --porcelain -uno") else ""),
        "cpu": sh("lscpu | grep 'Model name' | sed 's/.*: *//'") + ", family " + sh("lscpu | grep '^CPU family' | sed 's/.*: *//'")
               + " model " + sh("lscpu | grep '^Model:' | sed 's/.*: *//'"),
        "vector_isa": "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other",
        "openblas": sh("dpkg-query -W -f='${Package} ${Version}' libopenblas0-openmp 2>/dev/null"),
        "loadavg_before": os.getloadavg(),
    }
    doc["one_thread"] = run(binary, 1)
    doc["two_threads"] = run(binary, 2)
    doc["loadavg_after"] = os.getloadavg()
    with open(prefix + ".json.tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(prefix + ".json.tmp", prefix + ".json")

    m1, m2 = medians(doc["one_thread"]), medians(doc["two_threads"])
    lines = [f"# CPU kernels: {doc['cpu']} ({doc['vector_isa']})", "",
             f"Commit {doc['git_commit'][:12]}, {doc['date_utc']}, load average {doc['loadavg_before'][0]:.2f} "
             f"before and {doc['loadavg_after'][0]:.2f} after. GFLOP/s, median of 5. JSON: "
             f"{os.path.basename(prefix)}.json.", "",
             "## SGEMM: hpdt against OpenBLAS", "",
             "| shape | 1 thread: hpdt | OpenBLAS | ratio | 2 threads: hpdt | OpenBLAS | ratio |", "|---|---|---|---|---|---|---|"]
    for name in m1:
        if not name.startswith("BM_sgemm/hpdt/"):
            continue
        peer = name.replace("/hpdt/", "/openblas/")
        shape = name.split("/", 2)[2]
        row = [shape]
        for m in (m1, m2):
            h, o = m.get(name), m.get(peer)
            row += [f"{h:.1f}", f"{o:.1f}" if o else "-", f"{h / o:.2f}" if o else "-"]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## 3x3 convolution, batch 128: NHWC direct against NCHW im2col + SGEMM", "",
              "| pass, shape | 1 thread: NCHW | NHWC | ratio | 2 threads: NCHW | NHWC | ratio |", "|---|---|---|---|---|---|---|"]
    for name in m1:
        if not name.startswith("BM_conv3x3/") or "_nchw/" not in name:
            continue
        peer = name.replace("_nchw/", "_nhwc/")
        label = name.replace("BM_conv3x3/", "").replace("_nchw", "")
        row = [label]
        for m in (m1, m2):
            c, h = m.get(name), m.get(peer)
            row += [f"{c:.1f}", f"{h:.1f}", f"{h / c:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    with open(prefix + ".md.tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(prefix + ".md.tmp", prefix + ".md")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
