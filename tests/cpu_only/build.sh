#!/usr/bin/env bash
# build.sh CMAKE SOURCE_DIR BUILD_DIR MAKE_PROGRAM: configure SOURCE_DIR without CUDA into BUILD_DIR and build it
# (ctest cpu_only.build, CMakeLists.txt beside this file).
set -euo pipefail
cmake=$1 src=$2 dir=$3 make=$4
"$cmake" -S "$src" -B "$dir" -G Ninja -DCMAKE_MAKE_PROGRAM="$make" -DCMAKE_BUILD_TYPE=Release -DHPDT_CUDA=OFF \
  -DHPDT_WARNINGS_AS_ERRORS=ON -DHPDT_BUILD_TESTS=OFF > "$dir.configure.log" 2>&1 ||
  { cat "$dir.configure.log"; echo "FAIL: the CPU-only configure (HPDT_CUDA=OFF) of $src failed"; exit 1; }
grep -q "CUDA=OFF" "$dir.configure.log" || { cat "$dir.configure.log"; echo "FAIL: expected CUDA=OFF"; exit 1; }
"$cmake" --build "$dir" -j 1 ||
  { echo "FAIL: the CPU-only build (HPDT_CUDA=OFF) failed: code outside '#if HPDT_HAVE_CUDA' uses GPU-only declarations?"; exit 1; }
echo "cpu_only.build: $(grep -o 'hpdt [0-9.]*: CUDA=OFF.*' "$dir.configure.log")"
