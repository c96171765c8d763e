#include "hpdt/core/results.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "hpdt/core/build_info.h"
#include "hpdt/core/error.h"
#include "hpdt/core/runtime.h"

namespace hpdt {

void write_file_atomic(const std::string& path, const std::string& content) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) throw Error("cannot create directory " + p.parent_path().string() + ": " + ec.message(), path);
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(std::string("cannot open for writing: ") + std::strerror(errno), tmp);
  const bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size() && std::fflush(f) == 0 &&
                  ::fsync(::fileno(f)) == 0;
  const int err = errno;
  std::fclose(f);
  if (!ok) {
    std::remove(tmp.c_str());
    throw Error(std::string("cannot write: ") + std::strerror(err), tmp);
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Error("cannot rename " + tmp + " into place: " + ec.message(), path);
  }
}

namespace {
std::string read_first_match(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      auto v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}
}  // namespace

nlohmann::json machine_info() {
  nlohmann::json m;
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) == 0) m["hostname"] = host;
  m["cpu_model"] = read_first_match("/proc/cpuinfo", "model name");
  m["logical_cpus"] = std::thread::hardware_concurrency();
  const std::string mem = read_first_match("/proc/meminfo", "MemTotal");
  if (!mem.empty()) m["memory_gib"] = std::round(std::stod(mem) / (1024.0 * 1024.0) * 10) / 10;
  utsname u{};
  if (::uname(&u) == 0) m["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  if (const char* v = std::getenv("OMP_NUM_THREADS")) m["omp_num_threads"] = v;
  nlohmann::json gpus = nlohmann::json::array();
  for (int d = 0; d < cuda_device_count(); ++d) gpus.push_back(cuda_device_name(d));
  m["gpus"] = gpus;
  if (cuda_available()) {
    m["cuda_driver"] = cuda_driver_version();
    m["cuda_runtime"] = cuda_runtime_version();
  } else {
    m["gpu_unavailable_reason"] = cuda_unavailable_reason();
  }
  return m;
}

nlohmann::json build_info_json() {
  const BuildInfo& b = build_info();
  nlohmann::json j{{"version", b.version},       {"git_commit", b.git_commit},   {"compiler", b.compiler},
                   {"build_type", b.build_type}, {"cuda", b.cuda},               {"hdf5", b.hdf5_version}};
  if (b.cuda) {
    j["cuda_toolkit"] = b.cuda_version;
    j["cuda_architectures"] = b.cuda_architectures;
    j["nccl"] = b.nccl_version;
    j["cudnn"] = b.cudnn_version;
  }
  return j;
}

SampleStats sample_stats(std::vector<double> v) {
  SampleStats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(ss / double(v.size() - 1)) : 0.0;
  return s;
}

nlohmann::json to_json(const SampleStats& s) {
  return {{"n", s.n}, {"median", s.median}, {"mean", s.mean}, {"min", s.min}, {"max", s.max}, {"stddev", s.stddev}};
}

CsvWriter::CsvWriter(std::vector<std::string> header) : columns_(header.size()) { append(header); }

void CsvWriter::add_row(const std::vector<std::string>& fields) {
  HPDT_CHECK(fields.size() == columns_, "CSV row has ", fields.size(), " fields, the header has ", columns_);
  append(fields);
}

void CsvWriter::append(const std::vector<std::string>& fields) {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) text_ += ',';
    const std::string& f = fields[i];
    if (f.find_first_of(",\"\n\r") == std::string::npos) {
      text_ += f;
    } else {
      text_ += '"';
      for (char c : f) {
        if (c == '"') text_ += '"';
        text_ += c;
      }
      text_ += '"';
    }
  }
  text_ += '\n';
}

std::string CsvWriter::str() const { return text_; }
void CsvWriter::write(const std::string& path) const { write_file_atomic(path, text_); }

}  // namespace hpdt
