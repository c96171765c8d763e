#include "hpdt/comm/tuning.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hpdt/comm/allreduce.h"
#include "hpdt/core/error.h"
#include "hpdt/core/results.h"

namespace hpdt::comm {

TuningTable TuningTable::parse(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    HPDT_FAIL("tuning file ", source, ": not valid JSON: ", e.what());
  }
  HPDT_CHECK(j.is_object() && j.value("format", "") == "hpdt-allreduce-tuning", "tuning file ", source,
             ": expected an object with \"format\": \"hpdt-allreduce-tuning\"");
  HPDT_CHECK(j.value("version", 0) == 1, "tuning file ", source, ": unsupported version ", j.value("version", 0), " (expected 1)");
  HPDT_CHECK(j.contains("entries") && j["entries"].is_array(), "tuning file ", source, ": missing array \"entries\"");
  std::vector<TuningEntry> entries;
  size_t i = 0;
  for (const auto& e : j["entries"]) {
    try {
      TuningEntry t;
      t.world_size = e.value("world_size", 0);
      t.nodes = e.value("nodes", 0);
      t.min_bytes = e.value("min_bytes", size_t(0));
      t.max_bytes = e.value("max_bytes", size_t(0));
      t.algorithm = parse_algorithm(e.at("algorithm").get<std::string>());
      t.segment_bytes = e.value("segment_bytes", size_t(0));
      HPDT_CHECK(t.max_bytes == 0 || t.max_bytes > t.min_bytes, "max_bytes ", t.max_bytes, " <= min_bytes ", t.min_bytes);
      HPDT_CHECK(t.world_size >= 0 && t.nodes >= 0, "negative world_size or nodes");
      entries.push_back(t);
    } catch (const std::exception& ex) {
      HPDT_FAIL("tuning file ", source, ": entry ", i, ": ", ex.what());
    }
    ++i;
  }
  return TuningTable(std::move(entries), source);
}

TuningTable TuningTable::load(const std::string& path) {
  std::ifstream in(path);
  HPDT_CHECK(in.good(), "tuning file ", path, ": cannot be opened");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

std::string TuningTable::to_json() const {
  nlohmann::json j;
  j["format"] = "hpdt-allreduce-tuning";
  j["version"] = 1;
  j["entries"] = nlohmann::json::array();
  for (const auto& e : entries_)
    j["entries"].push_back({{"world_size", e.world_size},
                            {"nodes", e.nodes},
                            {"min_bytes", e.min_bytes},
                            {"max_bytes", e.max_bytes},
                            {"algorithm", std::string(algorithm_name(e.algorithm))},
                            {"segment_bytes", e.segment_bytes}});
  return j.dump(2) + "\n";
}

void TuningTable::save(const std::string& path) const { write_file_atomic(path, to_json()); }

TuningChoice TuningTable::fallback(size_t bytes, int world_size, int nodes) {
  if (world_size <= 1) return {Algorithm::ring, 0};
  // One node: the shared window beats every point-to-point algorithm and MPI_Allreduce at every size
  // measured (4 KiB..16 MiB, np 2 and 4: results/allreduce/shm_np*.txt).
  if (nodes == 1) return {Algorithm::shm, 0};
  if (nodes > 1 && world_size > nodes) return {Algorithm::hier, 0};
  if (bytes < (size_t(64) << 10)) return {Algorithm::rhd, 0};
  return {Algorithm::ring, 0};
}

TuningChoice TuningTable::choose(size_t bytes, int world_size, int nodes) const {
  return match(bytes, world_size, nodes).value_or(fallback(bytes, world_size, nodes));
}

std::optional<TuningChoice> TuningTable::match(size_t bytes, int world_size, int nodes) const {
  const TuningEntry* best = nullptr;
  int best_score = -1;
  for (const auto& e : entries_) {
    if (e.world_size && e.world_size != world_size) continue;
    if (e.nodes && e.nodes != nodes) continue;
    if (bytes < e.min_bytes || (e.max_bytes && bytes >= e.max_bytes)) continue;
    const int score = (e.world_size ? 2 : 0) + (e.nodes ? 1 : 0);
    if (score > best_score) {
      best = &e;
      best_score = score;
    }
  }
  if (!best) return std::nullopt;
  return TuningChoice{best->algorithm, best->segment_bytes};
}

}  // namespace hpdt::comm
