// hpdt-smoke: proves that this machine can run hpdt: MPI across ranks, a collective parallel-HDF5
// write and read of one shared file, and (when a GPU is usable) the CUDA kernels against the CPU ones.
//
//   mpiexec -n 2 hpdt-smoke [--dir DIR] [--log-level info]
//
// Exit code 0 when every check passed; 1 with a message naming the failed check otherwise.
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "hpdt/core/build_info.h"
#include "hpdt/core/check_hdf5.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/cli_checks.h"
#include "hpdt/core/log.h"
#include "hpdt/core/runtime.h"
#include "hpdt/core/tensor.h"
#include "hpdt/kernels/elementwise.h"
#include "hpdt/kernels/reduce.h"

namespace {

using namespace hpdt;

// Every rank contributes rank+1; the sum is p(p+1)/2 on every rank.
void check_mpi(MPI_Comm comm, int rank, int size) {
  int value = rank + 1, total = 0;
  HPDT_MPI_CHECK(MPI_Allreduce(&value, &total, 1, MPI_INT, MPI_SUM, comm));
  HPDT_CHECK(total == size * (size + 1) / 2, "MPI_Allreduce gave ", total, ", expected ", size * (size + 1) / 2);
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  HPDT_MPI_CHECK(MPI_Get_processor_name(host, &len));
  std::vector<char> hosts(size_t(size) * MPI_MAX_PROCESSOR_NAME);
  HPDT_MPI_CHECK(MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, comm));
  if (rank == 0) {
    std::string list;
    for (int r = 0; r < size; ++r) list += std::string(r ? ", " : "") + &hosts[size_t(r) * MPI_MAX_PROCESSOR_NAME];
    std::printf("MPI     ok: %d rank(s) on %s\n", size, list.c_str());
  }
}

// Each rank writes its rows of a shared [rows*p x 64] float dataset collectively, then reads back the
// rows of the next rank (so the data must have travelled through the file).
void check_hdf5(MPI_Comm comm, int rank, int size, const std::string& dir) {
  quiet_hdf5_errors();
  const std::string path = dir + "/hpdt-smoke.h5";
  constexpr hsize_t kRows = 32, kCols = 64;
  const hid_t fapl = h5check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", path);
  h5check(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL), "H5Pset_fapl_mpio", path);
  h5check(H5Pset_all_coll_metadata_ops(fapl, true), "H5Pset_all_coll_metadata_ops", path);
  h5check(H5Pset_coll_metadata_write(fapl, true), "H5Pset_coll_metadata_write", path);
  const hid_t file = h5check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "H5Fcreate", path);
  const hsize_t dims[2] = {kRows * hsize_t(size), kCols};
  const hid_t space = h5check(H5Screate_simple(2, dims, nullptr), "H5Screate_simple", path);
  const hid_t dset = h5check(H5Dcreate2(file, "/data", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                             "H5Dcreate2", path + ":/data");
  const hid_t dxpl = h5check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", path);
  h5check(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio", path);

  auto select_rows = [&](int owner) {
    const hsize_t start[2] = {kRows * hsize_t(owner), 0}, count[2] = {kRows, kCols};
    h5check(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr), "H5Sselect_hyperslab", path);
  };
  const hsize_t mdims[2] = {kRows, kCols};
  const hid_t mspace = h5check(H5Screate_simple(2, mdims, nullptr), "H5Screate_simple", path);
  std::vector<float> rows(kRows * kCols);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(rank * 100000 + int(i));
  select_rows(rank);
  h5check(H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace, space, dxpl, rows.data()), "H5Dwrite", path + ":/data");
  H5D_mpio_actual_io_mode_t mode{};
  h5check(H5Pget_mpio_actual_io_mode(dxpl, &mode), "H5Pget_mpio_actual_io_mode", path);
  const bool collective = mode != H5D_MPIO_NO_COLLECTIVE;
  h5check(H5Fflush(file, H5F_SCOPE_GLOBAL), "H5Fflush", path);
  HPDT_MPI_CHECK(MPI_Barrier(comm));

  const int peer = (rank + 1) % size;
  select_rows(peer);
  std::vector<float> back(rows.size(), -1.0f);
  h5check(H5Dread(dset, H5T_NATIVE_FLOAT, mspace, space, dxpl, back.data()), "H5Dread", path + ":/data");
  for (size_t i = 0; i < back.size(); ++i)
    HPDT_CHECK(back[i] == float(peer * 100000 + int(i)), "HDF5 read back ", back[i], " at element ", i, " of rank ",
               peer, "'s rows, expected ", float(peer * 100000 + int(i)));
  for (hid_t h : {dxpl, fapl}) H5Pclose(h);
  H5Sclose(mspace);
  H5Sclose(space);
  H5Dclose(dset);
  h5check(H5Fclose(file), "H5Fclose", path);
  HPDT_MPI_CHECK(MPI_Barrier(comm));
  if (rank == 0) {
    std::filesystem::remove(path);
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    std::printf("HDF5    ok: %u.%u.%u parallel, shared file written and read by %d rank(s), %s transfer\n", maj, min,
                rel, size, collective ? "collective" : "independent (HDF5 fell back)");
  }
}

// fill_uniform, axpy, cast and sum on the GPU against the CPU oracle.
void check_cuda(int rank, int local_rank) {
  if (!cuda_available()) {
    if (rank == 0) std::printf("CUDA    skipped: %s\n", cuda_unavailable_reason().c_str());
    return;
  }
  const int device = local_rank % cuda_device_count();
  cuda_set_device(device);
  const Stream gpu = Stream::create_cuda(device);
  const Stream cpu;
  const int64_t n = 1000003;  // odd on purpose
  Tensor xc = Tensor::empty({n}, DType::f32), yc = Tensor::empty({n}, DType::f32);
  kernels::fill_uniform(xc, -1, 1, 7, 0, cpu);
  kernels::fill_uniform(yc, -1, 1, 7, uint64_t(n), cpu);
  Tensor xg = xc.to(Device::cuda(device), gpu), yg = yc.to(Device::cuda(device), gpu);
  kernels::axpy(0.5f, xc, yc, cpu);
  kernels::axpy(0.5f, xg, yg, gpu);
  Tensor back = yg.to(Device::cpu(), gpu);
  gpu.synchronize();
  for (int64_t i = 0; i < n; ++i)
    HPDT_CHECK(back.data<float>()[i] == yc.data<float>()[i], "CUDA axpy differs from the CPU at element ", i);
  Tensor sc = Tensor::empty({1}, DType::f32), sg = Tensor::empty({1}, DType::f32, Device::cuda(device));
  kernels::sum(yc, sc, cpu);
  kernels::sum(yg, sg, gpu);
  Tensor sb = sg.to(Device::cpu(), gpu);
  gpu.synchronize();
  const float a = sc.data<float>()[0], b = sb.data<float>()[0];
  HPDT_CHECK(std::fabs(a - b) <= 1e-3f * (1.0f + std::fabs(a)), "CUDA sum ", b, " differs from the CPU sum ", a);
  std::printf("CUDA    ok: rank %d on GPU %d (%s), kernels agree with the CPU\n", rank, device, cuda_device_name(device).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hpdt-smoke: check MPI, parallel HDF5 and CUDA on this machine"};
  std::string dir = std::filesystem::temp_directory_path().string();
  std::string level = "info";
  app.add_option("--dir", dir, "directory for the shared HDF5 test file (a shared file system for multi-node runs)")
      ->check(CLI::ExistingDirectory);  // (checked on every rank: one message from rank 0, a clean exit)
  app.add_option("--log-level", level, "trace|debug|info|warn|error|off");
  // A line at a time, so that a job log shows how far a rank got if it dies (a file is block-buffered otherwise).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "hpdt-smoke: MPI_Init_thread failed\n");
    return 1;
  }
  int rank = 0, size = 1, local_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);  // (MPI's default handler: an error here ends the job)
  if (const auto status = hpdt::cli::parse_on_rank(app, argc, argv, rank)) {
    MPI_Finalize();
    return *status;
  }
  int rc = 0;
  try {
    set_log_level(parse_log_level(level));
    set_errors_return(MPI_COMM_WORLD);
    HPDT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    set_process_rank(rank);
    MPI_Comm local;
    HPDT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    HPDT_MPI_CHECK(MPI_Comm_rank(local, &local_rank));
    HPDT_MPI_CHECK(MPI_Comm_free(&local));
    if (rank == 0) std::printf("hpdt %s (%s)\n", build_info().version, build_info().git_commit);
    check_mpi(MPI_COMM_WORLD, rank, size);
    check_hdf5(MPI_COMM_WORLD, rank, size, dir);
    check_cuda(rank, local_rank);
    if (rank == 0) std::printf("hpdt-smoke: all checks passed\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpdt-smoke: FAILED: %s\n", e.what());
    rc = 1;
  }
  if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);  // the other ranks may be waiting in a collective
  MPI_Finalize();
  return rc;
}
