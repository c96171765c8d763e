// Helpers for the corpus and synthetic tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hpdt/nccl_log/diagnose.h"
#include "hpdt/nccl_log/input.h"
#include "hpdt/nccl_log/model.h"

namespace hpdt::nccl_log::test {

const char* corpus_default_dir();  // the configured default (corpus_default.cpp)

// The corpus folder: $HPDT_NCCL_LOG_CORPUS, else the configured default (../shared/nccl_logs).
inline std::string corpus_dir() {
  const char* env = std::getenv("HPDT_NCCL_LOG_CORPUS");
  return env && *env ? env : corpus_default_dir();
}

// The corpus file whose name starts with `prefix` ("001_"), or "" with the reason in *why.
inline std::string corpus_file(const std::string& prefix, std::string* why) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(corpus_dir(), ec)) {
    *why = "NCCL log corpus not found at '" + corpus_dir() + "' (set HPDT_NCCL_LOG_CORPUS)";
    return "";
  }
  for (const auto& e : fs::directory_iterator(corpus_dir(), ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) return e.path().string();
  *why = "no file " + prefix + "* in the corpus at '" + corpus_dir() + "'";
  return "";
}

#define HPDT_LOAD_CORPUS(var, prefix)                          \
  ::hpdt::nccl_log::Log var;                                   \
  do {                                                         \
    std::string why_;                                          \
    std::string path_ = ::hpdt::nccl_log::test::corpus_file(prefix, &why_); \
    if (path_.empty()) GTEST_SKIP() << why_;                   \
    var = ::hpdt::nccl_log::read_logs({path_});                \
  } while (0)

inline const Communicator* only_comm(const Log& log) {
  EXPECT_EQ(log.comms.size(), 1u) << "expected exactly one communicator";
  return log.comms.size() == 1 ? &log.comms[0] : nullptr;
}

inline std::vector<int> ring(const Communicator& c, int ch) {
  auto it = c.rings.find(ch);
  return it == c.rings.end() ? std::vector<int>{} : it->second;
}

// The `via` of the connection ch: a -> b, or "" when none was logged.
inline std::string via(const Communicator& c, int ch, int a, int b) {
  for (const auto& e : c.connections)
    if (e.channel == ch && e.src == a && e.dst == b) return e.via;
  return "";
}

inline int parent(const Communicator& c, int ch, int r) {
  auto t = c.trees.find(ch);
  if (t == c.trees.end()) return -2;
  auto l = t->second.find(r);
  return l == t->second.end() ? -2 : l->second.parent;
}

inline std::set<int> children(const Communicator& c, int ch, int r) {
  auto t = c.trees.find(ch);
  if (t == c.trees.end()) return {};
  auto l = t->second.find(r);
  return l == t->second.end() ? std::set<int>{} : std::set<int>(l->second.children.begin(), l->second.children.end());
}

// A copy (diagnose() results are often temporaries).
inline std::optional<Diagnosis> find_diag(const std::vector<Diagnosis>& ds, const std::string& rule) {
  for (const auto& d : ds)
    if (d.rule == rule) return d;
  return std::nullopt;
}

inline std::vector<int> iota_vec(int a, int b) {  // [a, b)
  std::vector<int> v;
  for (int i = a; i < b; ++i) v.push_back(i);
  return v;
}

inline std::vector<int> rank_list(const Communicator& c) {
  std::vector<int> v;
  for (const auto& [r, ri] : c.ranks) v.push_back(r);
  return v;
}

}  // namespace hpdt::nccl_log::test
