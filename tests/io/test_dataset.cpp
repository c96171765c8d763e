// The dataset format: converter round trip against the IDX bytes, synthetic determinism across rank
// counts, and each kind of bad input failing with a message that names the file and dataset.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "hpdt/core/check_hdf5.h"
#include "hpdt/io/dataset.h"
#include "hpdt/io/prepare.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
namespace fs = std::filesystem;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

bool have_fashion_mnist() { return fs::exists(std::string(io::kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz"); }

void check_split(const std::string& split, const std::string& out, io::Layout layout) {
  io::WriteOptions opt;
  opt.layout = layout;
  opt.chunk_samples = layout == io::Layout::chunked ? 999 : 0;  // chunks that do not divide N
  const auto written = io::convert_fashion_mnist(MPI_COMM_WORLD, io::kFashionMnistDir, split, out, opt);
  const std::string prefix = split == "train" ? "train" : "t10k";
  const auto idx = io::read_idx_images(std::string(io::kFashionMnistDir) + "/" + prefix + "-images-idx3-ubyte.gz");
  const auto labels = io::read_idx_labels(std::string(io::kFashionMnistDir) + "/" + prefix + "-labels-idx1-ubyte.gz");
  const auto info = io::inspect_dataset(out);
  EXPECT_EQ(info.n, idx.n);
  EXPECT_EQ(info.c, 1);
  EXPECT_EQ(info.h, 28);
  EXPECT_EQ(info.w, 28);
  EXPECT_EQ(info.num_classes, 10);
  EXPECT_EQ(info.class_names[9], "Ankle boot");
  EXPECT_EQ(info.layout, layout);
  EXPECT_NE(info.source_checksum.find("crc32="), std::string::npos);
  EXPECT_EQ(info.mean, written.mean);
  // Known statistics of Fashion-MNIST (torchvision's normalisation constants for the train split).
  if (split == "train") {
    EXPECT_NEAR(info.mean[0], 0.2860, 1e-4);
    EXPECT_NEAR(info.std[0], 0.3530, 1e-4);
  }
  std::vector<uint8_t> images;
  std::vector<int32_t> back;
  io::read_samples(out, 0, info.n, images, back);
  ASSERT_EQ(images.size(), idx.pixels.size());
  EXPECT_TRUE(images == idx.pixels) << "image bytes differ from the IDX file";
  EXPECT_TRUE(back == labels) << "labels differ from the IDX file";
}

TEST(Dataset, FashionMnistRoundTripEveryImageAndLabel) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  test::TempDir dir;
  check_split("test", dir.file("test.h5"), io::Layout::chunked);
  check_split("train", dir.file("train.h5"), io::Layout::contiguous);
}

TEST(Dataset, PrepareFashionMnistCreatesOnceAndReuses) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  test::TempDir dir;
  const auto paths = io::prepare_fashion_mnist(MPI_COMM_WORLD, dir.file("cache"));
  EXPECT_EQ(io::inspect_dataset(paths.test).n, 10000);
  EXPECT_EQ(io::inspect_dataset(paths.train).n, 60000);
  const auto mtime = fs::last_write_time(paths.train);
  MPI_Barrier(MPI_COMM_WORLD);
  io::prepare_fashion_mnist(MPI_COMM_WORLD, dir.file("cache"));  // valid files are kept as they are
  EXPECT_EQ(fs::last_write_time(paths.train), mtime);
  // A source directory without the files: every rank gets rank 0's error.
  MPI_Barrier(MPI_COMM_WORLD);
  HPDT_EXPECT_THROW_MSG(io::prepare_fashion_mnist(MPI_COMM_WORLD, dir.file("cache2"), dir.file("nowhere")),
                        "IDX file does not exist");
}

TEST(Dataset, SyntheticIsTheSameOnAnyRankCount) {
  test::TempDir dir;
  const int64_t n = 301, c = 3, h = 5, w = 7, k = 13;
  io::WriteOptions opt;
  opt.layout = io::Layout::chunked;
  opt.chunk_samples = 8;
  opt.deflate_level = 1;      // parallel compressed write
  opt.block_bytes = 3 * 105;  // several collective rounds per rank
  io::write_dataset(MPI_COMM_WORLD, dir.file("syn.h5"), io::synthetic_spec(n, c, h, w, k, 42),
                    io::synthetic_fill(c, h, w, k, 42), opt);
  // The oracle: the fill function called once, serially, for all samples.
  std::vector<uint8_t> expect_img(size_t(n * c * h * w));
  std::vector<int32_t> expect_lab(static_cast<size_t>(n));
  io::synthetic_fill(c, h, w, k, 42)(0, n, expect_img.data(), expect_lab.data());
  std::vector<uint8_t> img;
  std::vector<int32_t> lab;
  io::read_samples(dir.file("syn.h5"), 0, n, img, lab);
  EXPECT_TRUE(img == expect_img);
  EXPECT_TRUE(lab == expect_lab);
  const auto info = io::inspect_dataset(dir.file("syn.h5"));
  EXPECT_TRUE(info.compressed);
  EXPECT_EQ(info.chunk_samples, 8);
  EXPECT_NEAR(info.mean[1], 0.5, 0.02);
  // Another seed gives other bytes.
  std::vector<uint8_t> other(expect_img.size());
  io::synthetic_fill(c, h, w, k, 43)(0, n, other.data(), expect_lab.data());
  EXPECT_FALSE(other == expect_img);
}

TEST(Dataset, WriterLeavesNoFileWhenLabelsAreBadAndKeepsTheOldOne) {
  test::TempDir dir;
  const std::string path = dir.file("d.h5");
  io::write_dataset(MPI_COMM_WORLD, path, io::synthetic_spec(20, 1, 2, 2, 3, 1), io::synthetic_fill(1, 2, 2, 3, 1));
  const auto before = io::inspect_dataset(path);
  auto bad = [](int64_t first, int64_t count, uint8_t* img, int32_t* lab) {
    for (int64_t i = 0; i < count; ++i) lab[i] = first + i == 17 ? 5 : 0;
    std::fill(img, img + count * 4, uint8_t(1));
  };
  HPDT_EXPECT_THROW_MSG(io::write_dataset(MPI_COMM_WORLD, path, io::synthetic_spec(20, 1, 2, 2, 3, 1), bad),
                        "label 5 of sample 17 is outside [0, 3)");
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(io::inspect_dataset(path).mean, before.mean);  // the old file is untouched
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
}

// ---- bad input ------------------------------------------------------------------------------

// A valid small dataset written by rank 0, then changed by `edit` (serial HDF5) into a bad one.
std::string make_bad(const test::TempDir& dir, const std::string& name, const std::function<void(hid_t)>& edit) {
  const std::string path = dir.file(name);
  if (world_rank() == 0) {
    io::write_dataset(MPI_COMM_SELF, path, io::synthetic_spec(10, 1, 2, 3, 4, 7), io::synthetic_fill(1, 2, 3, 4, 7));
    quiet_hdf5_errors();
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(f, 0);
    edit(f);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

void replace_dataset(hid_t f, const char* name, hid_t type, std::vector<hsize_t> dims, const void* data) {
  H5Ldelete(f, name, H5P_DEFAULT);
  const hid_t s = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  const hid_t d = H5Dcreate2(f, name, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (data) H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(d);
  H5Sclose(s);
}

TEST(DatasetBadInput, EachKindFailsWithAClearMessage) {
  test::TempDir dir;
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(dir.file("missing.h5")), "dataset file does not exist");
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(dir.file("missing.h5")), "missing.h5");
  if (world_rank() == 0) std::ofstream(dir.file("text.h5")) << "not an HDF5 file\n";
  MPI_Barrier(MPI_COMM_WORLD);
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(dir.file("text.h5")), "not an HDF5 file");

  auto p = make_bad(dir, "nolabels.h5", [](hid_t f) { H5Ldelete(f, "/labels", H5P_DEFAULT); });
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(p), "dataset /labels is missing");
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(p), "nolabels.h5:/labels");

  p = make_bad(dir, "rank3.h5", [](hid_t f) { replace_dataset(f, "/images", H5T_STD_U8LE, {10, 2, 3}, nullptr); });
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(p), "dataset /images has rank 3, expected 4 (N, C, H, W)");

  p = make_bad(dir, "f32.h5", [](hid_t f) { replace_dataset(f, "/images", H5T_IEEE_F32LE, {10, 1, 2, 3}, nullptr); });
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(p), "dataset /images has the wrong element type (expected u8)");

  p = make_bad(dir, "i64labels.h5", [](hid_t f) { replace_dataset(f, "/labels", H5T_STD_I64LE, {10}, nullptr); });
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(p), "dataset /labels has the wrong element type (expected i32)");

  p = make_bad(dir, "count.h5", [](hid_t f) { replace_dataset(f, "/labels", H5T_STD_I32LE, {9}, nullptr); });
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(p), "/labels has 9 entries but /images has 10 samples");

  p = make_bad(dir, "label.h5", [](hid_t f) {
    std::vector<int32_t> l(10, 1);
    l[6] = 4;
    replace_dataset(f, "/labels", H5T_STD_I32LE, {10}, l.data());
  });
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(p), "label 4 of sample 6 is outside [0, 4)");
  EXPECT_NO_THROW(io::inspect_dataset(p, /*check_labels=*/false));

  p = make_bad(dir, "empty.h5", [](hid_t f) {
    replace_dataset(f, "/images", H5T_STD_U8LE, {0, 1, 2, 3}, nullptr);
    replace_dataset(f, "/labels", H5T_STD_I32LE, {0}, nullptr);
  });
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(p), "the dataset has zero samples");

  p = make_bad(dir, "version.h5", [](hid_t f) {
    const hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
    const int64_t v = 99;
    const hid_t a = H5Aopen(root, "format_version", H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Gclose(root);
  });
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(p), "dataset format_version 99 is not supported");

  p = make_bad(dir, "noattr.h5", [](hid_t f) { H5Adelete(f, "num_classes"); });
  HPDT_EXPECT_THROW_MSG(io::inspect_dataset(p), "attribute 'num_classes' is missing");
}

// Writes `bytes` gzip-compressed to `path` (level 6), optionally cut to `keep` compressed bytes.
void write_gz(const std::string& path, const std::vector<uint8_t>& bytes, size_t keep = size_t(-1)) {
  gzFile f = gzopen((path + ".full").c_str(), "wb");
  gzwrite(f, bytes.data(), unsigned(bytes.size()));
  gzclose(f);
  std::ifstream in(path + ".full", std::ios::binary);
  std::vector<char> all((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(path, std::ios::binary).write(all.data(), std::streamsize(std::min(keep, all.size())));
  fs::remove(path + ".full");
}

std::vector<uint8_t> idx_bytes(uint32_t magic, std::vector<uint32_t> dims, size_t payload, bool random = false) {
  std::vector<uint8_t> b;
  for (uint32_t v : std::vector<uint32_t>{magic}) b.insert(b.end(), {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)});
  for (uint32_t v : dims) b.insert(b.end(), {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)});
  uint32_t x = 12345;
  for (size_t i = 0; i < payload; ++i) b.push_back(random ? uint8_t((x = x * 1664525u + 1013904223u) >> 24) : uint8_t(i % 7));
  return b;
}

TEST(DatasetBadInput, IdxErrorsLeaveNoOutput) {
  test::TempDir dir;
  const std::string src = dir.file("src");
  if (world_rank() == 0) {
    fs::create_directories(src);
    // t10k: 5 images of 28x28 and 4 labels (mismatch); train: wrong magic; a truncated copy.
    write_gz(src + "/t10k-images-idx3-ubyte.gz", idx_bytes(0x803, {5, 28, 28}, 5 * 784));
    write_gz(src + "/t10k-labels-idx1-ubyte.gz", idx_bytes(0x801, {4}, 4));
    write_gz(src + "/train-images-idx3-ubyte.gz", idx_bytes(0x801, {5, 28, 28}, 5 * 784));
    write_gz(src + "/train-labels-idx1-ubyte.gz", idx_bytes(0x801, {5}, 5));
    write_gz(dir.file("trunc.gz"), idx_bytes(0x803, {50, 28, 28}, 50 * 784, true), 20000);  // of ~39 KB
    write_gz(dir.file("notrailer.gz"), idx_bytes(0x801, {3}, 3), 30);  // the gzip trailer cut off
    write_gz(dir.file("labels9.gz"), idx_bytes(0x801, {3}, 3));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  HPDT_EXPECT_THROW_MSG(io::convert_fashion_mnist(MPI_COMM_WORLD, src, "test", dir.file("o1.h5")),
                        "holds 5 images but");
  HPDT_EXPECT_THROW_MSG(io::convert_fashion_mnist(MPI_COMM_WORLD, src, "train", dir.file("o2.h5")),
                        "wrong magic number 0x00000801 for an IDX image file");
  HPDT_EXPECT_THROW_MSG(io::read_idx_images(dir.file("trunc.gz")), "trunc.gz");
  HPDT_EXPECT_THROW_MSG(io::read_idx_images(dir.file("trunc.gz")), "truncated");
  HPDT_EXPECT_THROW_MSG(io::read_idx_labels(dir.file("notrailer.gz")), "notrailer.gz");
  HPDT_EXPECT_THROW_MSG(io::read_idx_images(dir.file("nothere.gz")), "IDX file does not exist");
  EXPECT_EQ(io::read_idx_labels(dir.file("labels9.gz")), (std::vector<int32_t>{0, 1, 2}));
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_FALSE(fs::exists(dir.file("o1.h5")));
  EXPECT_FALSE(fs::exists(dir.file("o2.h5")));
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
}

}  // namespace
