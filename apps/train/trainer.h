// The training run behind hpdt-train (main.cpp only parses options and handles errors).
#pragma once

#include <stdexcept>

#include "options.h"

namespace hpdt::train {

// A problem with the command line or the input files that every rank detects the same way: reported
// once by rank 0, exit code 2, no MPI_Abort.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs the whole training; returns the process exit code (0, or kRequeueExitCode when preempted).
int run_training(const TrainOptions& options);

}  // namespace hpdt::train
