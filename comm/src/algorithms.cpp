#include "algorithms.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/kernels/accumulate.h"
#include "shm.h"

namespace hpdt::comm::detail {

namespace {
// Tags, one per phase, so phases of one collective never match each other's messages. Within a phase
// messages between two ranks match in posting order.
enum Tag : int { kRingRS = 101, kRingAG, kTreeUp, kTreeDown, kRhdFold, kRhdHalve, kRhdDouble, kRhdUnfold, kHierRS, kHierAG };

struct Segments {
  size_t n, seg;
  size_t count() const { return (n + seg - 1) / seg; }
  size_t begin(size_t k) const { return k * seg; }
  size_t len(size_t k) const { return std::min(seg, n - k * seg); }
};
}  // namespace

float* scratch(size_t floats, int slot) {
  struct Buf {
    std::unique_ptr<float[]> p;
    size_t n = 0;
  };
  thread_local Buf bufs[8];
  Buf& b = bufs[slot];
  if (b.n < floats) {
    b.p.reset(new float[floats]);
    b.n = floats;
  }
  return b.p.get();
}

// ---- ring -----------------------------------------------------------------------------------------

void RingAllreduce::run(float* data, size_t n) {
  const int p = t_.size(), r = t_.rank();
  if (p == 1 || n == 0) return;
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  auto cbegin = [&](int c) { return part_begin(n, size_t(p), size_t(c)); };
  auto clen = [&](int c) { return part_begin(n, size_t(p), size_t(c) + 1) - cbegin(c); };
  const size_t max_chunk = n / size_t(p) + 1;
  float* tmp[2] = {t_.scratch(max_chunk, 0), t_.scratch(max_chunk, 1)};
  constexpr size_t F = sizeof(float);
  // MPI: the receives of step s + 1 are posted during step s and every reduced segment is forwarded at
  // once. NCCL (posts_ahead() false): each step posts its receives and the sends reduced in the step
  // before, so that one wait issues exactly one step as one group (see Transport::posts_ahead).
  const bool ahead = t_.posts_ahead();
  struct Forward {
    float* p;
    size_t len;
    int tag;
  };
  std::vector<Forward> deferred;
  std::vector<Transport::Request> sends;
  auto forward = [&](float* q, size_t len, int tag) {
    if (!ahead) return deferred.push_back({q, len, tag});
    // The last reduce-scatter step's forwards (the first all-gather step) are not waited for before the
    // all-gather: their chunk is final and never overwritten.
    if (tag == kRingRS)
      sends.push_back(t_.isend(q, len * F, right, tag));
    else
      t_.isend(q, len * F, right, tag);
  };
  auto post_deferred = [&] {
    for (const Forward& f : deferred) t_.isend(f.p, f.len * F, right, f.tag);
    deferred.clear();
  };

  // Reduce-scatter: at step s send chunk r-s, receive chunk r-s-1 and add it; after p-1 steps this rank
  // holds the full sum of chunk r+1.
  auto rs_recv_chunk = [&](int s) { return (r - s - 1 + 2 * p) % p; };
  std::vector<std::vector<Transport::Request>> recvs{size_t(p)};
  auto post_rs_recvs = [&](int s) {
    const int c = rs_recv_chunk(s);
    Segments sg{clen(c), seg_};
    recvs[size_t(s)].clear();
    for (size_t k = 0; k < sg.count(); ++k)
      recvs[size_t(s)].push_back(t_.irecv(tmp[s & 1] + sg.begin(k), sg.len(k) * F, left, kRingRS));
  };
  post_rs_recvs(0);
  {
    Segments sg{clen(r), seg_};
    for (size_t k = 0; k < sg.count(); ++k) sends.push_back(t_.isend(data + cbegin(r) + sg.begin(k), sg.len(k) * F, right, kRingRS));
  }
  for (int s = 0; s < p - 1; ++s) {
    if (s > 0 && !ahead) {
      post_rs_recvs(s);
      post_deferred();
    }
    if (ahead && s + 1 < p - 1) post_rs_recvs(s + 1);
    const int c = rs_recv_chunk(s);
    Segments sg{clen(c), seg_};
    for (size_t k = 0; k < sg.count(); ++k) {
      t_.wait(recvs[size_t(s)][k]);
      float* dst = data + cbegin(c) + sg.begin(k);
      t_.accumulate(dst, tmp[s & 1] + sg.begin(k), sg.len(k));
      // Forward: to the next reduce-scatter step, or (last step) the first all-gather step.
      forward(dst, sg.len(k), s + 1 < p - 1 ? kRingRS : kRingAG);
    }
  }
  // The all-gather receives overwrite chunks that reduce-scatter sends may still be reading. (Without
  // posting ahead every one of them was issued before a completed wait, which completed it too.)
  if (ahead)
    for (auto q : sends) t_.wait(q);

  // All-gather: at step s receive chunk r-s (final) straight into place and forward it.
  std::vector<std::vector<Transport::Request>> ag{size_t(p)};
  auto post_ag_recvs = [&](int s) {
    const int c = (r - s + p) % p;
    Segments sg{clen(c), seg_};
    for (size_t k = 0; k < sg.count(); ++k) ag[size_t(s)].push_back(t_.irecv(data + cbegin(c) + sg.begin(k), sg.len(k) * F, left, kRingAG));
  };
  if (ahead)
    for (int s = 0; s < p - 1; ++s) post_ag_recvs(s);
  for (int s = 0; s < p - 1; ++s) {
    if (!ahead) {
      post_ag_recvs(s);
      post_deferred();
    }
    const int c = (r - s + p) % p;
    Segments sg{clen(c), seg_};
    for (size_t k = 0; k < sg.count(); ++k) {
      t_.wait(ag[size_t(s)][k]);
      if (s + 1 < p - 1) forward(data + cbegin(c) + sg.begin(k), sg.len(k), kRingAG);
    }
  }
  post_deferred();
  t_.wait_all();
}

// ---- tree -----------------------------------------------------------------------------------------

void TreeAllreduce::run(float* data, size_t n) {
  const int p = t_.size(), r = t_.rank();
  if (p == 1 || n == 0) return;
  const int parent = r > 0 ? (r - 1) / 2 : -1;
  const int child[2] = {2 * r + 1 < p ? 2 * r + 1 : -1, 2 * r + 2 < p ? 2 * r + 2 : -1};
  constexpr size_t F = sizeof(float);
  Segments sg{n, seg_};
  const size_t ns = sg.count();
  float* tmp[2] = {child[0] >= 0 ? t_.scratch(n, 0) : nullptr, child[1] >= 0 ? t_.scratch(n, 1) : nullptr};
  std::vector<Transport::Request> up[2], up_send(ns), down(ns);
  for (int c = 0; c < 2; ++c)
    if (child[c] >= 0)
      for (size_t k = 0; k < ns; ++k) up[c].push_back(t_.irecv(tmp[c] + sg.begin(k), sg.len(k) * F, child[c], kTreeUp));
  for (size_t k = 0; k < ns; ++k) {
    float* d = data + sg.begin(k);
    for (int c = 0; c < 2; ++c)
      if (child[c] >= 0) {
        t_.wait(up[c][k]);
        t_.accumulate(d, tmp[c] + sg.begin(k), sg.len(k));
      }
    if (parent >= 0) {
      up_send[k] = t_.isend(d, sg.len(k) * F, parent, kTreeUp);
    } else {  // the root has the final segment: start it down the tree at once
      for (int c = 0; c < 2; ++c)
        if (child[c] >= 0) t_.isend(d, sg.len(k) * F, child[c], kTreeDown);
    }
  }
  if (parent >= 0) {
    for (size_t k = 0; k < ns; ++k) {
      t_.wait(up_send[k]);  // the segment is overwritten by the broadcast
      down[k] = t_.irecv(data + sg.begin(k), sg.len(k) * F, parent, kTreeDown);
    }
    for (size_t k = 0; k < ns; ++k) {
      t_.wait(down[k]);
      for (int c = 0; c < 2; ++c)
        if (child[c] >= 0) t_.isend(data + sg.begin(k), sg.len(k) * F, child[c], kTreeDown);
    }
  }
  t_.wait_all();
}

// ---- recursive halving / doubling ---------------------------------------------------------------

void RhdAllreduce::run(float* data, size_t n) {
  const int p = t_.size(), r = t_.rank();
  if (p == 1 || n == 0) return;
  constexpr size_t F = sizeof(float);
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  const int rem = p - p2;
  float* tmp = t_.scratch(n, 0);

  // Fold the extra ranks in: rank 2i sends everything to 2i+1 (i < rem).
  int newrank;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      t_.wait(t_.isend(data, n * F, r + 1, kRhdFold));
      newrank = -1;
    } else {
      t_.wait(t_.irecv(tmp, n * F, r - 1, kRhdFold));
      t_.accumulate(data, tmp, n);
      newrank = r / 2;
    }
  } else {
    newrank = r - rem;
  }
  auto real = [&](int nr) { return nr < rem ? 2 * nr + 1 : nr + rem; };

  if (newrank >= 0) {
    struct Range {
      size_t lo, hi;
    };
    std::vector<Range> path;
    size_t lo = 0, hi = n;
    for (int mask = p2 / 2; mask >= 1; mask /= 2) {
      const int partner = real(newrank ^ mask);
      const size_t mid = lo + (hi - lo) / 2;
      const bool lower = (newrank & mask) == 0;
      const size_t klo = lower ? lo : mid, khi = lower ? mid : hi;  // kept half
      const size_t slo = lower ? mid : lo, shi = lower ? hi : mid;  // sent half
      const auto s = t_.isend(data + slo, (shi - slo) * F, partner, kRhdHalve);
      const auto q = t_.irecv(tmp, (khi - klo) * F, partner, kRhdHalve);
      t_.wait(q);
      t_.accumulate(data + klo, tmp, khi - klo);
      t_.wait(s);
      path.push_back({lo, hi});
      lo = klo;
      hi = khi;
    }
    for (int mask = 1; mask < p2; mask *= 2) {
      const int partner = real(newrank ^ mask);
      const Range parent = path.back();
      path.pop_back();
      // The partner holds the other half of the parent range.
      const size_t olo = lo == parent.lo ? hi : parent.lo, ohi = lo == parent.lo ? parent.hi : lo;
      const auto s = t_.isend(data + lo, (hi - lo) * F, partner, kRhdDouble);
      const auto q = t_.irecv(data + olo, (ohi - olo) * F, partner, kRhdDouble);
      t_.wait(q);
      t_.wait(s);
      lo = parent.lo;
      hi = parent.hi;
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 1)
      t_.isend(data, n * F, r - 1, kRhdUnfold);
    else
      t_.irecv(data, n * F, r + 1, kRhdUnfold);
  }
  t_.wait_all();
}

// ---- hierarchical ---------------------------------------------------------------------------------

void HierAllreduce::run(float* data, size_t n) {
  if (n == 0) return;
  if (intra_ == IntraNode::shm && c_)
    run_shm(data, n);
  else
    run_p2p(data, n);
}

// Per chunk of the window's slot (the same chunks on every node, so the cross-node all-reduces match):
// every rank copies into its slot the shards other local ranks reduce; a barrier; local rank k < K sums
// shard k over the node in local-rank order (its own values straight from `data`) into the shared
// result, all-reduces it across nodes there, and copies it to `data`; a barrier; every rank copies the
// other shards of the result out. Two slot sets alternate, as in shm_allreduce.
void HierAllreduce::run_shm(float* data, size_t n) {
  ShmSegment& s = c_->shm_segment();
  const int L = s.size(), lr = s.rank(), K = K_;
  const WatchdogOptions& w = local_.watchdog();
  const OperationContext& ctx = local_.context();
  const bool cross = cross_ != nullptr;
  const size_t S = s.slot_floats();
  for (size_t off = 0; off < n; off += S) {
    const size_t m = std::min(S, n - off);
    auto sbegin = [&](int k) { return part_begin(m, size_t(K), size_t(k)); };
    auto slen = [&](int k) { return part_begin(m, size_t(K), size_t(k) + 1) - sbegin(k); };
    float* chunk = data + off;
    const int set = s.next_set();
    if (L > 1) {
      float* mine = s.slot(set, lr);
      for (int k = 0; k < K; ++k)
        if (k != lr) std::memcpy(mine + sbegin(k), chunk + sbegin(k), slen(k) * sizeof(float));
      s.barrier(w, ctx);
    }
    if (lr < K && slen(lr)) {
      const size_t lo = sbegin(lr), len = slen(lr);
      float* res = s.result(set) + lo;
      auto input = [&](int q) -> const float* { return q == lr ? chunk + lo : s.slot(set, q) + lo; };
      std::memcpy(res, input(0), len * sizeof(float));
      for (int q = 1; q < L; ++q) kernels::accumulate_f32(res, input(q), len);
      if (cross) flat_allreduce(inter_, *cross_, res, len, seg_);
      std::memcpy(chunk + lo, res, len * sizeof(float));
    }
    if (L > 1) {
      s.barrier(w, ctx);
      for (int k = 0; k < K; ++k)
        if (k != lr) std::memcpy(chunk + sbegin(k), s.result(set) + sbegin(k), slen(k) * sizeof(float));
    }
  }
}

void HierAllreduce::run_p2p(float* data, size_t n) {
  Transport& lt = local_;
  const int L = lt.size(), lr = lt.rank();
  const int K = K_;
  constexpr size_t F = sizeof(float);
  auto sbegin = [&](int k) { return part_begin(n, size_t(K), size_t(k)); };
  auto slen = [&](int k) { return part_begin(n, size_t(K), size_t(k) + 1) - sbegin(k); };

  // Intra-node reduce-scatter, direct: shard k goes to local rank k.
  if (L > 1) {
    const size_t my = lr < K ? slen(lr) : 0;
    float* tmp = my ? lt.scratch(my * size_t(L), 2) : nullptr;
    std::vector<Transport::Request> recvs(static_cast<size_t>(L), 0);
    if (my)
      for (int j = 0; j < L; ++j)
        if (j != lr) recvs[size_t(j)] = lt.irecv(tmp + size_t(j) * my, my * F, j, kHierRS);
    for (int k = 0; k < K; ++k)
      if (k != lr && slen(k)) lt.isend(data + sbegin(k), slen(k) * F, k, kHierRS);
    if (my)
      for (int j = 0; j < L; ++j)
        if (j != lr) {
          lt.wait(recvs[size_t(j)]);
          lt.accumulate(data + sbegin(lr), tmp + size_t(j) * my, my);
        }
    lt.wait_all();  // shards sent away are overwritten by the all-gather below
  }
  // Across nodes: local rank k of every node all-reduces shard k.
  if (lr < K && cross_ && slen(lr)) flat_allreduce(inter_, *cross_, data + sbegin(lr), slen(lr), seg_);
  // Intra-node all-gather, direct.
  if (L > 1) {
    for (int k = 0; k < K; ++k)
      if (k != lr && slen(k)) lt.irecv(data + sbegin(k), slen(k) * F, k, kHierAG);
    if (lr < K && slen(lr))
      for (int j = 0; j < L; ++j)
        if (j != lr) lt.isend(data + sbegin(lr), slen(lr) * F, j, kHierAG);
    lt.wait_all();
  }
}

void flat_allreduce(Algorithm a, Transport& t, float* data, size_t n, size_t segment_floats) {
  switch (a) {
    case Algorithm::ring: return RingAllreduce(t, segment_floats).run(data, n);
    case Algorithm::tree: return TreeAllreduce(t, segment_floats).run(data, n);
    case Algorithm::rhd: return RhdAllreduce(t).run(data, n);
    case Algorithm::mpi: {
      auto* mt = dynamic_cast<MpiTransport*>(&t);
      HPDT_CHECK(mt, "flat_allreduce: mpi needs an MPI transport");
      for (size_t off = 0; off < n; off += size_t(INT_MAX)) {
        const int c = int(std::min(n - off, size_t(INT_MAX)));
        HPDT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + off, c, MPI_FLOAT, MPI_SUM, mt->comm()));
      }
      return;
    }
    default: break;
  }
  HPDT_FAIL("flat_allreduce: algorithm ", int(a), " is not a flat algorithm (ring, tree, rhd, mpi)");
}

}  // namespace hpdt::comm::detail
