#!/usr/bin/env bash
# hpdt-allreduce-perf --device cuda on emulated GPUs (hpdt-allreduce-perf-emu: the benchmark against the
# CUDA emulator's libraries, NCCL emulated over MPI; docs/cuda-emulator.md), one virtual node per rank so
# that every rank has a GPU of its own: ring/tree/rhd/hier on the GPU over NCCL (nccl-p2p), nccl, mpi
# (staged), auto; #wrong = 0 in the nccl-tests layout for f32 sum and bf16 avg; then the same through
# the staged path (--device-transport staged), and the device named in the header; --compress on the GPU
# (comm::DeviceCompressor, #wrong: bitwise the host compressor's) and through the host mirror.
#   usage: allreduce_perf_emu.sh NP BINARY LAUNCH PREFIX... (e.g. timeout 120 mpiexec -n NP --oversubscribe)
set -uo pipefail
np=$1 bin=$2; shift 2
run=("$@")
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/hpdt-perf-emu-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
export HPDT_RANKS_PER_NODE=1
algos=ring,tree,rhd,hier,nccl,mpi,auto
check() {  # name algos file
  "$here/check_allreduce_output.py" "$3" "$np" "$2" || { cat "$3"; echo "FAIL: $1"; exit 1; }
}
"${run[@]}" "$bin" --device cuda -b 4 -e 40K -f 9 -n 2 -w 1 --repeat 1 --algo $algos --device-transport nccl \
  > "$work/out.txt" 2> "$work/err.txt" || { cat "$work/out.txt" "$work/err.txt"; echo "FAIL: f32 run exited non-zero"; exit 1; }
check "f32 sum, nccl" $algos "$work/out.txt"
grep -q "device cuda, .*device transport nccl" "$work/out.txt" || { cat "$work/out.txt"; echo "FAIL: header"; exit 1; }
grep -q "device  0 \[cuda:0\] hpdt CUDA emulator" "$work/out.txt" || { cat "$work/out.txt"; echo "FAIL: no emulated GPU in the rank lines"; exit 1; }
"${run[@]}" "$bin" --device cuda -b 2 -e 6002 -i 3000 -n 1 -w 0 --repeat 1 -d bfloat16 -o avg --algo ring,hier,nccl \
  --device-transport nccl > "$work/out2.txt" 2> "$work/err2.txt" \
  || { cat "$work/out2.txt" "$work/err2.txt"; echo "FAIL: bf16 avg run exited non-zero"; exit 1; }
check "bf16 avg, nccl" ring,hier,nccl "$work/out2.txt"
"${run[@]}" "$bin" --device cuda -b 4 -e 40K -f 9 -n 2 -w 1 --repeat 1 --algo ring,rhd --device-transport staged \
  > "$work/out3.txt" 2> "$work/err3.txt" || { cat "$work/out3.txt" "$work/err3.txt"; echo "FAIL: staged run exited non-zero"; exit 1; }
check "f32 sum, staged" ring,rhd "$work/out3.txt"
# compressed on the (emulated) GPU and through the host mirror: a block each, the device's #wrong = 0 meaning
# bitwise the host compressor's result
comp=none,fp16,bf16,topk:0.1,qsgd:4,topk:0.05,noef,powersgd:2
"${run[@]}" "$bin" --device cuda -b 1K -e 64K -f 64 -n 2 -w 1 --repeat 1 -o avg --algo ring --compress $comp \
  -J "$work/c.json" --csv "$work/c.csv" > "$work/out4.txt" 2> "$work/err4.txt" \
  || { cat "$work/out4.txt" "$work/err4.txt"; echo "FAIL: --device cuda --compress run exited non-zero"; exit 1; }
"$here/check_allreduce_output.py" "$work/out4.txt" "$np" ring --compress $comp --device cuda --wire-smaller-from 65536 \
  --json "$work/c.json" --csv "$work/c.csv" || { cat "$work/out4.txt"; echo "FAIL: --device cuda --compress"; exit 1; }
echo "PASS: hpdt-allreduce-perf --device cuda on $np emulated GPUs"
