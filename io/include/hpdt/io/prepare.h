// Sources of dataset files: Fashion-MNIST from its IDX files (Debian's dataset-fashion-mnist), and
// synthetic data of any shape for I/O and scaling benchmarks.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hpdt/io/dataset.h"

namespace hpdt::io {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// An IDX file read through zlib (gzip or plain). Throws hpdt::Error naming the file for a missing
// file, a wrong magic number, a truncated or corrupt gzip stream, or trailing bytes.
struct IdxImages {
  int64_t n = 0, h = 0, w = 0;
  std::vector<uint8_t> pixels;  // n*h*w
};
IdxImages read_idx_images(const std::string& path);
std::vector<int32_t> read_idx_labels(const std::string& path);
// "<file name> crc32=<8 hex> bytes=<n>" of the file's bytes as stored (CRC-32 from zlib).
std::string file_checksum(const std::string& path);

std::vector<std::string> fashion_mnist_class_names();

// Converts one split ("train" or "test") of Fashion-MNIST in `source_dir` into `out_path` (written
// collectively over `comm`, temp name + rename). All ranks read and validate the IDX files first, so
// bad input fails everywhere before anything is created.
DatasetInfo convert_fashion_mnist(MPI_Comm comm, const std::string& source_dir, const std::string& split,
                                  const std::string& out_path, const WriteOptions& options = {});

struct PreparedPaths {
  std::string train, test;
};
// The trainer's first-use path: makes sure `cache_dir`/fashion-mnist-{train,test}.h5 exist and are
// valid hpdt datasets; when not, rank 0 converts them (serially, temp name + rename) while the other
// ranks wait at a barrier. A failure on rank 0 is raised on every rank. Collective over `comm`; call
// it before creating any ShardedReader.
PreparedPaths prepare_fashion_mnist(MPI_Comm comm, const std::string& cache_dir,
                                    const std::string& source_dir = kFashionMnistDir);

// Synthetic samples: pixel bytes from Philox4x32 keyed by (seed, sample index), labels uniform in
// [0, classes). Deterministic for a seed, whatever the rank count.
SampleFill synthetic_fill(int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed);
DatasetSpec synthetic_spec(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed);

}  // namespace hpdt::io
