// The MPI test harness itself, MPI error checking, and a collective parallel-HDF5 round trip: what
// every layer above relies on.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <numeric>

#include "hpdt/core/check_hdf5.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/log.h"
#include "hpdt_test.h"

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

TEST(MpiHarness, RanksAndAllreduce) {
  const int rank = world_rank(), size = world_size();
  EXPECT_EQ(hpdt::process_rank(), rank);
  int one = 1, total = 0;
  HPDT_MPI_CHECK(MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  EXPECT_EQ(total, size);
}

TEST(MpiHarness, ErrorsBecomeExceptionsWithTheRank) {
  // An invalid count returns an error (MPI_ERRORS_RETURN is set by the test main), which the check
  // turns into an hpdt::Error carrying this rank.
  int x = 0;
  try {
    HPDT_MPI_CHECK(MPI_Bcast(&x, -1, MPI_INT, 0, MPI_COMM_WORLD));
    ADD_FAILURE() << "MPI_Bcast with count -1 did not fail";
  } catch (const hpdt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MPI error"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[rank " + std::to_string(world_rank()) + "]"), std::string::npos) << e.what();
  }
}

TEST(ParallelHdf5, CollectiveWriteThenReadOtherRanksRows) {
  hpdt::quiet_hdf5_errors();
  hpdt::test::TempDir dir;
  const std::string path = dir.file("shared.h5");
  const int rank = world_rank(), size = world_size();
  const hsize_t rows = 17, cols = 5;  // odd on purpose
  hid_t fapl = hpdt::h5check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", path);
  hpdt::h5check(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL), "H5Pset_fapl_mpio", path);
  hid_t file = hpdt::h5check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "H5Fcreate", path);
  const hsize_t dims[2] = {rows * hsize_t(size), cols};
  hid_t space = H5Screate_simple(2, dims, nullptr);
  hid_t dset = hpdt::h5check(H5Dcreate2(file, "/x", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "H5Dcreate2", path);
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  hpdt::h5check(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio", path);
  const hsize_t mdims[2] = {rows, cols};
  hid_t mspace = H5Screate_simple(2, mdims, nullptr);
  std::vector<int> mine(rows * cols);
  std::iota(mine.begin(), mine.end(), rank * 1000);
  hsize_t start[2] = {rows * hsize_t(rank), 0};
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, mdims, nullptr);
  hpdt::h5check(H5Dwrite(dset, H5T_NATIVE_INT, mspace, space, dxpl, mine.data()), "H5Dwrite", path);
  H5D_mpio_actual_io_mode_t mode{};
  H5Pget_mpio_actual_io_mode(dxpl, &mode);
  EXPECT_NE(mode, H5D_MPIO_NO_COLLECTIVE) << "HDF5 fell back to independent I/O";
  hpdt::h5check(H5Fflush(file, H5F_SCOPE_GLOBAL), "H5Fflush", path);
  MPI_Barrier(MPI_COMM_WORLD);
  const int peer = (rank + size - 1) % size;
  start[0] = rows * hsize_t(peer);
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, mdims, nullptr);
  std::vector<int> theirs(rows * cols, -1);
  hpdt::h5check(H5Dread(dset, H5T_NATIVE_INT, mspace, space, dxpl, theirs.data()), "H5Dread", path);
  for (size_t i = 0; i < theirs.size(); ++i) ASSERT_EQ(theirs[i], peer * 1000 + int(i));
  H5Pclose(dxpl);
  H5Sclose(mspace);
  H5Sclose(space);
  H5Dclose(dset);
  hpdt::h5check(H5Fclose(file), "H5Fclose", path);
  H5Pclose(fapl);
}

TEST(ParallelHdf5, ErrorsCarryTheHdf5StackAndTheFile) {
  hpdt::quiet_hdf5_errors();
  try {
    hpdt::h5check(H5Fopen("/nonexistent/dir/file.h5", H5F_ACC_RDONLY, H5P_DEFAULT), "open dataset file", "file /nonexistent/dir/file.h5");
    ADD_FAILURE() << "opening a missing file did not fail";
  } catch (const hpdt::Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("HDF5: open dataset file failed"), std::string::npos) << w;
    EXPECT_NE(w.find("(file /nonexistent/dir/file.h5)"), std::string::npos) << w;
    EXPECT_NE(w.find("unable to open file"), std::string::npos) << w;
  }
}

}  // namespace
