// Checkpoints: bit-exact round trip of every kind of content, a save killed mid-write leaving the
// previous checkpoint intact, keep-last-K, and clear errors for another model, config, shape or
// format version.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "hpdt/io/checkpoint.h"
#include "hpdt_test.h"

namespace {

using namespace hpdt;
namespace fs = std::filesystem;

Tensor random_tensor(const Shape& shape, DType dt, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dt);
  Rng rng(seed);
  auto* p = static_cast<uint8_t*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(rng.next_u32());
  return t;
}

io::Checkpoint sample_checkpoint(uint64_t seed) {
  io::Checkpoint c;
  c.model_name = "resnet18";
  c.model_config = R"({"depth":18,"width":64})";
  c.world_size = 4;
  c.epoch = 3;
  c.step = 1234;
  c.data_epoch = 3;
  c.data_step = 17;
  Tensor w = random_tensor({16, 3, 3, 3}, DType::f32, seed);
  float* wf = w.data<float>();  // specials must survive bit for bit
  wf[0] = -0.0f;
  wf[1] = std::numeric_limits<float>::quiet_NaN();
  wf[2] = std::numeric_limits<float>::infinity();
  wf[3] = std::numeric_limits<float>::denorm_min();
  c.params["conv1.weight"] = w;
  c.params["layer1/0/bn.bias"] = random_tensor({16}, DType::f32, seed + 1);
  c.params["head.weight.f16"] = random_tensor({10, 7}, DType::f16, seed + 2);
  c.params["emb.bf16"] = random_tensor({5, 3}, DType::bf16, seed + 3);
  c.params["scalar"] = random_tensor(Shape{}, DType::f32, seed + 4);
  c.params["empty"] = Tensor::empty({0, 4}, DType::f32);
  c.optimizer["momentum/conv1.weight"] = random_tensor({16, 3, 3, 3}, DType::f32, seed + 5);
  c.optimizer["step_count"] = random_tensor({1}, DType::i32, seed + 6);
  c.optimizer["mask"] = random_tensor({9}, DType::u8, seed + 7);
  c.loss_scaler = {{"scale", 65536.0}, {"good_steps", 17}, {"growth_interval", 2000}};
  Rng r(42, 7);
  r.skip(123456789);
  c.rng["dropout"] = io::RngState::of(r);
  c.rng["data/augment"] = {~uint64_t(0), 1, 2};
  c.metadata = {{"lr", 0.1}, {"note", "unit test"}, {"sizes", {1, 2, 3}}};
  return c;
}

bool same_tensors(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, t] : a) {
    auto it = b.find(k);
    if (it == b.end() || !(it->second.shape() == t.shape()) || it->second.dtype() != t.dtype() ||
        std::memcmp(it->second.data(), t.data(), t.nbytes()) != 0) {
      ADD_FAILURE() << "tensor " << k << " differs";
      return false;
    }
  }
  return true;
}

void expect_same(const io::Checkpoint& a, const io::Checkpoint& b) {
  EXPECT_EQ(a.model_name, b.model_name);
  EXPECT_EQ(a.model_config, b.model_config);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.data_epoch, b.data_epoch);
  EXPECT_EQ(a.data_step, b.data_step);
  EXPECT_TRUE(same_tensors(a.params, b.params));
  EXPECT_TRUE(same_tensors(a.optimizer, b.optimizer));
  EXPECT_EQ(a.loss_scaler, b.loss_scaler);
  EXPECT_EQ(a.rng, b.rng);
  EXPECT_EQ(a.metadata, b.metadata);
}

TEST(Checkpoint, RoundTripIsBitExact) {
  test::TempDir dir;
  const auto c = sample_checkpoint(1);
  io::save_checkpoint(dir.file("c.h5"), c);
  const auto back = io::load_checkpoint(dir.file("c.h5"));
  expect_same(c, back);
  EXPECT_EQ(back.rng.at("dropout").rng().next_u32(), [] {
    Rng r(42, 7);
    r.skip(123456789);
    return r.next_u32();
  }());
  // Overwriting an existing checkpoint replaces it whole.
  io::save_checkpoint(dir.file("c.h5"), sample_checkpoint(2));
  expect_same(sample_checkpoint(2), io::load_checkpoint(dir.file("c.h5")));
}

void kill_self(int written) {
  if (written == 3) raise(SIGKILL);
}

TEST(Checkpoint, SaveKilledMidWriteLeavesThePreviousIntact) {
  test::TempDir dir;
  io::CheckpointDirectory ckpts(dir.path(), 2);
  const auto old = sample_checkpoint(1);
  const std::string path = ckpts.save(old);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the child overwrites the same step and dies after the third tensor
    io::detail::set_checkpoint_write_hook(kill_self);
    auto next = sample_checkpoint(9);
    next.step = old.step;
    io::save_checkpoint(path, next);
    _exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child was meant to die mid-write";
  bool tmp_left = false;
  for (const auto& e : fs::directory_iterator(dir.path())) tmp_left |= e.path().string().find(".tmp-") != std::string::npos;
  EXPECT_TRUE(tmp_left) << "the kill should have happened with a temporary file on disk";
  expect_same(old, io::load_checkpoint(path));
  // The next save cleans the crashed save's temporary file up.
  auto later = sample_checkpoint(3);
  later.step = 2000;
  ckpts.save(later);
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(Checkpoint, DirectoryKeepsTheLastK) {
  test::TempDir dir;
  io::CheckpointDirectory ckpts(dir.file("ck"), 2);
  EXPECT_FALSE(ckpts.latest().has_value());
  for (int64_t step : {10, 200, 3000, 40000}) {
    auto c = sample_checkpoint(uint64_t(step));
    c.step = step;
    ckpts.save(c);
  }
  const auto l = ckpts.list();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(fs::path(l[0]).filename(), "ckpt-000003000.h5");
  EXPECT_EQ(*ckpts.latest(), dir.file("ck") + "/ckpt-000040000.h5");
  EXPECT_EQ(io::load_checkpoint(*ckpts.latest()).step, 40000);
  EXPECT_EQ(io::shard_path(dir.file("ck/ckpt-000040000.h5"), 3, 8), dir.file("ck/ckpt-000040000.rank3of8.h5"));
}

TEST(Checkpoint, IncompatibleCheckpointsFailClearly) {
  test::TempDir dir;
  const std::string path = dir.file("c.h5");
  io::save_checkpoint(path, sample_checkpoint(1));
  io::CheckpointExpectation e;
  e.model_name = "vit-tiny";
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(path, e), "checkpoint is of model 'resnet18' but this run trains 'vit-tiny'");
  e.model_name = "resnet18";
  e.model_config = R"({"depth":34,"width":64})";
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(path, e), "differs from this run's");
  e.model_config.clear();
  const auto full = io::load_checkpoint(path);
  for (const auto& [k, t] : full.params) e.params[k] = {t.shape(), t.dtype()};
  EXPECT_NO_THROW(io::load_checkpoint(path, e));
  auto bad_shape = e;
  bad_shape.params["conv1.weight"] = {Shape{16, 3, 5, 5}, DType::f32};
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(path, bad_shape),
                        "parameter 'conv1.weight' is f32 [16, 3, 3, 3] in the checkpoint but the model has f32 [16, 3, 5, 5]");
  auto bad_dtype = e;
  bad_dtype.params["emb.bf16"] = {Shape{5, 3}, DType::f16};
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(path, bad_dtype), "'emb.bf16' is bf16");
  auto missing = e;
  missing.params["fc.bias"] = {Shape{10}, DType::f32};
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(path, missing), "parameter 'fc.bias' is missing from the checkpoint");
  auto extra = e;
  extra.params.erase("scalar");
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(path, extra), "checkpoint has parameter 'scalar', which the model does not");
}

TEST(Checkpoint, OtherFormatVersionsAndFilesAreRefused) {
  test::TempDir dir;
  const std::string path = dir.file("c.h5");
  io::save_checkpoint(path, sample_checkpoint(1));
  {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t a = H5Aopen_by_name(f, "/", "format_version", H5P_DEFAULT, H5P_DEFAULT);
    const int64_t v = 2;
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Fclose(f);
  }
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(path), "checkpoint format_version 2 is not supported (this build reads 1)");
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(path), "c.h5");
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(dir.file("none.h5")), "checkpoint file does not exist");
  std::ofstream(dir.file("text.h5")) << "hello";
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(dir.file("text.h5")), "not an HDF5 file");
  auto sharded = sample_checkpoint(1);
  sharded.optimizer_shards = 4;
  sharded.optimizer.clear();
  io::save_checkpoint(dir.file("s.h5"), sharded);
  HPDT_EXPECT_THROW_MSG(io::load_checkpoint(dir.file("s.h5")), "per-rank shard files");
  io::CheckpointExpectation allow;
  allow.allow_sharded_optimizer = true;
  EXPECT_EQ(io::load_checkpoint(dir.file("s.h5"), allow).optimizer_shards, 4);
  HPDT_EXPECT_THROW_MSG(io::save_checkpoint(dir.file("no/dir/c.h5"), sharded), "checkpoint directory");
}

}  // namespace
