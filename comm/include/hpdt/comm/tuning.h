// TuningTable: which algorithm and segment size `auto` uses for a message size, per world size and
// node count. Written by the all-reduce benchmark (hpdt-allreduce-perf), read here. The format is
// documented in docs/comm.md:
//
//   {"format": "hpdt-allreduce-tuning", "version": 1,
//    "entries": [{"world_size": 4, "nodes": 1, "min_bytes": 0, "max_bytes": 65536,
//                 "algorithm": "rhd", "segment_bytes": 0}, ...]}
//
// Byte ranges are [min_bytes, max_bytes); max_bytes 0 means no upper bound. world_size/nodes 0 (or
// absent) match any. The most specific matching entry wins (exact world size and nodes before
// wildcards), then the first in file order.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace hpdt::comm {

enum class Algorithm { ring, tree, rhd, hier, mpi, nccl, shm, automatic };

struct TuningEntry {
  int world_size = 0;  // 0: any
  int nodes = 0;       // 0: any
  size_t min_bytes = 0;
  size_t max_bytes = 0;  // exclusive; 0: unbounded
  Algorithm algorithm = Algorithm::ring;
  size_t segment_bytes = 0;  // 0: the algorithm's default
};

struct TuningChoice {
  Algorithm algorithm;
  size_t segment_bytes;
};

class TuningTable {
 public:
  TuningTable() = default;
  explicit TuningTable(std::vector<TuningEntry> entries, std::string source = "<entries>")
      : entries_(std::move(entries)), source_(std::move(source)) {}
  // Throws hpdt::Error naming the file and the entry on bad input.
  static TuningTable load(const std::string& path);
  static TuningTable parse(const std::string& json_text, const std::string& source = "<string>");
  void save(const std::string& path) const;  // atomic (temporary file + rename)
  std::string to_json() const;

  // The built-in choice when no entry matches (measured on the development machine; docs/comm.md).
  static TuningChoice fallback(size_t bytes, int world_size, int nodes);
  TuningChoice choose(size_t bytes, int world_size, int nodes) const;  // match(), else fallback()
  // The most specific entry for this size, world size and node count (then the first in file order); none when
  // no entry matches.
  std::optional<TuningChoice> match(size_t bytes, int world_size, int nodes) const;

  const std::vector<TuningEntry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  const std::string& source() const { return source_; }  // the file it was loaded from, for messages

 private:
  std::vector<TuningEntry> entries_;
  std::string source_ = "<entries>";
};

}  // namespace hpdt::comm
