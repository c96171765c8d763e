// main() of MPI tests: MPI_Init_thread(MULTIPLE), errors returned (not fatal) on MPI_COMM_WORLD,
// the process rank set for logs and errors, full gtest output from rank 0 and failures only from
// the others (prefixed with their rank), and one exit code for all ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "hpdt/core/check_mpi.h"
#include "hpdt/core/log.h"
#include "hpdt_test.h"

namespace hpdt::test {

TempDir::TempDir() {
  // One directory name for all ranks of the job: rank 0 picks it and broadcasts it.
  namespace fs = std::filesystem;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char name[512] = {0};
  if (rank == 0) {
    std::random_device rd;
    for (int attempt = 0; attempt < 100; ++attempt) {
      fs::path p = fs::temp_directory_path() / ("hpdt-mpitest-" + std::to_string(rd()));
      std::error_code ec;
      if (fs::create_directory(p, ec)) {
        std::snprintf(name, sizeof name, "%s", p.c_str());
        break;
      }
    }
  }
  MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (name[0] == 0) throw std::runtime_error("TempDir: rank 0 could not create a temporary directory");
  path_ = name;
}

TempDir::~TempDir() {
  MPI_Barrier(MPI_COMM_WORLD);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

}  // namespace hpdt::test

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] FAILURE %s:%d\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "MPI_Init_thread failed\n");
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  hpdt::set_process_rank(rank);
  hpdt::set_errors_return(MPI_COMM_WORLD);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = local_failed;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !local_failed) std::fprintf(stderr, "a test failed on another rank (see above)\n");
  MPI_Finalize();
  return any_failed;
}
