#include "metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "hpdt/core/error.h"

namespace hpdt::train {

void check_output_path(const std::string& flag, const std::string& path, bool append, bool force) {
  if (path.empty() || append || force) return;
  if (std::filesystem::exists(path))
    HPDT_FAIL(flag, " ", path, " already exists (from an earlier run?); pass --force to overwrite it, ",
              "--resume to continue it, or choose another name");
}

void MetricsWriter::open(const std::string& path, bool append, bool force) {
  if (path.empty()) return;
  check_output_path("--metrics", path, append, force);
  path_ = path;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!file_) HPDT_FAIL("cannot open --metrics file ", path, ": ", std::strerror(errno));
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    HPDT_FAIL("cannot write --metrics file ", path_, ": ", std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

}  // namespace hpdt::train
