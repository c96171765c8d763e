#!/usr/bin/env bash
# End-to-end checks of hpdt-train under MPI (ctest runs one CASE per test):
#   equivalence-resnet  ResNet-20 with SyncBN: np 2 and np 4 end with the parameters of np 1 (same global batch);
#                       --decode device (u8 batches decoded by kernels::decode_images) the bits of --decode host
#   equivalence-vit     ViT-Ti (AdamW) with dropout: the same (the masks follow the sample, not the rank);
#                       --gelu fused ends near the separate GELU's (the default) parameters and optimizer state
#   resume              SIGTERM mid-run -> checkpoint + exit 75; --resume ends bit-identical to an
#                       uninterrupted run (ResNet-20, and ViT-Ti with dropout); resuming on another rank
#                       count works and says so
#   algos               every all-reduce algorithm trains a few steps with falling loss
#   compress            every compression x every algorithm trains a few steps with falling loss; a
#                       preempted + resumed run with error feedback ends bit-identical to an uninterrupted one
#   bad-input           clear errors, exit 2, nothing overwritten (and --device cuda: exit 2 naming the
#                       ranks without a GPU, or one step where GPUs exist)
# (the emulated cases train ViT-Ti with --vit-depth 2: every layer kind and gradient path, in ~1/3 of 12 blocks' time)
#   cuda-emu            HPDT_TRAIN is hpdt-train-emu (the trainer on emulated GPUs, tests/cuda_emu) and
#                       HPDT_TRAIN_CPU the real trainer: --device cuda at np 2 through each gradient path
#                       (host mirror; nccl-p2p ring and hier with a GPU per rank; nccl, and auto with a GPU per rank
#                       (nccl; with a tuning file, nccl-p2p + nccl); --compress topk, qsgd,
#                       fp16 and powersgd on the device), the GPU paths bitwise equal to each other (device compression to the host
#                       mirror's, HPDT_DEVICE_COMPRESSION=off), the GPU run near the CPU run (mixed precision on the
#                       emulated GPU: test_nn_models_cuda_emu); batches decoded on the GPU (the default) bitwise
#                       equal to the reader's decode, in f32 and bf16
#   cuda-emu-streams    the same HPDT_TRAIN with each stream's work deferred (CUDA_EMU_STREAMS=lazy, and random
#                       with 4 seeds: docs/cuda-emulator.md), through the one-rank path (batches copied up on a copy
#                       stream into two slots, 3 micro-batches a step so that a slot is reused within it), the host
#                       mirror (the stager thread, a copy stream) and device compression at np 2, and nccl-p2p and
#                       auto (nccl) with a GPU per rank: each bitwise equal to the same run in the eager mode, where a missing event
#                       wait between the streams would read or overwrite a buffer at the wrong time
#   cuda-emu-find       the same HPDT_TRAIN at np 1: a bf16 ViT-Ti with GEMM v3's plans by Find near the same run by
#                       rule (one core: its own test, so that it runs beside others)
#   cuda-emu-graph      the same HPDT_TRAIN with --cuda-graph, bitwise equal to the eager runs: one rank with 3
#                       micro-batches a step and evaluation between epochs (captured again after it), fp16 whose loss
#                       scale moves (captured again), 2 ranks through the host mirror (the graph in parts, split at
#                       the buckets) and through nccl, 1 and 2 ranks under CUDA_EMU_STREAMS's orders as
#                       cuda-emu-streams; --dropout refused (one ctest slot)
#   cuda-emu-racecheck  the racecheck preset's HPDT_TRAIN (ThreadSanitizer on the emulated GPU's threads and the host's):
#                       np 1 with the reader, copy stream and evaluation; a ResNet-20 in NHWC (both decodes, a CUDA
#                       graph); np 2 through the host mirror's stager thread and through nccl (eager, graph): no report
#   cpu-only            HPDT_TRAIN is the CPU-only build's hpdt-train (HPDT_CUDA=OFF, tests/cpu_only: none of the
#                       `#if HPDT_HAVE_CUDA` code) and HPDT_TRAIN_CPU this build's: ResNet-20 (SyncBN, crop and flip,
#                       the reader's and the training thread's decode, evaluation) and ViT-Ti (dropout) at np 2 end
#                       with the same bits, loss and accuracy; its --device cuda stops with exit 2 naming each rank
#                       and "built without CUDA"
#   cuda-gpu            on a machine with one real GPU (scripts/gpu/run.sh): ViT-Ti and ResNet-20 on the GPU
#                       with our kernels and with --kernels vendor, near the CPU run; 2 ranks sharing the
#                       GPU (host mirror) near 1 rank, and with --compress topk and bf16 on the GPU bitwise equal to
#                       the host mirror's; --algo nccl on a 1-rank NCCL communicator; bf16 and
#                       fp16 (loss scaling) runs finish with a finite loss (their GEMMs on v3, the default), and
#                       bf16 runs with --gemm v2 (ViT-Ti) and --conv v3 (ResNet-50 in NHWC, whose 1x1 convolutions
#                       then run as GEMM v3, the others on conv v3); ViT-Ti with --gelu fused near the CPU
#                       run (f32) and finite (bf16); --cuda-graph near the eager run on 1 rank and on 2 (in parts)
# usage: train_cases.sh CASE HPDT_TRAIN COMPARE_CHECKPOINTS PREPARE_DATA DATA_DIR
# env:   HPDT_MPIEXEC (launcher and flags)
set -uo pipefail
case=$1 train=$2 compare=$3 prepare=$4 data=$5
mpiexec=${HPDT_MPIEXEC:-mpiexec}
w=$(mktemp -d /tmp/hpdt-train-test.XXXXXX)
trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run NP ARGS... (HPDT_RUN_TIMEOUT: seconds a run may take, 240 unless set)
  local np=$1; shift
  timeout --kill-after=10 "${HPDT_RUN_TIMEOUT:-240}" $mpiexec -n "$np" "$train" --data "$data/fashion-mnist-train.h5" --progress lines \
    --threads 1 --seed 7 "$@"
}
latest() { ls "$1"/ckpt-*.h5 | tail -1; }
# metrics_near A.jsonl B.jsonl: the same steps, each step's loss within 1e-4 (1 + |loss|) and accuracy equal, and the
# summaries' test_loss and test_accuracy likewise (the keys as hpdt-train writes them: sorted).
metrics_near() {
  awk '
    function num(key,   m) { if (match($0, "\"" key "\":[-+0-9.eE]+")) return substr($0, RSTART + length(key) + 3, RLENGTH - length(key) - 3); return "none" }
    function near(a, b) { d = a - b; if (d < 0) d = -d; return d <= 1e-4 * (1 + (a < 0 ? -a : a)) }
    /"type":"step"/ || /"type":"summary"/ {
      k = /"type":"step"/ ? "step " num("step") : "summary"
      l = /"type":"step"/ ? num("loss") : num("test_loss"); a = /"type":"step"/ ? num("accuracy") : num("test_accuracy")
      if (NR == FNR) { L[k] = l; A[k] = a; n++; next }
      seen++
      if (!(k in L)) { print "metrics: " k " only in " ARGV[2]; bad = 1; next }
      if (l == "none" || !near(L[k], l)) { print "metrics: " k " loss " L[k] " against " l; bad = 1 }
      if (A[k] != a) { print "metrics: " k " accuracy " A[k] " against " a; bad = 1 }
    }
    END { if (seen != n || n < 2) { print "metrics: " n " records in " ARGV[1] ", " seen " in " ARGV[2]; bad = 1 }; exit bad }
  ' "$1" "$2"
}
# same_metrics A.jsonl B.jsonl: every step's loss and accuracy, and the evaluation's, written identically (and some are).
same_metrics() {
  local a b
  a=$(grep -oE '"(test_)?(loss|accuracy)":[^,}]*' "$1") b=$(grep -oE '"(test_)?(loss|accuracy)":[^,}]*' "$2")
  [ "$(printf '%s\n' "$a" | grep -c test_loss)" -ge 1 ] || { echo "metrics: no test_loss in $1"; return 1; }
  [ "$a" = "$b" ] || { diff <(printf '%s\n' "$a") <(printf '%s\n' "$b") | head -5; return 1; }
}
# GEMM v3's plans by Find (--gemm-tuning find; 16-bit GEMMs) in a bf16 ViT-Ti of batch $1, near the same run by rule
# (SGD: a wrong gradient moves the weights far, where AdamW's steps are about lr whatever the gradient); and that
# comparison can fail: the run by rule against its own start (lr 1e-9). Further arguments go to every run.
gemm_find_near_rule() {
  local vitb=(--model vit-ti --patch 7 --optimizer sgd --eval false --augment false --max-steps 2 --batch "$1" --lr 0.05
              --warmup-epochs 0 --precision bf16 "${@:2}")
  run 1 "${vitb[@]}" --device cuda --checkpoint-dir "$w/bf16-rule" > "$w/bf16-rule.log" 2>&1 || { cat "$w/bf16-rule.log"; fail "vit-ti bf16 cuda"; }
  run 1 "${vitb[@]}" --device cuda --gemm-tuning find --checkpoint-dir "$w/bf16-find" > "$w/bf16-find.log" 2>&1 || { cat "$w/bf16-find.log"; fail "vit-ti bf16 cuda --gemm-tuning find"; }
  grep -q "GEMM v3 plans by find" "$w/bf16-find.log" || { cat "$w/bf16-find.log"; fail "--gemm-tuning find: not named on the GPU line"; }
  "$compare" "$(latest "$w/bf16-rule")" "$(latest "$w/bf16-find")" --atol 1e-3 --rtol 1e-2 || fail "vit-ti bf16 --gemm-tuning find: not near the run by rule"
  run 1 "${vitb[@]}" --lr 1e-9 --max-steps 1 --device cuda --checkpoint-dir "$w/bf16-still" > /dev/null 2>&1 || fail "vit-ti bf16 cuda at lr 1e-9"
  if "$compare" "$(latest "$w/bf16-still")" "$(latest "$w/bf16-rule")" --atol 1e-3 --rtol 1e-2 > /dev/null; then fail "the bf16 run did not move the weights beyond the tolerance"; fi
}
common_resnet=(--model resnet20 --sync-bn --eval false --augment false --max-steps 3 --lr 0.05 --warmup-epochs 0)
common_vit=(--model vit-ti --optimizer adamw --weight-decay 0.05 --eval false --augment false --max-steps 2 --lr 0.001 --warmup-epochs 0 --dropout 0.1)

# same_in_every_order NAME NP [ARGS...] (cuda-emu-streams, cuda-emu-graph): the run of the caller's args and ARGS in the
# emulator's eager mode, then lazy and random (seeds 1-4; $orders, when set, names fewer), each bitwise equal to it (ck
# NAME: the checkpoint compared)
same_in_every_order() {
  local name=$1 np=$2 mode; shift 2
  CUDA_EMU_STREAMS=eager run "$np" "${args[@]}" "$@" --checkpoint-dir "$w/$name-eager" > "$w/$name-eager.log" 2>&1 ||
    { cat "$w/$name-eager.log"; fail "$name: the eager run"; }
  for mode in ${orders:-lazy:0 random:1 random:2 random:3 random:4}; do  # mode:seed (lazy draws nothing)
    CUDA_EMU_STREAMS=${mode%%:*} CUDA_EMU_STREAMS_SEED=${mode#*:} run "$np" "${args[@]}" "$@" \
      --checkpoint-dir "$w/$name-$mode" > "$w/$name-$mode.log" 2>&1 || { cat "$w/$name-$mode.log"; fail "$name: CUDA_EMU_STREAMS=$mode"; }
    "$compare" "$(ck "$name-eager")" "$(ck "$name-$mode")" --optimizer > "$w/cmp.log" ||
      { cat "$w/cmp.log"; fail "$name: CUDA_EMU_STREAMS=$mode differs from the eager run (a missing wait between streams?)"; }
  done
  grep -h "gradients" "$w/$name-eager.log"
}

case $case in
equivalence-resnet | equivalence-vit)
  if [ $case = equivalence-resnet ]; then args=("${common_resnet[@]}") b=16; else args=("${common_vit[@]}") b=8; fi
  run 1 "${args[@]}" --batch $b --checkpoint-dir "$w/np1" > "$w/np1.log" 2>&1 || { cat "$w/np1.log"; fail "np 1 run"; }
  run 2 "${args[@]}" --batch $((b / 2)) --checkpoint-dir "$w/np2" > "$w/np2.log" 2>&1 || { cat "$w/np2.log"; fail "np 2 run"; }
  run 4 "${args[@]}" --batch $((b / 4)) --checkpoint-dir "$w/np4" > "$w/np4.log" 2>&1 || { cat "$w/np4.log"; fail "np 4 run"; }
  # Not bitwise: the ranks' partial sums are added in a different order than one rank's (stated
  # tolerance: |a-b| <= 2e-4 + 2e-3 |b| after the steps above).
  "$compare" "$(latest "$w/np1")" "$(latest "$w/np2")" --atol 2e-4 --rtol 2e-3 || fail "np 2 differs from np 1"
  "$compare" "$(latest "$w/np1")" "$(latest "$w/np4")" --atol 2e-4 --rtol 2e-3 || fail "np 4 differs from np 1"
  if [ $case = equivalence-vit ]; then
    # AdamW's first steps move every weight by about lr whatever the gradient, so the parameters hardly
    # see the dropout masks; its first moment does (a rank drawing the masks of another sample
    # position leaves exp_avg 0.19 off, against 2.4e-7 here).
    for np in 2 4; do
      "$compare" "$(latest "$w/np1")" "$(latest "$w/np$np")" --optimizer --atol 2e-5 --rtol 2e-3 ||
        fail "np $np: optimizer state differs from np 1 (dropout masks not those of the sample positions?)"
    done
  fi
  if [ $case = equivalence-vit ]; then
    # --gelu fused: the MLP's GELU in the GEMM epilogues, not a layer of its own (the default). Not bit for bit here: with
    # dropout after the GELU, the fused backward multiplies by gelu'(h), then by the dropout mask's scale, the
    # separate layers the other way round (without dropout the same bits: test_nn_models).
    run 1 "${args[@]}" --batch $b --gelu fused --checkpoint-dir "$w/gelu" > "$w/gelu.log" 2>&1 || { cat "$w/gelu.log"; fail "--gelu fused run"; }
    "$compare" "$(latest "$w/np1")" "$(latest "$w/gelu")" --optimizer --atol 2e-5 --rtol 2e-3 || fail "--gelu fused differs from the separate GELU"
  fi
  if [ $case = equivalence-resnet ]; then
    # --decode device on the CPU (the reader hands over u8 pixels and crops, kernels::decode_images decodes them on
    # the training thread): the same bits as the reader's decode, with crop and flip, and in the evaluation.
    for d in host device; do
      run 1 "${args[@]}" --batch $b --augment true --eval true --eval-samples 32 --decode $d --metrics "$w/decode-$d.jsonl" \
        --checkpoint-dir "$w/decode-$d" > "$w/decode-$d.log" 2>&1 || { cat "$w/decode-$d.log"; fail "--decode $d run"; }
    done
    grep -q '"decode":"host"' "$w/decode-host.jsonl" || fail "the CPU's default --decode should be recorded as host"
    "$compare" "$(latest "$w/decode-host")" "$(latest "$w/decode-device")" --optimizer || fail "--decode device differs from host"
    same_metrics "$w/decode-host.jsonl" "$w/decode-device.jsonl" || fail "--decode device: the loss or accuracy differs from host"
  fi
  # ...and the runs really trained: the parameters moved away from the initial ones.
  run 1 "${args[@]}" --batch $b --max-steps 1 --lr 1e-9 --checkpoint-dir "$w/init" > /dev/null 2>&1 || fail "init run"
  if "$compare" "$(latest "$w/np1")" "$(latest "$w/init")" --atol 1e-3 > /dev/null; then fail "training did not change the parameters"; fi
  ;;
resume)
  args=(--model resnet20 --eval false --max-steps 4 --batch 8 --lr 0.05 --warmup-epochs 0)
  run 2 "${args[@]}" --checkpoint-dir "$w/full" > "$w/full.log" 2>&1 || { cat "$w/full.log"; fail "uninterrupted run"; }
  HPDT_TRAIN_TEST_SIGNAL_AT_STEP=2 run 2 "${args[@]}" --checkpoint-dir "$w/part" --metrics "$w/part.jsonl" > "$w/part.log" 2>&1
  rc=$?
  [ $rc -eq 75 ] || { cat "$w/part.log"; fail "a preempted run must exit 75, got $rc"; }
  grep -q "preempted" "$w/part.log" || fail "no preemption message"
  [ "$(ls "$w/part"/ckpt-*.h5 | wc -l)" -eq 1 ] || fail "the preempted run left no checkpoint"
  run 2 "${args[@]}" --checkpoint-dir "$w/part" --metrics "$w/part.jsonl" --resume > "$w/resume.log" 2>&1 || { cat "$w/resume.log"; fail "resumed run"; }
  grep -q "resumed from" "$w/resume.log" || fail "no resume message"
  "$compare" "$(latest "$w/full")" "$(latest "$w/part")" --optimizer || fail "resumed run is not bit-identical to the uninterrupted one"
  grep -c '"type":"step"' "$w/part.jsonl" | grep -qx 4 || fail "metrics of the two halves should hold 4 steps"
  # Another rank count: the sampler re-shards and the learning rate follows the new global batch.
  HPDT_TRAIN_TEST_SIGNAL_AT_STEP=2 run 2 "${args[@]}" --checkpoint-dir "$w/moved" > /dev/null 2>&1
  run 1 "${args[@]}" --checkpoint-dir "$w/moved" --resume > "$w/moved.log" 2>&1 || { cat "$w/moved.log"; fail "resume on 1 rank"; }
  grep -q "resumed on 1 ranks from a checkpoint of 2 ranks" "$w/moved.log" || { cat "$w/moved.log"; fail "no note about the rank count"; }
  # ViT-Ti with dropout: the checkpoint keeps every dropout layer's generator position
  vargs=("${common_vit[@]}" --max-steps 4 --batch 8 --patch 7)
  run 2 "${vargs[@]}" --checkpoint-dir "$w/vfull" > "$w/vfull.log" 2>&1 || { cat "$w/vfull.log"; fail "uninterrupted ViT run"; }
  HPDT_TRAIN_TEST_SIGNAL_AT_STEP=2 run 2 "${vargs[@]}" --checkpoint-dir "$w/vpart" > "$w/vpart.log" 2>&1
  [ $? -eq 75 ] || { cat "$w/vpart.log"; fail "a preempted ViT run must exit 75"; }
  run 2 "${vargs[@]}" --checkpoint-dir "$w/vpart" --resume > "$w/vresume.log" 2>&1 || { cat "$w/vresume.log"; fail "resumed ViT run"; }
  if grep -q "dropout masks start from the beginning" "$w/vresume.log"; then cat "$w/vresume.log"; fail "the dropout state was not restored"; fi
  "$compare" "$(latest "$w/vfull")" "$(latest "$w/vpart")" --optimizer || fail "resumed ViT run with dropout is not bit-identical to the uninterrupted one"
  ;;
algos)
  for algo in ring tree rhd hier mpi shm; do
    nodes=1
    [ $algo = shm ] && nodes=2  # shm: both ranks on one node; the others: one rank per virtual node
    HPDT_RANKS_PER_NODE=$nodes run 2 --model resnet20 --eval false --max-steps 8 --batch 16 --lr 0.1 --warmup-epochs 0 \
      --algo $algo --bucket-mb 0.25 --metrics "$w/$algo.jsonl" > "$w/$algo.log" 2>&1 || { cat "$w/$algo.log"; fail "--algo $algo"; }
    /usr/bin/python3 - "$w/$algo.jsonl" "$algo" <<'PY' || fail "--algo $algo: loss did not fall"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"type":"step"' in l]
first, last = steps[0]["loss"], sum(s["loss"] for s in steps[-3:]) / 3
print(f"{sys.argv[2]}: loss {first:.3f} -> {last:.3f} over {len(steps)} steps")
sys.exit(0 if last < first else 1)
PY
  done
  # The CPU default is NHWC; --layout nchw (the oracle layout) trains too, and both are recorded.
  grep -q '"layout":"nhwc"' "$w/ring.jsonl" || fail "the default layout on the CPU should be nhwc (metrics)"
  run 2 --model resnet20 --eval false --max-steps 8 --batch 16 --lr 0.1 --warmup-epochs 0 --layout nchw \
    --metrics "$w/nchw.jsonl" > "$w/nchw.log" 2>&1 || { cat "$w/nchw.log"; fail "--layout nchw"; }
  grep -q '"layout":"nchw"' "$w/nchw.jsonl" || fail "--layout nchw is not in the metrics"
  ;;
compress)
  falling() {  # falling METRICS LABEL
    /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"type":"step"' in l]
first, last = steps[0]["loss"], sum(s["loss"] for s in steps[-3:]) / 3
print(f"{sys.argv[2]}: loss {first:.3f} -> {last:.3f} over {len(steps)} steps")
sys.exit(0 if last < first else 1)
PY
  }
  for comp in fp16 bf16 topk:0.1 qsgd:4 powersgd:2; do
    for algo in ring tree rhd hier mpi shm; do
      m="$w/$algo-${comp/:/}.jsonl"
      nodes=1
      [ $algo = shm ] && nodes=2
      HPDT_RANKS_PER_NODE=$nodes run 2 --model resnet20 --eval false --max-steps 8 --batch 16 --lr 0.1 --warmup-epochs 0 \
        --algo $algo --compress $comp --bucket-mb 0.25 --metrics "$m" > "$w/out.log" 2>&1 || { cat "$w/out.log"; fail "--algo $algo --compress $comp"; }
      grep -q "compress $comp" "$w/out.log" || { cat "$w/out.log"; fail "--compress $comp is not in the summary"; }
      falling "$m" "$algo $comp" || fail "--algo $algo --compress $comp: loss did not fall"
    done
  done
  # The error-feedback residuals and QSGD's random stream are in the checkpoint: resume is bit-exact.
  args=(--model resnet20 --eval false --max-steps 4 --batch 8 --lr 0.05 --warmup-epochs 0 --compress qsgd:4 --bucket-mb 0.25)
  run 2 "${args[@]}" --checkpoint-dir "$w/full" > "$w/full.log" 2>&1 || { cat "$w/full.log"; fail "uninterrupted qsgd run"; }
  HPDT_TRAIN_TEST_SIGNAL_AT_STEP=2 run 2 "${args[@]}" --checkpoint-dir "$w/part" > "$w/part.log" 2>&1
  [ $? -eq 75 ] || { cat "$w/part.log"; fail "a preempted run must exit 75"; }
  run 2 "${args[@]}" --checkpoint-dir "$w/part" --resume > "$w/resume.log" 2>&1 || { cat "$w/resume.log"; fail "resumed qsgd run"; }
  "$compare" "$(latest "$w/full")" "$(latest "$w/part")" --optimizer || fail "resumed qsgd run is not bit-identical to the uninterrupted one"
  # Resuming with another compression says that the residuals start from zero.
  run 2 "${args[@]/qsgd:4/topk:0.1}" --max-steps 6 --checkpoint-dir "$w/part" --resume > "$w/other.log" 2>&1 || { cat "$w/other.log"; fail "resume with topk"; }
  grep -q "compression state (error feedback) starts from zero" "$w/other.log" || { cat "$w/other.log"; fail "no note about the compression state"; }
  ;;
bad-input)
  expect_error() {  # expect_error PATTERN ARGS...
    local pattern=$1; shift
    run 2 "$@" > "$w/out.log" 2>&1
    local rc=$?
    [ $rc -eq 2 ] || { cat "$w/out.log"; fail "expected exit 2 for: $*; got $rc"; }
    grep -q -- "$pattern" "$w/out.log" || { cat "$w/out.log"; fail "message should mention '$pattern' for: $*"; }
  }
  expect_error "--model 'resnet21'" --model resnet21
  expect_error "--algo" --algo butterfly
  expect_error "--compress" --compress zip:3
  expect_error "top-k ratio must be in" --compress topk:2
  expect_error "/nonexistent/x.h5" --data /nonexistent/x.h5
  echo "not hdf5" > "$w/text.h5"
  expect_error "$w/text.h5" --data "$w/text.h5"
  timeout 60 "$prepare" --out "$w/wide.h5" --synthetic 64 --shape 1,28,32 --classes 10 > /dev/null || fail "prepare"
  expect_error "square" --data "$w/wide.h5"
  expect_error "--kernels vendor needs --device cuda" --kernels vendor
  expect_error "--cudnn-algo find needs --device cuda and --kernels vendor" --cudnn-algo find
  expect_error "--cudnn-algo" --device cuda --kernels vendor --cudnn-algo benchmark
  expect_error "--gemm-tuning find needs --device cuda and --kernels ours" --gemm-tuning find
  expect_error "--gemm-tuning" --device cuda --gemm-tuning fastest
  expect_error "--shuffle-block" --shuffle-block 0
  expect_error "--window-batches" --window-batches 0
  expect_error "--decode-threads" --decode-threads -1
  expect_error "--decode" --decode gpu
  expect_error "--layout" --layout nchwc
  expect_error "--layout nhwc is for the ResNets" --model vit-ti --layout nhwc
  expect_error "--dropout is for the ViTs" --dropout 0.1
  expect_error "--gelu" --model vit-ti --gelu none
  expect_error "--gelu separate is for the ViTs" --gelu separate
  expect_error "--dropout 1 is not in" --model vit-ti --dropout 1
  expect_error "--vit-depth is for the ViTs" --vit-depth 2
  expect_error "--vit-depth" --model vit-ti --vit-depth -1
  # --layout nhwc --device cuda is accepted (NHWC has CUDA kernels): it trains where a GPU is usable and fails
  # only for the want of one here, like --device cuda below, never with a layout message.
  run 2 --layout nhwc --device cuda --eval false --max-steps 1 --batch 8 > "$w/nhwc_cuda.log" 2>&1
  rc=$?
  if grep -q "CPU-only\|layout nhwc" "$w/nhwc_cuda.log"; then cat "$w/nhwc_cuda.log"; fail "--layout nhwc --device cuda was refused"; fi
  if [ $rc -eq 2 ]; then
    grep -q "no usable GPU on rank 0 (" "$w/nhwc_cuda.log" || { cat "$w/nhwc_cuda.log"; fail "--layout nhwc --device cuda: exit 2 without the no-GPU message"; }
  elif [ $rc -ne 0 ]; then
    cat "$w/nhwc_cuda.log"; fail "--layout nhwc --device cuda: exit $rc"
  fi
  # --device cuda where no GPU is usable: every rank stops, one message naming each rank, its host and the
  # reason; where GPUs exist the same command trains one step on them.
  run 2 --device cuda --eval false --max-steps 1 --batch 8 > "$w/cuda.log" 2>&1
  rc=$?
  if [ $rc -eq 2 ]; then
    { grep -q "no usable GPU on rank 0 (" "$w/cuda.log" && grep -q "rank 1 (" "$w/cuda.log"; } ||
      { cat "$w/cuda.log"; fail "--device cuda without a GPU: the message should name ranks 0 and 1"; }
  elif [ $rc -ne 0 ]; then
    cat "$w/cuda.log"; fail "--device cuda: exit $rc"
  fi
  echo '{"keep": "me"}' > "$w/old.jsonl"
  expect_error "already exists" --max-steps 1 --metrics "$w/old.jsonl"
  grep -q keep "$w/old.jsonl" || fail "an existing metrics file was overwritten"
  run 1 --model resnet20 --eval false --max-steps 1 --batch 8 --checkpoint-dir "$w/ck" > /dev/null 2>&1 || fail "checkpoint run"
  sum=$(md5sum "$w"/ck/*.h5)
  expect_error "resnet" --model resnet56 --eval false --max-steps 2 --batch 8 --checkpoint-dir "$w/ck" --resume
  [ "$(md5sum "$w"/ck/*.h5)" = "$sum" ] || fail "the checkpoint of the other model was touched"
  # --vit-depth is part of the model: a checkpoint of another depth is refused, naming both
  run 1 --model vit-ti --vit-depth 1 --eval false --max-steps 1 --batch 8 --checkpoint-dir "$w/vck" > /dev/null 2>&1 ||
    fail "vit-ti --vit-depth 1 checkpoint run"
  expect_error "vit_depth=1' differs from this run's 'vit_ti .*vit_depth=2'" --model vit-ti --vit-depth 2 --eval false \
    --max-steps 2 --batch 8 --checkpoint-dir "$w/vck" --resume
  ;;
cuda-emu)
  cpu=${HPDT_TRAIN_CPU:?HPDT_TRAIN_CPU: the CPU hpdt-train to compare with}
  args=(--model vit-ti --vit-depth 2 --patch 7 --optimizer adamw --weight-decay 0.05 --eval false --augment false
        --max-steps 2 --batch 4 --lr 0.001 --warmup-epochs 0)
  ck() { echo "$w/$1/ckpt-000000002.h5"; }
  # (path expected in the banner, extra environment, algorithm)
  # (this run and the CPU one below also evaluate 8 test samples and write their metrics: the loss and accuracy
  # the GPU step reads back once, at its end, against the CPU's)
  run 2 "${args[@]}" --eval true --eval-samples 8 --metrics "$w/mirror.jsonl" --device cuda --algo ring \
    --checkpoint-dir "$w/mirror" > "$w/mirror.log" 2>&1 || { cat "$w/mirror.log"; fail "cuda ring (host mirror)"; }
  grep -q "gradients averaged via host mirror" "$w/mirror.log" || { cat "$w/mirror.log"; fail "2 ranks on 1 emulated GPU should take the host mirror"; }
  # One rank with --algo auto (the default): nothing to average, no mirror; near the 2-rank run of the same global batch.
  # (its reader decodes each batch on 2 threads: the same batches)
  run 1 "${args[@]}" --batch 8 --decode-threads 2 --device cuda --checkpoint-dir "$w/one" > "$w/one.log" 2>&1 ||
    { cat "$w/one.log"; fail "cuda, 1 rank"; }
  grep -q "gradients not averaged (one rank)" "$w/one.log" || { cat "$w/one.log"; fail "1 rank, --algo auto: expected no averaging"; }
  "$compare" "$(ck mirror)" "$(ck one)" --atol 2e-4 --rtol 2e-3 || fail "cuda np 1 (not averaged) is not near cuda np 2 (host mirror)"
  # Batches go up as u8 and are decoded on the GPU (--decode auto: device), into the model's dtype: the same bits as the
  # reader's decode (--decode host), with crop and flip and in the evaluation, in f32 and in bf16 (the cast folded in).
  for p in fp32 bf16; do
    for d in auto host; do
      run 1 "${args[@]}" --batch 8 --augment true --eval true --eval-samples 8 --precision $p --decode $d --device cuda \
        --metrics "$w/dec-$p-$d.jsonl" --checkpoint-dir "$w/dec-$p-$d" > "$w/dec-$p-$d.log" 2>&1 ||
        { cat "$w/dec-$p-$d.log"; fail "cuda --precision $p --decode $d"; }
    done
    grep -q '"decode":"device"' "$w/dec-$p-auto.jsonl" || fail "--decode auto on the GPU should decode on the device"
    "$compare" "$(ck dec-$p-host)" "$(ck dec-$p-auto)" --optimizer || fail "--precision $p: the GPU's decode differs from the reader's"
    same_metrics "$w/dec-$p-host.jsonl" "$w/dec-$p-auto.jsonl" || fail "--precision $p: the GPU's decode changes the loss or accuracy"
  done
  # A ResNet runs in NHWC on the GPU: the batches are decoded channels last, by the GPU (auto) and by the reader (host),
  # and go into the model without a transpose; the two decodes give the same bits. 3 channels (one is NCHW's bytes).
  timeout 60 "$prepare" --out "$w/rgb.h5" --synthetic 64 --shape 3,12,12 --classes 10 > /dev/null || fail "prepare 3 channels"
  for d in auto host; do
    run 1 --data "$w/rgb.h5" --model resnet20 --eval false --augment true --max-steps 2 --batch 8 --lr 0.05 \
      --warmup-epochs 0 --precision bf16 --decode $d --device cuda --metrics "$w/rgb-$d.jsonl" \
      --checkpoint-dir "$w/rgb-$d" > "$w/rgb-$d.log" 2>&1 || { cat "$w/rgb-$d.log"; fail "resnet20 3 channels --decode $d"; }
  done
  { grep -q '"decode":"device"' "$w/rgb-auto.jsonl" && grep -q '"layout":"nhwc"' "$w/rgb-auto.jsonl"; } ||
    fail "resnet20 on the GPU: expected the device's decode and layout nhwc in the metrics' config"
  "$compare" "$(ck rgb-host)" "$(ck rgb-auto)" --optimizer ||
    fail "resnet20 nhwc: the GPU's channels-last decode differs from the reader's"
  # More channels than the GPU decode takes (16): --decode device is refused naming the flag and the file; auto lets
  # the reader decode them.
  timeout 60 "$prepare" --out "$w/wide17.h5" --synthetic 64 --shape 17,8,8 --classes 10 > /dev/null || fail "prepare 17 channels"
  wide=(--data "$w/wide17.h5" --model resnet20 --eval false --max-steps 1 --batch 8 --device cuda)
  run 1 "${wide[@]}" --decode device > "$w/wide-device.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "--decode device: --data $w/wide17.h5 has 17 channels" "$w/wide-device.log" ||
    { cat "$w/wide-device.log"; fail "--decode device with 17 channels: expected exit 2 naming the flag and the file, got $rc"; }
  run 1 "${wide[@]}" --metrics "$w/wide-auto.jsonl" > "$w/wide-auto.log" 2>&1 || { cat "$w/wide-auto.log"; fail "17 channels, --decode auto"; }
  grep -q '"decode":"host"' "$w/wide-auto.jsonl" || fail "17 channels, --decode auto: the reader should decode"
  # One virtual node per rank: every rank has its own (emulated) GPU, so ring/hier run on the GPU over NCCL.
  for algo in ring hier nccl; do
    HPDT_RANKS_PER_NODE=1 run 2 "${args[@]}" --device cuda --algo $algo --checkpoint-dir "$w/$algo" > "$w/$algo.log" 2>&1 ||
      { cat "$w/$algo.log"; fail "cuda $algo with a GPU per rank"; }
    want=nccl-p2p; [ $algo = nccl ] && want=nccl
    grep -q "gradients averaged via $want$" "$w/$algo.log" || { cat "$w/$algo.log"; fail "cuda $algo: expected the $want path"; }
  done
  # --algo auto (the default) with a GPU per rank reduces device memory too: ncclAllReduce without a tuning file (the
  # same bits as --algo nccl); with one, each bucket as the file names it (here ring, over NCCL, below 64 KiB and nccl
  # above: ViT-Ti's 0.1-MiB buckets and its small last ones). Sharing one GPU, auto takes the host mirror.
  HPDT_RANKS_PER_NODE=1 run 2 "${args[@]}" --device cuda --checkpoint-dir "$w/auto" > "$w/auto.log" 2>&1 ||
    { cat "$w/auto.log"; fail "cuda auto with a GPU per rank"; }
  grep -q "gradients averaged via nccl$" "$w/auto.log" || { cat "$w/auto.log"; fail "cuda auto with a GPU per rank: expected nccl"; }
  "$compare" "$(ck nccl)" "$(ck auto)" --optimizer || fail "auto with a GPU per rank differs from --algo nccl"
  printf '%s\n' '{"format": "hpdt-allreduce-tuning", "version": 1, "entries": [' \
    '{"min_bytes": 0, "max_bytes": 65536, "algorithm": "ring"}, {"min_bytes": 65536, "algorithm": "nccl"}]}' > "$w/tuning.json"
  HPDT_RANKS_PER_NODE=1 run 2 "${args[@]}" --device cuda --bucket-mb 0.1 --tuning-file "$w/tuning.json" \
    --checkpoint-dir "$w/auto-tuned" > "$w/auto-tuned.log" 2>&1 || { cat "$w/auto-tuned.log"; fail "cuda auto with a tuning file"; }
  grep -q "gradients averaged via \(nccl + nccl-p2p\|nccl-p2p + nccl\)$" "$w/auto-tuned.log" ||
    { cat "$w/auto-tuned.log"; fail "cuda auto with a tuning file: expected nccl and nccl-p2p buckets"; }
  "$compare" "$(ck nccl)" "$(ck auto-tuned)" --optimizer --atol 1e-6 --rtol 1e-5 || fail "auto with a tuning file is not near nccl"
  run 2 "${args[@]}" --device cuda --tuning-file "$w/tuning.json" --checkpoint-dir "$w/auto-shared" > "$w/auto-shared.log" 2>&1 ||
    { cat "$w/auto-shared.log"; fail "cuda auto, 2 ranks on 1 GPU, a tuning file naming nccl"; }
  grep -q "gradients averaged via host mirror" "$w/auto-shared.log" || { cat "$w/auto-shared.log"; fail "auto sharing a GPU: expected the host mirror"; }
  grep -q "names nccl for all-reduces of" "$w/auto-shared.log" ||
    { cat "$w/auto-shared.log"; fail "auto on host memory: expected the warning on the file's nccl"; }
  "$compare" "$(ck mirror)" "$(ck auto-shared)" --optimizer || fail "auto through the host mirror differs from its ring (2 ranks: a + b)"
  # The same f32 sums in the same order (2 ranks: a + b whatever the algorithm): bitwise equal.
  for algo in ring hier; do
    "$compare" "$(ck mirror)" "$(ck $algo)" --optimizer || fail "nccl-p2p $algo differs from the host mirror's ring"
  done
  # ncclAllReduce (here emulated over MPI) averages in its own way: equal within rounding.
  "$compare" "$(ck mirror)" "$(ck nccl)" --optimizer --atol 1e-6 --rtol 1e-5 || fail "nccl differs from the host mirror"
  # Top-k and QSGD compressed on the GPU (comm::DeviceCompressor) give the host compressors' bits: the checkpoints,
  # error-feedback state included, equal those of the host mirror (HPDT_DEVICE_COMPRESSION=off).
  for c in topk:0.1 qsgd:4 fp16 powersgd:2; do
    run 2 "${args[@]}" --device cuda --algo ring --compress $c --checkpoint-dir "$w/dev-$c" > "$w/dev-$c.log" 2>&1 ||
      { cat "$w/dev-$c.log"; fail "cuda --compress $c"; }
    grep -q "gradients averaged via device compression" "$w/dev-$c.log" ||
      { cat "$w/dev-$c.log"; fail "cuda --compress $c: expected the device compression path"; }
    HPDT_DEVICE_COMPRESSION=off run 2 "${args[@]}" --device cuda --algo ring --compress $c --checkpoint-dir "$w/mir-$c" \
      > "$w/mir-$c.log" 2>&1 || { cat "$w/mir-$c.log"; fail "cuda --compress $c, HPDT_DEVICE_COMPRESSION=off"; }
    grep -q "gradients averaged via host mirror" "$w/mir-$c.log" ||
      { cat "$w/mir-$c.log"; fail "HPDT_DEVICE_COMPRESSION=off: expected the host mirror"; }
    "$compare" "$(ck mir-$c)" "$(ck dev-$c)" --optimizer || fail "--compress $c on the GPU differs from the host mirror's"
  done
  # The compression state carries over between the paths: a host mirror run preempted after step 2, resumed on the
  # device, ends bit-identical to an uninterrupted device run (QSGD: the residuals and the random stream's position).
  run 2 "${args[@]}" --max-steps 3 --device cuda --algo ring --compress qsgd:4 --checkpoint-dir "$w/dev3" > "$w/dev3.log" 2>&1 ||
    { cat "$w/dev3.log"; fail "cuda --compress qsgd:4, 3 steps"; }
  HPDT_DEVICE_COMPRESSION=off HPDT_TRAIN_TEST_SIGNAL_AT_STEP=2 run 2 "${args[@]}" --max-steps 3 --device cuda --algo ring \
    --compress qsgd:4 --checkpoint-dir "$w/resumed" > "$w/preempted.log" 2>&1
  [ $? -eq 75 ] || { cat "$w/preempted.log"; fail "a preempted run must exit 75"; }
  run 2 "${args[@]}" --max-steps 3 --device cuda --algo ring --compress qsgd:4 --checkpoint-dir "$w/resumed" --resume \
    > "$w/resumed.log" 2>&1 || { cat "$w/resumed.log"; fail "cuda --compress qsgd:4 resumed from the host mirror's checkpoint"; }
  "$compare" "$(latest "$w/dev3")" "$(latest "$w/resumed")" --optimizer ||
    fail "the device compression run resumed from the host mirror's checkpoint differs from an uninterrupted one"
  # --sync-bn (ResNet-20): the batch statistics summed over the ranks. Sharing one GPU, by MPI on the host (a round trip
  # a batch norm); a GPU each, by NCCL on the compute stream. The same sums (2 ranks: a + b), so the same bits (ring
  # both ways: the host mirror's and nccl-p2p's are bitwise equal). Near one rank with the global batch: the statistics
  # are of all 8 samples (each rank's own 4, without --sync-bn, leave the running variances ~0.1 apart).
  sbn=(--model resnet20 --sync-bn --eval false --augment false --max-steps 3 --lr 0.05 --warmup-epochs 0 --device cuda
       --algo ring)
  run 2 "${sbn[@]}" --batch 4 --checkpoint-dir "$w/sbn-mpi" > "$w/sbn-mpi.log" 2>&1 || { cat "$w/sbn-mpi.log"; fail "--sync-bn, 2 ranks on 1 GPU"; }
  grep -q "batch-norm statistics via MPI on the host" "$w/sbn-mpi.log" || { cat "$w/sbn-mpi.log"; fail "--sync-bn sharing a GPU: expected MPI"; }
  HPDT_RANKS_PER_NODE=1 run 2 "${sbn[@]}" --batch 4 --metrics "$w/sbn-nccl.jsonl" --checkpoint-dir "$w/sbn-nccl" \
    > "$w/sbn-nccl.log" 2>&1 || { cat "$w/sbn-nccl.log"; fail "--sync-bn, a GPU per rank"; }
  grep -q "batch-norm statistics via nccl on the compute stream" "$w/sbn-nccl.log" && grep -q '"sync_bn_via":"nccl"' "$w/sbn-nccl.jsonl" ||
    { cat "$w/sbn-nccl.log"; fail "--sync-bn with a GPU per rank: expected nccl on the compute stream"; }
  "$compare" "$(latest "$w/sbn-mpi")" "$(latest "$w/sbn-nccl")" --optimizer || fail "--sync-bn by nccl differs from MPI's"
  run 1 "${sbn[@]}" --batch 8 --checkpoint-dir "$w/sbn-one" > "$w/sbn-one.log" 2>&1 || { cat "$w/sbn-one.log"; fail "--sync-bn, 1 rank"; }
  "$compare" "$(latest "$w/sbn-one")" "$(latest "$w/sbn-nccl")" --atol 2e-4 --rtol 2e-3 || fail "--sync-bn by nccl: not near one rank's batch of 8"
  # The GPU kernels against the CPU ones after two AdamW steps (other summation orders).
  timeout --kill-after=10 240 $mpiexec -n 2 "$cpu" --data "$data/fashion-mnist-train.h5" --progress lines --threads 1 --seed 7 \
    "${args[@]}" --eval true --eval-samples 8 --metrics "$w/cpu.jsonl" --device cpu --algo ring --checkpoint-dir "$w/cpu" \
    > "$w/cpu.log" 2>&1 || { cat "$w/cpu.log"; fail "cpu run"; }
  "$compare" "$(ck cpu)" "$(ck mirror)" --atol 2e-4 --rtol 2e-3 || fail "the emulated GPU run is not near the CPU run"
  # Each step's loss and accuracy, and the evaluation's, as the GPU step counts them on the device (read after its
  # one wait) against the CPU's: the loss within 1e-4, the same number of samples right (f32).
  metrics_near "$w/cpu.jsonl" "$w/mirror.jsonl" || fail "the emulated GPU run's loss or accuracy is not the CPU run's"
  # ...and the runs trained: the parameters moved (against a run whose steps hardly move them).
  timeout --kill-after=10 240 $mpiexec -n 2 "$cpu" --data "$data/fashion-mnist-train.h5" --progress lines --threads 1 --seed 7 \
    "${args[@]}" --lr 1e-9 --device cpu --algo ring --checkpoint-dir "$w/still" > /dev/null 2>&1 || fail "cpu run at lr 1e-9"
  # (peak lr 3.1e-5 at global batch 8: AdamW moves every weight by about that per step)
  if "$compare" "$(ck still)" "$(ck mirror)" --atol 1e-5 > /dev/null; then fail "the GPU run did not change the parameters"; fi
  ;;
cuda-emu-find)
  gemm_find_near_rule 4 --vit-depth 2
  ;;
cuda-emu-graph)
  # --cuda-graph: each step's forward and backward replayed as one CUDA graph, bitwise the eager run's (the same kernels
  # with the same arguments), whatever the graph had to be captured again for.
  ck() { echo "$w/$1/ckpt-$(printf %09d "$2").h5"; }
  # graph_like_eager NAME NP STEPS ARGS...: the run with and without --cuda-graph, the same checkpoint and metrics
  # ("{mode}" in an argument: eager or graph)
  graph_like_eager() {
    local name=$1 np=$2 steps=$3; shift 3
    for mode in eager graph; do
      local flag=(); [ $mode = graph ] && flag=(--cuda-graph)
      run "$np" "${@//\{mode\}/$mode}" "${flag[@]}" --metrics "$w/$name-$mode.jsonl" --checkpoint-dir "$w/$name-$mode" \
        > "$w/$name-$mode.log" 2>&1 || { cat "$w/$name-$mode.log"; fail "$name: the $mode run"; }
    done
    "$compare" "$(ck "$name-eager" "$steps")" "$(ck "$name-graph" "$steps")" --optimizer > "$w/cmp.log" ||
      { cat "$w/cmp.log"; fail "$name: the --cuda-graph run differs from the eager one"; }
    diff <(grep -oE '"(test_)?(loss|accuracy|loss_scale)":[^,}]*' "$w/$name-eager.jsonl") \
      <(grep -oE '"(test_)?(loss|accuracy|loss_scale)":[^,}]*' "$w/$name-graph.jsonl") ||
      fail "$name: the --cuda-graph run's loss, accuracy or loss scale differs from the eager one's"
    grep -h "cuda graph  " "$w/$name-graph.log"
  }
  captures() { grep -o '"cuda_graph":{"captures":[0-9]*' "$w/$1-graph.jsonl" | grep -o '[0-9]*$'; }
  parts() { grep -o '"parts":[0-9]*' "$w/$1-graph.jsonl" | grep -o '[0-9]*$'; }
  buckets() { grep '"type":"summary"' "$w/$1-graph.jsonl" | grep -o '"buckets":[0-9]*' | grep -o '[0-9]*$'; }
  # One rank, 3 micro-batches a step from the two slots (u8 batches decoded on the GPU, crop and flip), 2 epochs of 4
  # steps (--train-samples 48): eager steps until one allocates nothing, then a capture; evaluation drops the graph, so
  # the second epoch captures again.
  graph_like_eager accum 1 8 --model vit-ti --vit-depth 2 --patch 7 --optimizer adamw --weight-decay 0.05 --augment true \
    --eval true --eval-samples 8 --train-samples 48 --epochs 2 --batch 4 --accum-steps 3 --lr 0.001 --warmup-epochs 0 \
    --device cuda
  grep -q '"steps_per_epoch":4,' "$w/accum-graph.jsonl" || fail "--train-samples 48 at a global batch of 12: 4 steps an epoch"
  [ "$(captures accum)" = 2 ] || fail "accum: expected 2 captures (one an epoch), got $(captures accum)"
  # (the second epoch's warm-up may be shorter: the first left the cache warm)
  replays=$(grep -o '"replays":[0-9]*' "$w/accum-graph.jsonl" | grep -o '[0-9]*$')
  eager=$(grep -o '"eager_steps":[0-9]*' "$w/accum-graph.jsonl" | grep -o '[0-9]*$')
  [ "${replays:-0}" -ge 2 ] && [ $((replays + eager)) -eq 8 ] ||
    fail "accum: expected 8 steps, 2 or more replayed: $replays replayed, $eager eager"
  grep -q "forward+backward .* (CUDA graph)" "$w/accum-graph.log" || fail "accum: the summary should say the step ran as a graph"
  # fp16 at a learning rate that overflows now and then: the dynamic loss scale halves, the graph is captured again.
  graph_like_eager fp16 1 10 --model vit-ti --vit-depth 2 --patch 7 --optimizer sgd --eval false --augment false --max-steps 10 \
    --batch 4 --lr 1000 --warmup-epochs 0 --precision fp16 --device cuda
  [ "$(captures fp16)" -ge 2 ] || fail "fp16: the loss scale moved after the capture, expected a second capture"
  # Two ranks: the gradients averaged through the host mirror (one GPU; 1-MiB buckets, so the graph is captured in
  # parts, each bucket handed to the sync after the part that completes it) and NCCL (a GPU each; 0.1-MiB buckets,
  # their all-reduces queued on the GPU and captured into the graph with the backward: one part).
  vit=(--model vit-ti --vit-depth 2 --patch 7 --optimizer adamw --weight-decay 0.05 --eval false --augment false
       --max-steps 5 --batch 2 --lr 0.001 --warmup-epochs 0 --device cuda)
  graph_like_eager mirror 2 5 "${vit[@]}" --algo ring --bucket-mb 1
  grep -q "gradients averaged via host mirror" "$w/mirror-graph.log" || fail "np 2 on 1 emulated GPU: expected the host mirror"
  HPDT_RANKS_PER_NODE=1 graph_like_eager nccl 2 5 "${vit[@]}" --algo nccl --bucket-mb 0.1 --timeline "$w/nccl-{mode}.json"
  grep -q "gradients averaged via nccl$" "$w/nccl-graph.log" || fail "a GPU per rank, --algo nccl: expected nccl"
  # (the last step was a replay: its bytes are the capture's)
  [ "$(grep -o '"bytes_sent_per_step":[0-9]*' "$w/nccl-graph.jsonl")" = "$(grep -o '"bytes_sent_per_step":[0-9]*' "$w/nccl-eager.jsonl")" ] ||
    fail "nccl --cuda-graph: the bytes sent a step differ from the eager run's"
  # the eager steps' buckets on the timeline (times from the GPU's events), the replayed steps' not (one launch)
  spans=$(grep -o '"name":"allreduce bucket [0-9]*"' "$w/nccl-graph.json" | wc -l)
  [ "$spans" -eq $((2 * 3 * $(buckets nccl))) ] ||
    fail "nccl --cuda-graph: expected the 3 eager steps' $(buckets nccl) bucket spans a rank on the timeline, got $spans"
  grep -q "1 part(s), the gradients' all-reduces inside" "$w/nccl-graph.log" || fail "nccl: the summary should say so"
  for name in mirror nccl; do
    [ "$(captures $name)" = 1 ] && grep -q '"replays":2' "$w/$name-graph.jsonl" ||
      fail "$name: expected a capture after the eager steps and 2 replayed steps of 5"
  done
  [ "$(parts mirror)" -gt 1 ] && [ "$(parts mirror)" -le "$(buckets mirror)" ] ||
    fail "mirror: 1-MiB buckets should split the graph into 2..$(buckets mirror) parts, got $(parts mirror)"
  [ "$(buckets nccl)" -gt 1 ] && [ "$(parts nccl)" = 1 ] ||
    fail "nccl: $(buckets nccl) buckets (expected several) queued inside the graph, expected one part, got $(parts nccl)"
  [ "$(parts accum)" = 1 ] || fail "one rank: nothing to average, expected one part, got $(parts accum)"
  # The streams' work deferred (CUDA_EMU_STREAMS, as cuda-emu-streams): the batches copied from their slots into the
  # graph's inputs while the next one is copied up, the graph replayed at steps 4 and 5.
  # (lazy and two random orders: cuda-emu-streams runs all five for the eager step)
  args=("${vit[@]}") orders="lazy:0 random:1 random:2"
  ck() { echo "$w/$1/ckpt-000000005.h5"; }
  same_in_every_order streams 1 --accum-steps 3 --cuda-graph
  grep -q "cuda graph      1 capture(s), 2 step(s) replayed" "$w/streams-eager.log" ||
    { cat "$w/streams-eager.log"; fail "--cuda-graph under CUDA_EMU_STREAMS: expected 2 replays"; }
  # ... and the parts of two ranks' graph, each followed by its buckets' copy down on the mirror's copy stream
  same_in_every_order streams-mirror 2 --algo ring --bucket-mb 1 --cuda-graph
  # --sync-bn with a GPU per rank: the statistics' all-reduces (NCCL on the compute stream) inside the graph's parts,
  # bitwise the eager run's, also with the streams' work deferred (the launches of graphs holding a collective run at
  # once in the emulator, as its collectives do). Sharing a GPU (MPI on the host) the run is refused (exit 2).
  rn=(--model resnet20 --sync-bn --eval false --augment false --max-steps 5 --batch 4 --lr 0.05 --warmup-epochs 0
      --device cuda --algo ring --bucket-mb 0.1)
  # (HPDT_GRAD_SYNC_QUEUED=off: the gradients by the stager thread, so the graph is in parts, the statistics'
  # all-reduces inside them)
  HPDT_GRAD_SYNC_QUEUED=off HPDT_RANKS_PER_NODE=1 graph_like_eager syncbn 2 5 "${rn[@]}"
  [ "$(captures syncbn)" = 1 ] && [ "$(parts syncbn)" -gt 1 ] || fail "syncbn: expected one capture in several parts"
  # (under the streams' orders, queued: the gradients' all-reduces by ring over NCCL in the graph too, one part)
  args=("${rn[@]}") orders="lazy:0 random:1"
  HPDT_RANKS_PER_NODE=1 same_in_every_order streams-syncbn 2 --cuda-graph
  grep -q "1 part(s), the gradients' all-reduces inside" "$w/streams-syncbn-eager.log" ||
    fail "streams-syncbn: expected the gradients' all-reduces inside the graph"
  run 2 "${rn[@]}" --cuda-graph > "$w/bad.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "--cuda-graph with --sync-bn needs a GPU per rank" "$w/bad.log" ||
    { cat "$w/bad.log"; fail "--cuda-graph --sync-bn sharing a GPU: expected exit 2 naming both flags, got $rc"; }
  # Bad input: refused before any work, naming the flag (exit 2).
  run 1 --model vit-ti --cuda-graph --dropout 0.1 --device cuda > "$w/bad.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "--cuda-graph: not with --dropout 0.1" "$w/bad.log" ||
    { cat "$w/bad.log"; fail "--cuda-graph --dropout: expected exit 2 naming both flags, got $rc"; }
  ;;
cuda-emu-streams | cuda-emu-streams-one)
  args=(--model vit-ti --vit-depth 2 --patch 7 --optimizer adamw --weight-decay 0.05 --eval false --augment false
        --max-steps 2 --batch 2 --lr 0.001 --warmup-epochs 0 --device cuda)
  ck() { echo "$w/$1/ckpt-000000002.h5"; }
  if [ $case = cuda-emu-streams-one ]; then  # (one rank: a one-slot test of its own, started early)
    same_in_every_order one 1 --accum-steps 3
    grep -q "gradients not averaged (one rank)" "$w/one-eager.log" || { cat "$w/one-eager.log"; fail "1 rank: expected no averaging"; }
    exit 0
  fi
  same_in_every_order mirror 2 --algo ring
  grep -q "gradients averaged via host mirror" "$w/mirror-eager.log" || fail "np 2 on 1 emulated GPU: expected the host mirror"
  # (device compression and auto in three orders, the host mirror and nccl-p2p in all five: CI's time)
  orders="lazy:0 random:1 random:2" same_in_every_order topk 2 --algo ring --compress topk:0.1
  grep -q "gradients averaged via device compression" "$w/topk-eager.log" || fail "--compress topk: expected device compression"
  HPDT_RANKS_PER_NODE=1 same_in_every_order p2p 2 --algo ring
  grep -q "gradients averaged via nccl-p2p" "$w/p2p-eager.log" || fail "a GPU per rank: expected nccl-p2p"
  # the default --algo auto with a GPU per rank: ncclAllReduce
  HPDT_RANKS_PER_NODE=1 orders="lazy:0 random:1 random:2" same_in_every_order auto 2
  grep -q "gradients averaged via nccl$" "$w/auto-eager.log" || fail "a GPU per rank, --algo auto: expected nccl"
  ;;
cuda-emu-racecheck)
  # HPDT_TRAIN is the racecheck preset's hpdt-train-emu: the trainer, the emulated kernels and the NCCL emulation under
  # ThreadSanitizer (docs/cuda-emulator.md, "Racecheck"), which stops a rank at its first report (halt_on_error). One
  # OpenMP thread and one decode thread: libgomp's workers are not instrumented, and every access they made would be
  # reported. Each run must pass and its log hold no ThreadSanitizer report.
  args=(--model vit-ti --vit-depth 2 --patch 7 --optimizer adamw --weight-decay 0.05 --augment true --max-steps 2
        --batch 4 --lr 0.001 --warmup-epochs 0 --decode-threads 1 --device cuda)
  checked() {  # checked NAME WHAT NP ARGS...: run, then no report in NAME.log
    local name=$1 what=$2; shift 2
    run "$@" --checkpoint-dir "$w/$name" > "$w/$name.log" 2>&1 || { cat "$w/$name.log"; fail "$what under ThreadSanitizer"; }
    ! grep -q "WARNING: ThreadSanitizer" "$w/$name.log" || { cat "$w/$name.log"; fail "$what: ThreadSanitizer reported"; }
    echo "racecheck: $what: no report"
  }
  # One rank: the reader's thread with pooled pinned batches, the copy stream into two slots, the GPU's decode, the
  # one-wait step, evaluation.
  checked one "np 1 (reader, copy stream, evaluation)" 1 "${args[@]}" --eval true --eval-samples 8
  # A ResNet in NHWC: the batches decoded channels last on the GPU and by the reader's thread; a CUDA graph.
  timeout 60 "$prepare" --out "$w/rgb.h5" --synthetic 32 --shape 3,12,12 --classes 10 > /dev/null || fail "prepare 3 channels"
  rn=(--data "$w/rgb.h5" --model resnet20 --eval false --augment true --max-steps 3 --batch 4 --lr 0.05 --warmup-epochs 0
      --decode-threads 1 --device cuda)
  checked rn-device "resnet20 nhwc, --decode device, --cuda-graph" 1 "${rn[@]}" --cuda-graph
  checked rn-host "resnet20 nhwc, --decode host" 1 "${rn[@]}" --decode host
  # Two ranks on one emulated GPU: the host mirror, GradSync's stager thread reducing buckets while backward goes on.
  checked mirror "np 2, host mirror (stager thread)" 2 "${args[@]}" --eval false --algo ring --bucket-mb 0.1
  grep -q "gradients averaged via host mirror" "$w/mirror.log" || fail "np 2 on 1 emulated GPU: expected the host mirror"
  # A GPU each: ncclAllReduce of each bucket queued by the training thread on a second stream, eager and in a graph.
  HPDT_RANKS_PER_NODE=1 checked nccl "np 2, nccl (queued buckets)" 2 "${args[@]}" --eval false --algo nccl --bucket-mb 0.1
  HPDT_RANKS_PER_NODE=1 checked nccl-graph "np 2, nccl, --cuda-graph" 2 "${args[@]}" --eval false --algo nccl \
    --bucket-mb 0.1 --max-steps 4 --cuda-graph
  ;;
cpu-only)
  gpu_build=${HPDT_TRAIN_CPU:?HPDT_TRAIN_CPU: the hpdt-train of this build to compare with}
  cpu_only=$train
  # same_bits NAME ARGS...: the run of ARGS at np 2 by each build ends with the same bits, loss and accuracy
  same_bits() {
    local name=$1 b; shift
    for b in cpu_only gpu_build; do
      train=${!b}
      run 2 "$@" --metrics "$w/$name-$b.jsonl" --checkpoint-dir "$w/$name-$b" > "$w/$name-$b.log" 2>&1 ||
        { cat "$w/$name-$b.log"; fail "$name: the $b run ($train)"; }
    done
    { grep -q '"build":{[^}]*"cuda":false' "$w/$name-cpu_only.jsonl" && grep -q '"build":{[^}]*"cuda":true' "$w/$name-gpu_build.jsonl"; } ||
      fail "$name: expected the metrics' build to say cuda false for $cpu_only and true for $gpu_build"
    "$compare" "$(latest "$w/$name-gpu_build")" "$(latest "$w/$name-cpu_only")" --optimizer > "$w/cmp.log" ||
      { cat "$w/cmp.log"; fail "$name: the CPU-only build's run differs from this build's CPU run"; }
    same_metrics "$w/$name-gpu_build.jsonl" "$w/$name-cpu_only.jsonl" ||
      fail "$name: the CPU-only build's loss or accuracy differs from this build's"
    echo "$name: $(grep -c '"type":"step"' "$w/$name-cpu_only.jsonl") steps, the CPU-only build's bits are this build's"
  }
  resnet=(--model resnet20 --sync-bn --augment true --eval true --eval-samples 32 --max-steps 3 --batch 8 --lr 0.05
          --warmup-epochs 0)
  same_bits resnet-host "${resnet[@]}" --decode host
  same_bits resnet-device "${resnet[@]}" --decode device
  same_bits vit "${common_vit[@]}" --vit-depth 2 --eval true --eval-samples 16 --batch 8
  train=$cpu_only
  run 2 --device cuda --eval false --max-steps 1 --batch 8 > "$w/cuda.log" 2>&1
  rc=$?
  { [ $rc -eq 2 ] && grep -q "no usable GPU on rank 0 (" "$w/cuda.log" && grep -q "rank 1 (" "$w/cuda.log" &&
    grep -q "built without CUDA" "$w/cuda.log"; } ||
    { cat "$w/cuda.log"; fail "--device cuda in the CPU-only build: expected exit 2 naming ranks 0 and 1 and 'built without CUDA', got $rc"; }
  ;;
cuda-gpu)
  vit=(--model vit-ti --patch 7 --optimizer adamw --weight-decay 0.05 --eval false --augment false --max-steps 2 --batch 8
       --lr 0.001 --warmup-epochs 0)
  res=(--model resnet20 --eval false --augment false --max-steps 3 --batch 16 --lr 0.05 --warmup-epochs 0)
  ck() { echo "$w/$1/ckpt-000000002.h5"; }
  ckr() { echo "$w/$1/ckpt-000000003.h5"; }
  for m in vit res; do
    eval "args=(\"\${$m[@]}\")"
    ckf=ck; [ $m = res ] && ckf=ckr
    run 1 "${args[@]}" --device cpu --checkpoint-dir "$w/$m-cpu" > "$w/$m-cpu.log" 2>&1 || { cat "$w/$m-cpu.log"; fail "$m cpu run"; }
    run 1 "${args[@]}" --device cuda --checkpoint-dir "$w/$m-gpu" > "$w/$m-gpu.log" 2>&1 || { cat "$w/$m-gpu.log"; fail "$m cuda run (our kernels)"; }
    run 1 "${args[@]}" --device cuda --kernels vendor --checkpoint-dir "$w/$m-vendor" > "$w/$m-vendor.log" 2>&1 || { cat "$w/$m-vendor.log"; fail "$m cuda run (--kernels vendor)"; }
    grep -h "hpdt-train: GPU" "$w/$m-gpu.log" "$w/$m-vendor.log"
    # Our kernels and the vendor's against the CPU oracle after a few f32 steps (other summation orders).
    "$compare" "$($ckf $m-cpu)" "$($ckf $m-gpu)" --atol 2e-4 --rtol 2e-3 || fail "$m: the GPU run (our kernels) is not near the CPU run"
    "$compare" "$($ckf $m-cpu)" "$($ckf $m-vendor)" --atol 2e-4 --rtol 2e-3 || fail "$m: the GPU run (vendor kernels) is not near the CPU run"
  done
  # cuDNN's algorithms by Find (--cudnn-algo find: the fastest, deterministic or not) also near the CPU run
  run 1 "${res[@]}" --device cuda --kernels vendor --cudnn-algo find --checkpoint-dir "$w/find" > "$w/find.log" 2>&1 || { cat "$w/find.log"; fail "resnet20 cuda --kernels vendor --cudnn-algo find"; }
  "$compare" "$(ckr res-cpu)" "$(ckr find)" --atol 2e-4 --rtol 2e-3 || fail "resnet20 --cudnn-algo find: the GPU run is not near the CPU run"
  gemm_find_near_rule 8
  # Two ranks sharing the one GPU average through the host mirror; NCCL on a 1-rank communicator.
  run 2 "${vit[@]}" --batch 4 --device cuda --algo ring --checkpoint-dir "$w/mirror" > "$w/mirror.log" 2>&1 || { cat "$w/mirror.log"; fail "cuda np 2 ring (host mirror)"; }
  grep -q "gradients averaged via host mirror" "$w/mirror.log" || { cat "$w/mirror.log"; fail "2 ranks on 1 GPU should take the host mirror"; }
  "$compare" "$(ck vit-gpu)" "$(ck mirror)" --atol 2e-4 --rtol 2e-3 || fail "cuda np 2 differs from cuda np 1"
  # Top-k and bf16 compressed on the GPU (comm::DeviceCompressor) against the host mirror's compressor: bitwise equal.
  for c in topk:0.1 bf16; do
    run 2 "${vit[@]}" --batch 4 --device cuda --algo ring --compress $c --checkpoint-dir "$w/dev-$c" \
      > "$w/dev-$c.log" 2>&1 || { cat "$w/dev-$c.log"; fail "cuda np 2 --compress $c"; }
    grep -q "gradients averaged via device compression" "$w/dev-$c.log" ||
      { cat "$w/dev-$c.log"; fail "--compress $c: expected the device compression path"; }
    HPDT_DEVICE_COMPRESSION=off run 2 "${vit[@]}" --batch 4 --device cuda --algo ring --compress $c \
      --checkpoint-dir "$w/mir-$c" > "$w/mir-$c.log" 2>&1 || { cat "$w/mir-$c.log"; fail "--compress $c, host mirror"; }
    "$compare" "$(ck mir-$c)" "$(ck dev-$c)" --optimizer || fail "--compress $c on the GPU differs from the host mirror's"
  done
  run 1 "${vit[@]}" --device cuda --algo nccl --checkpoint-dir "$w/nccl" > "$w/nccl.log" 2>&1 || { cat "$w/nccl.log"; fail "cuda --algo nccl (1 rank)"; }
  grep -q "gradients averaged via nccl" "$w/nccl.log" || { cat "$w/nccl.log"; fail "--algo nccl: expected the nccl path"; }
  "$compare" "$(ck vit-gpu)" "$(ck nccl)" --atol 1e-6 --rtol 1e-5 || fail "--algo nccl on 1 rank differs from --algo ring"
  # --cuda-graph (forward and backward replayed as CUDA graphs after the eager warm-up steps): near the eager run, on
  # one rank and on two sharing the GPU (the host mirror; 1-MiB buckets, so the graph is in parts). The same kernels
  # run either way (bitwise the same on the emulator, train.cuda-emu-graph); here within rounding, in case a kernel's
  # order of additions varies between runs.
  # With --algo nccl (a 1-rank NCCL communicator; 0.1-MiB buckets) the bucket all-reduces, queued on a second stream,
  # go into the graph: its first capture of two streams' work (fork and join) on a GPU.
  for g in "1 one" "2 two --algo ring --bucket-mb 1" "1 nccl --algo nccl --bucket-mb 0.1"; do
    read -r np name extra <<< "$g"
    for mode in eager graph; do
      flag=(); [ $mode = graph ] && flag=(--cuda-graph)
      # shellcheck disable=SC2086  # extra: words
      run "$np" "${vit[@]}" --batch 4 --max-steps 5 --device cuda $extra "${flag[@]}" --checkpoint-dir "$w/g-$name-$mode" \
        > "$w/g-$name-$mode.log" 2>&1 || { cat "$w/g-$name-$mode.log"; fail "cuda np $np, $mode (--cuda-graph's twin)"; }
    done
    grep -qE "cuda graph      1 capture\(s\), [1-9] step\(s\) replayed" "$w/g-$name-graph.log" ||
      { cat "$w/g-$name-graph.log"; fail "np $np --cuda-graph: expected a capture and replayed steps"; }
    "$compare" "$w/g-$name-eager/ckpt-000000005.h5" "$w/g-$name-graph/ckpt-000000005.h5" --optimizer --atol 1e-6 --rtol 1e-5 ||
      fail "np $np: the --cuda-graph run is not near the eager run"
  done
  grep -q "1 part(s), the gradients' all-reduces inside" "$w/g-nccl-graph.log" ||
    { cat "$w/g-nccl-graph.log"; fail "--algo nccl --cuda-graph: expected the all-reduces inside the graph"; }
  # --sync-bn on the real GPU: one rank (a GPU of its own) all-reduces the statistics by NCCL on the compute stream (a
  # 1-rank communicator: the sums unchanged), near the run without --sync-bn (the same statistics, finalized from the
  # sums instead); with --cuda-graph the NCCL all-reduces are captured into the graph, near the eager run. Two ranks
  # sharing the GPU take MPI on the host, near one rank with their global batch.
  for mode in eager graph; do
    flag=(); [ $mode = graph ] && flag=(--cuda-graph)
    run 1 "${res[@]}" --sync-bn --max-steps 5 --device cuda "${flag[@]}" --checkpoint-dir "$w/sbn-$mode" > "$w/sbn-$mode.log" 2>&1 ||
      { cat "$w/sbn-$mode.log"; fail "resnet20 --sync-bn, $mode"; }
    grep -q "batch-norm statistics via nccl on the compute stream" "$w/sbn-$mode.log" ||
      { cat "$w/sbn-$mode.log"; fail "--sync-bn on one rank: expected nccl on the compute stream"; }
  done
  grep -qE "cuda graph      1 capture\(s\), [1-9] step\(s\) replayed" "$w/sbn-graph.log" ||
    { cat "$w/sbn-graph.log"; fail "--sync-bn --cuda-graph: expected a capture and replayed steps"; }
  "$compare" "$w/sbn-eager/ckpt-000000005.h5" "$w/sbn-graph/ckpt-000000005.h5" --optimizer --atol 1e-6 --rtol 1e-5 ||
    fail "--sync-bn: the --cuda-graph run is not near the eager run"
  run 1 "${res[@]}" --max-steps 5 --device cuda --checkpoint-dir "$w/sbn-off" > "$w/sbn-off.log" 2>&1 || { cat "$w/sbn-off.log"; fail "resnet20, 5 steps"; }
  "$compare" "$w/sbn-off/ckpt-000000005.h5" "$w/sbn-eager/ckpt-000000005.h5" --atol 2e-4 --rtol 2e-3 ||
    fail "--sync-bn on one rank is not near the run without it"
  run 2 "${res[@]}" --batch 8 --sync-bn --device cuda --algo ring --checkpoint-dir "$w/sbn-two" > "$w/sbn-two.log" 2>&1 ||
    { cat "$w/sbn-two.log"; fail "resnet20 --sync-bn, 2 ranks sharing the GPU"; }
  grep -q "batch-norm statistics via MPI on the host" "$w/sbn-two.log" || { cat "$w/sbn-two.log"; fail "--sync-bn sharing a GPU: expected MPI"; }
  "$compare" "$(ckr res-gpu)" "$(ckr sbn-two)" --atol 2e-4 --rtol 2e-3 || fail "--sync-bn at np 2: not near np 1's batch of 16"
  # Mixed precision: the step runs and the loss stays finite (how near it is: test_nn_models_cuda).
  for p in bf16 fp16; do
    run 1 "${res[@]}" --device cuda --precision $p --max-steps 5 --checkpoint-dir "$w/$p" > "$w/$p.log" 2>&1 || { cat "$w/$p.log"; fail "resnet20 --precision $p"; }
    grep -qiE "loss[^0-9]*(nan|inf)" "$w/$p.log" && { cat "$w/$p.log"; fail "resnet20 --precision $p: non-finite loss"; }
    tail -2 "$w/$p.log"
  done
  # bf16 ViT-Ti with GEMM v2 for every linear layer (--gemm v2; the other runs take the default, v3 where the
  # GPU is 9.0)
  run 1 "${vit[@]}" --device cuda --precision bf16 --gemm v2 --max-steps 5 --checkpoint-dir "$w/v2" > "$w/v2.log" 2>&1 || { cat "$w/v2.log"; fail "vit-ti bf16 --gemm v2"; }
  grep -qiE "loss[^0-9]*(nan|inf)" "$w/v2.log" && { cat "$w/v2.log"; fail "vit-ti bf16 --gemm v2: non-finite loss"; }
  tail -2 "$w/v2.log"
  # ViT-Ti with the GELU in the GEMMs' epilogues (--gelu fused; the default is a layer of its own): f32 near the CPU run, bf16 finite
  run 1 "${vit[@]}" --device cuda --gelu fused --checkpoint-dir "$w/gelu" > "$w/gelu.log" 2>&1 || { cat "$w/gelu.log"; fail "vit-ti --gelu fused"; }
  "$compare" "$(ck vit-cpu)" "$(ck gelu)" --atol 2e-4 --rtol 2e-3 || fail "vit-ti --gelu fused: the GPU run is not near the CPU run"
  run 1 "${vit[@]}" --device cuda --precision bf16 --gelu fused --max-steps 5 --checkpoint-dir "$w/gelu16" > "$w/gelu16.log" 2>&1 || { cat "$w/gelu16.log"; fail "vit-ti bf16 --gelu fused"; }
  grep -qiE "loss[^0-9]*(nan|inf)" "$w/gelu16.log" && { cat "$w/gelu16.log"; fail "vit-ti bf16 --gelu fused: non-finite loss"; }
  tail -2 "$w/gelu16.log"
  # bf16 ResNet-50 in NHWC with --conv v3: its 1x1 stride-1 convolutions run as GEMM v3, the others on conv v3
  run 1 --model resnet50 --eval false --augment false --batch 8 --lr 0.05 --warmup-epochs 0 --device cuda --precision bf16 --layout nhwc --conv v3 --max-steps 3 --checkpoint-dir "$w/r50v3" > "$w/r50v3.log" 2>&1 || { cat "$w/r50v3.log"; fail "resnet50 nhwc bf16 --conv v3"; }
  grep -qiE "loss[^0-9]*(nan|inf)" "$w/r50v3.log" && { cat "$w/r50v3.log"; fail "resnet50 nhwc bf16 --conv v3: non-finite loss"; }
  tail -2 "$w/r50v3.log"
  ;;
*) fail "unknown case $case" ;;
esac
echo "PASS: $case"
