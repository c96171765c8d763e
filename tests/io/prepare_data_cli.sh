#!/usr/bin/env bash
# hpdt-prepare-data end to end: a synthetic write at 2 ranks succeeds; bad input exits non-zero with a
# message naming the file or flag, leaves no output and keeps an existing output file as it was.
#   prepare_data_cli.sh <hpdt-prepare-data> <mpiexec> <timeout>
set -u
tool=$1 mpiexec=$2 timeout=$3
dir=$(mktemp -d /tmp/hpdt-cli-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail=0
# Success runs at 2 ranks; error runs as singletons (MPI starts in a fraction of the time).
np=2
run() {
  if [ $np -gt 1 ]; then "$timeout" --kill-after=10 60 "$mpiexec" -n $np --oversubscribe --bind-to none "$tool" "$@" >"$dir/out" 2>&1
  else "$timeout" --kill-after=10 60 "$tool" "$@" >"$dir/out" 2>&1; fi
}
expect_ok() {
  if ! run "$@"; then echo "FAIL: expected success: $*"; cat "$dir/out"; fail=1; fi
}
expect_error() {  # expect_error <text in message> args...
  local text=$1; shift
  if run "$@"; then echo "FAIL: expected an error: $*"; fail=1; return; fi
  if ! grep -qF -- "$text" "$dir/out"; then echo "FAIL: message lacks '$text': $*"; cat "$dir/out"; fail=1; fi
  if grep -qiE "segmentation|core dumped|MPI_ABORT" "$dir/out"; then echo "FAIL: crashed: $*"; cat "$dir/out"; fail=1; fi
}

expect_ok --synthetic 50 --shape 3,8,8 --classes 5 --seed 3 --out "$dir/syn.h5" --layout chunked --chunk 7 --compress 1
grep -q "wrote $dir/syn.h5: 50 samples of 3x8x8" "$dir/out" || { echo "FAIL: no summary line"; cat "$dir/out"; fail=1; }

# a bad option at 2 ranks: parsed after MPI_Init, so rank 0 alone prints it (each rank did, parsing before)
expect_error "--classes: must be > 0, got 0" --synthetic 10 --classes 0 --out "$dir/bad.h5"
[ "$(grep -c -- "--classes: must be" "$dir/out")" -eq 1 ] || { echo "FAIL: the message is not printed once"; cat "$dir/out"; fail=1; }

np=1
mkdir "$dir/out1"
echo keep > "$dir/out1/fashion-mnist-train.h5"
expect_error "$dir/nowhere/train-images-idx3-ubyte.gz" --source "$dir/nowhere" --out "$dir/out1"
[ "$(cat "$dir/out1/fashion-mnist-train.h5")" = keep ] || { echo "FAIL: existing output was changed"; fail=1; }
[ "$(ls "$dir/out1")" = fashion-mnist-train.h5 ] || { echo "FAIL: output left behind:"; ls "$dir/out1"; fail=1; }

expect_error "--shape" --synthetic 10 --shape 3,x,4 --out "$dir/bad.h5"
expect_error "--layout" --synthetic 10 --shape 1,2,2 --layout diagonal --out "$dir/bad.h5"
expect_error "compression needs --layout chunked" --synthetic 10 --shape 1,2,2 --layout contiguous --compress 3 --out "$dir/bad.h5"
expect_error "output directory" --synthetic 10 --shape 1,2,2 --out "$dir/no/such/dir/bad.h5"
[ ! -e "$dir/bad.h5" ] || { echo "FAIL: bad.h5 exists"; fail=1; }
ls "$dir" | grep -q tmp && { echo "FAIL: temporary file left:"; ls "$dir"; fail=1; }

[ $fail -eq 0 ] && echo "prepare_data_cli: all checks passed"
exit $fail
