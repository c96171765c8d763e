// A Chrome/Perfetto trace of a training run: every rank records spans (forward, backward, each bucket's
// all-reduce, optimizer, data wait) against a clock zeroed at a common barrier; at the end rank 0
// gathers them and writes one JSON trace (pid = rank, one thread per track) that loads in
// ui.perfetto.dev and chrome://tracing.
#pragma once

#include <mpi.h>

#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hpdt::train {

class Timeline {
 public:
  enum Track { compute = 0, comm = 1, data = 2 };
  explicit Timeline(bool enabled) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  // Sets the time origin; call on all ranks right after a barrier.
  void set_origin(double now_seconds) { origin_ = now_seconds; }
  // Records a span [t0, t1] (seconds from now_s()); thread-safe (the comm thread records too).
  void span(Track track, std::string name, double t0, double t1, nlohmann::json args = nullptr);
  size_t size() const;
  // Collective over `comm`: gathers every rank's spans to rank 0, which writes `path` atomically.
  void write(MPI_Comm comm, const std::string& path, const std::string& host) const;

 private:
  struct Span {
    Track track;
    std::string name;
    double t0, t1;
    nlohmann::json args;
  };
  bool enabled_;
  double origin_ = 0;
  mutable std::mutex mutex_;
  std::vector<Span> spans_;
};

}  // namespace hpdt::train
