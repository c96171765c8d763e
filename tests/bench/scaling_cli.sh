#!/usr/bin/env bash
# hpdt-scaling end to end on synthetic metrics: report (table, JSON, CSV), predict, and bad input
# (clear message, non-zero exit, nothing written).
#   usage: scaling_cli.sh HPDT_SCALING_BINARY
set -uo pipefail
bin=$1
work=$(mktemp -d /tmp/hpdt-scaling-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/runs/n1" "$work/runs/n2"
# strong scaling, f = 0.8: T(W) = 0.2 + 0.8/W
for w in 1 2 4; do
  t=$(awk -v w=$w 'BEGIN{printf "%.6f", 0.2 + 0.8 / w}')
  d=$work/runs/n$(( (w + 1) / 2 ))
  { echo '{"type":"step","step":1,"loss":2.0}'
    echo "{\"type\":\"summary\",\"model\":\"resnet20\",\"ranks\":$w,\"nodes\":$(( (w + 1) / 2 )),\"per_rank_batch\":$((64 / w)),\"global_batch\":64,\"steps\":10,\"step_time_s\":$t,\"throughput_img_s\":$(awk -v t=$t 'BEGIN{print 64/t}'),\"forward_s\":0.1,\"backward_s\":0.2,\"exposed_comm_s\":0.01,\"optimizer_s\":0.01,\"data_wait_s\":0.02,\"bytes_sent_per_step\":1000,\"algo\":\"ring\",\"compress\":\"none\",\"test_accuracy\":0.9,\"git_commit\":\"x\",\"hosts\":[\"node1\"]}"
  } > "$d/metrics.r$w.jsonl"
done
echo '{"not":"a summary"}' > "$work/runs/other.json"
out=$("$bin" report "$work/runs" --json "$work/s.json" --csv "$work/s.csv" 2>"$work/err") || fail "report failed: $(cat "$work/err")"
echo "$out"
grep -q "strong scaling: model resnet20, algo ring" <<< "$out" || fail "no strong-scaling header"
grep -q "Amdahl fit: parallel fraction f = 0.8000" <<< "$out" || fail "Amdahl fit did not recover f = 0.8"
grep -q "skipped .*other.json" "$work/err" || fail "the non-summary file was not reported as skipped"
[ "$(wc -l < "$work/s.csv")" -eq 4 ] || fail "CSV should have a header and 3 rows"
grep -q '"parallel_fraction": 0.8' "$work/s.json" || fail "JSON lacks the fit"
# predict
out=$("$bin" predict --compute-ms 50 --grad-bytes 100e6 --ranks-per-node 8 --inter-bw 4x400Gbit/s \
      --ranks 8,64,1024 --algo ring,hier --compress none,fp16 --json "$work/p.json") || fail "predict failed"
echo "$out"
[ "$(grep -c '^  ' <<< "$out")" -eq 12 ] || fail "predict should print 12 rows"
grep -q '"efficiency"' "$work/p.json" || fail "predict JSON lacks rows"
# bad input: clear message, exit != 0, no output file
if "$bin" report "$work/nowhere" --json "$work/bad.json" 2>"$work/err"; then fail "a missing dir was accepted"; fi
grep -q "not a directory: $work/nowhere" "$work/err" || fail "message does not name the dir: $(cat "$work/err")"
[ ! -e "$work/bad.json" ] || fail "output written despite the error"
if "$bin" predict --compute-ms 50 --grad-bytes 1e6 --inter-bw 10furlongs 2>"$work/err"; then fail "bad bandwidth accepted"; fi
grep -q "unknown unit 'furlongs'" "$work/err" || fail "bad-bandwidth message: $(cat "$work/err")"
if "$bin" predict --compute-ms 50 --grad-bytes 1e6 --compress zip 2>"$work/err"; then fail "bad compression accepted"; fi
grep -q "unknown compression 'zip'" "$work/err" || fail "bad-compression message: $(cat "$work/err")"
echo "scaling_cli: all checks passed"
