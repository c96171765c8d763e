// Writing results: JSON documents (config, machine, versions, samples, summary) and CSV tables,
// always through a temporary file and a rename so that a crash never leaves half a file behind and
// never destroys the previous one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hpdt {

// Writes `content` to `path` atomically (path.tmp.<pid> then rename). Throws hpdt::Error naming the path.
void write_file_atomic(const std::string& path, const std::string& content);

// Machine facts for results: hostname, CPU model, logical cores, memory, OS, and GPU (when usable).
nlohmann::json machine_info();
// Build facts: version, git commit, compiler, CUDA/NCCL/cuDNN/HDF5 versions.
nlohmann::json build_info_json();

// Median and spread of timing samples (the summary benchmarks report).
struct SampleStats {
  size_t n = 0;
  double median = 0, mean = 0, min = 0, max = 0, stddev = 0;
};
SampleStats sample_stats(std::vector<double> samples);
nlohmann::json to_json(const SampleStats& s);

// A CSV table written atomically when finished. Fields with commas, quotes or newlines are quoted.
class CsvWriter {
 public:
  explicit CsvWriter(std::vector<std::string> header);
  void add_row(const std::vector<std::string>& fields);  // throws if the field count differs
  std::string str() const;
  void write(const std::string& path) const;

 private:
  size_t columns_;
  std::string text_;
  void append(const std::vector<std::string>& fields);
};

}  // namespace hpdt
