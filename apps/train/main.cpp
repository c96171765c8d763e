// hpdt-train: data-parallel training of ResNet and ViT across MPI ranks (mpirun, srun --mpi=pmix or a
// PBS mpiexec). Every rank holds the whole model; each step every rank trains on its share of the
// global batch (ShardedReader), gradients are averaged bucket by bucket during backward (comm::GradientSync
// over comm's all-reduce family), the optimizer runs identically everywhere.
//
// Exit codes: 0 done; 1 runtime error; 2 bad command line or input; 75 preempted (SIGTERM/SIGUSR1):
// a checkpoint was written, run again with --resume (the job scripts requeue on 75).
#include <mpi.h>
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "options.h"
#include "preemption.h"
#include "trainer.h"

int main(int argc, char** argv) {
  // Open MPI's ompio aggregates the reader's collective reads through a few ranks ("vulcan"), which
  // only copies bytes every rank reads as long runs anyway; "individual" keeps the reads collective
  // and let each rank read its own (0.85-0.96 of raw at np 4 against 0.41-0.45, docs/io.md). A
  // default only: an fcoll chosen by the user (environment or --mca) wins; other MPIs ignore it.
  setenv("OMPI_MCA_fcoll", "individual", /*overwrite=*/0);
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "hpdt-train: MPI_Init_thread failed\n");
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  hpdt::set_process_rank(rank);
  int code = 0;
  try {
    std::string help;
    std::optional<hpdt::train::TrainOptions> options;
    try {
      options = hpdt::train::parse_train_options(argc, argv, &help);
    } catch (const hpdt::Error& e) {
      throw hpdt::train::UsageError(e.message());
    }
    if (!options) {
      if (rank == 0) std::printf("%s", help.c_str());
    } else {
      HPDT_CHECK(provided >= MPI_THREAD_MULTIPLE, "hpdt-train needs an MPI with MPI_THREAD_MULTIPLE (got level ",
                 provided, "); the gradient buckets are reduced on a comm thread");
      hpdt::train::install_preemption_handlers();
      code = hpdt::train::run_training(*options);
    }
  } catch (const hpdt::train::UsageError& e) {
    // Detected identically on every rank (options, data files): one message, a clean exit.
    if (rank == 0) std::fprintf(stderr, "hpdt-train: error: %s\n", e.what());
    code = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpdt-train: rank %d: error: %s\n", rank, e.what());
    std::fflush(stderr);
    // Other ranks may be inside a collective waiting for this one: end the job instead of hanging it.
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  MPI_Finalize();
  return code;
}
