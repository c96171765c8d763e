#include "timeline.h"

#include "hpdt/core/check_mpi.h"
#include "hpdt/core/results.h"

namespace hpdt::train {

void Timeline::span(Track track, std::string name, double t0, double t1, nlohmann::json args) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  spans_.push_back({track, std::move(name), t0 - origin_, t1 - origin_, std::move(args)});
}

size_t Timeline::size() const {
  std::lock_guard lock(mutex_);
  return spans_.size();
}

void Timeline::write(MPI_Comm comm, const std::string& path, const std::string& host) const {
  if (!enabled_ || path.empty()) return;
  int rank = 0, size = 1;
  HPDT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HPDT_MPI_CHECK(MPI_Comm_size(comm, &size));
  static const char* kTrackNames[] = {"compute", "comm", "data"};
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank) + " (" + host + ")"}}}});
  events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  for (int t = 0; t < 3; ++t)
    events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", t}, {"args", {{"name", kTrackNames[t]}}}});
  {
    std::lock_guard lock(mutex_);
    for (const auto& s : spans_) {
      nlohmann::json e = {{"ph", "X"}, {"name", s.name}, {"pid", rank}, {"tid", int(s.track)},
                          {"ts", s.t0 * 1e6}, {"dur", std::max(0.0, s.t1 - s.t0) * 1e6}};
      if (!s.args.is_null()) e["args"] = s.args;
      events.push_back(std::move(e));
    }
  }
  // Gather each rank's serialised event array (as text) to rank 0.
  const std::string mine = events.dump();
  int len = int(mine.size());
  std::vector<int> lens(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  HPDT_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm));
  std::string all;
  if (rank == 0) {
    long total = 0;
    for (int r = 0; r < size; ++r) {
      displs[size_t(r)] = int(total);
      total += lens[size_t(r)];
    }
    all.resize(size_t(total));
  }
  HPDT_MPI_CHECK(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, comm));
  if (rank != 0) return;
  nlohmann::json trace = {{"displayTimeUnit", "ms"}, {"traceEvents", nlohmann::json::array()}};
  for (int r = 0; r < size; ++r) {
    auto part = nlohmann::json::parse(all.substr(size_t(displs[size_t(r)]), size_t(lens[size_t(r)])));
    for (auto& e : part) trace["traceEvents"].push_back(std::move(e));
  }
  write_file_atomic(path, trace.dump());
}

}  // namespace hpdt::train
