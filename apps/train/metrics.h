// Machine-readable output of hpdt-train. JSON lines, written by rank 0 and flushed line by line so a
// running job can be watched: {"type":"config",...} once, {"type":"step",...} per optimizer step,
// {"type":"epoch",...} per epoch (with test accuracy), {"type":"summary",...} at the end (the record
// hpdt-scaling reads; schema in docs/train.md).
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace hpdt::train {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // append: continue the file of an interrupted run (--resume). Otherwise an existing file is an error
  // unless `force` (nothing on disk is lost by accident). An empty path writes nothing.
  void open(const std::string& path, bool append, bool force);
  void write(const nlohmann::json& record);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

// Refuses to run when `path` exists and neither `append` nor `force`: checked on every rank before
// any work so a typo does not cost a training run.
void check_output_path(const std::string& flag, const std::string& path, bool append, bool force);

}  // namespace hpdt::train
