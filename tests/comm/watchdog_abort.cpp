// The watchdog's default action, end to end: rank 1 skips an all-reduce, rank 0's watchdog prints the
// operation, bucket and missing rank and aborts the whole job (ctest checks the message; no hang).
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "hpdt/comm/allreduce.h"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  hpdt::comm::CommunicatorOptions o;
  o.watchdog.timeout_s = 1.0;  // action: abort (the default)
  hpdt::comm::Communicator comm(MPI_COMM_WORLD, o);
  std::vector<float> x(8, 1.0f);
  hpdt::comm::AllreduceOptions ao;
  ao.bucket = 3;
  if (comm.rank() != 1)
    hpdt::comm::allreduce(comm, x.data(), x.data(), x.size(), hpdt::DType::f32, hpdt::comm::ReduceOp::sum,
                          hpdt::comm::Algorithm::ring, ao);
  MPI_Barrier(MPI_COMM_WORLD);
  std::printf("not aborted: the watchdog did not fire\n");
  MPI_Finalize();
  return 0;
}
