#!/usr/bin/env bash
# Prepares what the GPU machine needs, on this (build) machine: a CUDA build for sm_90 with portable
# x86-64-v3 host code (preset gpu-bundle), and a self-contained bundle directory holding
#   bin/      the test, benchmark and app executables (debug info stripped)
#   lib/      every shared library they need that the GPU machine lacks (MPI, HDF5, ...), but not
#             the CUDA libraries (cudart, cuBLAS, cuDNN, NCCL), which run.sh finds on that machine
#   ompi/     a relocatable Open MPI runtime (mpiexec, orted, plugins, help files) and its PMIx
#   manifest.tsv  what run.sh runs: gpu-labelled tests (with their rank counts), the end-to-end checks of
#             scripts/gpu/checks.txt and the GPU benchmarks of scripts/gpu/benchmarks.txt
#   data/     fashion-mnist-train.h5: Fashion-MNIST's 10,000 test images (8.9 MB; the 60,000 training images
#             would not fit what a call carries), for the trainer's checks
#   ptxas.log register and spill report of every CUDA kernel (-Xptxas -v)
#   build.json    commit, compiler and versions the bundle was made from
# and BUNDLE_DIR.txz, the same packed into one file: that is what travels to the GPU machine.
#
# usage: scripts/gpu/prepare.sh [BUNDLE_DIR=.gpu-bundle]
# Then on the GPU machine (the device tool carries BUNDLE_DIR): scripts/gpu/run.sh OUT_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=${1:-$root/.gpu-bundle}
case "$bundle" in /*) ;; *) bundle=$root/$bundle ;; esac
build=$root/build/gpu-bundle

command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "prepare.sh: nvcc not found; the GPU bundle needs the CUDA toolkit on this machine" >&2; exit 1; }

echo "== configure and build (preset gpu-bundle: sm_90, x86-64-v3, -Xptxas -v)"
cmake --preset gpu-bundle >/dev/null
# ptxas -v prints one report per kernel; keep them (and everything else the build says) in the bundle.
rm -rf "$bundle"; mkdir -p "$bundle"/{bin,lib,ompi}
# Only what the GPU machine runs: the gpu-labelled tests (CMake lists them) and the executables that
# checks.txt and benchmarks.txt name (a target is named as its executable).
targets=$( { cat "$build/gpu-test-targets.txt"; echo hpdt-smoke hpdt-prepare-data
             grep -hoE '(\{bin\}/|^)(apps|bench|tests)/[^ ]+' "$root/scripts/gpu/checks.txt" "$root/scripts/gpu/benchmarks.txt" | xargs -n1 basename; } |
           tr ' ' '\n' | grep -v '^$' | sort -u)
echo "targets:" $targets
# (The build's status through the pipe: pipefail, and a grep that finds nothing is no failure. Until 2026-11-30 the
# status was read from PIPESTATUS after `|| true`, i.e. true's: a failed build went on to pack a bundle without the
# binaries it could not link, and gtest's discovery left their tests out of the manifest unannounced.)
if ! cmake --build --preset gpu-bundle --target $targets 2>&1 | tee "$bundle/build.log" |
  { grep -E "error|FAILED|warning" || true; }; then
  echo "prepare.sh: build failed, see $bundle/build.log" >&2
  exit 1
fi
# Every CUDA object's report, kept beside it by scripts/gpu/ptxas-log.sh (the build log holds only what this build
# recompiled).
find "$build" -name '*.ptxas.log' | sort | xargs -r cat | grep -E "ptxas info|bytes stack frame|spill" > "$bundle/ptxas.log" || true
echo "ptxas.log: $(grep -c 'Compiling entry function' "$bundle/ptxas.log") kernels," \
  "$(grep 'spill stores' "$bundle/ptxas.log" | grep -vc ' 0 bytes spill stores') with spills"
# A stack frame without spills is local memory the code asked for: an array (or an argument struct) indexed by a
# value the compiler cannot resolve, copied to every thread's stack (decode_images' normalisation, until ce47046).
# Named, so that a new one shows: on 2026-12-01 only GEMM v1's three (256 bytes: the SIMT oracle's accumulators).
awk '/Compiling entry function/ {match($0, /'"'"'[^'"'"']*'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2)}
     /bytes stack frame/ && $1 != "0" {print "  stack frame " $1 " bytes: " name}' "$bundle/ptxas.log" | sort -u |
  { c++filt 2>/dev/null || cat; } | cut -c1-200

echo "== manifest of GPU tests and benchmarks"
/usr/bin/env python3 "$root/scripts/gpu/manifest.py" "$build" "$root/scripts/gpu/benchmarks.txt" "$root/scripts/gpu/checks.txt" > "$bundle/manifest.tsv"
{ awk -F'\t' '$1 == "test" || $1 == "bench" || $1 == "smoke" {print $3}' "$bundle/manifest.tsv"
  grep -oE '\{bin\}/[^ ]+' "$bundle/manifest.tsv" | sed 's|^{bin}/||'; } | sort -u | while read -r exe; do
  [ -n "$exe" ] && [ "$exe" != "-" ] || continue
  mkdir -p "$bundle/bin/$(dirname "$exe")"
  cp "$build/$exe" "$bundle/bin/$exe"
  strip --strip-debug "$bundle/bin/$exe"
done
sed -n '1,200p' "$bundle/manifest.tsv"

# Libraries every Linux GPU machine has (or must have its own of): never bundled.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+|libgcc_s|libresolv|libcuda\.so|libcudart|libcublas|libcudnn|libnccl|libnvrtc|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver)'
# Multi-node fabrics (InfiniBand, OFI, UCX, PSM) are of no use on one GPU machine: neither their Open MPI
# components nor their libraries travel, which keeps the bundle well under the 64 MiB a call can carry.
fabric='(libfabric|libuc[mpst]|libpsm|libibverbs|libefa|librdmacm|libinfinipath|libnl-|libmunge)'
copy_deps() {  # copy the shared-library closure of $1 into $2
  ldd "$1" 2>/dev/null | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    [[ "$name" =~ $fabric ]] && continue
    [ -e "$2/$name" ] || cp -L "$path" "$2/$name"
  done
}
echo "== data: Fashion-MNIST test split as the trainer's training file"
mkdir -p "$bundle/data"
data=$build/test-data/fashion-mnist
[ -f "$data/fashion-mnist-test.h5" ] || { mkdir -p "$data" && "$build/apps/prepare-data/hpdt-prepare-data" --out "$data" >/dev/null; }
cp "$data/fashion-mnist-test.h5" "$bundle/data/fashion-mnist-train.h5"

echo "== shared libraries"
find "$bundle/bin" -type f -executable | while read -r f; do copy_deps "$f" "$bundle/lib"; done
# The preset builds hpdt's own libraries shared: the kernels' device code travels once, in libhpdt_kernels.so,
# instead of once per executable (a static build put 63 MB of it into each of 40 executables).
for f in "$bundle"/lib/libhpdt_*.so*; do [ -f "$f" ] && strip --strip-debug "$f"; done

# CUPTI of the toolkit the bundle is built with: hpdt-bench-train-step --kernel-trace opens it at run time (dlopen,
# so ldd does not list it), and it must be the CUPTI major version the program was compiled with (4 MB).
cupti=$(sed -n 's/^CUDA_cupti_LIBRARY:FILEPATH=//p' "$build/CMakeCache.txt")
if [ -n "$cupti" ] && ls "$(dirname "$cupti")"/libcupti.so.[0-9]* > /dev/null 2>&1; then
  cp -L "$(ls "$(dirname "$cupti")"/libcupti.so.[0-9]* | grep -E 'libcupti\.so\.[0-9]+$' | head -1)" "$bundle/lib/"
else
  echo "prepare.sh: no libcupti next to the toolkit's libraries: --kernel-trace will look for the GPU machine's" >&2
fi

echo "== relocatable Open MPI runtime"
ompi_lib=/usr/lib/x86_64-linux-gnu/openmpi
pmix=/usr/lib/x86_64-linux-gnu/pmix2
if [ -d "$ompi_lib" ]; then
  o=$bundle/ompi
  mkdir -p "$o/bin" "$o/lib/x86_64-linux-gnu" "$o/share" "$o/pmix2"
  cp -L /usr/bin/orterun "$o/bin/mpiexec"
  cp -L /usr/bin/orted "$o/bin/orted"
  cp -a "$ompi_lib" "$o/lib/x86_64-linux-gnu/"
  rm -rf "$o/lib/x86_64-linux-gnu/openmpi/include"
  find "$o/lib/x86_64-linux-gnu/openmpi/lib" \( -name '*ofi*' -o -name '*ucx*' -o -name '*psm*' -o -name '*openib*' \
       -o -name '*verbs*' -o -name '*portals*' -o -name '*ofi*' -o -name 'liboshmem*' -o -name '*spml*' \) -delete
  cp -a /usr/share/openmpi "$o/share/"
  [ -d /usr/share/pmix ] && cp -a /usr/share/pmix "$o/share/"
  [ -d "$pmix" ] && cp -a "$pmix/lib" "$o/pmix2/" && rm -rf "$o/pmix2/lib/pkgconfig"
  for f in "$o/bin/mpiexec" "$o/bin/orted" "$o"/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so "$o"/pmix2/lib/pmix/*.so; do
    [ -f "$f" ] && copy_deps "$f" "$bundle/lib"
  done
else
  echo "prepare.sh: Open MPI not found at $ompi_lib; MPI tests will not run on the GPU machine" >&2
fi

/usr/bin/env python3 - "$bundle/build.json" <<'PY'
import json, subprocess, sys
def out(*cmd):
    try: return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
    except Exception: return ""
json.dump({"git_commit": out("git", "rev-parse", "HEAD"), "git_dirty": bool(out("git", "status", "--porcelain", "--untracked-files=no")),
           "nvcc": out("nvcc", "--version").splitlines()[-1:], "cxx": out("c++", "--version").splitlines()[:1],
           "preset": "gpu-bundle"}, open(sys.argv[1], "w"), indent=2)
PY
rm -f "$bundle/ompi/pmix2/lib/libpmix.a" "$bundle/lib/liboshmem.so.40"
# What travels: one compressed file (the device tool carries at most 64 MiB a call, the checkout included).
# Files sorted by size put near-copies side by side, and an xz window larger than the largest file stores
# each such copy once. Until 2026-11-27 every executable embedded the whole kernel library (63 MB of it, and
# nvcc compresses large fatbins itself, which xz cannot shrink further): 441 MB of files packed to 50.5 MiB,
# too much with the tracked files. Since then the preset builds shared libraries, so the kernels travel once,
# and leaves the fatbins uncompressed (--compress-mode=none), which xz packs ten times smaller than nvcc
# does (norm.cu: 3.87 MB raw, 401 KB nvcc "size" mode, 356 KB raw then xz). Packing takes about 2.7 GB of
# memory, unpacking 256 MiB.
(cd "$(dirname "$bundle")" && find "$(basename "$bundle")" \( -type f -o -type l \) -printf '%s %p\n' | sort -n | cut -d' ' -f2- |
   tar cf - --no-recursion -T - | xz --lzma2=preset=9,dict=256MiB -T1 > "$bundle.txz")
# The device tool refuses a call whose working tree (tracked files and carried paths) is over 64 MiB.
size=$(stat -c %s "$bundle.txz")
tree=$(cd "$root" && git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
[ $((size + tree)) -lt $((63 * 1024 * 1024)) ] ||
  echo "prepare.sh: WARNING: $bundle.txz ($((size / 1048576)) MiB) and the tracked files ($((tree / 1048576)) MiB) are over the 64 MiB a device call carries" >&2
rm -f "$bundle.tgz"
echo "bundle: $bundle ($(du -sh "$bundle" | cut -f1)), packed as $bundle.txz ($(du -sh "$bundle.txz" | cut -f1))"
echo "device tool: command 'scripts/gpu/device.sh [run.sh options]', carry ['$(basename "$bundle").txz']"
