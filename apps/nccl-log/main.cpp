// hpdt-nccl-log: reads NCCL_DEBUG=INFO output of every rank and says what the topology is and what
// looks wrong. See docs/nccl-log.md.
//
//   hpdt-nccl-log report [--json] [--json-out FILE] [--dot FILE] [--png FILE] [--dir DIR] [FILES... | -]
//   hpdt-nccl-log env DIR      (prints `export NCCL_DEBUG=INFO ...` for job scripts)
//
// Exit codes: 0 report written; 1 bad usage or unreadable input; 2 the input holds no NCCL debug
// lines (the report is still printed: it may show application failure lines).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "hpdt/core/cli_checks.h"
#include "hpdt/core/error.h"
#include "hpdt/core/results.h"
#include "hpdt/nccl_log/capture.h"
#include "hpdt/nccl_log/diagnose.h"
#include "hpdt/nccl_log/input.h"
#include "hpdt/nccl_log/render.h"
#include "hpdt/nccl_log/report.h"

int main(int argc, char** argv) {
  using namespace hpdt::nccl_log;
  CLI::App app{"hpdt-nccl-log: read NCCL_DEBUG output and report topology, transports and problems"};
  app.require_subcommand(1);
  CLI::App* report = app.add_subcommand("report", "summarize logs: per communicator, then diagnoses");
  std::vector<std::string> files;
  std::string dir, json_out, dot_out, png_out;
  bool json = false;
  int dot_channels = 2;
  report->add_option("files", files, "log files (plain or .gz), or - for standard input");
  report->add_option("--dir", dir, "read every file in this directory (an NCCL_DEBUG_FILE directory)");
  report->add_flag("--json", json, "print JSON (schema hpdt-nccl-log/1, docs/nccl-log.md) instead of text");
  report->add_option("--json-out", json_out, "also write the JSON report to this file");
  report->add_option("--dot", dot_out, "write a Graphviz drawing of rings and trees to this file");
  report->add_option("--png", png_out, "render the drawing to this PNG with graphviz `dot` (implies a drawing)");
  report->add_option("--dot-channels", dot_channels, "channels to draw per communicator")
      ->check(hpdt::cli::in_range(1, 64));
  CLI::App* env = app.add_subcommand("env", "print the shell exports that capture NCCL_DEBUG output of every rank into DIR");
  std::string env_dir;
  env->add_option("dir", env_dir, "directory for the per-process logs (nccl.%h.%p.log)")->required();
  CLI11_PARSE(app, argc, argv);

  if (env->parsed()) {
    for (const auto& [k, v] : nccl_debug_env(env_dir)) std::cout << "export " << k << "='" << v << "'\n";
    return 0;
  }

  try {
    std::vector<std::string> paths = files;
    if (!dir.empty()) {
      auto more = log_files_in(dir);
      HPDT_CHECK(!more.empty(), "no files in --dir '", dir, "'");
      paths.insert(paths.end(), more.begin(), more.end());
    }
    if (paths.empty()) {
      std::cerr << "hpdt-nccl-log: no input: give log files, --dir DIR, or - for standard input\n";
      return 1;
    }
    Log log = read_logs(paths);
    auto diagnoses = diagnose(log);
    if (json) std::cout << json_text(json_report(log, diagnoses));
    else std::cout << text_report(log, diagnoses);
    if (!json_out.empty()) hpdt::write_file_atomic(json_out, json_text(json_report(log, diagnoses)));
    if (!dot_out.empty() || !png_out.empty()) {
      std::string dot = dot_report(log, dot_channels);
      if (!dot_out.empty()) hpdt::write_file_atomic(dot_out, dot);
      if (!png_out.empty()) {
        std::string why;
        if (!render_png(dot, png_out, &why)) std::cerr << "hpdt-nccl-log: no PNG written: " << why << "\n";
      }
    }
    if (log.nccl_records == 0) {
      std::cerr << "hpdt-nccl-log: no NCCL debug lines found in " << paths.size() << " input(s)"
                << " (run the job with NCCL_DEBUG=INFO)\n";
      return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "hpdt-nccl-log: " << e.what() << "\n";
    return 1;
  }
}
