#include "hpdt/nccl_log/input.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "hpdt/core/error.h"

namespace hpdt::nccl_log {

namespace fs = std::filesystem;

void read_source(LogParser& parser, const std::string& path) {
  parser.add_source(path);
  std::vector<char> buf(1 << 16);
  if (path == "-") {
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), stdin)) > 0) parser.add_text(std::string_view(buf.data(), n));
    HPDT_CHECK(!std::ferror(stdin), "cannot read standard input: ", std::strerror(errno));
    parser.end_source();
    return;
  }
  std::error_code ec;
  HPDT_CHECK(fs::exists(path, ec), "cannot read '", path, "': no such file");
  HPDT_CHECK(!fs::is_directory(path, ec), "cannot read '", path, "': it is a directory (give the files in it, or use it as --dir)");
  // gzopen reads plain files transparently, so one path covers both.
  gzFile f = gzopen(path.c_str(), "rb");
  HPDT_CHECK(f != nullptr, "cannot open '", path, "': ", std::strerror(errno));
  int n;
  while ((n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()))) > 0) parser.add_text(std::string_view(buf.data(), static_cast<size_t>(n)));
  int err = Z_OK;
  std::string msg = gzerror(f, &err);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
    if (err == Z_ERRNO) msg = std::strerror(errno);
    gzclose(f);
    HPDT_FAIL("cannot read '", path, "': ", msg, " (a corrupt or truncated .gz?)");
  }
  gzclose(f);
  parser.end_source();
}

std::vector<std::string> log_files_in(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) {
      const std::string name = e.path().filename().string(), ext = e.path().extension().string();
      if (name == "nccl-report.txt" || name == "nccl-report.json" || ext == ".dot" || ext == ".png") continue;
      files.push_back(e.path().string());
    }
  HPDT_CHECK(!ec, "cannot list '", dir, "': ", ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

Log read_logs(const std::vector<std::string>& paths) {
  LogParser parser;
  for (const auto& p : paths) read_source(parser, p);
  return parser.finish();
}

}  // namespace hpdt::nccl_log
