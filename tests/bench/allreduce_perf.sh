#!/usr/bin/env bash
# hpdt-allreduce-perf under mpiexec with small sizes: the nccl-tests layout, #wrong = 0 for every
# algorithm (f32 sum, f16 avg, in place and out of place, counts not divisible by the rank count),
# the side files, the tuning file feeding --algo auto, --compress (a block per (algorithm, compression),
# #wrong = 0 by each method's check, fewer wire bytes than uncompressed ring at the larger sizes), and
# bad input (clear message, non-zero exit).
#   usage: allreduce_perf.sh NP BINARY LAUNCH PREFIX... (e.g. timeout 120 mpiexec -n NP --oversubscribe)
set -uo pipefail
np=$1 bin=$2; shift 2
run=("$@")
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/hpdt-perf-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
algos=ring,tree,rhd,hier,mpi,auto
"${run[@]}" "$bin" -b 4 -e 40K -f 3 -n 2 -w 1 --repeat 1 --algo $algos \
  -J "$work/p.json" --csv "$work/p.csv" --tuning-out "$work/tuning.json" > "$work/out.txt" 2> "$work/err.txt" \
  || { cat "$work/out.txt" "$work/err.txt"; echo "FAIL: f32 run exited non-zero"; exit 1; }
"$here/check_allreduce_output.py" "$work/out.txt" "$np" $algos --json "$work/p.json" --csv "$work/p.csv" \
  --tuning "$work/tuning.json" || { cat "$work/out.txt"; exit 1; }
# the tuning file just written drives auto; f16 with avg, -i stepping instead of -f
HPDT_TUNING_FILE= "${run[@]}" "$bin" -b 2 -e 6002 -i 3000 -n 1 -w 0 --repeat 1 -d half -o avg --algo auto,ring \
  --tuning "$work/tuning.json" > "$work/out2.txt" 2> "$work/err2.txt" \
  || { cat "$work/out2.txt" "$work/err2.txt"; echo "FAIL: f16 avg run exited non-zero"; exit 1; }
"$here/check_allreduce_output.py" "$work/out2.txt" "$np" auto,ring || { cat "$work/out2.txt"; exit 1; }
# --interleave (algorithms timed round by round, blocks printed afterwards) and hier's p2p phases
"${run[@]}" "$bin" -b 4 -e 40K -f 9 -n 2 -w 1 --repeat 2 --algo ring,hier,auto --interleave --hier-intra p2p \
  -J "$work/i.json" > "$work/out5.txt" 2> "$work/err5.txt" \
  || { cat "$work/out5.txt" "$work/err5.txt"; echo "FAIL: --interleave run exited non-zero"; exit 1; }
"$here/check_allreduce_output.py" "$work/out5.txt" "$np" ring,hier,auto --json "$work/i.json" || { cat "$work/out5.txt"; exit 1; }
grep -q "algorithms interleaved), .*hier intra-node p2p" "$work/out5.txt" \
  || { cat "$work/out5.txt"; echo "FAIL: the header does not say interleaved / hier intra-node p2p"; exit 1; }
# compressed all-reduce: lossy methods (",noef" attached to the method before it), sum over ranks
comp=none,fp16,topk:0.1,qsgd:8,powersgd:2,topk:0.1,noef
"${run[@]}" "$bin" -b 4 -e 16K -f 16 -n 2 -w 1 --repeat 1 --algo ring,rhd --compress $comp \
  -J "$work/c.json" --csv "$work/c.csv" > "$work/out3.txt" 2> "$work/err3.txt" \
  || { cat "$work/out3.txt" "$work/err3.txt"; echo "FAIL: --compress run exited non-zero"; exit 1; }
"$here/check_allreduce_output.py" "$work/out3.txt" "$np" ring,rhd --compress $comp --wire-smaller-from 16384 \
  --json "$work/c.json" --csv "$work/c.csv" || { cat "$work/out3.txt"; exit 1; }
# and with avg (fp16/bf16 rounding check, powersgd:1000: nothing to compress at these sizes, exact)
"${run[@]}" "$bin" -b 1000 -e 20000 -f 20 -n 1 -w 0 --repeat 1 -o avg --algo auto --compress bf16,qsgd:4,powersgd:1000 \
  > "$work/out4.txt" 2> "$work/err4.txt" \
  || { cat "$work/out4.txt" "$work/err4.txt"; echo "FAIL: --compress avg run exited non-zero"; exit 1; }
"$here/check_allreduce_output.py" "$work/out4.txt" "$np" auto --compress bf16,qsgd:4,powersgd:1000 \
  || { cat "$work/out4.txt"; exit 1; }
# bad input
if "${run[@]}" "$bin" --compress fp16 -d half > "$work/bad.txt" 2>&1; then echo "FAIL: --compress with -d half accepted"; exit 1; fi
grep -q "needs -d float" "$work/bad.txt" || { cat "$work/bad.txt"; echo "FAIL: --compress/-d message"; exit 1; }
if "${run[@]}" "$bin" --compress topk:2 > "$work/bad.txt" 2>&1; then echo "FAIL: --compress topk:2 accepted"; exit 1; fi
grep -q "topk:2" "$work/bad.txt" || { cat "$work/bad.txt"; echo "FAIL: message does not name 'topk:2'"; exit 1; }
if "${run[@]}" "$bin" --algo bogus > "$work/bad.txt" 2>&1; then echo "FAIL: --algo bogus accepted"; exit 1; fi
grep -q "bogus" "$work/bad.txt" || { cat "$work/bad.txt"; echo "FAIL: message does not name 'bogus'"; exit 1; }
if "${run[@]}" "$bin" --algo nccl --device cpu > "$work/bad.txt" 2>&1; then echo "FAIL: nccl on cpu accepted"; exit 1; fi
grep -q "needs --device cuda" "$work/bad.txt" || { cat "$work/bad.txt"; echo "FAIL: nccl/cpu message"; exit 1; }
if "${run[@]}" "$bin" --hier-intra nvlink > "$work/bad.txt" 2>&1; then echo "FAIL: --hier-intra nvlink accepted"; exit 1; fi
grep -q "hier-intra" "$work/bad.txt" || { cat "$work/bad.txt"; echo "FAIL: message does not name --hier-intra"; exit 1; }
if "${run[@]}" "$bin" -b 1M -e 1K > "$work/bad.txt" 2>&1; then echo "FAIL: -b > -e accepted"; exit 1; fi
grep -q "larger than -e" "$work/bad.txt" || { cat "$work/bad.txt"; echo "FAIL: -b/-e message"; exit 1; }
# a bad option is the same on every rank: rank 0 says so once, and no rank aborts the job (no MPI_Abort banner)
[ "$(grep -c "hpdt-allreduce-perf: error:" "$work/bad.txt")" -eq 1 ] && ! grep -q "MPI_ABORT" "$work/bad.txt" \
  || { cat "$work/bad.txt"; echo "FAIL: a usage error should be one message from rank 0 and a clean exit"; exit 1; }
# --device cuda where no GPU is usable (here; the CPU-only build): one message from rank 0 naming every rank, a clean
# exit; where GPUs exist the same command runs
if "${run[@]}" "$bin" --device cuda -b 4 -e 1K -n 1 -w 0 --repeat 1 --algo ring > "$work/gpu.txt" 2>&1; then
  grep -q "# Out of bounds values : 0 OK" "$work/gpu.txt" || { cat "$work/gpu.txt"; echo "FAIL: --device cuda ran without the summary"; exit 1; }
else
  { [ "$(grep -c "hpdt-allreduce-perf: error:" "$work/gpu.txt")" -eq 1 ] && grep -q "no usable GPU on rank 0 (" "$work/gpu.txt" &&
    grep -q "rank $((np - 1)) (" "$work/gpu.txt" && ! grep -q "MPI_ABORT" "$work/gpu.txt"; } ||
    { cat "$work/gpu.txt"; echo "FAIL: --device cuda without a GPU: expected one message naming ranks 0 to $((np - 1)) and a clean exit"; exit 1; }
fi
echo "allreduce_perf np$np: all checks passed"
