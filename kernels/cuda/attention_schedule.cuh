// Attention v3's rotated order (kernels/cuda/attention.cu, the schedule above fused_offset): where key block kbi of a
// head's nkb starts among its nqb query blocks, and its rank in a query block's order of dQ adds. Plain C++ for the
// host and the device: tests/kernels/test_attention_schedule.cpp checks on the CPU that the ranks are the order in
// which the key blocks reach each query block.
#pragma once

#include <cstdint>

#include "hpdt/core/hostdev.h"

namespace hpdt::kernels::cuda::detail {

// Key block kbi's first query block, kbi nqb / nkb: with nqb >= nkb (a query step is no longer than a key block)
// the key blocks start at different query blocks, spread evenly.
HPDT_HD_INLINE int v3_first_query_block(int kbi, int nkb, int nqb) { return int(int64_t(kbi) * nqb / nkb); }

// Whether the rotated order can be computed for nkb key blocks and nqb query blocks: nqb >= nkb (distinct first
// query blocks), and v3_rotated_rank's products in 32 bits ((nkb + 1) nqb < 2^32). The host checks it before it picks
// the order; the GPU's residency keeps nkb in the thousands at most, so it holds wherever that does.
HPDT_HD_INLINE bool v3_rotation_fits(int nkb, int nqb) {
  return nkb >= 1 && nqb >= nkb && (int64_t(nkb) + 1) * nqb < (int64_t(1) << 32);
}

// Key block kbi's rank in query block qb's order of dQ adds (0: the first, nkb - 1: the last) when every key block
// visits the query blocks from its first one, wrapping around: the order in which they reach qb. That is kstar
// first, the last key block whose first query block is qb or before it, then kstar - 1 down to 0, then nkb - 1 down
// to kstar + 1. kstar = ceil((qb + 1) nkb / nqb) - 1: kbi nqb / nkb <= qb exactly when kbi nqb < (qb + 1) nkb.
// In 32-bit unsigned arithmetic (v3_rotation_fits): the dQ step computes it twice a step with dK and dV live in
// registers, where a 64-bit division made the tall dh-128 kernel spill.
HPDT_HD_INLINE int v3_rotated_rank(int qb, int kbi, int nkb, int nqb) {
  const int kstar = int((uint32_t(qb + 1) * uint32_t(nkb) + uint32_t(nqb - 1)) / uint32_t(nqb)) - 1;
  const int r = kstar - kbi;
  return r < 0 ? r + nkb : r;
}

}  // namespace hpdt::kernels::cuda::detail
