// Dataset sources: Fashion-MNIST IDX files through zlib, and synthetic Philox samples.
#include "hpdt/io/prepare.h"

#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "h5.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/core/philox.h"

namespace hpdt::io {

namespace fs = std::filesystem;

namespace {

// A gzip (or plain) file read through zlib, with every short read turned into an error naming it.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    if (!fs::exists(path)) throw Error("IDX file does not exist", path);
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) throw Error(std::string("cannot open: ") + std::strerror(errno), path);
  }
  ~GzFile() {
    if (f_) gzclose_r(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  void read(void* dst, size_t bytes, const char* what) {
    auto* p = static_cast<unsigned char*>(dst);
    while (bytes > 0) {
      const unsigned step = unsigned(std::min<size_t>(bytes, 1u << 30));
      const int got = gzread(f_, p, step);
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(f_, &code);
        throw Error(std::string("corrupt or truncated gzip data while reading ") + what + " (" + msg + ")", path_);
      }
      if (got == 0)
        throw Error(std::string("file ends early while reading ") + what + " (truncated download or gzip?)", path_);
      p += got;
      bytes -= size_t(got);
    }
  }
  uint32_t read_be32(const char* what) {
    unsigned char b[4];
    read(b, 4, what);
    return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
  }
  // The stream must end here, and its gzip trailer (CRC, length) must check out.
  void expect_end() {
    unsigned char extra;
    const int got = gzread(f_, &extra, 1);
    if (got > 0) throw Error("unexpected bytes after the IDX data (wrong header counts?)", path_);
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f_, &code);
      throw Error(std::string("corrupt or truncated gzip data at the end (") + msg + ")", path_);
    }
    const int rc = gzclose_r(f_);
    f_ = nullptr;
    if (rc != Z_OK) throw Error("gzip stream is truncated or corrupt (gzclose: " + std::to_string(rc) + ")", path_);
  }

 private:
  std::string path_;
  gzFile f_ = nullptr;
};

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  GzFile f(path);
  const uint32_t magic = f.read_be32("the magic number");
  if (magic != kIdxImagesMagic)
    throw Error("wrong magic number 0x" + hex32(magic) + " for an IDX image file (expected 0x" + hex32(kIdxImagesMagic) +
                    ")",
                path);
  IdxImages out;
  out.n = f.read_be32("the image count");
  out.h = f.read_be32("the row count");
  out.w = f.read_be32("the column count");
  if (out.n == 0 || out.h == 0 || out.w == 0 || out.h > 65536 || out.w > 65536)
    throw Error("implausible IDX image header " + std::to_string(out.n) + "x" + std::to_string(out.h) + "x" +
                    std::to_string(out.w),
                path);
  out.pixels.resize(size_t(out.n * out.h * out.w));
  f.read(out.pixels.data(), out.pixels.size(), "the pixels");
  f.expect_end();
  return out;
}

std::vector<int32_t> read_idx_labels(const std::string& path) {
  GzFile f(path);
  const uint32_t magic = f.read_be32("the magic number");
  if (magic != kIdxLabelsMagic)
    throw Error("wrong magic number 0x" + hex32(magic) + " for an IDX label file (expected 0x" + hex32(kIdxLabelsMagic) +
                    ")",
                path);
  const uint32_t n = f.read_be32("the label count");
  if (n == 0) throw Error("IDX label file holds zero labels", path);
  std::vector<uint8_t> bytes(n);
  f.read(bytes.data(), n, "the labels");
  f.expect_end();
  return std::vector<int32_t>(bytes.begin(), bytes.end());
}

std::string file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open for checksum", path);
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    const auto got = in.gcount();
    if (got <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), uInt(got));
    total += uint64_t(got);
  }
  return fs::path(path).filename().string() + " crc32=" + hex32(uint32_t(crc)) + " bytes=" + std::to_string(total);
}

std::vector<std::string> fashion_mnist_class_names() {
  return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
}

DatasetInfo convert_fashion_mnist(MPI_Comm comm, const std::string& source_dir, const std::string& split,
                                  const std::string& out_path, const WriteOptions& options) {
  HPDT_CHECK(split == "train" || split == "test", "Fashion-MNIST split must be train or test, got '", split, "'");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string ipath = source_dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string lpath = source_dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  // Every rank reads and validates (the same bytes, so the same verdict): nothing is created when
  // the input is bad, and no rank waits in a collective for one that failed.
  const IdxImages images = read_idx_images(ipath);
  const std::vector<int32_t> labels = read_idx_labels(lpath);
  if (int64_t(labels.size()) != images.n)
    throw Error(ipath + " holds " + std::to_string(images.n) + " images but " + lpath + " holds " +
                    std::to_string(labels.size()) + " labels",
                source_dir);
  const auto classes = fashion_mnist_class_names();
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] >= int32_t(classes.size()))
      throw Error("label " + std::to_string(labels[i]) + " of sample " + std::to_string(i) + " is outside [0, 10)", lpath);
  DatasetSpec spec;
  spec.n = images.n;
  spec.c = 1;
  spec.h = images.h;
  spec.w = images.w;
  spec.class_names = classes;
  spec.source = "Fashion-MNIST " + split + " split (Zalando Research, MIT licence) from " + source_dir;
  spec.source_checksum = file_checksum(ipath) + "; " + file_checksum(lpath);
  const int64_t sample = images.h * images.w;
  SampleFill fill = [&](int64_t first, int64_t count, uint8_t* img, int32_t* lab) {
    std::memcpy(img, images.pixels.data() + first * sample, size_t(count * sample));
    std::memcpy(lab, labels.data() + first, size_t(count) * 4);
  };
  return write_dataset(comm, out_path, spec, fill, options);
}

PreparedPaths prepare_fashion_mnist(MPI_Comm comm, const std::string& cache_dir, const std::string& source_dir) {
  int rank = 0;
  HPDT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  PreparedPaths paths{cache_dir + "/fashion-mnist-train.h5", cache_dir + "/fashion-mnist-test.h5"};
  char error[2048] = {0};
  if (rank == 0) {
    try {
      std::error_code ec;
      fs::create_directories(cache_dir, ec);
      if (!fs::is_directory(cache_dir))
        throw Error("cannot create the data cache directory" + (ec ? ": " + ec.message() : std::string()), cache_dir);
      for (const auto& [split, path] : {std::pair{"train", paths.train}, std::pair{"test", paths.test}}) {
        bool valid = false;
        if (fs::exists(path)) {
          try {
            inspect_dataset(path, true);
            valid = true;
          } catch (const std::exception& e) {
            HPDT_LOG(warn) << "re-creating " << path << ": " << e.what();
          }
        }
        if (!valid) {
          HPDT_LOG(info) << "converting Fashion-MNIST " << split << " from " << source_dir << " to " << path;
          convert_fashion_mnist(MPI_COMM_SELF, source_dir, split, path);
        }
      }
    } catch (const std::exception& e) {
      std::snprintf(error, sizeof error, "%s", e.what());
    }
  }
  HPDT_MPI_CHECK(MPI_Bcast(error, sizeof error, MPI_CHAR, 0, comm));  // also the barrier the others wait at
  if (error[0] != 0) throw Error(std::string("preparing Fashion-MNIST failed on rank 0: ") + error, cache_dir);
  return paths;
}

SampleFill synthetic_fill(int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed) {
  HPDT_CHECK(classes >= 1, "synthetic data needs at least one class");
  const int64_t sample = c * h * w;
  return [=](int64_t first, int64_t count, uint8_t* images, int32_t* labels) {
    constexpr uint64_t kLabelStream = ~uint64_t(0);  // sample i uses stream i; labels the last stream
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t index = uint64_t(first + i);
      uint8_t* dst = images + i * sample;
      for (int64_t b = 0; b * 16 < sample; ++b) {
        const Philox4x32 r = philox_block(seed, index, uint64_t(b));
        uint8_t bytes[16];
        std::memcpy(bytes, r.v, 16);
        const int64_t n = std::min<int64_t>(16, sample - b * 16);
        std::memcpy(dst + b * 16, bytes, size_t(n));
      }
      labels[i] = int32_t((uint64_t(philox_u32(seed, kLabelStream, index)) * uint64_t(classes)) >> 32);
    }
  };
}

DatasetSpec synthetic_spec(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed) {
  DatasetSpec spec;
  spec.n = n;
  spec.c = c;
  spec.h = h;
  spec.w = w;
  for (int64_t k = 0; k < classes; ++k) spec.class_names.push_back("class" + std::to_string(k));
  spec.source = "synthetic: Philox4x32-10 bytes, seed " + std::to_string(seed);
  spec.source_checksum = "none (generated)";
  return spec;
}

}  // namespace hpdt::io
