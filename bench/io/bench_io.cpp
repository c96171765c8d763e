// hpdt-io-bench: throughput of ShardedReader on a dataset file beside the raw sequential read speed
// of the same file, measured in the same run, with the page cache of the file dropped before each
// measurement (posix_fadvise DONTNEED; the resident fraction is checked with mincore and recorded).
//
//   mpiexec -n P hpdt-io-bench --file big.h5 [--file other.h5] --bytes 1073741824 --local-batch 32
//       --reps 3 --shuffle-block 1 --shuffle-block 32 --out results/io/run-npP.json
//
// Per file: raw = each rank preads a contiguous 1/P of --bytes of the file in 8 MiB blocks (the raw
// row: the first --bytes; before every repetition of every other case, as its "adjacent raw": the
// next --bytes, walking through the file; "vs raw" is the median of the per-repetition ratios);
// hdf5 = the reader's access pattern without its threads and decode (each step each rank's own rows
// as one hyperslab union, one H5Dread), collective or independent, order seq (file order) or each
// --shuffle-block K (K = 1 "shuffle": random samples; K > 1 "blockK": ShardedReader's block order);
// reader = ShardedReader in train mode for each K x transfer {collective, independent} [+ the
// two-phase exchange on ("+a2a", K > 1, np > 1), readahead hints off ("nora"), pooled batch memory
// ("reuse"): --compare-exchange/-readahead/-reuse; window reads of --window-samples S ("+winS", K > 1:
// ReaderOptions::window_batches = S / global batch, measured over --window-bytes)] [+ train+augment
// with --augment]. Per-sample
// shuffles read --shuffle-bytes, block orders --block-bytes (default --bytes). Reported: median over
// --reps of aggregate MB/s (all ranks' bytes / slowest rank's time): "read" counts the HDF5 read calls
// only, "pipeline" the whole reader from construction through the last next() (read [+ exchange] +
// u8->f32 decode + normalise [+ augment] on --decode-threads threads, or with --raw-pixels the gather of the u8
// samples alone, prefetch 2), samples/s of the pipeline, and the
// reader's own seconds (slowest rank) in read, exchange, decode, and waiting in next(); "steady" is the pipeline after
// its first batch (leaves out the start-up: opening, and the first window of window reads, which nothing overlaps),
// with the first batch's latency beside it.
#include <fcntl.h>
#include <hdf5.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpdt/core/build_info.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/cli_checks.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/results.h"
#include "hpdt/core/timer.h"
#include "hpdt/io/dataset.h"
#include "hpdt/io/reader.h"

namespace {

using namespace hpdt;
using nlohmann::json;

int g_rank = 0, g_size = 1;
int g_decode_threads = 1;  // --decode-threads: ReaderOptions::decode_threads of every reader case
bool g_raw_pixels = false;  // --raw-pixels: ReaderOptions::raw_pixels of every reader case (the decode left to the GPU)

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

// Each rank preads its contiguous share of [start, start + bytes) in 8 MiB blocks. Returns {bytes, seconds}.
std::pair<int64_t, double> raw_read(const std::string& path, int64_t bytes, int64_t start = 0) {
  const int64_t lo = start + bytes * g_rank / g_size, hi = start + bytes * (g_rank + 1) / g_size;
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
                bool shuffle, int64_t block, uint64_t seed) {
  const int64_t S = info.sample_bytes(), B = local_batch * g_size;
  const int64_t steps = std::max<int64_t>(1, std::min<int64_t>(bytes / (B * S), info.n / B));
  const auto order = io::ShardedReader::epoch_order(info.n, seed, 0, shuffle, block, B);
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
  int64_t bytes = 0, samples = 0, fallbacks = 0, runs = 0, batches = 0;
  double wall = 0, open = 0, read = 0, exchange = 0, decode = 0, wait = 0, read_cpu = 0, decode_cpu = 0;
  double first = 0;  // construction through the first batch (slowest rank): the reader's start-up
};

ReaderRun reader_read(const std::string& path, int64_t bytes, int64_t local_batch, bool collective, bool exchange,
                      bool readahead, bool reuse, int64_t block, bool augment, uint64_t seed, int64_t window_samples = 0) {
  io::ReaderOptions opt;
  opt.reuse_batch_memory = reuse;
  opt.readahead = readahead;
  opt.mode = io::ReaderMode::train;
  opt.shuffle = true;
  opt.shuffle_block = block;
  opt.exchange = exchange;
  opt.augment = augment;
  opt.collective = collective;
  opt.prefetch = 2;
  opt.decode_threads = g_decode_threads;
  opt.raw_pixels = g_raw_pixels;
  opt.window_batches = std::max<int64_t>(1, window_samples / (local_batch * g_size));
  HPDT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  Stopwatch sw;  // includes opening the file and the first reads, as a trainer sees them
  io::ShardedReader reader(MPI_COMM_WORLD, path, local_batch * g_size, seed, opt);
  const double open = sw.elapsed_s();
  const int64_t per_step = reader.global_batch() * reader.info().sample_bytes();
  const int64_t steps = std::max<int64_t>(1, std::min<int64_t>(bytes / per_step, reader.steps_per_epoch()));
  double first = 0;
  for (int64_t s = 0; s < steps; ++s) {
    reader.next();
    if (s == 0) first = sw.elapsed_s();
  }
  const double wall = sw.elapsed_s();
  const auto st = reader.stats();
  ReaderRun r;
  r.wall = max_over_ranks(wall);
  r.open = max_over_ranks(open);
  r.first = max_over_ranks(first);
  r.read = max_over_ranks(st.read_seconds);
  r.exchange = max_over_ranks(st.exchange_seconds);
  r.decode = max_over_ranks(st.decode_seconds);
  r.wait = max_over_ranks(st.wait_seconds);
  r.read_cpu = max_over_ranks(st.read_cpu_seconds);
  r.decode_cpu = max_over_ranks(st.decode_cpu_seconds);
  r.bytes = sum_over_ranks(st.bytes_read);
  r.runs = sum_over_ranks(st.runs);
  r.batches = st.batches;
  r.samples = steps * reader.global_batch();
  r.fallbacks = sum_over_ranks(st.independent_fallbacks);
  r.in_memory = reader.in_memory();
  return r;
}

// Open MPI's MPI-IO selection from the environment (OMPI_MCA_io, OMPI_MCA_fcoll), as the JSON records it.
std::string mpiio_setting() {
  std::string out;
  for (const char* name : {"OMPI_MCA_io", "OMPI_MCA_fcoll"})
    if (const char* v = std::getenv(name)) out += (out.empty() ? "" : " ") + std::string(name + 9) + "=" + v;
  return out.empty() ? "default" : out;
}

std::string order_name(bool shuffle, int64_t block) {
  return !shuffle ? "seq" : block == 1 ? "shuffle" : "block" + std::to_string(block);
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
  int64_t bytes = int64_t(1) << 30, shuffle_bytes = int64_t(64) << 20, block_bytes = 0, local_batch = 32;
  int64_t window_samples = 0, window_bytes = 0;
  std::vector<int64_t> blocks;
  int reps = 3;
  bool augment = false, keep_cache = false, compare_exchange = false, compare_readahead = false, skip_hdf5 = false,
       compare_reuse = false;
  uint64_t seed = 1;
  app.add_option("--file", files, "dataset files (hpdt-prepare-data --synthetic ...)")->required();
  app.add_option("--bytes", bytes, "image bytes per measurement (all ranks together)")->check(hpdt::cli::positive());
  app.add_option("--shuffle-bytes", shuffle_bytes, "image bytes per shuffled measurement (random access is slow)")
      ->check(hpdt::cli::positive());
  app.add_option("--block-bytes", block_bytes, "image bytes per block-shuffled measurement (default: --bytes)")
      ->check(hpdt::cli::positive());
  app.add_option("--shuffle-block", blocks,
                 "shuffled orders to measure: 1 = per-sample, K > 1 = blocks of K (repeatable; default 1)")
      ->check(hpdt::cli::positive());
  app.add_flag("--compare-exchange", compare_exchange, "block orders: also measure the reader with its two-phase exchange off");
  app.add_flag("--skip-hdf5", skip_hdf5, "measure raw and the reader only");
  app.add_option("--window-samples", window_samples,
                 "block orders: also measure the reader with window reads of this many samples (window_batches = it / "
                 "global batch)")
      ->check(hpdt::cli::positive());
  app.add_option("--window-bytes", window_bytes, "image bytes per window-read measurement (default: --block-bytes)")
      ->check(hpdt::cli::positive());
  app.add_flag("--compare-reuse", compare_reuse, "also measure the collective reader with reuse_batch_memory");
  app.add_flag("--compare-readahead", compare_readahead, "also measure the collective reader with readahead hints off");
  app.add_option("--local-batch", local_batch, "samples per rank per step")->check(hpdt::cli::positive());
  app.add_option("--reps", reps, "repetitions (median reported)")->check(hpdt::cli::positive());
  app.add_flag("--augment", augment, "also measure train mode with crop+flip augmentation");
  app.add_option("--decode-threads", g_decode_threads, "threads that decode each batch (ReaderOptions::decode_threads)")
      ->check(hpdt::cli::positive());
  app.add_flag("--keep-cache", keep_cache, "do not drop the page cache (warm: read the file once first)");
  app.add_flag("--raw-pixels", g_raw_pixels,
               "the readers hand over u8 pixels and crops (ReaderOptions::raw_pixels, hpdt-train's GPU default): their "
               "decode is then the gather of the batch's samples alone");
  app.add_option("--seed", seed, "shuffle seed");
  app.add_option("--out", out, "JSON output file");
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "hpdt-io-bench: MPI_Init_thread failed\n");
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  if (const auto status = hpdt::cli::parse_on_rank(app, argc, argv, g_rank)) {
    MPI_Finalize();
    return *status;
  }
  if (blocks.empty()) blocks = {1};
  if (block_bytes == 0) block_bytes = bytes;
  if (window_bytes == 0) window_bytes = block_bytes;
  int rc = 0;
  try {
    set_errors_return(MPI_COMM_WORLD);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    set_process_rank(g_rank);
    g_keep_cache = keep_cache;
    json doc;
    doc["benchmark"] = "hpdt-io-bench";
    doc["config"] = {{"files", files},
                     {"bytes", bytes},
                     {"shuffle_bytes", shuffle_bytes},
                     {"block_bytes", block_bytes},
                     {"shuffle_blocks", blocks},
                     {"local_batch", local_batch},
                     {"reps", reps},
                     {"decode_threads", g_decode_threads},
                     {"raw_pixels", g_raw_pixels},
                     {"window_samples", window_samples},
                     {"window_bytes", window_bytes},
                     {"ranks", g_size},
                     {"prefetch", 2},
                     {"mpiio", mpiio_setting()},
                     {"page_cache", keep_cache ? "kept (warm)" : "dropped before each measurement"},
                     {"mpi_thread_multiple", provided == MPI_THREAD_MULTIPLE}};
    doc["machine"] = machine_info();
    doc["build"] = build_info_json();
    doc["load_average_start"] = load_average();
    json rows = json::array();
    if (g_rank == 0)
      std::printf("%-28s %-10s %3s %-8s %-16s %-11s %9s %9s %10s %8s %7s\n", "file", "layout", "np", "kind", "transfer",
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
        std::printf("%-28s %-10s %3d %-8s %-16s %-11s %9.0f %9s %10s %8s %7.2f\n", file.substr(file.rfind('/') + 1).c_str(),
                    layout.c_str(), g_size, "raw", "pread", "seq", raw, "-", "-", "1.00", median(cached));
      // The disk's speed drifts (other jobs share it): every repetition of every case below is paired
      // with a raw read taken just before it, and "vs raw" is the median of the per-repetition ratios.
      // Successive adjacent raw reads walk through the whole file (the shuffled cases read all of it;
      // always re-reading its first bytes could favour raw through caches below the guest's).
      int64_t raw_cursor = 0;
      struct stat fst {};
      ::stat(file.c_str(), &fst);
      const int64_t file_size = int64_t(fst.st_size);
      auto adjacent_raw = [&] {
        if (raw_cursor + b > file_size) raw_cursor = 0;
        drop_cache(file);
        const auto [n, t] = raw_read(file, b, raw_cursor);
        raw_cursor += b;
        return double(n) / t / 1e6;
      };
      // HDF5 reads in the reader's pattern, synchronous, no decode: the "collective reads" of the target.
      // {shuffle, block}: seq, then every --shuffle-block.
      std::vector<std::pair<bool, int64_t>> orders = {{false, 1}};
      for (const int64_t k : blocks) orders.push_back({true, k});
      auto measured_bytes = [&](bool shuffle, int64_t block) {
        return !shuffle ? b : block == 1 ? std::min(b, shuffle_bytes) : std::min(file_bytes, block_bytes);
      };
      for (const auto& [shuffle, block] : orders) {
        if (skip_hdf5) break;
        for (const bool collective : {true, false}) {
          std::vector<double> mbps, cached_before, raws, ratios;
          int64_t fallbacks = 0;
          const int64_t mb = measured_bytes(shuffle, block);
          for (int r = 0; r < reps; ++r) {
            raws.push_back(adjacent_raw());
            cached_before.push_back(drop_cache(file));
            const H5Run run = hdf5_read(file, info, mb, local_batch, collective, shuffle, block, seed + uint64_t(r));
            mbps.push_back(double(run.bytes) / run.seconds / 1e6);
            ratios.push_back(mbps.back() / raws.back());
            fallbacks += run.fallbacks;
          }
          const double m = median(mbps), ratio = median(ratios);
          const std::string order = order_name(shuffle, block);
          rows.push_back({{"file", file}, {"layout", layout}, {"np", g_size}, {"kind", "hdf5"},
                          {"transfer", collective ? "collective" : "independent"}, {"order", order},
                          {"shuffle_block", block}, {"bytes", mb},
                          {"MBps", mbps}, {"MBps_median", m}, {"raw_MBps_adjacent", raws}, {"vs_raw_each", ratios},
                          {"vs_raw", ratio}, {"independent_fallbacks", fallbacks},
                          {"cached_fraction_before", cached_before}});
          if (g_rank == 0)
            std::printf("%-28s %-10s %3d %-8s %-16s %-11s %9.0f %9s %10s %8.2f %7.2f\n", file.substr(file.rfind('/') + 1).c_str(),
                        layout.c_str(), g_size, "hdf5", collective ? "collective" : "independent", order.c_str(), m, "-", "-",
                        ratio, median(cached_before));
          std::fflush(stdout);
        }
      }
      // The whole reader: reads on the I/O thread [+ two-phase exchange], decode, normalise [, augment], prefetch 2.
      struct ReaderCase {
        int64_t block;
        bool collective, exchange, readahead, reuse, augment;
        int64_t window_samples = 0;  // > 0: window reads (ReaderOptions::window_batches)
      };
      std::vector<ReaderCase> reader_cases;
      for (const int64_t k : blocks) {  // {block, collective, exchange, readahead, reuse, augment}
        reader_cases.push_back({k, true, false, true, false, false});
        reader_cases.push_back({k, false, false, true, false, false});
        if (k > 1 && g_size > 1 && compare_exchange) {
          reader_cases.push_back({k, true, true, true, false, false});
          reader_cases.push_back({k, false, true, true, false, false});
        }
        if (compare_readahead) reader_cases.push_back({k, true, false, false, false, false});
        if (compare_reuse) reader_cases.push_back({k, true, false, true, true, false});
        if (k > 1 && window_samples > 0) {
          reader_cases.push_back({k, true, false, true, false, false, window_samples});
          reader_cases.push_back({k, false, false, true, false, false, window_samples});
        }
      }
      if (augment) reader_cases.push_back({1, true, false, true, false, true});
      for (const ReaderCase rcase : reader_cases) {
        const bool aug = rcase.augment;
        std::vector<double> pipe_mbps, sps, waitf, readf, xchgf, decodef, opens, runs, cached_before, raws, ratios;
        std::vector<double> steady_mbps, steady_ratios, firsts;  // after the first batch: the reader's start-up left out
        std::vector<double> read_ms, read_cpu_ms, decode_ms, decode_cpu_ms;  // per batch, slowest rank
        int64_t fallbacks = 0;
        bool in_memory = false;
        const int64_t mb = rcase.window_samples > 0 ? std::min(file_bytes, window_bytes) : measured_bytes(true, rcase.block);
        for (int r = 0; r < reps; ++r) {
          raws.push_back(adjacent_raw());
          cached_before.push_back(drop_cache(file));
          const ReaderRun run = reader_read(file, mb, local_batch, rcase.collective, rcase.exchange, rcase.readahead,
                                            rcase.reuse, rcase.block, aug, seed + uint64_t(r), rcase.window_samples);
          pipe_mbps.push_back(double(run.bytes) / run.wall / 1e6);
          ratios.push_back(pipe_mbps.back() / raws.back());
          const double after_first = double(run.bytes) * double(run.batches - 1) / double(std::max<int64_t>(run.batches, 1));
          steady_mbps.push_back(run.batches > 1 ? after_first / (run.wall - run.first) / 1e6 : pipe_mbps.back());
          steady_ratios.push_back(steady_mbps.back() / raws.back());
          firsts.push_back(run.first);
          sps.push_back(double(run.samples) / run.wall);
          waitf.push_back(run.wait / run.wall);
          readf.push_back(run.read / run.wall);
          xchgf.push_back(run.exchange / run.wall);
          decodef.push_back(run.decode / run.wall);
          opens.push_back(run.open);
          runs.push_back(double(run.runs) / double(std::max<int64_t>(run.batches, 1)));
          const double nb = double(std::max<int64_t>(run.batches, 1));
          read_ms.push_back(run.read / nb * 1e3);
          read_cpu_ms.push_back(run.read_cpu / nb * 1e3);
          decode_ms.push_back(run.decode / nb * 1e3);
          decode_cpu_ms.push_back(run.decode_cpu / nb * 1e3);
          in_memory = run.in_memory;
          fallbacks += run.fallbacks;
        }
        const std::string order = order_name(true, rcase.block) + (aug ? "+aug" : "");
        // Two-phase only where the reader uses it: block order, several ranks, read from the file.
        const bool two_phase = rcase.exchange && rcase.block > 1 && g_size > 1 && !in_memory;
        const bool windowed = rcase.window_samples > 0 && !in_memory;
        const std::string transfer = std::string(rcase.collective ? "collective" : "independent") + (two_phase ? "+a2a" : "") +
                                     (windowed ? "+win" + std::to_string(rcase.window_samples) : "") +
                                     (rcase.readahead ? "" : " nora") + (rcase.reuse ? " reuse" : "");
        rows.push_back({{"file", file}, {"layout", layout}, {"np", g_size}, {"kind", "reader"}, {"transfer", transfer},
                        {"order", order}, {"shuffle_block", rcase.block}, {"exchange", two_phase},
                        {"window_samples", windowed ? rcase.window_samples : 0},
                        {"readahead", rcase.readahead}, {"reuse_batch_memory", rcase.reuse}, {"bytes", mb},
                        {"pipeline_MBps", pipe_mbps}, {"pipeline_MBps_median", median(pipe_mbps)},
                        {"raw_MBps_adjacent", raws}, {"vs_raw_each", ratios}, {"vs_raw", median(ratios)},
                        {"steady_MBps", steady_mbps}, {"steady_MBps_median", median(steady_mbps)},
                        {"steady_vs_raw_each", steady_ratios}, {"steady_vs_raw", median(steady_ratios)},
                        {"first_batch_seconds", firsts},
                        {"samples_per_s", sps}, {"samples_per_s_median", median(sps)}, {"wait_fraction", waitf},
                        {"read_fraction", readf}, {"exchange_fraction", xchgf}, {"decode_fraction", decodef},
                        {"open_seconds", opens}, {"runs_per_batch_all_ranks", runs},
                        {"per_batch_ms", {{"read", read_ms}, {"read_cpu", read_cpu_ms}, {"decode", decode_ms}, {"decode_cpu", decode_cpu_ms}}},
                        {"independent_fallbacks", fallbacks}, {"cached_fraction_before", cached_before},
                        {"in_memory", in_memory}});
        if (g_rank == 0)
          std::printf("%-28s %-10s %3d %-8s %-16s %-11s %9s %9.0f %10.0f %8.2f %7.2f  steady %.0f MB/s (%.2f), first batch %.2f s | frac read %.2f xchg %.2f decode %.2f wait %.2f | runs %.1f | ms/batch read %.1f (cpu %.1f) decode %.1f (cpu %.1f)\n",
                      file.substr(file.rfind('/') + 1).c_str(), layout.c_str(), g_size, "reader", transfer.c_str(), order.c_str(),
                      "-", median(pipe_mbps), median(sps), median(ratios), median(cached_before), median(steady_mbps),
                      median(steady_ratios), median(firsts), median(readf),
                      median(xchgf), median(decodef), median(waitf), median(runs), median(read_ms), median(read_cpu_ms),
                      median(decode_ms), median(decode_cpu_ms));
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
