#!/usr/bin/env bash
# scripts/gpu/vendor_races.sh on made-up racecheck logs in the layout compute-sanitizer wrote on the H200
# (2026-11-29): hazards inside cuDNN's kernels alone pass; one of ours, another sanitizer error, a failed test or a
# log without hazards does not.
set -uo pipefail
src=${1:?usage: check_vendor_races.sh SOURCE_DIR}
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
fail() { echo "check_vendor_races: $*" >&2; exit 1; }
verdict() { "$src/scripts/gpu/vendor_races.sh" "$w/$1.log"; }
cudnn=sm90_xmma_dgrad_implicit_gemm_indexed_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x64x64_warpgroupsize1x1x1_g1_strided_execute_kernel__5x_cudnn
race() {  # writer reader
  printf '%s\n' "========= Error: Race reported between Write access at $1+0x8c30" \
    "=========     and Read access at $2+0xb0a0 [64 hazards]" "========= "
}
head() { printf '%s\n' '========= COMPUTE-SANITIZER' 'Note: Google Test filter = ConvCuda.SmallOddShapes' '[ RUN      ] ConvCuda.SmallOddShapes'; }
tail_ok() { printf '%s\n' '[       OK ] ConvCuda.SmallOddShapes (62253 ms)' '[  PASSED  ] 1 test.' \
  "========= RACECHECK SUMMARY: $1 hazards displayed ($1 errors, 0 warnings)"; }
{ head; race $cudnn $cudnn; race $cudnn $cudnn; tail_ok 2; } > "$w/vendor.log"
out=$(verdict vendor) || fail "hazards inside cuDNN's kernels alone should pass"
[[ "$out" == "2 hazard reports, all inside vendor kernels (sm90_xmma_dgrad"* ]] || fail "the verdict's words: $out"
{ head; race $cudnn $cudnn; race $cudnn "void hpdt::kernels::cuda::conv_v2_kernel<hpdt::bf16_t>(hpdt::kernels::cuda::ConvParams)"; tail_ok 2; } > "$w/ours.log"
verdict ours > /dev/null && fail "a hazard with one of our kernels should fail"
{ head; race $cudnn $cudnn; echo '========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception.'; tail_ok 1; } > "$w/internal.log"
verdict internal > /dev/null && fail "another sanitizer error should fail"
{ head; race $cudnn $cudnn; printf '%s\n' '[  FAILED  ] ConvCuda.SmallOddShapes' '[  PASSED  ] 0 tests.'; } > "$w/failed.log"
verdict failed > /dev/null && fail "a failed test should fail"
{ head; tail_ok 0; } > "$w/none.log"
verdict none > /dev/null && fail "a log without hazards is no vendor verdict"
verdict missing 2> /dev/null && fail "a missing log"
echo "PASS: vendor_races.sh"
