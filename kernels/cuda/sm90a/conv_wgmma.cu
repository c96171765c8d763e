// v3: the NHWC convolution on Hopper's wgmma + TMA (sm_90a only), for the implicit GEMMs of conv_nhwc.cu (the
// forward; every stride phase of a backward-data; the backward-filter), 16-bit, the reduced channels % 64 == 0.
// What it computes is conv_v3.cuh's ConvV3; the CPU oracle is kernels/cpu/conv_nhwc.cpp.
//
// GEMM v3's block (wgmma.cuh: 128 x BN tile, two consumer warpgroups; the "barrier" pipeline, one block per tile,
// or "ws" with HPDT_GEMM_V3_PIPELINE=ws as for GEMM v3, persistent: a block per SM walks the tiles; or "pingpong",
// each consumer warpgroup a whole tile of 64 or 128 channels, the two in turns; the backward-filter runs "ws"
// under it) with the im2col
// done by TMA: the 128 rows of the A tile are a box of pixels, tw x th x tn (x, y, image; powers of two,
// tw * th * tn = 128), and k tile kt is 64 channels of one tap (jr, jc). So A's k tile is one 4-D TMA box of the
// source [n][hs][ws][C] at (c0, px0 + ox0 + tsign * jc, py0 + oy0 + tsign * jr, img0): the box lands exactly as
// a 2-D tile of 128 rows of 64 channels would, with the 128-byte swizzle, and TMA fills the taps' padding (and
// the box's overhang past the pixel grid) with zeros, coordinates below zero included. A strided convolution
// reads every stride-th pixel with TMA's element strides (a box of tw * stride x th * stride traversed, tw x th
// loaded), the same rows in shared memory. B's k tile is the weights' [M][64] slice, as in GEMM v3. No gather,
// no im2col buffer, no index math in the k loop beyond the tap's coordinates.
// The epilogue maps each accumulator row back to its pixel and stores through band_epilogue.cuh (bias and residual
// as GEMM v3), or with HPDT_CONV_V3_STORE=tma by TMA stores of 16-row chunks (tma_store_epilogue.cuh; PixelStore);
// rows of the box outside the pixel grid are computed and dropped. Asked (ConvV3::stats), the forward's
// epilogue also computes the batch norm's statistics of its output channels (column_stats.cuh), a partial per
// channel and 64-row half of a pixel box (its real pixels).
// Box shape: the one with the fewest tiles (56 x 56: 16 x 8, 87.5 % of rows used; 28 x 28: 32 x 4, 87.5 %;
// 14 x 14: 16 x 8, 77 %; 7 x 7: 8 x 8 x 2 images, 77 %). Or, with HPDT_CONV_V3_LOAD=im2col (2026-11-30; boxes stay
// the default until a GPU has run it), no boxes: tile tm is the grid's pixels 128 tm .. 128 tm + 127 in (image, row,
// column) order, and A's k tile one load of TMA's im2col mode (PTX ISA, "Tensor copy: im2col mode";
// cuTensorMapEncodeIm2col), which walks each image's grid of tap-(0, 0) source coordinates (the map's bounding box,
// in steps of the stride, across rows and images) and loads every pixel at the tap's offsets, zeros outside the
// source: every row used but the last tile's overhang. Tile N: 64 output channels when M <= 64 (ResNet's
// 64-channel 3 x 3 convolutions), else 128, or 256 by whole waves (wgmma.cuh: v3_tile). No split-K: k is at
// most 9 * 512 = 4608 here and the pixel tiles fill the GPU.
//
// Backward-filter (conv_v3_wgrad_launch): dw^T[tap * ci + c][co] = sum over pixels of
// x(pixel * stride + tap)[c] dy[pixel][co], a GEMM with M = taps * ci (rows: 64-wide chunks of one tap's
// channels), N = co, and the pixels as k. Both operands are MN-major (channels contiguous), read with wgmma's
// transpose bits as GEMM v3 reads A^T and B: k tile kt is a box of 64 pixels (tw x th x tn), and the A tile is
// two 64 x 64 boxes of x, each at its chunk's tap offset (a chunk past taps * ci reads out of bounds: zeros), the
// B tile BN / 64 boxes of dy at the same pixels
// (pixels past the grid read as zero dy, so they add nothing). Split-K over the pixel boxes (whole waves,
// detail::choose_split_k) into f32 partials in dw's layout, summed in split order by conv_common.cuh's
// wgrad_reduce; one split adds into dw directly. Deterministic.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "band_epilogue.cuh"
#include "column_stats.cuh"
#include "conv_common.cuh"
#include "conv_v3.cuh"
#include "fast_div.cuh"
#include "find.cuh"
#include "gemm_common.cuh"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/kernels/backend.h"
#include "hpdt/kernels/cuda/gemm.h"
#include "launch.cuh"
#include "tma_store_epilogue.cuh"
#include "v3_find.cuh"
#include "wgmma.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(HPDT_CUDA_EMU)
#error "conv_wgmma.cu is built for sm_90a only (wgmma and TMA); kernels/CMakeLists.txt gives it its own target"
#endif

namespace hpdt::kernels::cuda::conv_detail {

namespace {

using namespace sm90a;
using gemm_detail::Params;

// A box of pixels, tw x th of tn images (powers of two), and the grid of such boxes over a pixel grid: the 128
// rows of a forward / backward-data tile, the 64 k of a backward-filter k tile.
struct PixelBox {
  int tw_log2, th_log2, tn;
  int tiles_w, tiles_h;  // boxes across a pixel row, down an image
};

// Box t of the grid -> its first image, row and column.
__device__ __forceinline__ void box_origin(const PixelBox& b, int t, int& img0, int& py0, int& px0) {
  const int per_images = b.tiles_w * b.tiles_h;
  const int in = t % per_images;
  img0 = t / per_images * b.tn;
  py0 = (in / b.tiles_w) << b.th_log2;
  px0 = (in % b.tiles_w) << b.tw_log2;
}

// The pixel side of a launch: the box, the taps and where outputs go (ConvV3's fields).
struct PixelTiles {
  PixelBox box;
  int n, hp, wp;             // the pixel grid
  int stride;                // source pixels per output pixel (TMA's element stride)
  int oy0, ox0, tsign, kw, c_tiles;
  int dst_h, dst_w, dys, dy0, dxs, dx0;
  // im2col loads (HPDT_CONV_V3_LOAD, Find): tile tm is the grid's pixels 128 tm .. 128 tm + 127 in order (image, row,
  // column), `pixels` of them in all; A's k tile one im2col load from the source coordinates (by0, bx0) of pixel
  // (0, 0)'s tap (0, 0) in the source's order (backward-data's taps run backwards: tap (kh - 1, kw - 1) first)
  int im2col, kh, by0, bx0, pixels;
  FastDiv per_image, per_row;  // hp * wp, wp
};

// The forward / backward-data kernel's shared memory: the stages (C::kSmem), kConvBarBytes for their barriers (two a
// stage, and the pingpong pipeline's two turns; the column statistics' two at kConvStatsBars), then the epilogue's
// buffers (band_epilogue.cuh: 2 KiB for each of the 8 consumer warps) and the column statistics' exchange. The
// buffers start 1024-byte aligned: the TMA-store epilogue's images (tma_store_epilogue.cuh) are swizzled by the
// shared address's bits in 512-byte periods (the 64-byte swizzle), so an image must start where a period does
// (256 bytes of barriers put them 256 bytes off: the emulator, which checks that alignment since, stopped there).
constexpr uint32_t kConvBarBytes = 1024, kConvStatsBars = 240;
template <class C>
constexpr int kConvSmem = C::kSmem + int(kConvBarBytes) + 8 * gemm_detail::kBandBufBytes + 2 * int(kColumnReductionBytes);
template <class C>
constexpr bool kConvStagingAligned = (C::STAGES * C::kStageBytes + int(kConvBarBytes)) % 1024 == 0;
static_assert(kConvSmem<Wide> <= 227 * 1024 && kConvSmem<Narrow> <= 227 * 1024 && kConvSmem<Slim> <= 227 * 1024 &&
                  16 * Slim::STAGES + 16 <= int(kConvStatsBars) && kConvStatsBars + 16 <= kConvBarBytes,
              "an H100 block has 227 KiB; the barriers fit before the buffers");
static_assert(kConvStagingAligned<Wide> && kConvStagingAligned<Narrow> && kConvStagingAligned<Slim>,
              "the epilogue's buffers 1024-byte aligned (the TMA-store images' swizzle)");

// Row m (0..127) of a pixel tile whose box starts at image img0, row py0, column px0 -> its row of dst: pixel
// (m % tw, m / tw % th, m / (tw th)) of the box; outside the pixel grid, row p.M, which the epilogue drops.
// im2col tiles: the tile's first pixel plus m, through the grid's order; past the grid, row p.M.
__device__ __forceinline__ int pixel_row(const Params& p, const PixelTiles& q, int img0, int py0, int px0, int m) {
  if (q.im2col) {
    const int l = (img0 * q.hp + py0) * q.wp + px0 + m;
    if (l >= q.pixels) return p.M;
    const int img = q.per_image.div(l), in = l - img * q.hp * q.wp, py = q.per_row.div(in), px = in - py * q.wp;
    return (img * q.dst_h + py * q.dys + q.dy0) * q.dst_w + px * q.dxs + q.dx0;
  }
  const int img = img0 + (m >> (q.box.tw_log2 + q.box.th_log2));
  const int py = py0 + ((m >> q.box.tw_log2) & ((1 << q.box.th_log2) - 1));
  const int px = px0 + (m & ((1 << q.box.tw_log2) - 1));
  return img < q.n && py < q.hp && px < q.wp ? (img * q.dst_h + py * q.dys + q.dy0) * q.dst_w + px * q.dxs + q.dx0
                                             : p.M;
}

// tma_store_epilogue's `store` for conv v3's dst (p.tma_store: conv_tma_store_eligible, dst the dense output grid):
// chunk c, whose first row is tile row origin(c).x (16 consecutive rows) and first column origin(c).y, as one box of
// dst's store map: of an im2col tile, rows `first` + m .. of dst as a [pixels][channels] matrix; of a pixel box (tw
// x th x tn), the sub-box {32, bw, bh, bn} (bw = min(tw, 16), ..: conv_store_box) of dst as [n][hp][wp][channels] at
// the pixel of row m. TMA drops the pixels outside the grid, as pixel_row does.
template <class Origin>
struct PixelStore {
  const CUtensorMap* map_dst;
  const PixelTiles& q;
  int img0, py0, px0, first;  // the tile's box origin; im2col: its first pixel
  Origin& origin;
  __device__ __forceinline__ void operator()(int c, uint32_t image) const {
    const int2 mc = origin(c);
    const int tw = q.box.tw_log2, th = q.box.th_log2;
    if (q.im2col)
      tma_store_2d(map_dst, image, mc.y, first + mc.x);
    else
      tma_store_4d(map_dst, image, mc.y, px0 + (mc.x & ((1 << tw) - 1)), py0 + ((mc.x >> tw) & ((1 << th) - 1)),
                   img0 + (mc.x >> (tw + th)));
  }
};

// Warpgroup wg's 64 x BN accumulators (the D fragment as in gemm_wgmma.cu's store_rows), rows 64 wg.. of the tile,
// to their pixels' rows of dst (pixel_row) through band_epilogue, or by TMA stores (p.tma_store: PixelStore).
template <class T, class C>
__device__ __forceinline__ void store_pixels(const Params& p, const PixelTiles& q, const CUtensorMap* map_dst,
                                             float (&d)[C::BN / 2], int tm, int img0, int py0, int px0, int tn, int wg,
                                             unsigned char* staging, uint32_t stats_bars) {
  const int warp = (int(threadIdx.x) % 128) / 32;
  const int m0 = wg * 64 + warp * 16;
  auto frag = [&](auto J) {
    constexpr int j = decltype(J)::value;
    return make_float4(d[4 * j], d[4 * j + 1], d[4 * j + 2], d[4 * j + 3]);
  };
  auto at = [&](int c, int r) {
    return make_int2(pixel_row(p, q, img0, py0, px0, m0 + r), tn * C::BN + c * gemm_detail::kChunkCols);
  };
  constexpr int kChunks = C::BN / gemm_detail::kChunkCols;
  unsigned char* buf = staging + (wg * 4 + warp) * gemm_detail::kBandBufBytes;
  if (p.tma_store) {
    auto origin = [&](int c) { return make_int2(m0, tn * C::BN + c * gemm_detail::kChunkCols); };
    tma_store_epilogue<T, kChunks>(p, frag, at, buf, PixelStore{map_dst, q, img0, py0, px0, tm * 128, origin});
  } else {
    gemm_detail::band_epilogue<T, kChunks>(
        p, 0, frag, at, buf,
        column_reduction_of(staging + 8 * gemm_detail::kBandBufBytes, stats_bars, wg, 2 * tm + wg, kChunks));
  }
}

// The forward's `store` step (a functor whose operator() is forced inline: a lambda around the epilogue was left a
// function of its own, its accumulators in local memory; see gemm_wgmma.cu's StoreTile).
template <class T, class C>
struct StorePixels {
  const Params& p;
  const PixelTiles& q;
  const CUtensorMap* map_dst;
  float (&d)[C::BN / 2];
  unsigned char* staging;
  uint32_t stats_bars;
  template <class Tile>
  __device__ __forceinline__ void operator()(const Tile& t, int wg) const {
    store_pixels<T, C>(p, q, map_dst, d, t.tm, t.img0, t.py0, t.px0, t.tn, wg, staging, stats_bars);
  }
  // the inputs of warpgroup wg's 64 rows' pixels (wgmma.cuh: prefetch_unit)
  template <class Tile>
  __device__ __forceinline__ void prefetch(const Tile& t, int wg) const {
    gemm_detail::band_prefetch_inputs<T>(
        p, 64, [&](int r) { return pixel_row(p, q, t.img0, t.py0, t.px0, wg * 64 + r); }, t.tn * C::BN, C::BN);
  }
};

// The pingpong pipeline's `store` step: consumer cw's whole tile, both 64-row halves (d0, d1) in one band_epilogue of
// twice the chunks (as gemm_wgmma.cu's StoreWholeTile).
template <class T, class C>
struct StorePixelsWhole {
  const Params& p;
  const PixelTiles& q;
  const CUtensorMap* map_dst;
  float (&d0)[C::BN / 2];
  float (&d1)[C::BN / 2];
  unsigned char* staging;
  uint32_t stats_bars;
  template <class Tile>
  __device__ __forceinline__ void operator()(const Tile& t, int cw) const {
    constexpr int kHalfChunks = C::BN / gemm_detail::kChunkCols;
    const int warp = (int(threadIdx.x) % 128) / 32;
    gemm_detail::HalvesFrag<C::BN> frag{d0, d1};
    auto origin = [&](int c) {
      const int half = c / kHalfChunks;
      return make_int2(half * 64 + warp * 16, t.tn * C::BN + (c - half * kHalfChunks) * gemm_detail::kChunkCols);
    };
    auto at = [&](int c, int r) {
      const int2 mc = origin(c);
      return make_int2(pixel_row(p, q, t.img0, t.py0, t.px0, mc.x + r), mc.y);
    };
    unsigned char* buf = staging + (cw * 4 + warp) * gemm_detail::kBandBufBytes;
    if (p.tma_store)
      tma_store_epilogue<T, 2 * kHalfChunks>(p, frag, at, buf,
                                             PixelStore{map_dst, q, t.img0, t.py0, t.px0, t.tm * 128, origin});
    else
      gemm_detail::band_epilogue<T, 2 * kHalfChunks>(
          p, 0, frag, at, buf,
          column_reduction_of(staging + 8 * gemm_detail::kBandBufBytes, stats_bars, cw, 2 * t.tm, kHalfChunks));
  }
  // the inputs of the whole tile's 128 rows' pixels
  template <class Tile>
  __device__ __forceinline__ void prefetch(const Tile& t, int) const {
    gemm_detail::band_prefetch_inputs<T>(
        p, 128, [&](int r) { return pixel_row(p, q, t.img0, t.py0, t.px0, r); }, t.tn * C::BN, C::BN);
  }
};

// Output tile u (wgmma.cuh's work unit): its N tile, the first image, row and column of its pixel box, and its k
// tiles (all of K).
struct PixelTile {
  int tm, tn, img0, py0, px0, kt_count;
};
__device__ __forceinline__ PixelTile pixel_tile(const Params& p, const PixelTiles& q, int u) {
  PixelTile t;
  t.kt_count = p.K / kBK;
  gemm_detail::tile_coords(u, p.tiles_m, p.tiles_n, t.tm, t.tn);
  if (q.im2col) {  // the image, row and column of the tile's first pixel
    const int first = t.tm * 128;
    t.img0 = q.per_image.div(first);
    const int in = first - t.img0 * q.hp * q.wp;
    t.py0 = q.per_row.div(in);
    t.px0 = in - t.py0 * q.wp;
  } else {
    box_origin(q.box, t.tm, t.img0, t.py0, t.px0);
  }
  return t;
}

// k tile kt of pixel tile t into the stage at `stage`, completing on `bar` (one thread): the tap's shifted box of
// source pixels (64 channels), or im2col, the tile's 128 pixels at the tap's offsets; and the weights' 64 x BN box.
template <class C>
__device__ __forceinline__ void issue_pixels(const CUtensorMap* map_src, const CUtensorMap* map_w, const PixelTiles& q,
                                             const PixelTile& t, int kt, uint32_t stage, uint32_t bar) {
  const int tap = kt / q.c_tiles, c0 = (kt - tap * q.c_tiles) * kBK;
  const int jr = tap / q.kw, jc = tap - jr * q.kw;
  mbar_arrive_expect_tx(bar, uint32_t(C::kStageBytes));
  if (q.im2col)
    tma_load_im2col_4d(stage, map_src, bar, c0, t.px0 * q.stride + q.bx0, t.py0 * q.stride + q.by0, t.img0,
                       uint16_t(q.tsign > 0 ? jc : q.kw - 1 - jc), uint16_t(q.tsign > 0 ? jr : q.kh - 1 - jr));
  else
    tma_load_4d(stage, map_src, bar, c0, t.px0 * q.stride + q.ox0 + q.tsign * jc,
                t.py0 * q.stride + q.oy0 + q.tsign * jr, t.img0);
  tma_load_2d(stage + uint32_t(C::kABytes), map_w, bar, kt * kBK, t.tn * C::BN);
}

// The block's epilogue buffers, kConvBarBytes past its stages.
template <class C>
__device__ __forceinline__ unsigned char* conv_staging(unsigned char* smem_raw, uint32_t base) {
  return smem_raw + (base + uint32_t(C::STAGES * C::kStageBytes) + kConvBarBytes - smem_u32(smem_raw));
}

template <class T, class C, bool WS>
__global__ void __launch_bounds__(kPipelineThreads<C, WS>, 1)
    conv_v3_kernel(const __grid_constant__ CUtensorMap map_src, const __grid_constant__ CUtensorMap map_w,
                   const __grid_constant__ CUtensorMap map_dst, const PixelTiles q, const Params p) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes
  unsigned char* staging = conv_staging<C>(smem_raw, base);
  const uint32_t stats_bars = base + uint32_t(C::STAGES * C::kStageBytes) + kConvStatsBars;
  init_column_reduction(stats_bars);
  float d[C::BN / 2];
  run_pipeline<T, C, WS, 1, false, false>(
      d, base, p.tiles_m * p.tiles_n, [&](int u) { return pixel_tile(p, q, u); },
      [&](const PixelTile& t, int kt, uint32_t stage, uint32_t bar) {
        issue_pixels<C>(&map_src, &map_w, q, t, kt, stage, bar);
      },
      StorePixels<T, C>{p, q, &map_dst, d, staging, stats_bars});
}

// conv v3 forward / backward-data on the pingpong pipeline (wgmma.cuh: pingpong_pipeline): each consumer warpgroup a
// whole 128 x BN tile (Slim or Narrow), the two in turns.
template <class T, class C>
__global__ void __launch_bounds__(kWsThreads<C>, 1)
    conv_v3_pingpong_kernel(const __grid_constant__ CUtensorMap map_src, const __grid_constant__ CUtensorMap map_w,
                            const __grid_constant__ CUtensorMap map_dst, const PixelTiles q, const Params p) {
  static_assert(C::BN <= 128, "a warpgroup's whole tile: 128 accumulators a thread at most");
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  unsigned char* staging = conv_staging<C>(smem_raw, base);
  const uint32_t stats_bars = base + uint32_t(C::STAGES * C::kStageBytes) + kConvStatsBars;
  init_column_reduction(stats_bars);
  float d0[C::BN / 2], d1[C::BN / 2];
  pingpong_pipeline<T, C, false, false>(
      d0, d1, base, p.tiles_m * p.tiles_n, [&](int u) { return pixel_tile(p, q, u); },
      [&](const PixelTile& t, int kt, uint32_t stage, uint32_t bar) {
        issue_pixels<C>(&map_src, &map_w, q, t, kt, stage, bar);
      },
      StorePixelsWhole<T, C>{p, q, &map_dst, d0, d1, staging, stats_bars});
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// launch(std::bool_constant<WS>) on `pipeline` (the backward-filter has "barrier" and "ws", and runs "ws" under
// "pingpong")
template <class Launch>
void on_pipeline(V3Pipeline pipeline, Launch launch) {
  if (pipeline != V3Pipeline::barrier)
    launch(std::true_type{});
  else
    launch(std::false_type{});
}

// The box of 2^log2_pixels pixels (tw x th x tn, powers of two; tw and th times the stride at most 256, TMA's box
// limit) with the fewest boxes over n images of h x w pixels; among equals the widest (longer contiguous runs of
// each image row). *count: the boxes.
PixelBox choose_box(int log2_pixels, int n, int h, int w, int stride, int64_t* count) {
  PixelBox best{};
  int64_t fewest = -1;
  for (int a = 0; a <= log2_pixels; ++a)
    for (int b = 0; a + b <= log2_pixels; ++b) {
      if ((stride << a) > 256 || (stride << b) > 256) continue;
      const int tn = 1 << (log2_pixels - a - b);
      const int64_t boxes = ceil_div(w, int64_t(1) << a) * ceil_div(h, int64_t(1) << b) * ceil_div(n, tn);
      if (fewest < 0 || boxes < fewest || (boxes == fewest && a > best.tw_log2)) {
        fewest = boxes;
        best.tw_log2 = a, best.th_log2 = b, best.tn = tn;
      }
    }
  best.tiles_w = int(ceil_div(w, int64_t(1) << best.tw_log2));
  best.tiles_h = int(ceil_div(h, int64_t(1) << best.th_log2));
  *count = fewest;
  return best;
}

// The bounding box of an im2col load of c's source (x first, then y): from pixel (0, 0)'s tap (0, 0), (bx0, by0),
// to the last pixel's, in source coordinates, as corners relative to the source's first and last pixel.
void im2col_corners(const ConvV3& c, const PixelTiles& q, int (&lower)[2], int (&upper)[2]) {
  lower[0] = q.bx0, lower[1] = q.by0;
  upper[0] = q.bx0 + (c.wp - 1) * c.stride - (c.ws - 1);
  upper[1] = q.by0 + (c.hp - 1) * c.stride - (c.hs - 1);
}

// How conv v3 loads its pixels, HPDT_CONV_V3_LOAD=box or im2col, read at every call (anything else is an error
// naming the variable): -1 unset, 0 box, 1 im2col. Unset, the rule loads by boxes (the default until a GPU has run
// im2col) and Find times both (the calls without batch-norm reductions: conv_v3_launch).
int pinned_conv_v3_load() { return env_pin("HPDT_CONV_V3_LOAD", "box", "im2col"); }
// The load by rule for pinned_conv_v3_load's `load_pin`: im2col where pinned so (the one place the default is set).
bool rule_im2col(int load_pin) { return load_pin == 1; }

// How conv v3's forward and backward-data store their outputs (tma_store_epilogue.cuh), HPDT_CONV_V3_STORE=direct or
// tma, read at every call (anything else is an error naming the variable): -1 unset, 0 direct, 1 tma. Unset, the rule
// stores directly (the default until a GPU has timed both) and Find times both where the TMA stores apply.
int pinned_conv_v3_store() { return env_pin("HPDT_CONV_V3_STORE", "direct", "tma"); }
// The stores by rule for pinned_conv_v3_store's `store_pin`: TMA's where pinned so (the one place the default is set).
bool rule_tma_store(int store_pin) { return store_pin == 1; }

// Where the TMA-store epilogue can take a conv v3 call (its Params p): as a GEMM (tma_store_epilogue.cuh:
// tma_store_eligible; p.N and p.ldc are the channels, p.C dst, p.res the residual), and dst the dense output grid, one
// row a pixel in the tiles' order (a forward, a stride-1 backward-data; not a stride phase of a strided one, whose
// rows are every stride-th pixel of dx).
bool conv_tma_store_eligible(const ConvV3& c, const Params& p) {
  return tma_store_eligible(p) && c.dst_h == c.hp && c.dst_w == c.wp && c.dys == 1 && c.dxs == 1 && c.dy0 == 0 &&
         c.dx0 == 0;
}

bool corners_fit(const int (&lower)[2], const int (&upper)[2]) {
  return im2col_corner_ok(lower[0]) && im2col_corner_ok(lower[1]) && im2col_corner_ok(upper[0]) &&
         im2col_corner_ok(upper[1]);
}

// Find's candidates `plans` loading as the rule does (im2col), then, where both loads apply (both), each loading the
// other way too.
std::vector<V3Plan> with_loads(std::vector<V3Plan> plans, bool im2col, bool both) {
  for (V3Plan& pl : plans) pl.im2col = im2col;
  const size_t n = plans.size();
  for (size_t i = 0; both && i < n; ++i) {
    V3Plan pl = plans[i];
    pl.im2col = !im2col;
    plans.push_back(pl);
  }
  return plans;
}

// c's pixel tiles (the launch's PixelTiles but for its tile counts; *tiles: the 128-row tiles): by im2col where
// `im2col` asks for it and the bounding box's corners are within what a rank-4 im2col map takes (q.im2col says), else
// boxes of the pixel grid (choose_box).
PixelTiles pixel_tiles_of(const ConvV3& c, bool im2col, int64_t* tiles) {
  PixelTiles q{};
  q.n = c.n, q.hp = c.hp, q.wp = c.wp, q.stride = c.stride;
  q.oy0 = c.oy0, q.ox0 = c.ox0, q.tsign = c.tsign, q.kh = c.kh, q.kw = c.kw, q.c_tiles = c.C / kBK;
  q.dst_h = c.dst_h, q.dst_w = c.dst_w, q.dys = c.dys, q.dy0 = c.dy0, q.dxs = c.dxs, q.dx0 = c.dx0;
  q.by0 = c.oy0 - (c.tsign > 0 ? 0 : c.kh - 1), q.bx0 = c.ox0 - (c.tsign > 0 ? 0 : c.kw - 1);
  int lower[2], upper[2];
  im2col_corners(c, q, lower, upper);
  q.im2col = im2col && corners_fit(lower, upper);
  if (q.im2col) {
    q.pixels = c.n * c.hp * c.wp;
    q.per_image = FastDiv(int64_t(c.hp) * c.wp), q.per_row = FastDiv(c.wp);
    *tiles = ceil_div(q.pixels, 128);
  } else {
    q.box = choose_box(7, c.n, c.hp, c.wp, c.stride, tiles);
  }
  return q;
}

// The TMA-store box of a pixel box tw x th x tn (conv_tma_store_eligible's tiles): 16 consecutive rows of the tile,
// {bw, bh, bn} pixels with bw = min(tw, 16), bh = min(th, 16 / bw), bn = 16 / (bw bh) (powers of two; a chunk's rows
// start at a multiple of 16, so they are such a sub-box).
std::array<cuuint32_t, 3> conv_store_box(const PixelBox& b) {
  const int bw = std::min(1 << b.tw_log2, 16), bh = std::min(1 << b.th_log2, 16 / bw);
  return {cuuint32_t(bw), cuuint32_t(bh), cuuint32_t(16 / (bw * bh))};
}

// The TMA-store map of c's output at dst (c.dst, or Find's scratch) for tiles q (p.tma_store): [pixels][channels] in
// boxes of 32 x 16 (im2col tiles), or [n][hp][wp][channels] in boxes of 32 x conv_store_box (pixel boxes).
CUtensorMap conv_store_map(const ConvV3& c, const PixelTiles& q, void* dst, DType dt) {
  if (q.im2col) return store_map("conv v3 (dst)", dst, int64_t(c.n) * c.hp * c.wp, c.M, c.M, dt);
  const auto b = conv_store_box(q.box);
  const cuuint64_t dims[4] = {cuuint64_t(c.M), cuuint64_t(c.wp), cuuint64_t(c.hp), cuuint64_t(c.n)};
  const cuuint64_t strides[3] = {cuuint64_t(c.M) * 2, cuuint64_t(c.wp) * c.M * 2, cuuint64_t(c.hp) * c.wp * c.M * 2};
  const cuuint32_t box[4] = {32, b[0], b[1], b[2]};
  return store_map("conv v3 (dst)", dst, 4, dims, strides, box, dt);
}

template <class T, class C>
void launch(const ConvV3& c, const PixelTiles& q, Params p, DType dt, V3Pipeline pipeline, const Stream& stream) {
  p.tiles_n = int(ceil_div(c.M, C::BN));
  p.prefetch = epilogue_prefetch_mode();
  const int64_t units = int64_t(p.tiles_m) * p.tiles_n;
  // the source [n][hs][ws][C] in boxes of 64 channels x tw x th x tn, or im2col, 128 pixels of 64 channels
  // traversing each image's hp x wp grid of taps (0, 0) (im2col_corners); the weights [M][ldw] in 64 x BN boxes
  const cuuint64_t src_dims[4] = {cuuint64_t(c.C), cuuint64_t(c.ws), cuuint64_t(c.hs), cuuint64_t(c.n)};
  const cuuint64_t src_strides[3] = {cuuint64_t(c.C) * 2, cuuint64_t(c.ws) * c.C * 2, cuuint64_t(c.hs) * c.ws * c.C * 2};
  CUtensorMap map_src;
  if (q.im2col) {
    int lower[2], upper[2];
    im2col_corners(c, q, lower, upper);
    map_src = im2col_map("conv v3 (source, im2col)", c.src, src_dims, src_strides, lower, upper, 128, q.stride, dt);
  } else {
    const cuuint32_t src_box[4] = {cuuint32_t(kBK), cuuint32_t(q.stride) << q.box.tw_log2,
                                   cuuint32_t(q.stride) << q.box.th_log2, cuuint32_t(q.box.tn)};
    const cuuint32_t src_steps[4] = {1, cuuint32_t(q.stride), cuuint32_t(q.stride), 1};
    map_src = swizzled_map("conv v3 (source)", c.src, 4, src_dims, src_strides, src_box, dt, src_steps);
  }
  const cuuint64_t w_dims[2] = {cuuint64_t(p.K), cuuint64_t(c.M)};
  const cuuint64_t w_strides[1] = {cuuint64_t(c.ldw) * 2};
  const cuuint32_t w_box[2] = {cuuint32_t(kBK), cuuint32_t(C::BN)};
  const CUtensorMap map_w = swizzled_map("conv v3 (weights)", c.w, 2, w_dims, w_strides, w_box, dt);
  // dst's store map where the TMA-store epilogue runs (else unused: zeros)
  const CUtensorMap map_dst = p.tma_store ? conv_store_map(c, q, p.C, dt) : CUtensorMap{};
  const int sms = detail::sm_count(stream.device().index);
  if (pipeline == V3Pipeline::pingpong) {
    if constexpr (C::BN <= 128) {
      constexpr auto kernel = conv_v3_pingpong_kernel<T, C>;
      detail::allow_dynamic_smem<kernel>(kConvSmem<C>);
      const int64_t blocks = pipeline_blocks("conv v3", true, units, sms);
      kernel<<<unsigned(blocks), unsigned(kWsThreads<C>), kConvSmem<C>, detail::native(stream)>>>(map_src, map_w,
                                                                                                  map_dst, q, p);
      HPDT_CUDA_CHECK_LAUNCH();
    } else {
      HPDT_CHECK(false, "conv v3: the pingpong pipeline has the narrow and 64-wide tiles only");
    }
    return;
  }
  const auto go = [&](auto warp_specialised) {
    constexpr bool WS = decltype(warp_specialised)::value;
    constexpr auto kernel = conv_v3_kernel<T, C, WS>;
    detail::allow_dynamic_smem<kernel>(kConvSmem<C>);
    const int64_t blocks = pipeline_blocks("conv v3", WS, units, sms);
    kernel<<<unsigned(blocks), unsigned(kPipelineThreads<C, WS>), kConvSmem<C>, detail::native(stream)>>>(
        map_src, map_w, map_dst, q, p);
    HPDT_CUDA_CHECK_LAUNCH();
  };
  on_pipeline(pipeline, go);
}

// ---- backward-filter ----------------------------------------------------------------------------------

struct WgradTiles {
  PixelBox box;  // a k tile: a box of 64 pixels
  // im2col (HPDT_CONV_V3_LOAD, Find): k tile kt is the output grid's pixels 64 kt .. 64 kt + 63 in (image, row,
  // column) order, x's chunks by im2col loads at their taps' offsets, dy's rows one 2-D box; `pixels` in all
  int im2col, oh, ow, pixels;
  FastDiv per_image, per_row;  // oh * ow, ow
  int ci, co, kw, stride, pad, taps;
  int K;                     // taps * ci: dw's row length
  int m_tiles;               // tiles of 128 (tap, channel) rows
  int tiles, splits;         // output tiles (m_tiles x tiles of BN output channels); split-K parts of each
  int kt_total, kt_per_split;
  void* dw;
  float* ws;  // null: dw += the sums; else [splits][co][K] partials in dw's layout
};

// Work unit u (wgmma.cuh's): split u / tiles (tiles = m_tiles * n_tiles) of output tile u % tiles, rows tm (128
// (tap, channel) rows), columns tn (BN output channels); its k tiles (pixel boxes) kt0, kt0 + 1, .. kt_count of them.
struct WgradUnit {
  int tm, tn, split, kt0, kt_count;
};
__device__ __forceinline__ WgradUnit wgrad_unit(const WgradTiles& q, int u) {
  WgradUnit w;
  w.split = u / q.tiles;
  const int tile = u - w.split * q.tiles;
  w.tm = tile % q.m_tiles, w.tn = tile / q.m_tiles;
  w.kt0 = w.split * q.kt_per_split;
  w.kt_count = min(q.kt_total - w.kt0, q.kt_per_split);
  return w;
}

template <class T, class C, bool WS>
__global__ void __launch_bounds__(kPipelineThreads<C, WS>, 1)
    conv_v3_wgrad_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_dy,
                         const WgradTiles q) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  float d[C::BN / 2];
  const auto issue = [&](const WgradUnit& w, int kt, uint32_t stage, uint32_t bar) {
    int img0, py0, px0;
    const int first = (w.kt0 + kt) * 64;  // im2col: the k tile's first pixel
    if (q.im2col) {
      img0 = q.per_image.div(first);
      const int in = first - img0 * q.oh * q.ow;
      py0 = q.per_row.div(in);
      px0 = in - py0 * q.ow;
    } else {
      box_origin(q.box, w.kt0 + kt, img0, py0, px0);
    }
    mbar_arrive_expect_tx(bar, uint32_t(C::kStageBytes));
    // the A tile's two 64-row chunks, each at its tap's offset (a chunk past K reads channel ci: out of bounds)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int m = w.tm * kBM + 64 * j, tap = m / q.ci;
      const bool inside = m < q.K;
      if (q.im2col)
        tma_load_im2col_4d(stage + uint32_t(j) * kMnBoxBytes, &map_x, bar, inside ? m - tap * q.ci : q.ci,
                           px0 * q.stride - q.pad, py0 * q.stride - q.pad, img0, uint16_t(inside ? tap % q.kw : 0),
                           uint16_t(inside ? tap / q.kw : 0));
      else
        tma_load_4d(stage + uint32_t(j) * kMnBoxBytes, &map_x, bar, inside ? m - tap * q.ci : q.ci,
                    px0 * q.stride + (inside ? tap % q.kw - q.pad : 0),
                    py0 * q.stride + (inside ? tap / q.kw - q.pad : 0), img0);
    }
#pragma unroll
    for (int j = 0; j < C::BN / 64; ++j) {
      if (q.im2col)  // dy as [pixels][co]: rows past the last pixel read as zeros
        tma_load_2d(stage + uint32_t(C::kABytes) + uint32_t(j) * kMnBoxBytes, &map_dy, bar, w.tn * C::BN + 64 * j,
                    first);
      else
        tma_load_4d(stage + uint32_t(C::kABytes) + uint32_t(j) * kMnBoxBytes, &map_dy, bar, w.tn * C::BN + 64 * j, px0,
                    py0, img0);
    }
  };
  // D row m = tap * ci + c, column co: dw[co][c][tap] (dw's layout, row length K), or this split's partial
  run_pipeline<T, C, WS, 1, true, true>(
      d, base, q.tiles * q.splits, [&](int u) { return wgrad_unit(q, u); }, issue, [&](const WgradUnit& w, int wg) {
        const int t = int(threadIdx.x) % 128, warp = t / 32, lane = t % 32;
        T* dw = static_cast<T*>(q.dw);
        float* ws = q.ws ? q.ws + int64_t(w.split) * q.co * q.K : nullptr;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = w.tm * kBM + wg * 64 + warp * 16 + lane / 4 + 8 * h;
          if (m >= q.K) continue;
          const int tap = m / q.ci, column = (m - tap * q.ci) * q.taps + tap;
#pragma unroll
          for (int j = 0; j < C::BN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int co = w.tn * C::BN + 8 * j + 2 * (lane % 4) + e;
              if (co >= q.co) continue;
              const int64_t i = int64_t(co) * q.K + column;
              const float v = d[4 * j + 2 * h + e];
              if (ws)
                ws[i] = v;
              else
                dw[i] = from_f32<T>(to_f32(dw[i]) + v);
            }
        }
      });
}

// The bounding box of the backward-filter's im2col loads of x: the output grid's taps (0, 0) in x's coordinates, from
// pixel (0, 0)'s (-pad) to the last one's, as corners relative to x's first and last pixel (x first, then y).
void wgrad_im2col_corners(const ConvV3Wgrad& c, int (&lower)[2], int (&upper)[2]) {
  lower[0] = lower[1] = -c.pad;
  upper[0] = -c.pad + (c.ow - 1) * c.stride - (c.w - 1);
  upper[1] = -c.pad + (c.oh - 1) * c.stride - (c.h - 1);
}

template <class T, class C>
void launch_wgrad(const ConvV3Wgrad& c, WgradTiles q, DType dt, Tensor& dw_view, V3Pipeline pipeline,
                  const Stream& stream) {
  const int device = stream.device().index;
  const int64_t n_tiles = ceil_div(c.co, C::BN), tiles = int64_t(q.m_tiles) * n_tiles;
  const detail::SplitK sk = detail::choose_split_k(tiles, q.kt_total, detail::sm_count(device),
                                                   2.0 * kBM * C::BN * kBK, int64_t(c.co) * q.K, 8, 256,
                                                   detail::kWgmmaFlops);
  q.kt_per_split = int(sk.steps_per_split);
  const int splits = int(ceil_div(q.kt_total, q.kt_per_split));
  q.tiles = int(tiles), q.splits = splits;
  Tensor ws;
  if (splits > 1) {
    ws = device_buffer(int64_t(splits) * c.co * q.K, DType::f32, stream.device(), stream);
    q.ws = ws.data<float>();
  }
  // x [n][h][w][ci] and dy [n][oh][ow][co] in boxes of 64 channels x tw x th x tn pixels
  const cuuint64_t x_dims[4] = {cuuint64_t(c.ci), cuuint64_t(c.w), cuuint64_t(c.h), cuuint64_t(c.n)};
  const cuuint64_t x_strides[3] = {cuuint64_t(c.ci) * 2, cuuint64_t(c.w) * c.ci * 2, cuuint64_t(c.h) * c.w * c.ci * 2};
  const cuuint64_t dy_dims[4] = {cuuint64_t(c.co), cuuint64_t(c.ow), cuuint64_t(c.oh), cuuint64_t(c.n)};
  const cuuint64_t dy_strides[3] = {cuuint64_t(c.co) * 2, cuuint64_t(c.ow) * c.co * 2,
                                    cuuint64_t(c.oh) * c.ow * c.co * 2};
  // x: every stride-th pixel (TMA's element strides), the same box rows as dy's; im2col: runs of 64 output pixels,
  // x by im2col loads over the output grid's taps (0, 0) (wgrad_im2col_corners), dy as a [pixels][co] matrix
  CUtensorMap map_x, map_dy;
  if (q.im2col) {
    int lower[2], upper[2];
    wgrad_im2col_corners(c, lower, upper);
    map_x = im2col_map("conv v3 backward-filter (x, im2col)", c.x, x_dims, x_strides, lower, upper, 64, q.stride, dt);
    const cuuint64_t rows_dims[2] = {cuuint64_t(c.co), cuuint64_t(q.pixels)};
    const cuuint64_t rows_strides[1] = {cuuint64_t(c.co) * 2};
    const cuuint32_t rows_box[2] = {cuuint32_t(kBK), 64};
    map_dy = swizzled_map("conv v3 backward-filter (dy rows)", c.dy, 2, rows_dims, rows_strides, rows_box, dt);
  } else {
    const cuuint32_t box[4] = {cuuint32_t(kBK), 1u << q.box.tw_log2, 1u << q.box.th_log2, cuuint32_t(q.box.tn)};
    const cuuint32_t x_box[4] = {cuuint32_t(kBK), cuuint32_t(q.stride) << q.box.tw_log2,
                                 cuuint32_t(q.stride) << q.box.th_log2, cuuint32_t(q.box.tn)};
    const cuuint32_t x_steps[4] = {1, cuuint32_t(q.stride), cuuint32_t(q.stride), 1};
    map_x = swizzled_map("conv v3 backward-filter (x)", c.x, 4, x_dims, x_strides, x_box, dt, x_steps);
    map_dy = swizzled_map("conv v3 backward-filter (dy)", c.dy, 4, dy_dims, dy_strides, box, dt);
  }
  const auto go = [&](auto warp_specialised) {
    constexpr bool WS = decltype(warp_specialised)::value;
    constexpr auto kernel = conv_v3_wgrad_kernel<T, C, WS>;
    detail::allow_dynamic_smem<kernel>(C::kSmem);
    const int64_t blocks = pipeline_blocks("conv v3 backward-filter", WS, tiles * splits, detail::sm_count(device));
    kernel<<<unsigned(blocks), unsigned(kPipelineThreads<C, WS>), C::kSmem, detail::native(stream)>>>(map_x, map_dy, q);
    HPDT_CUDA_CHECK_LAUNCH();
  };
  on_pipeline(pipeline, go);
  if (splits > 1) wgrad_reduce(ws.data<float>(), splits, dw_view, detail::native(stream));
}

// ---- Find (kernels::GemmTuning::find, as GEMM v3's: gemm_wgmma.cu) -------------------------------------------

// A call, as far as its plan's speed goes: its kind (0 forward or backward-data phase, 1 backward-filter), device,
// dtype, the pins of HPDT_GEMM_V3_PIPELINE / _TILE, HPDT_CONV_V3_LOAD (and _STORE), and every field of ConvV3 /
// ConvV3Wgrad that shapes the work.
using FindKey = std::array<int64_t, 31>;

// The process's plans and their reports, which cuda::gemm_v3_found() lists after GEMM v3's.
find::Choices<FindKey, V3Plan, GemmV3Found>& found_plans() {
  static auto* c = new find::Choices<FindKey, V3Plan, GemmV3Found>;  // never destroyed
  return *c;
}

// (through ostringstream: GCC 12's -Wrestrict misfires on chains of std::string +)
std::string kernel_name(int kh, int kw, int stride) {
  std::ostringstream os;
  os << kh << "x" << kw;
  if (stride > 1) os << "s" << stride;
  return os.str();
}

// c's backward-filter tiles (but its split-K and dw, launch_wgrad's): k tiles by im2col where `im2col` asks for it,
// the corners fit a rank-4 im2col map and the pixels an int (q.im2col says), else boxes of 64 pixels.
WgradTiles wgrad_tiles_of(const ConvV3Wgrad& c, bool im2col) {
  WgradTiles q{};
  int lower[2], upper[2];
  wgrad_im2col_corners(c, lower, upper);
  q.im2col = im2col && corners_fit(lower, upper) && int64_t(c.n) * c.oh * c.ow < (int64_t(1) << 31) - 64;
  if (q.im2col) {  // k tiles of 64 consecutive output pixels
    q.oh = c.oh, q.ow = c.ow, q.pixels = c.n * c.oh * c.ow;
    q.per_image = FastDiv(int64_t(c.oh) * c.ow), q.per_row = FastDiv(c.ow);
    q.kt_total = int(ceil_div(q.pixels, 64));
  } else {  // k tiles of boxes of 64 pixels
    int64_t boxes = 0;
    q.box = choose_box(6, c.n, c.oh, c.ow, c.stride, &boxes);
    q.kt_total = int(boxes);
  }
  q.ci = c.ci, q.co = c.co, q.kw = c.kw, q.stride = c.stride, q.pad = c.pad, q.taps = c.kh * c.kw, q.K = q.taps * c.ci;
  q.m_tiles = int(ceil_div(q.K, kBM));
  return q;
}

// ---- one im2col load, for tests (conv_v3_im2col_load) ---------------------------------------------------------

// One block: thread 0 issues the map's load (its pixelsPerColumn pixels of 64 channels) at (x, y, img) with offsets
// (ox, oy); every thread then copies the landed rows out of the 128-byte swizzle into dst [pixels][64].
__global__ void __launch_bounds__(128, 1) im2col_load_kernel(const __grid_constant__ CUtensorMap map, int x, int y,
                                                             int img, int ox, int oy, int pixels, uint16_t* dst) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u, bar = base + uint32_t(pixels) * 128u;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    fence_mbar_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar, uint32_t(pixels) * 128u);
    tma_load_im2col_4d(base, &map, bar, 0, x, y, img, uint16_t(ox), uint16_t(oy));
  }
  mbar_wait(bar, 0);
  const unsigned char* rows = smem_raw + (base - smem_u32(smem_raw));
  for (int i = int(threadIdx.x); i < pixels * 64; i += int(blockDim.x)) {
    const int r = i / 64, e = i % 64;  // 16-byte chunk c of row r lands at chunk c ^ r % 8
    uint16_t v;
    memcpy(&v, rows + r * 128 + (((e / 8) ^ (r % 8)) * 16) + (e % 8) * 2, 2);
    dst[i] = v;
  }
}

}  // namespace

std::vector<GemmV3Found> conv_v3_found() { return found_plans().reports(); }
void conv_v3_forget_found() { found_plans().clear(); }

bool conv_v3_wgrad_can_take(const ConvV3Wgrad& c, DType dt, const Stream& stream) {
  const int64_t K = int64_t(c.kh) * c.kw * c.ci;
  return (dt == DType::bf16 || dt == DType::f16) && stream.is_cuda() && c.ci > 0 && c.ci % 64 == 0 && c.co > 0 &&
         c.co % 8 == 0 && c.kh > 0 && c.kw > 0 && c.stride >= 1 && c.stride <= 8 && c.n > 0 && c.h > 0 && c.w > 0 &&
         c.oh > 0 && c.ow > 0 &&
         aligned16(c.x) && aligned16(c.dy) && K * c.co < (int64_t(1) << 31) &&
         gemm_detail::v3_device_ok(stream.device().index);
}

void conv_v3_wgrad_launch(const ConvV3Wgrad& c, DType dt, const Stream& stream) {
  HPDT_CHECK(conv_v3_wgrad_can_take(c, dt, stream), "conv v3 backward-filter: this convolution (", dtype_name(dt),
             ", ci = ", c.ci, ", co = ", c.co, ") is not one it takes (conv_v3_wgrad_can_take)");
  const int load_pin = pinned_conv_v3_load();
  const WgradTiles q = wgrad_tiles_of(c, rule_im2col(load_pin));
  // Find times both loads where both apply (the load not pinned); the other's tiles worked out only then
  const WgradTiles q_other =
      gemm_tuning() == GemmTuning::find && load_pin < 0 ? wgrad_tiles_of(c, !q.im2col) : q;
  const bool other_load = q_other.im2col != q.im2col;
  // the tile follows co; the pipeline by rule (ws on the wide tile: 5-6 % faster than barrier on every ResNet-50
  // backward-filter the H200 timed under Find, 2026-11-29; barrier on the others, which it ran as fast or faster), or
  // under Find the faster of barrier and ws (pingpong runs ws here)
  const V3Tile tile = c.co <= 64 ? V3Tile::slim : c.co <= 128 ? V3Tile::narrow : V3Tile::wide;
  const auto launch_on = [&](const V3Plan& plan, void* dw) {
    const V3Pipeline pipeline = plan.pipeline;
    WgradTiles qq = plan.im2col == q.im2col ? q : q_other;
    HPDT_CHECK(plan.im2col == qq.im2col, "conv v3 backward-filter: a plan loading by ",
               plan.im2col ? "im2col" : "boxes", " where this call cannot");
    qq.dw = dw;
    // dw as a flat tensor for wgrad_reduce (it adds the splits into dw.numel() elements)
    Tensor dw_view = Tensor::wrap(dw, {int64_t(c.co) * q.K}, dt, stream.device());
    auto run = [&](auto tag) {
      using T = decltype(tag);
      if (tile == V3Tile::slim) launch_wgrad<T, Slim>(c, qq, dt, dw_view, pipeline, stream);
      else if (tile == V3Tile::narrow) launch_wgrad<T, Narrow>(c, qq, dt, dw_view, pipeline, stream);
      else launch_wgrad<T, Wide>(c, qq, dt, dw_view, pipeline, stream);
    };
    if (dt == DType::bf16)
      run(bf16_t{});
    else
      run(f16_t{});
  };
  V3Pipeline pipeline = tile == V3Tile::wide ? V3Pipeline::ws : V3Pipeline::barrier;
  if (pinned_v3_pipeline(pipeline) && pipeline == V3Pipeline::pingpong) pipeline = V3Pipeline::ws;
  V3Plan plan{pipeline, tile};
  plan.im2col = q.im2col;
  if (gemm_tuning() == GemmTuning::find) {
    const V3Pins pins = v3_pins();
    const auto candidates = [&] {  // a pinned pipeline: its own (pingpong runs ws here); each load where both apply
      std::vector<V3Plan> plans = pins.pipeline >= 0
                                      ? std::vector<V3Plan>{{pipeline, tile}}
                                      : std::vector<V3Plan>{{V3Pipeline::barrier, tile}, {V3Pipeline::ws, tile}};
      return with_loads(std::move(plans), q.im2col, other_load);
    };
    const FindKey key{1,           stream.device().index,
                      int64_t(dt), pins.pipeline,
                      pins.tile,   c.n,
                      c.h,         c.w,
                      c.ci,        c.co,
                      c.kh,        c.kw,
                      c.stride,    c.pad,
                      c.oh,        c.ow,
                      load_pin};
    const auto describe = [&] {
      std::ostringstream call;
      call << "conv v3 bwd_filter " << kernel_name(c.kh, c.kw, c.stride) << " " << c.ci << "->" << c.co << " " << c.n
           << "x" << c.h << "x" << c.w;
      if (c.pad) call << " pad " << c.pad;
      call << " " << dtype_name(dt);
      return call.str();
    };
    Tensor scratch;
    const auto on_scratch = [&](const V3Plan& candidate) {
      if (!scratch.defined())
        scratch = Tensor::empty({int64_t(c.co) * q.K}, dt, stream.device(), AllocOptions{.stream = &stream});
      launch_on(candidate, scratch.data());
    };
    plan = find_v3_plan(found_plans(), key, "conv v3", describe, candidates, plan, detail::native(stream), on_scratch);
  }
  launch_on(plan, c.dw);
}

bool conv_v3_can_take(const ConvV3& c, DType dt, const Stream& stream) {
  const int64_t K = int64_t(c.kh) * c.kw * c.C, rows = int64_t(c.n) * c.dst_h * c.dst_w;
  return (dt == DType::bf16 || dt == DType::f16) && stream.is_cuda() && c.C > 0 && c.C % 64 == 0 && c.M > 0 &&
         c.kh > 0 && c.kw > 0 && c.stride >= 1 && c.stride <= 8 && c.n > 0 && c.hp > 0 && c.wp > 0 && c.hs > 0 &&
         c.ws > 0 && aligned16(c.src) &&
         aligned16(c.w) && c.ldw % 8 == 0 && c.ldw >= K && K < (int64_t(1) << 31) && rows < (int64_t(1) << 31) - 1 &&
         gemm_detail::v3_device_ok(stream.device().index);
}

int64_t conv_v3_row_groups(const ConvV3& c) {  // the rule's load: conv_v3_launch keeps to it with reductions
  int64_t tiles = 0;
  pixel_tiles_of(c, rule_im2col(pinned_conv_v3_load()), &tiles);
  return 2 * tiles;
}

void conv_v3_launch(const ConvV3& c, DType dt, const Stream& stream) {
  HPDT_CHECK(conv_v3_can_take(c, dt, stream), "conv v3: this convolution (", dtype_name(dt), ", C = ", c.C,
             ") is not one it takes (conv_v3_can_take)");
  HPDT_CHECK(!(c.stats && c.grad_sums), "conv v3: statistics and backward sums exclude each other");
  HPDT_CHECK(!(c.stats || c.grad_sums) ||
                 (c.M % 2 == 0 && aligned4(c.dst) &&
                  (!c.grad_sums || (aligned4(c.grad_sums->x.data()) &&
                                    (!c.grad_sums->y.defined() || aligned4(c.grad_sums->y.data()))))),
             "conv v3: batch-norm reductions need an even channel count (", c.M,
             ") and 4-byte aligned tensors (the epilogue reduces pairs of channels)");
  const int load_pin = pinned_conv_v3_load();
  int64_t boxes = 0;  // the pixel tiles by the rule's load: boxes, or im2col's runs of 128 pixels
  const PixelTiles q = pixel_tiles_of(c, rule_im2col(load_pin), &boxes);
  // ... and by the other load, which Find also times where HPDT_CONV_V3_LOAD is unset, the corners fit and no batch
  // norm's reductions ride along (their partials are sized by the rule's tiles: conv_v3_row_groups); worked out only
  // then, not on every call
  int64_t other_boxes = boxes;
  const bool may_time_other = gemm_tuning() == GemmTuning::find && load_pin < 0 && !c.stats && !c.grad_sums;
  const PixelTiles q_other = may_time_other ? pixel_tiles_of(c, !q.im2col, &other_boxes) : q;
  const bool other_load = q_other.im2col != q.im2col;
  Params p{};
  p.M = c.n * c.dst_h * c.dst_w;  // dst's rows (pixels); the GEMM's "M" here only bounds the epilogue's rows
  p.N = c.M;
  p.K = c.kh * c.kw * c.C;
  p.alpha = 1.0f, p.beta = 0.0f;
  p.C = c.dst, p.ldc = c.M;
  p.bias = c.bias, p.res = c.residual;
  p.tiles_m = int(boxes);
  p.kt_per_split = p.K / kBK;
  if (c.stats) {  // a partial per channel and 64-row half of a box; its real pixels are n hp wp
    p.stats_splits = int(2 * boxes);
    HPDT_CHECK(c.dst_h == c.hp && c.dst_w == c.wp && c.dys == 1 &&
                   c.dxs == 1 && c.dy0 == 0 && c.dx0 == 0,
               "conv v3: batch-norm statistics need dst as the whole dense output (a forward)");
    p.col_stats = c.stats->start(c.M, p.stats_splits, c.dst, int64_t(c.n) * c.hp * c.wp, stream);
  }
  if (c.grad_sums) {  // this phase's 2 boxes partials of the batch norm's, from split sums_split0
    const ChannelGradSums& g = *c.grad_sums;
    HPDT_CHECK(g.partial.defined() && g.partial.numel() == int64_t(c.M) * g.splits * 2 &&
                   c.sums_split0 + 2 * boxes <= g.splits,
               "conv v3: backward sums for ", g.splits, " splits, this phase needs ", 2 * boxes, " from ", c.sums_split0);
    p.col_stats = const_cast<float*>(g.partial.data<float>());
    p.stats_splits = int(g.splits), p.stats_split0 = c.sums_split0;
    p.bn_x = g.x.data(), p.bn_y = g.y.defined() ? g.y.data() : nullptr, p.bn_mean = g.mean.data<float>();
  }
  // the epilogue's stores: TMA's where they apply and the plan asks for them (HPDT_CONV_V3_STORE, or Find's choice)
  const int store_pin = pinned_conv_v3_store();
  const bool tma_ok = conv_tma_store_eligible(c, p);
  const auto launch_plan = [&](const V3Plan& plan, void* dst) {
    const bool other = plan.im2col != q.im2col;
    HPDT_CHECK(!other || other_load, "conv v3: a plan loading by ", plan.im2col ? "im2col" : "boxes",
               " where this call cannot");
    const PixelTiles& qq = other ? q_other : q;
    Params pp = p;
    pp.C = dst;
    pp.tma_store = plan.tma_store && tma_ok;
    if (other) pp.tiles_m = int(other_boxes);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      if (plan.tile == V3Tile::slim)
        launch<T, Slim>(c, qq, pp, dt, plan.pipeline, stream);
      else if (plan.tile == V3Tile::wide)
        launch<T, Wide>(c, qq, pp, dt, plan.pipeline, stream);
      else
        launch<T, Narrow>(c, qq, pp, dt, plan.pipeline, stream);
    };
    if (dt == DType::bf16)
      run(bf16_t{});
    else
      run(f16_t{});
  };
  // The plan: by rule as GEMM v3's (wgmma.cuh: v3_rule_plan; slim for up to 64 output channels; K = taps x channels,
  // so the 3x3 convolutions of 64 and 128 channels have a short k loop), or under Find the fastest of GEMM v3's
  // candidates, timed on a scratch dst, with each load where both apply (other_load), each storing directly and by TMA
  // where TMA's stores apply (tma_ok; unless HPDT_CONV_V3_STORE pins one)
  V3Plan plan = v3_rule_plan(p.tiles_m, c.M, p.K, detail::sm_count(stream.device().index));
  plan.im2col = q.im2col;
  plan.tma_store = rule_tma_store(store_pin) && tma_ok;
  if (gemm_tuning() == GemmTuning::find) {
    V3Pins pins = v3_pins();
    pins.tma_store = store_pin;  // conv v3's own pin, not GEMM v3's
    const FindKey key{0,
                      stream.device().index,
                      int64_t(dt),
                      pins.pipeline,
                      pins.tile,
                      c.M,
                      c.ldw,
                      c.C,
                      c.hs,
                      c.ws,
                      c.n,
                      c.hp,
                      c.wp,
                      c.stride,
                      c.oy0,
                      c.ox0,
                      c.tsign,
                      c.kh,
                      c.kw,
                      c.dst_h,
                      c.dst_w,
                      c.dys,
                      c.dy0,
                      c.dxs,
                      c.dx0,
                      c.bias != nullptr,
                      c.residual != nullptr,
                      c.stats != nullptr,
                      c.grad_sums != nullptr,
                      load_pin,
                      store_pin};
    const auto describe = [&] {
      std::ostringstream call;
      call << "conv v3 " << (c.tsign > 0 ? "fwd " : "bwd_data phase ") << kernel_name(c.kh, c.kw, c.stride) << " "
           << c.C << "->" << c.M << " " << c.n << "x" << c.hs << "x" << c.ws << " -> " << c.hp << "x" << c.wp << " "
           << dtype_name(dt) << (c.bias ? " bias" : "") << (c.residual ? " residual" : "")
           << (c.stats ? " bn-stats" : "") << (c.grad_sums ? " bn-grad-sums" : "");
      return call.str();
    };
    Tensor scratch;
    const auto on_scratch = [&](const V3Plan& candidate) {
      if (!scratch.defined())
        scratch = Tensor::empty({int64_t(c.n) * c.dst_h * c.dst_w * c.M}, dt, stream.device(),
                                AllocOptions{.stream = &stream});
      launch_plan(candidate, scratch.data());
    };
    const auto candidates = [&] {
      return with_loads(v3_find_candidates(c.M, pins, false, tma_ok), q.im2col, other_load);
    };
    plan = find_v3_plan(found_plans(), key, "conv v3", describe, candidates, plan, detail::native(stream), on_scratch);
  }
  launch_plan(plan, c.dst);
}

void conv_v3_im2col_load(const void* src, DType dt, int n, int h, int w, const int (&lower)[2], const int (&upper)[2],
                         int stride, int x, int y, int img, int ox, int oy, int pixels, void* dst,
                         const Stream& stream) {
  HPDT_CHECK((dt == DType::bf16 || dt == DType::f16) && stream.is_cuda() && aligned16(src) && pixels >= 1 &&
                 pixels <= 256 && ox >= 0 && oy >= 0 && gemm_detail::v3_device_ok(stream.device().index),
             "conv v3 im2col load: a 16-bit, 16-byte aligned source, 1 to 256 pixels, offsets from 0 and a compute "
             "capability 9.0 device are needed");
  const cuuint64_t dims[4] = {64, cuuint64_t(w), cuuint64_t(h), cuuint64_t(n)};
  const cuuint64_t strides[3] = {128, cuuint64_t(w) * 128, cuuint64_t(h) * w * 128};
  const CUtensorMap map =
      im2col_map("conv v3 im2col load", src, dims, strides, lower, upper, cuuint32_t(pixels), stride, dt);
  const int smem = pixels * 128 + 1024 + 16;
  detail::allow_dynamic_smem<im2col_load_kernel>(smem);
  im2col_load_kernel<<<1, 128, smem, detail::native(stream)>>>(map, x, y, img, ox, oy, pixels,
                                                               static_cast<uint16_t*>(dst));
  HPDT_CUDA_CHECK_LAUNCH();
}

}  // namespace hpdt::kernels::cuda::conv_detail
