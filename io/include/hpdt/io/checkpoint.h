// Checkpoints: one HDF5 file per save, written by one rank with the serial driver under a temporary
// name, flushed and fsync'ed, then renamed over the final name, so a crash at any moment leaves
// either the previous checkpoint or the new one, never half of one.
//
// File layout (format_version 1; docs/io.md has every attribute):
//   /                attributes: hpdt_format "hpdt-checkpoint", format_version, model_name, model_config,
//                    world_size, epoch, step, data_epoch, data_step, created_by, metadata (JSON text),
//                    optimizer_shards (0: optimizer state is in this file)
//   /params/<name>   one dataset per tensor, any dtype; attribute "dtype" (f32 f16 bf16 i32 u8)
//   /optimizer/<name>                     same, for optimizer state (e.g. "momentum/conv1.weight")
//   /loss_scaler     attributes: one f64 per named value (e.g. scale, good_steps)
//   /rng/<name>      attribute "state": u64 [seed, stream, offset] of an hpdt::Rng
// Names may contain '/', which makes nested groups.
//
// Sharded optimizer state (ZeRO-1 style), for later: each rank writes its shard with
// save_checkpoint(shard_path(path, rank, world), shard) holding only `optimizer`, and rank 0's main
// file sets optimizer_shards = world size and leaves /optimizer empty. load_checkpoint reads the main
// file; a loader then reads shard_path(path, rank, world) per rank. The format version stays 1: a
// reader that does not know shards sees optimizer_shards > 0 and refuses (load_checkpoint checks it
// unless told to allow shards).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hpdt/core/philox.h"
#include "hpdt/core/tensor.h"

namespace hpdt::io {

inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr const char* kCheckpointFormatName = "hpdt-checkpoint";

struct RngState {
  uint64_t seed = 0, stream = 0, offset = 0;
  static RngState of(const Rng& r) { return {r.seed(), r.stream(), r.offset()}; }
  Rng rng() const { return Rng(seed, stream, offset); }
  friend bool operator==(const RngState&, const RngState&) = default;
};

struct Checkpoint {
  std::string model_name;     // e.g. "resnet18"
  std::string model_config;   // the model's configuration as text (compared exactly on load)
  int64_t world_size = 1;
  int64_t epoch = 0, step = 0;             // training position: epoch, optimizer steps done
  int64_t data_epoch = 0, data_step = 0;   // where the reader resumes (ShardedReader::resume)
  std::map<std::string, Tensor> params;    // CPU tensors, any dtype
  std::map<std::string, Tensor> optimizer; // CPU tensors, any dtype
  std::map<std::string, double> loss_scaler;
  std::map<std::string, RngState> rng;
  nlohmann::json metadata = nlohmann::json::object();  // free-form (stored as JSON text)
  int64_t optimizer_shards = 0;            // 0: optimizer state in this file; >0: per-rank shard files
};

// What a run expects of a checkpoint it loads. Empty strings and maps are not checked.
struct CheckpointExpectation {
  std::string model_name;
  std::string model_config;
  std::map<std::string, std::pair<Shape, DType>> params;  // every entry must be present with this shape and dtype
  bool allow_sharded_optimizer = false;
};

// Writes atomically (temp name + fsync + rename). Throws hpdt::Error naming the path; on error the
// temporary file is removed and `path` is left as it was.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);

// Reads and checks: format name and version, then `expect` (model name, config, parameter shapes and
// dtypes). Throws hpdt::Error naming the file and what differs.
Checkpoint load_checkpoint(const std::string& path, const CheckpointExpectation& expect = {});
void check_compatible(const Checkpoint& ckpt, const CheckpointExpectation& expect, const std::string& path);

// The file of rank `rank`'s optimizer shard next to `path` ("<stem>.rank<r>of<w>.h5").
std::string shard_path(const std::string& path, int rank, int world);

// Numbered checkpoints in a directory, the last `keep` kept: <dir>/<prefix>-<step, 9 digits>.h5.
// One rank (rank 0) uses it.
class CheckpointDirectory {
 public:
  CheckpointDirectory(std::string dir, int keep = 3, std::string prefix = "ckpt");
  std::string path_for(int64_t step) const;
  // save_checkpoint(path_for(ckpt.step)), then removes all but the newest `keep` and any stale
  // temporary files of earlier crashed saves. Returns the path written.
  std::string save(const Checkpoint& ckpt);
  std::vector<std::string> list() const;      // complete checkpoints, oldest first
  std::optional<std::string> latest() const;  // the newest, if any

 private:
  std::string dir_, prefix_;
  int keep_;
};

namespace detail {
// Test hook: called after each tensor is written during save_checkpoint (with the count so far).
// A test sets it to kill the process mid-write.
void set_checkpoint_write_hook(void (*hook)(int tensors_written));
}  // namespace detail

}  // namespace hpdt::io
