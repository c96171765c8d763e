#!/usr/bin/env bash
# Runs hpdt-io-bench at np 1, 2, 4 on two synthetic ImageNet-shaped files (> 4 GiB each: 30000 x
# 3x224x224 u8, contiguous and chunked), and on Fashion-MNIST (warm cache, with augmentation);
# writes one JSON per run and a markdown table to OUT_DIR.
#   bench/io/run_io_bench.sh BUILD_DIR OUT_DIR [DATA_DIR]
# DATA_DIR (default /tmp/hpdt-iobench) needs ~9.1 GB free; the big files are deleted at the end
# unless KEEP=1. Orders: per-sample shuffle (K=1) and block shuffles of K=8, 32 and 256 samples (256: 8
# consecutive steps of one rank read one run, which the kernel's sequential readahead sees); the
# reader also with readahead hints off, pooled batch memory, and (np > 1) the two-phase exchange.
# PARTS (default "sweep window"): sweep = the above; window = interleaved window reads
# (ReaderOptions::window_batches) of 4096 samples with blocks of 256 and 1024, over 4 GiB, 5
# repetitions, once with Open MPI's default MPI-IO selection and once with `--mca fcoll individual`
# (every rank reads its own long runs; ompio's default vulcan aggregation only adds copies, docs/io.md).
set -euo pipefail
build=$1 out=$2 data=${3:-/tmp/hpdt-iobench}
mkdir -p "$out" "$data"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mpi() { local np=$1; shift; timeout --kill-after=10 1800 mpiexec -n "$np" --oversubscribe --bind-to none "$@"; }
for layout in contiguous chunked; do
  f=$data/imagenet-$layout.h5
  [ -f "$f" ] || mpi 2 "$build/apps/prepare-data/hpdt-prepare-data" --synthetic 30000 --shape 3,224,224 \
      --classes 1000 --seed 1 --layout "$layout" --out "$f"
done
[ -f "$data/fashion-mnist-train.h5" ] || mpi 1 "$build/apps/prepare-data/hpdt-prepare-data" --out "$data"
df -h "$data" | tee "$out/disk.txt"
parts=${PARTS:-sweep window}
if [[ " $parts " == *" sweep "* ]]; then
for np in 1 2 4; do
  mpi "$np" "$build/bench/io/hpdt-io-bench" --file "$data/imagenet-contiguous.h5" --file "$data/imagenet-chunked.h5" \
      --bytes $((512 << 20)) --shuffle-bytes $((128 << 20)) --block-bytes $((512 << 20)) \
      --shuffle-block 1 --shuffle-block 8 --shuffle-block 32 --shuffle-block 256 --compare-readahead --compare-reuse --compare-exchange \
      --local-batch 32 --reps 3 --out "$out/imagenet-np$np.json"
done
mpi 2 "$build/bench/io/hpdt-io-bench" --file "$data/fashion-mnist-train.h5" --bytes $((40 << 20)) --shuffle-bytes $((40 << 20)) --local-batch 128 \
    --reps 3 --augment --keep-cache --out "$out/fashion-mnist-warm-np2.json"
fi
if [[ " $parts " == *" window "* ]]; then
  for np in 1 2 4; do
    for fcoll in default individual; do
      suffix=$([ "$fcoll" = default ] && echo "" || echo "-fcoll-$fcoll")
      env $([ "$fcoll" = default ] || echo "OMPI_MCA_fcoll=$fcoll") \
        timeout --kill-after=10 1800 mpiexec -n "$np" --oversubscribe --bind-to none "$build/bench/io/hpdt-io-bench" \
        --file "$data/imagenet-contiguous.h5" --bytes $((512 << 20)) --block-bytes $((512 << 20)) --window-bytes $((4 << 30)) \
        --window-samples 4096 --shuffle-block 256 --shuffle-block 1024 --skip-hdf5 --local-batch 32 --reps 5 \
        --out "$out/imagenet-window$suffix-np$np.json"
    done
  done
fi
/usr/bin/python3 "$(dirname "$0")/io_table.py" $(ls "$out"/imagenet-np*.json "$out"/imagenet-window*-np*.json "$out/fashion-mnist-warm-np2.json" 2>/dev/null) > "$out/io_bench.md"
[ "${KEEP:-0}" = 1 ] || rm -f "$data/imagenet-contiguous.h5" "$data/imagenet-chunked.h5"
