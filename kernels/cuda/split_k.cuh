// Split-K sizing for the CUDA GEMM and backward-filter kernels, and GEMM v3's block tile, by a model of whole
// waves (private to kernels/cuda). Plain C++, no CUDA: tests/kernels/test_split_k.cpp checks it on the CPU.
#pragma once

#include <algorithm>
#include <cstdint>

namespace hpdt::kernels::cuda::detail {

// Split-K: how many slices to cut a reduction of `k_steps` steps into, for a grid of `tiles` output tiles of which
// `resident` blocks run at once, by a model of the time: waves(tiles * splits) * ceil(k_steps / splits) steps of a
// full wave, plus one pass over the f32 partials (`partial_floats` per split: written, then read by the reduction)
// per split. Whole waves matter: 540 blocks where 264 run at once take three waves, not 2.05. A full wave's step
// costs resident * step_flops / kTensorFlops; the partials move at kPartialBytesPerSecond. Each split keeps
// >= min_steps steps; at most max_splits, and at most kMaxPartialFloats of partials in all. Ties go to fewer
// splits.
struct SplitK {
  int splits = 1;
  int64_t steps_per_split = 0;
};
constexpr double kTensorFlops = 150e12;            // what our mma.sync kernels reach on an H100 (bf16)
constexpr double kSimtFlops = 35e12;               // our f32 SIMT kernels on an H100
constexpr double kWgmmaFlops = 500e12;             // what GEMM v3 (wgmma) aims at on an H100; cuBLAS reaches 650
constexpr double kPartialBytesPerSecond = 2.5e12;  // f32 partials out and back in, on HBM3
constexpr int64_t kMaxPartialFloats = int64_t(1) << 25;  // the split workspace: at most 128 MiB
inline SplitK choose_split_k(int64_t tiles, int64_t k_steps, int64_t resident, double step_flops,
                             int64_t partial_floats, int64_t min_steps, int max_splits,
                             double flops_per_second = kTensorFlops) {
  SplitK best{1, std::max<int64_t>(k_steps, 1)};
  if (tiles <= 0 || k_steps <= 0) return best;
  resident = std::max<int64_t>(resident, 1);
  const double wave_step = double(resident) * step_flops / flops_per_second;
  const double split_pass = double(partial_floats) * 8.0 / kPartialBytesPerSecond;
  const int64_t most = std::clamp<int64_t>(
      std::min<int64_t>({max_splits, k_steps / std::max<int64_t>(min_steps, 1),
                         kMaxPartialFloats / std::max<int64_t>(partial_floats, 1)}),
      1, int64_t(1) << 16);
  double best_cost = 0.0;
  for (int64_t s = 1; s <= most; ++s) {
    const int64_t per = (k_steps + s - 1) / s, used = (k_steps + per - 1) / per;  // no empty split
    if (used != s) continue;
    const int64_t waves = (tiles * s + resident - 1) / resident;
    const double cost = double(waves) * double(per) * wave_step + (s > 1 ? double(s) * split_pass : 0.0);
    if (s == 1 || cost < best_cost * 0.98) best = {int(s), per}, best_cost = cost;
  }
  return best;
}

// GEMM v3's and conv v3's block tile: 128 x 256 ("wide") or 128 x 128 ("narrow"), for `narrow_tiles` output tiles
// of 128 x 128 (wide_tiles of 128 x 256) and `sms` blocks at once (one block an SM). Wide where its tiles fill a
// wave of the GPU, unless the narrow tiles take fewer waves than the wide ones would cost: a wave of wide tiles
// costs kWideWaveCost waves of narrow ones (twice the MMAs a tile, less what the wide tile saves: each row of A it
// loads feeds twice the columns). Whole waves matter: ViT-B/16's GEMMs 768 wide (the proj and fc2 forwards, the dx
// of every layer into 768 features; 12,608 rows) are 297 wide tiles on 132 SMs, 3 waves (5.4 narrow ones), or 594
// narrow tiles in 5 waves (4.5, rounded up), so narrow. Below a wave of wide tiles (the split-K shapes) narrow as
// before: the splits, not the tile, fill the GPU there.
constexpr double kWideWaveCost = 1.8;  // a model's guess; hpdt-bench-gemm-cuda's v3_wgmma_wide / _narrow rows time it
inline bool wide_tile_by_waves(int64_t wide_tiles, int64_t narrow_tiles, int64_t sms) {
  sms = std::max<int64_t>(sms, 1);
  if (wide_tiles < sms) return false;
  const int64_t wide_waves = (wide_tiles + sms - 1) / sms, narrow_waves = (narrow_tiles + sms - 1) / sms;
  return double(wide_waves) * kWideWaveCost <= double(narrow_waves);
}

// GEMM v3's and conv v3's pipeline by rule (wgmma.cuh: v3_rule_plan): a call whose k loop is short (K <= kShortK,
// 18 k tiles of 64) over at least a wave of output tiles (`tiles` blocks of its tile, `sms` at once) spends much of
// each tile outside its k loop (the pipeline's fill, the epilogue), so it takes a pipeline that overlaps those with
// MMAs: pingpong (two consumer warpgroups in turns, one's epilogue under the other's MMAs) on the slim and narrow
// tiles, ws (persistent; the next tile's loads under the epilogue) on the wide one. Everything else: barrier, a block
// a tile. From the H200's Find timings in the ResNet-50 and ViT-B/16 steps (2026-11-29): over the ResNet-50 step's 78
// distinct GEMM v3 and conv v3 calls, barrier by rule added up to 12.66 ms, this rule to 11.89 and the fastest plans
// to 11.87 (conv v3's 3x3 64-channel forward 0.316 -> 0.237 ms, K = 576; its 3x3 128-channel backward-data phases
// 10-18 % faster, K <= 1152; the 3x3 256- and 512-channel ones, K = 2304, fastest on barrier); over ViT-B/16's 15,
// 1.84 against 1.80 (K = 768: its forwards; its K = 3072 and weight-gradient calls stay on barrier).
constexpr int64_t kShortK = 1152;
inline bool short_k_loop(int64_t k, int64_t tiles, int64_t sms) {
  return k <= kShortK && tiles >= std::max<int64_t>(sms, 1);
}

}  // namespace hpdt::kernels::cuda::detail
