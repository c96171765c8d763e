#!/usr/bin/env bash
# usage: check_gpu_manifest.sh PYTHON SOURCE_DIR BUILD_DIR
# manifest.py must succeed (every listed benchmark and check executable built) and list the smoke check,
# the gpu-labelled test binaries of every op family and of core, each GPU benchmark, the named PyTorch
# peers (torch.compile's with its prewarm) and every end-to-end check of checks.txt.
set -euo pipefail
py=$1 src=$2 build=$3
m=$("$py" "$src/scripts/gpu/manifest.py" "$build" "$src/scripts/gpu/benchmarks.txt" "$src/scripts/gpu/checks.txt")
echo "$m"
fail=0
expect() { grep -qE "$1" <<< "$m" || { echo "check_gpu_manifest: the manifest lacks a line matching: $1" >&2; fail=1; }; }
expect $'^smoke\t2\tapps/smoke/hpdt-smoke\t'
for t in "$src"/tests/kernels/test_*_cuda.cpp; do
  expect $'^test\t0\ttests/kernels/'"$(basename "$t" .cpp)"$'\t'
done
expect $'^test\t0\ttests/core/test_core_cuda\t'
expect $'^test\t0\ttests/nn/test_nn_models_cuda\t'
expect $'^test\t2\ttests/comm/test_comm_device_allreduce'
for b in "$src"/bench/kernels/bench_*_cuda.cpp; do
  f=$(basename "$b" .cpp); f=${f#bench_}; f=${f%_cuda}
  expect $'^bench\t0\tbench/kernels/hpdt-bench-'"${f//_/-}"$'-cuda\t'
done
expect $'^peer\t0\ttorch_eager\tpython3 .*torch_gpu_train_step.py'
# torch.compile's prewarm (started after the smoke) and its peer, which waits for it
expect $'^prewarm\t0\ttorch_compile\tpython3 .*torch_gpu_train_step.py --modes compile'
expect $'^peer\t0\ttorch_compile\tpython3 .*torch_gpu_train_step.py'
[ "$(grep -c $'^prewarm\t' <<< "$m")" -eq 1 ] || { echo "check_gpu_manifest: one prewarm expected" >&2; fail=1; }
grep -vE '^(#|$)' "$src/scripts/gpu/checks.txt" | while read -r name _; do
  grep -qP "^check\t0\t\Q$name\E\t" <<< "$m" || { echo "check_gpu_manifest: check $name missing" >&2; exit 1; }
done || fail=1
# benchmarks.txt, line by line:
# - a benchmark filter must select rows (a typo would quietly time nothing, or profile nothing: an ncu peer's too);
# - an Nsight Compute profile must count each kernel apart, or take one launch of one row: a row launches its kernels
#   dozens of times (calibration, the x_* counters back to back, cuBLAS's for x_cublas), so "the first N matching
#   launches" are all the first row's first kernel;
# - a training step must get past hpdt-bench-train-step's command line and its checks of the flags together (a flag
#   it does not know, or a combination it refuses, would cost a lease that run): here, with no usable GPU, each stops
#   at "no usable GPU", which the binary checks after all of them. Skipped where a GPU is usable.
"$py" - "$src/scripts/gpu/benchmarks.txt" "$build" <<'PY' || fail=1
import os, re, shlex, subprocess, sys, tempfile
bench_file, build = sys.argv[1], sys.argv[2]
bad = steps = 0
gpu_usable = False


def train_step_refusal(words, at, out):
    """Why hpdt-bench-train-step (words[at]) refused the line's command line, or None; raises TimeoutExpired if it
    ran (a GPU is usable)."""
    env = dict(os.environ)
    for w in words[2:at] if words[0] == "peer" else []:  # peer NAME [env VAR=VALUE ...] EXE ARGS
        if "=" in w:
            k, v = w.split("=", 1)
            env[k] = v
    argv = [os.path.join(build, words[at].replace("{bin}/", ""))] + [w.replace("{out}", out) for w in words[at + 1:]]
    got = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
    said = got.stdout + got.stderr
    if got.returncode != 0 and "no usable GPU" in said:
        return None
    return said.strip().splitlines()[0] if said.strip() else f"rc {got.returncode}"


with tempfile.TemporaryDirectory() as out:
    for line in open(bench_file):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line)
        at = next((i for i, w in enumerate(words) if w.endswith("bench/train_step/hpdt-bench-train-step")), None)
        if at is not None:
            if gpu_usable:
                continue
            try:
                why = train_step_refusal(words, at, out)
            except subprocess.TimeoutExpired:
                print("train-step lines: skipped, a GPU is usable here (a step ran)")
                gpu_usable = True
                continue
            steps += 1
            if why is not None:
                name = words[1] if words[0] == "peer" else next(
                    (os.path.basename(w) for w in words if w.startswith("{out}/train_step_")), words[0])
                print(f"check_gpu_manifest: benchmarks.txt: {name}: hpdt-bench-train-step refused its command line:"
                      f" {why}", file=sys.stderr)
                bad = 1
            continue
        exe = next((w for w in words if re.search(r"(^|/)bench/\S*hpdt-bench-[\w-]+$", w)), None)
        filt = next((w.split("=", 1)[1] for w in words if w.startswith("--benchmark_filter=")), None)
        if exe is None or filt is None:
            continue
        path = os.path.join(build, exe.replace("{bin}/", ""))
        got = subprocess.run([path, "--benchmark_list_tests", "--benchmark_filter=" + filt], capture_output=True,
                             text=True)
        n = len(got.stdout.split())
        if got.returncode != 0 or n == 0:
            print(f"check_gpu_manifest: benchmarks.txt: {os.path.basename(path)} --benchmark_filter={filt} selects no"
                  f" row ({got.stderr.strip() or 'none listed'})", file=sys.stderr)
            bad = 1
        else:
            print(f"filter\t{n}\t{os.path.basename(path)}\t{filt}")
        one_launch = n == 1 and "--launch-count" in words and words[words.index("--launch-count") + 1] == "1"
        if words[0] == "peer" and len(words) > 2 and words[2] == "ncu" and "per-launch-config" not in words \
                and not one_launch:
            print(f"check_gpu_manifest: benchmarks.txt: peer {words[1]} profiles the first launches of {n} row(s)"
                  f" without --filter-mode per-launch-config: they would all be the first row's first kernel",
                  file=sys.stderr)
            bad = 1
print(f"train-step lines whose flags hpdt-bench-train-step accepts: {steps}")
sys.exit(bad)
PY
# Every switch a benchmarks.txt line sets (env HPDT_...=VALUE, the A/B rows) must be one the code (or a script of
# scripts/gpu) reads: a misspelt name is ignored, and the row would time the default under the A/B's name. (A wrong
# value is an error naming the variable, at the first call that reads it.)
"$py" - "$src" <<'PY' || fail=1
import os, re, sys
src = sys.argv[1]
wanted = set(re.findall(r"\b(HPDT_[A-Z0-9_]+)=", open(os.path.join(src, "scripts", "gpu", "benchmarks.txt")).read()))
read = set()
for top in ("kernels", "core", "nn", "comm", "bench", "apps", "io"):
    for d, _, files in os.walk(os.path.join(src, top)):
        for f in files:
            if f.endswith((".cpp", ".cu", ".cuh", ".h")):
                read |= set(re.findall(r'"(HPDT_[A-Z0-9_]+)"', open(os.path.join(d, f), errors="replace").read()))
# ... or the lease's scripts that a line runs (train_throughput.sh's HPDT_THROUGHPUT_ARGS): $NAME or ${NAME...}
for d, _, files in os.walk(os.path.join(src, "scripts", "gpu")):
    for f in files:
        if f.endswith(".sh"):
            read |= set(re.findall(r"\$\{?(HPDT_[A-Z0-9_]+)", open(os.path.join(d, f), errors="replace").read()))
unknown = sorted(wanted - read)
for v in unknown:
    print(f"check_gpu_manifest: benchmarks.txt sets {v}, which no source of hpdt reads", file=sys.stderr)
print(f"switches benchmarks.txt sets, each read by the code: {len(wanted) - len(unknown)} of {len(wanted)}")
sys.exit(1 if unknown else 0)
PY
# A sanitizer filter must name cases that exist (a typo would quietly run nothing).
while read -r tool bin filter; do
  case "$tool" in '#'* | '') continue ;; esac
  exe=$(find "$build/tests" -name "$bin" -type f -perm -u+x | head -1)
  [ -n "$exe" ] || { echo "check_gpu_manifest: sanitize.txt names $bin, which was not built" >&2; fail=1; continue; }
  IFS=: read -ra cases <<< "$filter"
  for c in "${cases[@]}"; do
    n=$("$exe" --gtest_list_tests --gtest_filter="$c" | grep -c '^  ' || true)
    [ "$n" -ge 1 ] || { echo "check_gpu_manifest: sanitize.txt: $bin has no case $c" >&2; fail=1; }
  done
done < "$src/scripts/gpu/sanitize.txt"
exit $fail
