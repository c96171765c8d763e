#include "hpdt/nccl_log/capture.h"

#include <cstdlib>
#include <filesystem>

#include "hpdt/core/error.h"
#include "hpdt/core/results.h"
#include "hpdt/nccl_log/diagnose.h"
#include "hpdt/nccl_log/input.h"
#include "hpdt/nccl_log/report.h"

namespace hpdt::nccl_log {

namespace fs = std::filesystem;

namespace {
constexpr const char* kReportTxt = "nccl-report.txt";
constexpr const char* kReportJson = "nccl-report.json";
}  // namespace

std::vector<std::pair<std::string, std::string>> nccl_debug_env(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> env;
  const char* level = std::getenv("NCCL_DEBUG");
  const std::string lv = level ? level : "";
  env.emplace_back("NCCL_DEBUG", lv == "INFO" || lv == "TRACE" ? lv : "INFO");
  const char* subsys = std::getenv("NCCL_DEBUG_SUBSYS");
  env.emplace_back("NCCL_DEBUG_SUBSYS", subsys && *subsys ? subsys : "INIT,ENV,GRAPH,TUNING,COLL");
  env.emplace_back("NCCL_DEBUG_FILE", (fs::path(dir) / "nccl.%h.%p.log").string());
  return env;
}

NcclDebugCapture::NcclDebugCapture(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);  // several ranks may race here: that is fine
  HPDT_CHECK(fs::is_directory(dir), "--nccl-debug: cannot create directory '", dir, "'", ec ? ": " + ec.message() : "");
  dir_ = dir;
  for (const auto& [k, v] : nccl_debug_env(dir)) {
    ::setenv(k.c_str(), v.c_str(), 1);
    settings_.push_back(k + "=" + v);
  }
}

std::string NcclDebugCapture::report() const {
  if (!enabled()) return "";
  const std::vector<std::string> files = log_files_in(dir_);  // skips nccl-report.*
  if (files.empty()) return "NCCL debug capture: no NCCL output in '" + dir_ + "' (was NCCL used?)\n";
  Log log = read_logs(files);
  if (log.nccl_records == 0) return "NCCL debug capture: no NCCL debug lines in '" + dir_ + "'\n";
  auto diagnoses = diagnose(log);
  std::string text = text_report(log, diagnoses);
  write_file_atomic((fs::path(dir_) / kReportTxt).string(), text);
  write_file_atomic((fs::path(dir_) / kReportJson).string(), json_text(json_report(log, diagnoses)));
  return text + "(NCCL report also in " + (fs::path(dir_) / kReportJson).string() + ")\n";
}

}  // namespace hpdt::nccl_log
