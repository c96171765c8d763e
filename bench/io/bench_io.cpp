// hpdt-io-bench: throughput of ShardedReader on a dataset file beside the raw sequential read speed
// of the same file, measured in the same run, with the page cache of the file dropped before each
// measurement (posix_fadvise DONTNEED; the resident fraction is checked with mincore and recorded).
//
//   mpiexec -n P hpdt-io-bench --file big.h5 [--file other.h5] --bytes 1073741824 --local-batch 32
//       --reps 3 --out results/io/run-npP.json
//
// Per file: raw = each rank preads a contiguous 1/P of the first --bytes of the file in 8 MiB blocks;
// reader = ShardedReader over the same number of image bytes, for transfer {collective, independent}
// x order {seq (eval mode: file order), shuffle (train mode: random samples)} [x train+augment with
// --augment]. Reported: median over --reps of aggregate MB/s (all ranks' bytes / slowest rank's
// time): "read" counts the HDF5 read calls only, "pipeline" the whole next() loop (read + u8->f32
// decode + normalise [+ augment], prefetch 2), and samples/s of the pipeline.
#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpdt/core/build_info.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/results.h"
#include "hpdt/core/timer.h"
#include "hpdt/io/dataset.h"
#include "hpdt/io/reader.h"

#include <hdf5.h>

namespace {

using namespace hpdt;
using nlohmann::json;

int g_rank = 0, g_size = 1;

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Fraction of the file's pages in the page cache (mincore over a read-only mapping).
double cached_fraction(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  struct stat st {};
  fstat(fd, &st);
  const size_t len = size_t(st.st_size), page = size_t(sysconf(_SC_PAGESIZE));
  void* p = len ? mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  double frac = -1;
  if (p != MAP_FAILED) {
    std::vector<unsigned char> vec((len + page - 1) / page);
    if (mincore(p, len, vec.data()) == 0) {
      size_t resident = 0;
      for (unsigned char v : vec) resident += v & 1;
      frac = double(resident) / double(vec.size());
    }
    munmap(p, len);
  }
  ::close(fd);
  return frac;
}

// Drops the file's pages from the page cache (rank 0; all ranks share the node here), then
// returns the resident fraction left, as all ranks see it.
bool g_keep_cache = false;
double drop_cache(const std::string& path) {
  double frac = 0;
  if (g_rank == 0 && g_keep_cache) {
    frac = cached_fraction(path);
  } else if (g_rank == 0) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
      fdatasync(fd);
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
    frac = cached_fraction(path);
  }
  HPDT_MPI_CHECK(MPI_Bcast(&frac, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  HPDT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  return frac;
}

double max_over_ranks(double v) {
  double m = 0;
  HPDT_MPI_CHECK(MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return m;
}
int64_t sum_over_ranks(int64_t v) {
  int64_t s = 0;
  HPDT_MPI_CHECK(MPI_Allreduce(&v, &s, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  return s;
}

// Each rank preads its contiguous share of [0, bytes) in 8 MiB blocks. Returns {bytes, seconds}.
std::pair<int64_t, double> raw_read(const std::string& path, int64_t bytes) {
  const int64_t lo = bytes * g_rank / g_size, hi = bytes * (g_rank + 1) / g_size;
  std::vector<char> buf(8 << 20);
  const int fd = ::open(path.c_str(), O_RDONLY);
  HPDT_CHECK(fd >= 0, "cannot open ", path);
  HPDT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  Stopwatch sw;
  int64_t got = 0;
  for (int64_t off = lo; off < hi;) {
    const ssize_t n = pread(fd, buf.data(), size_t(std::min<int64_t>(int64_t(buf.size()), hi - off)), off);
    HPDT_CHECK(n > 0, "pread failed on ", path, " at ", off);
    off += n;
    got += n;
  }
  const double t = sw.elapsed_s();
  ::close(fd);
  return {sum_over_ranks(got), max_over_ranks(t)};
}

// The reader's access pattern without its thread and decode: every step each rank reads its share of
// the global batch (sorted rows merged into runs, one hyperslab union) with one H5Dread, collective
// or independent, timed on the wall clock. Returns {bytes of all ranks, seconds of the slowest rank,
// reads that fell back to independent}.
struct H5Run {
  int64_t bytes = 0, fallbacks = 0;
  double seconds = 0;
};
H5Run hdf5_read(const std::string& path, const io::DatasetInfo& info, int64_t bytes, int64_t local_batch, bool collective,
                bool shuffle, uint64_t seed) {
  const int64_t S = info.sample_bytes(), B = local_batch * g_size;
  const int64_t steps = std::max<int64_t>(1, std::min<int64_t>(bytes / (B * S), info.n / B));
  const auto order = io::ShardedReader::epoch_order(info.n, seed, 0, shuffle);
  std::vector<uint8_t> buf(size_t(local_batch * S));
  HPDT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  Stopwatch sw;
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
  H5Pset_all_coll_metadata_ops(fapl, true);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
  HPDT_CHECK(file >= 0, "H5Fopen failed for ", path);
  const hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);  // as ShardedReader: no chunk cache for raw chunks
  if (!info.compressed) H5Pset_chunk_cache(dapl, 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
  const hid_t dset = H5Dopen2(file, "/images", dapl);
  H5Pclose(dapl);
  const hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
  const hid_t fspace = H5Dget_space(dset);
  const hsize_t mdims[4] = {hsize_t(local_batch), hsize_t(info.c), hsize_t(info.h), hsize_t(info.w)};
  const hid_t mspace = H5Screate_simple(4, mdims, nullptr);
  int64_t fallbacks = 0;
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int64_t> rows(static_cast<size_t>(local_batch));
    for (int64_t i = 0; i < local_batch; ++i) rows[size_t(i)] = order[size_t(s * B + g_rank * local_batch + i)];
    std::sort(rows.begin(), rows.end());
    H5Sselect_none(fspace);
    for (size_t i = 0; i < rows.size();) {
      size_t j = i + 1;
      while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
      const hsize_t start[4] = {hsize_t(rows[i]), 0, 0, 0}, count[4] = {hsize_t(j - i), mdims[1], mdims[2], mdims[3]};
      H5Sselect_hyperslab(fspace, H5S_SELECT_OR, start, nullptr, count, nullptr);
      i = j;
    }
    HPDT_CHECK(H5Dread(dset, H5T_NATIVE_UINT8, mspace, fspace, dxpl, buf.data()) >= 0, "H5Dread failed on ", path);
    H5D_mpio_actual_io_mode_t mode{};
    H5Pget_mpio_actual_io_mode(dxpl, &mode);
    if (collective && mode == H5D_MPIO_NO_COLLECTIVE) ++fallbacks;
  }
  H5Sclose(mspace);
  H5Sclose(fspace);
  H5Pclose(dxpl);
  H5Dclose(dset);
  H5Fclose(file);
  H5Pclose(fapl);
  const double t = sw.elapsed_s();
  H5Run r;
  r.bytes = sum_over_ranks(steps * local_batch * S);
  r.seconds = max_over_ranks(t);
  r.fallbacks = sum_over_ranks(fallbacks);
  return r;
}

struct ReaderRun {
  bool in_memory = false;
  int64_t bytes = 0, samples = 0, fallbacks = 0;
  double wall = 0, read = 0, decode = 0, wait = 0;
};

ReaderRun reader_read(const std::string& path, int64_t bytes, int64_t local_batch, bool collective,
                      io::ReaderMode mode, bool augment, uint64_t seed) {
  io::ReaderOptions opt;
  opt.mode = mode;
  opt.shuffle = true;
  opt.augment = augment;
  opt.collective = collective;
  opt.prefetch = 2;
  HPDT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  Stopwatch sw;  // includes opening the file and the first reads, as a trainer sees them
  io::ShardedReader reader(MPI_COMM_WORLD, path, local_batch * g_size, seed, opt);
  const int64_t per_step = reader.global_batch() * reader.info().sample_bytes();
  const int64_t steps = std::max<int64_t>(1, std::min<int64_t>(bytes / per_step, reader.steps_per_epoch()));
  for (int64_t s = 0; s < steps; ++s) reader.next();
  const double wall = sw.elapsed_s();
  const auto st = reader.stats();
  ReaderRun r;
  r.wall = max_over_ranks(wall);
  r.read = max_over_ranks(st.read_seconds);
  r.decode = max_over_ranks(st.decode_seconds);
  r.wait = max_over_ranks(st.wait_seconds);
  r.bytes = sum_over_ranks(st.bytes_read);
  r.samples = steps * reader.global_batch();
  r.fallbacks = sum_over_ranks(st.independent_fallbacks);
  r.in_memory = reader.in_memory();
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hpdt-io-bench: ShardedReader throughput against the raw read speed of the same file"};
  std::vector<std::string> files;
  std::string out;
  int64_t bytes = int64_t(1) << 30, shuffle_bytes = int64_t(64) << 20, local_batch = 32;
  int reps = 3;
  bool augment = false, keep_cache = false;
  uint64_t seed = 1;
  app.add_option("--file", files, "dataset files (hpdt-prepare-data --synthetic ...)")->required();
  app.add_option("--bytes", bytes, "image bytes per measurement (all ranks together)")->check(CLI::PositiveNumber);
  app.add_option("--shuffle-bytes", shuffle_bytes, "image bytes per shuffled measurement (random access is slow)")
      ->check(CLI::PositiveNumber);
  app.add_option("--local-batch", local_batch, "samples per rank per step")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "repetitions (median reported)")->check(CLI::PositiveNumber);
  app.add_flag("--augment", augment, "also measure train mode with crop+flip augmentation");
  app.add_flag("--keep-cache", keep_cache, "do not drop the page cache (warm: read the file once first)");
  app.add_option("--seed", seed, "shuffle seed");
  app.add_option("--out", out, "JSON output file");
  CLI11_PARSE(app, argc, argv);

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 0;
  try {
    set_errors_return(MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    set_process_rank(g_rank);
    g_keep_cache = keep_cache;
    json doc;
    doc["benchmark"] = "hpdt-io-bench";
    doc["config"] = {{"files", files}, {"bytes", bytes}, {"shuffle_bytes", shuffle_bytes}, {"local_batch", local_batch}, {"reps", reps},
                     {"ranks", g_size}, {"prefetch", 2}, {"page_cache", keep_cache ? "kept (warm)" : "dropped before each measurement"}, {"mpi_thread_multiple", provided == MPI_THREAD_MULTIPLE}};
    doc["machine"] = machine_info();
    doc["build"] = build_info_json();
    doc["load_average_start"] = load_average();
    json rows = json::array();
    if (g_rank == 0)
      std::printf("%-28s %-10s %3s %-8s %-12s %-11s %9s %9s %10s %8s %7s\n", "file", "layout", "np", "kind", "transfer",
                  "order", "read MB/s", "pipe MB/s", "samples/s", "vs raw", "cached");
    for (const std::string& file : files) {
      const io::DatasetInfo info = io::inspect_dataset(file, false);
      const int64_t file_bytes = info.n * info.sample_bytes();
      const int64_t b = std::min(bytes, file_bytes);
      if (keep_cache) raw_read(file, file_bytes);  // warm the cache
      const std::string layout = std::string(io::layout_name(info.layout)) +
                                 (info.layout == io::Layout::chunked ? "/" + std::to_string(info.chunk_samples) : "");
      // Raw sequential read of the same file.
      std::vector<double> raw_mbps, cached;
      for (int r = 0; r < reps; ++r) {
        cached.push_back(drop_cache(file));
        const auto [n, t] = raw_read(file, b);
        raw_mbps.push_back(double(n) / t / 1e6);
      }
      const double raw = median(raw_mbps);
      rows.push_back({{"file", file}, {"layout", layout}, {"np", g_size}, {"kind", "raw"}, {"transfer", "pread"},
                      {"order", "seq"}, {"bytes", b}, {"MBps", raw_mbps}, {"MBps_median", raw},
                      {"cached_fraction_before", cached}});
      if (g_rank == 0)
        std::printf("%-28s %-10s %3d %-8s %-12s %-11s %9.0f %9s %10s %8s %7.2f\n", file.substr(file.rfind('/') + 1).c_str(),
                    layout.c_str(), g_size, "raw", "pread", "seq", raw, "-", "-", "1.00", median(cached));
      // HDF5 reads in the reader's pattern, synchronous, no decode: the "collective reads" of the target.
      for (const bool shuffle : {false, true}) {
        for (const bool collective : {true, false}) {
          std::vector<double> mbps, cached_before;
          int64_t fallbacks = 0;
          for (int r = 0; r < reps; ++r) {
            cached_before.push_back(drop_cache(file));
            const H5Run run = hdf5_read(file, info, shuffle ? std::min(b, shuffle_bytes) : b, local_batch, collective,
                                        shuffle, seed + uint64_t(r));
            mbps.push_back(double(run.bytes) / run.seconds / 1e6);
            fallbacks += run.fallbacks;
          }
          const double m = median(mbps);
          const char* order = shuffle ? "shuffle" : "seq";
          rows.push_back({{"file", file}, {"layout", layout}, {"np", g_size}, {"kind", "hdf5"},
                          {"transfer", collective ? "collective" : "independent"}, {"order", order},
                          {"bytes", shuffle ? std::min(b, shuffle_bytes) : b},
                          {"MBps", mbps}, {"MBps_median", m}, {"vs_raw", m / raw}, {"independent_fallbacks", fallbacks},
                          {"cached_fraction_before", cached_before}});
          if (g_rank == 0)
            std::printf("%-28s %-10s %3d %-8s %-12s %-11s %9.0f %9s %10s %8.2f %7.2f\n", file.substr(file.rfind('/') + 1).c_str(),
                        layout.c_str(), g_size, "hdf5", collective ? "collective" : "independent", order, m, "-", "-", m / raw,
                        median(cached_before));
          std::fflush(stdout);
        }
      }
      // The whole reader: collective shuffled reads on the I/O thread, decode, normalise [, augment], prefetch 2.
      struct ReaderCase {
        bool collective, augment;
      };
      std::vector<ReaderCase> reader_cases = {{true, false}, {false, false}};
      if (augment) reader_cases.push_back({true, true});
      for (const ReaderCase rcase : reader_cases) {
        const bool aug = rcase.augment;
        std::vector<double> read_mbps, pipe_mbps, sps, waitf, cached_before;
        int64_t fallbacks = 0;
        bool in_memory = false;
        for (int r = 0; r < reps; ++r) {
          cached_before.push_back(drop_cache(file));
          const ReaderRun run = reader_read(file, std::min(b, shuffle_bytes), local_batch, rcase.collective, io::ReaderMode::train, aug, seed + uint64_t(r));
          pipe_mbps.push_back(double(run.bytes) / run.wall / 1e6);
          sps.push_back(double(run.samples) / run.wall);
          waitf.push_back(run.wait / run.wall);
          in_memory = run.in_memory;
          fallbacks += run.fallbacks;
        }
        const char* order = aug ? "shuffle+aug" : "shuffle";
        const char* transfer = rcase.collective ? "collective" : "independent";
        rows.push_back({{"file", file}, {"layout", layout}, {"np", g_size}, {"kind", "reader"}, {"transfer", transfer},
                        {"order", order}, {"bytes", std::min(b, shuffle_bytes)}, {"pipeline_MBps", pipe_mbps},
                        {"pipeline_MBps_median", median(pipe_mbps)}, {"samples_per_s", sps},
                        {"samples_per_s_median", median(sps)}, {"wait_fraction", waitf},
                        {"independent_fallbacks", fallbacks}, {"cached_fraction_before", cached_before},
                        {"in_memory", in_memory}});
        if (g_rank == 0)
          std::printf("%-28s %-10s %3d %-8s %-12s %-11s %9s %9.0f %10.0f %8.2f %7.2f\n", file.substr(file.rfind('/') + 1).c_str(),
                      layout.c_str(), g_size, "reader", transfer, order, "-", median(pipe_mbps), median(sps),
                      median(pipe_mbps) / raw, median(cached_before));
        std::fflush(stdout);
      }
    }
    doc["results"] = rows;
    doc["load_average_end"] = load_average();
    if (g_rank == 0 && !out.empty()) write_file_atomic(out, doc.dump(2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpdt-io-bench: error: %s\n", e.what());
    rc = 1;
  }
  if (rc) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  return rc;
}
