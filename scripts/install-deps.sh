#!/usr/bin/env bash
# Installs what hpdt needs to build, test, and run its examples, from the distribution's packages only.
# Idempotent: installs only what is missing, and does nothing (no apt-get update) when all is there.
#
#   scripts/install-deps.sh           install (as root, or through sudo)
#   scripts/install-deps.sh --check   list what is missing, install nothing (exit 1 if anything is)
#
# On systems other than Debian/Ubuntu it prints what to install or `module load` instead.
set -euo pipefail

# One group per purpose; a component that needs a new package adds it here.
build=(g++ cmake ninja-build pkg-config git ca-certificates ccache)  # ccache: CMakeLists.txt compiles through it (HPDT_CCACHE)
mpi=(openmpi-bin libopenmpi-dev)
hdf5=(libhdf5-openmpi-dev hdf5-tools)
libs=(libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev zlib1g-dev)
data=(dataset-fashion-mnist)                       # the embedded default data set (Fashion-MNIST IDX files)
python=(python3-torch python3-numpy python3-h5py python3-matplotlib libopenblas0-openmp)  # fixtures, peers, plots
tools=(graphviz clang)                             # hpdt-nccl-log --png (dot, its CLI test renders one); clang: libFuzzer target
cluster=(slurm-wlm slurmctld slurmd slurm-client munge slurm-wlm-torque iproute2)  # emulated cluster tests
packages=("${build[@]}" "${mpi[@]}" "${hdf5[@]}" "${libs[@]}" "${data[@]}" "${python[@]}" "${tools[@]}" "${cluster[@]}")

check_only=0
[ "${1:-}" = "--check" ] && check_only=1

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  cat <<'TXT'
install-deps.sh: this is not a Debian/Ubuntu system; install these yourself (package names vary):
  compilers: a C++20 compiler (GCC >= 12 or Clang >= 16), CMake >= 3.25, Ninja
  MPI:       Open MPI or MPICH with headers          (HPC sites: module load openmpi | mpich | cray-mpich)
  HDF5:      *parallel* HDF5 built with that MPI      (module load hdf5-parallel | cray-hdf5-parallel)
  libraries: GoogleTest, Google Benchmark, CLI11, nlohmann-json, zlib   (spack install googletest benchmark cli11 nlohmann-json zlib)
  CUDA:      optional: CUDA toolkit 12+ with NCCL and cuDNN 9          (module load cuda nccl cudnn)
  Python:    optional, for fixtures and plots: python3 with torch, numpy, h5py, matplotlib
Then: cmake --preset default && cmake --build --preset default
TXT
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps.sh: all ${#packages[@]} packages are installed"
  exit 0
fi
echo "install-deps.sh: missing: ${missing[*]}"
[ $check_only -eq 1 ] && exit 1

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps.sh: run as root or install sudo" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /tmp/hpdt-install-deps.log 2>&1 || {
  tail -30 /tmp/hpdt-install-deps.log >&2
  echo "install-deps.sh: apt-get install failed (full log: /tmp/hpdt-install-deps.log)" >&2
  exit 1
}
echo "install-deps.sh: installed ${#missing[@]} package(s)"
