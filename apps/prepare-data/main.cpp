// hpdt-prepare-data: writes hpdt dataset files (HDF5, see docs/io.md).
//
//   hpdt-prepare-data --out DIR                     Fashion-MNIST train + test -> DIR/fashion-mnist-{train,test}.h5
//   hpdt-prepare-data --synthetic N --shape C,H,W --classes K --seed S --out FILE.h5
//   options: --layout contiguous|chunked  --chunk SAMPLES  --compress 0-9  --source DIR (IDX files)
//
// Under mpirun every rank writes its slice collectively. Exit 0 on success; on bad input a message
// naming the file or flag, exit 1, and no output file (existing outputs are left as they were).
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "hpdt/core/check_mpi.h"
#include "hpdt/core/cli_checks.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/timer.h"
#include "hpdt/io/dataset.h"
#include "hpdt/io/prepare.h"

namespace {

using namespace hpdt;

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> dims;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(part, &used);
      if (used != part.size() || v <= 0) throw std::invalid_argument(part);
      dims.push_back(v);
    } catch (const std::exception&) {
      throw Error("'" + text + "' is not a shape C,H,W of positive integers", "--shape");
    }
  }
  if (dims.size() != 3) throw Error("'" + text + "' is not a shape C,H,W (three numbers)", "--shape");
  return dims;
}

void print_info(const io::DatasetInfo& info, double seconds, int ranks) {
  std::printf("wrote %s: %lld samples of %lldx%lldx%lld u8, %lld classes, %s%s, %.1f MB in %.2f s on %d rank(s)\n",
              info.path.c_str(), (long long)info.n, (long long)info.c, (long long)info.h, (long long)info.w,
              (long long)info.num_classes, io::layout_name(info.layout),
              info.layout == io::Layout::chunked
                  ? (" (" + std::to_string(info.chunk_samples) + " samples/chunk" + (info.compressed ? ", deflate" : "") + ")").c_str()
                  : "",
              double(info.file_payload_bytes()) / 1e6, seconds, ranks);
  std::printf("  mean");
  for (float m : info.mean) std::printf(" %.4f", m);
  std::printf("  std");
  for (float s : info.std) std::printf(" %.4f", s);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hpdt-prepare-data: write hpdt dataset files (HDF5): Fashion-MNIST or synthetic"};
  std::string out, source = io::kFashionMnistDir, shape_text = "3,224,224", layout_text = "contiguous", level = "info";
  int64_t synthetic = 0, classes = 1000, chunk = 0;
  uint64_t seed = 1;
  int compress = 0;
  app.add_option("--out", out, "output directory (Fashion-MNIST) or file (--synthetic)")->required();
  app.add_option("--source", source, "directory with the Fashion-MNIST IDX .gz files");
  app.add_option("--synthetic", synthetic, "write N synthetic samples instead of Fashion-MNIST")
      ->check(hpdt::cli::positive());
  app.add_option("--shape", shape_text, "synthetic sample shape C,H,W");
  app.add_option("--classes", classes, "synthetic number of classes")->check(hpdt::cli::positive());
  app.add_option("--seed", seed, "synthetic data seed");
  app.add_option("--layout", layout_text, "contiguous (default; fastest for shuffled reads) | chunked (along N)");
  app.add_option("--chunk", chunk, "samples per chunk (chunked layout; default about 1 MiB)")
      ->check(hpdt::cli::non_negative());
  app.add_option("--compress", compress, "deflate level 1-9 (chunked only; slower for parallel reads), 0 = none")
      ->check(hpdt::cli::in_range(0, 9));
  app.add_option("--log-level", level, "trace|debug|info|warn|error|off");
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "hpdt-prepare-data: MPI_Init_thread failed\n");
    return 1;
  }
  int rank = 0, size = 1, rc = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);  // (MPI's default handler: an error here ends the job)
  if (const auto status = hpdt::cli::parse_on_rank(app, argc, argv, rank)) {
    MPI_Finalize();
    return *status;
  }
  try {
    set_log_level(parse_log_level(level));
    set_errors_return(MPI_COMM_WORLD);
    HPDT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    set_process_rank(rank);
    io::WriteOptions options;
    options.layout = io::parse_layout(layout_text);
    options.chunk_samples = chunk;
    options.deflate_level = compress;
    if (chunk > 0 && options.layout != io::Layout::chunked)
      throw Error("--chunk needs --layout chunked", "--chunk");
    if (compress > 0 && options.layout != io::Layout::chunked)
      throw Error("compression needs --layout chunked", "--compress");
    Stopwatch sw;
    if (synthetic > 0) {
      const auto dims = parse_shape(shape_text);
      const auto spec = io::synthetic_spec(synthetic, dims[0], dims[1], dims[2], classes, seed);
      const auto info = io::write_dataset(MPI_COMM_WORLD, out, spec,
                                          io::synthetic_fill(dims[0], dims[1], dims[2], classes, seed), options);
      if (rank == 0) print_info(info, sw.elapsed_s(), size);
    } else {
      for (const char* split : {"train", "test"}) {
        sw.restart();
        const std::string path = out + "/fashion-mnist-" + split + ".h5";
        const auto info = io::convert_fashion_mnist(MPI_COMM_WORLD, source, split, path, options);
        if (rank == 0) print_info(info, sw.elapsed_s(), size);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hpdt-prepare-data: error: %s\n", e.what());
    rc = 1;
  }
  // Errors above are raised on every rank together (inputs are validated everywhere before writing),
  // so a plain exit is safe; MPI_Abort would leave nothing better behind.
  MPI_Finalize();
  return rc;
}
