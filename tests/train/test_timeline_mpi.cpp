// The timeline gathers every rank's spans to rank 0 into one Chrome/Perfetto trace.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "timeline.h"

using hpdt::train::Timeline;

TEST(Timeline, OneTraceWithATrackPerRank) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string path = "/tmp/hpdt-timeline-test.json";
  MPI_Bcast(path.data(), int(path.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  Timeline t(true);
  t.set_origin(100.0);
  t.span(Timeline::compute, "forward", 100.0, 100.5);
  t.span(Timeline::comm, "allreduce bucket 0", 100.25, 100.75, {{"bytes", 1024 * (rank + 1)}});
  t.write(MPI_COMM_WORLD, path, "host");
  if (rank == 0) {
    std::ifstream in(path);
    auto trace = nlohmann::json::parse(in);
    int spans = 0;
    std::set<int> pids;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] == "X") {
        ++spans;
        pids.insert(e["pid"].get<int>());
        if (e["name"] == "forward") {
          EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.0);
          EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 5e5);
        } else {
          EXPECT_EQ(e["args"]["bytes"], 1024 * (e["pid"].get<int>() + 1));
        }
      }
    }
    EXPECT_EQ(spans, 2 * size);
    EXPECT_EQ(int(pids.size()), size);
    std::filesystem::remove(path);
  }
}
