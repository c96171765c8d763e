#!/usr/bin/env bash
# usage: check_gpu_manifest.sh PYTHON SOURCE_DIR BUILD_DIR
# manifest.py must succeed (every listed benchmark built) and list the smoke check, the gpu-labelled
# test binaries of every op family, each GPU benchmark and the PyTorch peer.
set -euo pipefail
py=$1 src=$2 build=$3
m=$("$py" "$src/scripts/gpu/manifest.py" "$build" "$src/scripts/gpu/benchmarks.txt")
echo "$m"
fail=0
expect() { grep -qE "$1" <<< "$m" || { echo "check_gpu_manifest: the manifest lacks a line matching: $1" >&2; fail=1; }; }
expect $'^smoke\t2\tapps/hpdt-smoke'
for t in "$src"/tests/kernels/test_*_cuda.cpp; do
  expect $'^test\t0\ttests/kernels/'"$(basename "$t" .cpp)"$'\t'
done
expect $'^test\t2\ttests/comm/test_comm_device_allreduce'
for b in "$src"/bench/kernels/bench_*_cuda.cpp; do
  f=$(basename "$b" .cpp); f=${f#bench_}; f=${f%_cuda}
  expect $'^bench\t0\tbench/kernels/hpdt-bench-'"${f//_/-}"$'-cuda\t'
done
expect $'^peer\t0\t-\tpython3 .*torch_gpu_train_step.py'
exit $fail
