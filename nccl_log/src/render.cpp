#include "hpdt/nccl_log/render.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

extern char** environ;

namespace hpdt::nccl_log {

namespace fs = std::filesystem;

bool have_graphviz() {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && ::access((dir + "/dot").c_str(), X_OK) == 0) return true;
  return false;
}

bool render_png(const std::string& dot_text, const std::string& png_path, std::string* why) {
  if (!have_graphviz()) {
    *why = "graphviz `dot` is not installed (apt-get install graphviz); the .dot file can be rendered elsewhere";
    return false;
  }
  const std::string tag = ".tmp." + std::to_string(::getpid());
  const std::string dot_tmp = png_path + tag + ".dot", png_tmp = png_path + tag;
  {
    std::ofstream f(dot_tmp, std::ios::binary);
    f << dot_text;
    if (!f) {
      *why = "cannot write '" + dot_tmp + "'";
      return false;
    }
  }
  std::vector<std::string> args = {"dot", "-Tpng", "-o", png_tmp, dot_tmp};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawnp(&pid, "dot", nullptr, nullptr, argv.data(), environ);
  int status = 0;
  if (rc == 0) waitpid(pid, &status, 0);
  std::error_code ec;
  fs::remove(dot_tmp, ec);
  if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fs::remove(png_tmp, ec);
    *why = "`dot -Tpng` failed";
    return false;
  }
  fs::rename(png_tmp, png_path, ec);
  if (ec) {
    fs::remove(png_tmp, ec);
    *why = "cannot rename to '" + png_path + "'";
    return false;
  }
  return true;
}

}  // namespace hpdt::nccl_log
