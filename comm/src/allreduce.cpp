// allreduce(): checks, dtype widening, the algorithm choice and averaging around the algorithm classes;
// the planning and the host reduction are shared with allreduce_device (comm/cuda/device_allreduce.cpp).
#include "hpdt/comm/allreduce.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: MPIX_Query_cuda_support() where OMPI_HAVE_MPI_EXT_CUDA
#endif

#include "algorithms.h"
#include "debug_check.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/kernels/accumulate.h"
#include "shm.h"

namespace hpdt::comm {

namespace {
constexpr std::string_view kNames[] = {"ring", "tree", "rhd", "hier", "mpi", "nccl", "shm", "auto"};
}

Algorithm parse_algorithm(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (kNames[i] == name) return Algorithm(i);
  HPDT_FAIL("unknown all-reduce algorithm '", name, "' (expected ring, tree, rhd, hier, mpi, nccl, shm or auto)");
}

std::string_view algorithm_name(Algorithm a) { return kNames[size_t(a)]; }

ReduceOp parse_reduce_op(std::string_view name) {
  if (name == "sum") return ReduceOp::sum;
  if (name == "avg") return ReduceOp::avg;
  HPDT_FAIL("unknown reduction '", name, "' (expected sum or avg)");
}

std::string_view reduce_op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "avg"; }

std::string_view intra_node_name(IntraNode m) { return m == IntraNode::shm ? "shm" : "p2p"; }

IntraNode parse_intra_node(std::string_view name) {
  if (name == "shm") return IntraNode::shm;
  if (name == "p2p") return IntraNode::p2p;
  HPDT_FAIL("unknown intra-node method '", name, "' for hier (expected shm or p2p)");
}

std::string_view device_transport_name(DeviceTransport d) {
  switch (d) {
    case DeviceTransport::automatic: return "auto";
    case DeviceTransport::staged: return "staged";
    case DeviceTransport::nccl: return "nccl";
  }
  return "?";
}

DeviceTransport parse_device_transport(std::string_view name) {
  if (name == "auto") return DeviceTransport::automatic;
  if (name == "staged") return DeviceTransport::staged;
  if (name == "nccl") return DeviceTransport::nccl;
  HPDT_FAIL("unknown device transport '", name, "' (expected auto, staged or nccl)");
}

size_t default_segment_bytes(Algorithm a) {
  switch (a) {
    case Algorithm::ring: return size_t(1) << 20;
    case Algorithm::tree: return size_t(256) << 10;
    case Algorithm::hier: return size_t(1) << 20;
    default: return 0;
  }
}

namespace {
// HPDT_TUNING_FILE, loaded once per process.
const TuningTable* env_tuning() {
  static std::once_flag once;
  static std::unique_ptr<TuningTable> table;
  std::call_once(once, [] {
    if (const char* f = std::getenv("HPDT_TUNING_FILE"); f && *f) table = std::make_unique<TuningTable>(TuningTable::load(f));
  });
  return table.get();
}

// The table auto reads: the caller's, else HPDT_TUNING_FILE's, else none.
const TuningTable* active_table(const AllreduceOptions& options) {
  return options.tuning ? options.tuning : env_tuning();
}

// The active table's entry for this message; an entry naming auto counts as none.
std::optional<TuningChoice> tuned_choice(const Communicator& comm, size_t bytes, const AllreduceOptions& options) {
  const TuningTable* t = active_table(options);
  if (!t) return std::nullopt;
  std::optional<TuningChoice> c = t->match(bytes, comm.size(), comm.node_count());
  if (c && c->algorithm == Algorithm::automatic) return std::nullopt;
  return c;
}
}  // namespace

TuningChoice resolve_auto(const Communicator& comm, size_t bytes, const AllreduceOptions& options) {
  const TuningChoice built_in = TuningTable::fallback(bytes, comm.size(), comm.node_count());
  const std::optional<TuningChoice> c = tuned_choice(comm, bytes, options);
  if (!c) return built_in;
  if (c->algorithm == Algorithm::nccl) {
    // A table measured on GPUs (hpdt-allreduce-perf --device cuda) names nccl where NCCL won; NCCL reduces device
    // memory only. Until 2026-12-01 such a table made the first all-reduce of host memory fail mid-run (hpdt-train
    // on the CPU, or through its host mirror, with the all-reduce job's tuning.json).
    static std::once_flag warned;
    std::call_once(warned, [&] {
      if (comm.rank() != 0) return;
      HPDT_LOG(warn) << "tuning file " << active_table(options)->source() << " names nccl for all-reduces of " << bytes
                     << " bytes (and maybe others) at " << comm.size() << " ranks on " << comm.node_count()
                     << " nodes; NCCL reduces device memory only, so auto takes the built-in choice for these "
                        "host buffers ("
                     << algorithm_name(built_in.algorithm) << " here)";
    });
    return built_in;
  }
  return *c;
}

#if HPDT_HAVE_CUDA
TuningChoice resolve_auto_device(const Communicator& comm, size_t bytes, const AllreduceOptions& options) {
  // (an NCCL communicator cannot hold two ranks of one GPU: where ranks share one, a table's nccl gives way too)
  const std::optional<TuningChoice> c = tuned_choice(comm, bytes, options);
  if (c && (c->algorithm != Algorithm::nccl || comm.gpu_per_rank())) return *c;
  if (comm.gpu_per_rank()) return {Algorithm::nccl, 0};
  return TuningTable::fallback(bytes, comm.size(), comm.node_count());
}
#endif

namespace detail {

CallPlan plan_call(Communicator& comm, std::string_view entry, int collective, const void* send, void* recv,
                   size_t count, DType dtype, ReduceOp op, Algorithm algorithm, const AllreduceOptions& options,
                   bool device_memory) {
  HPDT_CHECK(is_floating(dtype), entry, ": dtype ", dtype_name(dtype), " is not supported (expected f32, f16 or bf16)");
  HPDT_CHECK(count == 0 || (send && recv), entry, ": null buffer for ", count, " elements");
  CallPlan plan{algorithm, options.segment_bytes, {}};
  if (plan.algorithm == Algorithm::automatic) {
#if HPDT_HAVE_CUDA
    const TuningChoice c = device_memory ? resolve_auto_device(comm, count * dtype_size(dtype), options)
                                         : resolve_auto(comm, count * dtype_size(dtype), options);
#else
    HPDT_CHECK(!device_memory, entry, ": device memory needs a CUDA build");
    const TuningChoice c = resolve_auto(comm, count * dtype_size(dtype), options);
#endif
    plan.algorithm = c.algorithm;
    if (!plan.segment_bytes) plan.segment_bytes = c.segment_bytes;
  }
  if (!plan.segment_bytes) plan.segment_bytes = default_segment_bytes(plan.algorithm);

  std::ostringstream what;
  what << entry << " " << algorithm_name(plan.algorithm) << " of " << count << " x " << dtype_name(dtype) << " (" << reduce_op_name(op) << ")";
  plan.context = OperationContext{what.str(), options.bucket};
  for (Transport* t : {static_cast<Transport*>(&comm.transport()), static_cast<Transport*>(&comm.local_transport()),
                       static_cast<Transport*>(&comm.cross_transport())})
    t->set_context(plan.context);
  if (comm.debug_checks()) check_same_call(comm, CallSignature{collective, int(plan.algorithm), int(dtype), int(op), count});
  return plan;
}

void host_allreduce(Communicator& comm, const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Algorithm algorithm,
                    const AllreduceOptions& options, size_t segment_bytes) {
  if (count == 0) return;
  const size_t seg_floats = std::max<size_t>(1, segment_bytes / sizeof(float));
  if (algorithm == Algorithm::mpi && dtype == DType::f32) {  // the baseline exactly as users call it
    const bool in_place = send == recv;
    for (size_t off = 0; off < count; off += size_t(INT_MAX)) {
      const int c = int(std::min(count - off, size_t(INT_MAX)));
      float* out = static_cast<float*>(recv) + off;
      HPDT_MPI_CHECK(MPI_Allreduce(in_place ? MPI_IN_PLACE : static_cast<const float*>(send) + off, out, c, MPI_FLOAT, MPI_SUM, comm.comm()));
    }
    if (op == ReduceOp::avg) kernels::divide_f32(static_cast<float*>(recv), count, float(comm.size()));
    return;
  }

  float* work;
  if (dtype == DType::f32) {
    work = static_cast<float*>(recv);
    if (send != recv) std::memcpy(recv, send, count * sizeof(float));
  } else {
    work = scratch(count, 3);
    kernels::convert(work, DType::f32, send, dtype, count);
  }
  switch (algorithm) {
    case Algorithm::hier: HierAllreduce(comm, options.inter_node, options.intra_node, seg_floats).run(work, count); break;
    case Algorithm::shm:
      HPDT_CHECK(comm.node_count() == 1, "allreduce: algorithm shm works among the ranks of one node; this communicator spans ",
                 comm.node_count(), " nodes (", comm.describe(), "): use hier, which reduces inside each node first");
      shm_allreduce(comm.shm_segment(), work, count, comm.transport().watchdog(), comm.transport().context());
      break;
    case Algorithm::ring:
    case Algorithm::tree:
    case Algorithm::rhd:
    case Algorithm::mpi: flat_allreduce(algorithm, comm.transport(), work, count, seg_floats); break;
    default: HPDT_FAIL("allreduce: unexpected algorithm ", algorithm_name(algorithm));
  }
  if (op == ReduceOp::avg) kernels::divide_f32(work, count, float(comm.size()));
  if (dtype != DType::f32) kernels::convert(recv, dtype, work, DType::f32, count);
}

}  // namespace detail

void allreduce(Communicator& comm, const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Algorithm algorithm,
               const AllreduceOptions& options) {
  const detail::CallPlan plan = detail::plan_call(comm, "allreduce", 1, send, recv, count, dtype, op, algorithm, options);
  if (count == 0) return;
  HPDT_CHECK(plan.algorithm != Algorithm::nccl, "allreduce: algorithm nccl needs device buffers and a CUDA build; "
                                                "use allreduce_device (GPU builds) or another algorithm for host memory");
  detail::host_allreduce(comm, send, recv, count, dtype, op, plan.algorithm, options, plan.segment_bytes);
}

bool mpi_cuda_aware() {
  if (const char* e = std::getenv("HPDT_MPI_CUDA_AWARE"); e && *e) return std::atoi(e) != 0;
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

// ---- broadcast and all-gather -------------------------------------------------------------------

void broadcast(Communicator& comm, void* data, size_t bytes, int root) {
  Transport& t = comm.transport();
  const int p = t.size();
  HPDT_CHECK(root >= 0 && root < p, "broadcast: root ", root, " out of range [0, ", p, ")");
  t.set_context({"broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root), -1});
  if (comm.debug_checks()) detail::check_same_call(comm, detail::CallSignature{2, root, 0, 0, bytes});
  if (p == 1 || bytes == 0) return;
  const int vr = (t.rank() - root + p) % p;  // binomial tree in virtual ranks rooted at 0
  int mask = 1;
  while (mask < p) {
    if (vr & mask) {
      t.wait(t.irecv(data, bytes, (vr - mask + root) % p, 201));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < p) t.isend(data, bytes, (vr + mask + root) % p, 201);
  t.wait_all();
}

void allgather(Communicator& comm, const void* send, void* recv, size_t bytes) {
  Transport& t = comm.transport();
  const int p = t.size(), r = t.rank();
  t.set_context({"allgather of " + std::to_string(bytes) + " bytes per rank", -1});
  if (comm.debug_checks()) detail::check_same_call(comm, detail::CallSignature{3, 0, 0, 0, bytes});
  char* out = static_cast<char*>(recv);
  if (bytes && out + size_t(r) * bytes != send) std::memmove(out + size_t(r) * bytes, send, bytes);
  if (p == 1 || bytes == 0) return;
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  std::vector<Transport::Request> recvs;
  for (int s = 0; s < p - 1; ++s) recvs.push_back(t.irecv(out + size_t((r - s - 1 + p) % p) * bytes, bytes, left, 202));
  t.isend(out + size_t(r) * bytes, bytes, right, 202);
  for (int s = 0; s < p - 1; ++s) {
    t.wait(recvs[size_t(s)]);
    if (s + 1 < p - 1) t.isend(out + size_t((r - s - 1 + p) % p) * bytes, bytes, right, 202);
  }
  t.wait_all();
}

}  // namespace hpdt::comm
