// Checkpoints: serial HDF5, temp name + fsync + rename, compatibility checks on load.
#include "hpdt/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <regex>

#include "h5.h"
#include "hpdt/core/build_info.h"
#include "hpdt/core/error.h"

namespace hpdt::io {

namespace fs = std::filesystem;

namespace detail {
namespace {
std::atomic<void (*)(int)> g_write_hook{nullptr};
}
void set_checkpoint_write_hook(void (*hook)(int)) { g_write_hook = hook; }
}  // namespace detail

namespace {

// File type of each dtype; f16 and bf16 are stored as their 16-bit patterns (HDF5 1.10 has no
// half-precision type) with the "dtype" attribute saying which.
hid_t file_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::f16:
    case DType::bf16: return H5T_STD_U16LE;
    case DType::i32: return H5T_STD_I32LE;
    case DType::u8: return H5T_STD_U8LE;
  }
  return H5T_STD_U8LE;
}
hid_t mem_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f16:
    case DType::bf16: return H5T_NATIVE_UINT16;
    case DType::i32: return H5T_NATIVE_INT32;
    case DType::u8: return H5T_NATIVE_UINT8;
  }
  return H5T_NATIVE_UINT8;
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw Error(std::string("cannot open for fsync: ") + std::strerror(errno), path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0 && !directory) throw Error(std::string("fsync failed: ") + std::strerror(errno), path);
}

void write_tensors(hid_t file, const std::string& group, const std::map<std::string, Tensor>& tensors,
                   const std::string& where, int& written) {
  h5::Id lcpl = h5::make(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate", where);
  h5check(H5Pset_create_intermediate_group(lcpl, 1), "H5Pset_create_intermediate_group", where);
  if (!h5::has_link(file, group)) h5::make(H5Gcreate2(file, group.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT), "H5Gcreate", where);
  for (const auto& [name, t] : tensors) {
    const std::string full = group + "/" + name;
    HPDT_CHECK(!name.empty() && name.front() != '/' && name.back() != '/', "checkpoint tensor name '", name,
               "' is empty or starts/ends with '/' (", where, ")");
    HPDT_CHECK(t.defined() && t.is_cpu(), "checkpoint tensor ", full, " must be a defined CPU tensor, got ",
               t.defined() ? t.str() : std::string("undefined"));
    std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
    h5::Id space = h5::make(dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(int(dims.size()), dims.data(), nullptr),
                            "H5Screate", where + ":" + full);
    h5::Id dset = h5::make(H5Dcreate2(file, full.c_str(), file_type(t.dtype()), space, lcpl, H5P_DEFAULT, H5P_DEFAULT),
                           "H5Dcreate", where + ":" + full);
    if (t.numel() > 0)
      h5check(H5Dwrite(dset, mem_type(t.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data()), "H5Dwrite", where + ":" + full);
    h5::write_attr_string(dset, "dtype", std::string(dtype_name(t.dtype())), where + ":" + full);
    ++written;
    if (auto hook = detail::g_write_hook.load()) hook(written);
  }
}

struct VisitState {
  std::vector<std::string> names;
};
herr_t collect_datasets(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) static_cast<VisitState*>(data)->names.emplace_back(name);
  return 0;
}

std::map<std::string, Tensor> read_tensors(hid_t file, const std::string& group, const std::string& where) {
  std::map<std::string, Tensor> out;
  if (!h5::has_link(file, group)) return out;
  h5::Id g = h5::make(H5Gopen2(file, group.c_str(), H5P_DEFAULT), "H5Gopen " + group, where);
  VisitState st;
  h5check(H5Ovisit2(g, H5_INDEX_NAME, H5_ITER_INC, collect_datasets, &st, H5O_INFO_BASIC), "H5Ovisit " + group, where);
  for (const std::string& name : st.names) {
    const std::string full = group + "/" + name;
    h5::Id dset = h5::make(H5Dopen2(file, full.c_str(), H5P_DEFAULT), "H5Dopen", where + ":" + full);
    const DType dt = parse_dtype(h5::read_attr_string(dset, "dtype", where + ":" + full));
    h5::Id space = h5::make(H5Dget_space(dset), "H5Dget_space", where + ":" + full);
    const int nd = h5check(H5Sget_simple_extent_ndims(space), "H5Sget_simple_extent_ndims", where + ":" + full);
    HPDT_CHECK(nd <= Shape::kMaxDims, "tensor ", full, " in ", where, " has ", nd, " dimensions");
    std::vector<hsize_t> dims(static_cast<size_t>(nd));
    if (nd > 0) h5check(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "H5Sget_simple_extent_dims", where);
    std::vector<int64_t> shape(dims.begin(), dims.end());
    Tensor t = Tensor::empty(Shape(std::span<const int64_t>(shape)), dt);
    if (t.numel() > 0)
      h5check(H5Dread(dset, mem_type(dt), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data()), "H5Dread", where + ":" + full);
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  HPDT_CHECK(fs::is_directory(dir), "checkpoint directory ", dir.string(), " does not exist (for ", path, ")");
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  std::lock_guard lock(hdf5_mutex());
  quiet_hdf5_errors();
  try {
    {
      h5::Id file = h5::make(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "H5Fcreate", tmp);
      h5::Id root = h5::make(H5Gopen2(file, "/", H5P_DEFAULT), "H5Gopen /", tmp);
      h5::write_attr_string(root, "hpdt_format", kCheckpointFormatName, tmp);
      h5::write_attr_i64(root, "format_version", kCheckpointFormatVersion, tmp);
      h5::write_attr_string(root, "model_name", ckpt.model_name, tmp);
      h5::write_attr_string(root, "model_config", ckpt.model_config, tmp);
      h5::write_attr_i64(root, "world_size", ckpt.world_size, tmp);
      h5::write_attr_i64(root, "epoch", ckpt.epoch, tmp);
      h5::write_attr_i64(root, "step", ckpt.step, tmp);
      h5::write_attr_i64(root, "data_epoch", ckpt.data_epoch, tmp);
      h5::write_attr_i64(root, "data_step", ckpt.data_step, tmp);
      h5::write_attr_i64(root, "optimizer_shards", ckpt.optimizer_shards, tmp);
      h5::write_attr_string(root, "metadata", ckpt.metadata.dump(), tmp);
      h5::write_attr_string(root, "created_by", std::string("hpdt ") + build_info().version + " (" + build_info().git_commit + ")", tmp);
      h5::Id ls = h5::make(H5Gcreate2(file, "/loss_scaler", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "H5Gcreate", tmp);
      for (const auto& [k, v] : ckpt.loss_scaler) h5::write_attr_f64(ls, k, v, tmp + ":/loss_scaler");
      h5::Id lcpl = h5::make(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate", tmp);
      h5check(H5Pset_create_intermediate_group(lcpl, 1), "H5Pset_create_intermediate_group", tmp);
      h5::Id rng = h5::make(H5Gcreate2(file, "/rng", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "H5Gcreate", tmp);
      for (const auto& [k, s] : ckpt.rng) {
        h5::Id g = h5::make(H5Gcreate2(rng, k.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT), "H5Gcreate /rng/" + k, tmp);
        h5::write_attr_u64s(g, "state", {s.seed, s.stream, s.offset}, tmp + ":/rng/" + k);
      }
      int written = 0;
      write_tensors(file, "/params", ckpt.params, tmp, written);
      write_tensors(file, "/optimizer", ckpt.optimizer, tmp, written);
      h5check(H5Fflush(file, H5F_SCOPE_GLOBAL), "H5Fflush", tmp);
      rng.reset();
      ls.reset();
      root.reset();
      file.close_checked(tmp);
    }
    fsync_path(tmp, false);
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) throw Error("rename " + tmp + " -> " + path + " failed: " + ec.message(), path);
    fsync_path(dir.string(), true);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

Checkpoint load_checkpoint(const std::string& path, const CheckpointExpectation& expect) {
  if (!fs::exists(path)) throw Error("checkpoint file does not exist", path);
  Checkpoint c;
  {
    std::lock_guard lock(hdf5_mutex());
    quiet_hdf5_errors();
    if (H5Fis_hdf5(path.c_str()) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      throw Error("not an HDF5 file (not a checkpoint)", path);
    }
    h5::Id file = h5::make(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", path);
    h5::Id root = h5::make(H5Gopen2(file, "/", H5P_DEFAULT), "H5Gopen /", path);
    if (!h5::has_attr(root, "hpdt_format") || h5::read_attr_string(root, "hpdt_format", path) != kCheckpointFormatName)
      throw Error(std::string("not an hpdt checkpoint (attribute hpdt_format is not '") + kCheckpointFormatName + "')", path);
    const int64_t version = h5::read_attr_i64(root, "format_version", path);
    if (version != kCheckpointFormatVersion)
      throw Error("checkpoint format_version " + std::to_string(version) + " is not supported (this build reads " +
                      std::to_string(kCheckpointFormatVersion) + ")",
                  path);
    c.model_name = h5::read_attr_string(root, "model_name", path);
    c.model_config = h5::read_attr_string(root, "model_config", path);
    c.world_size = h5::read_attr_i64(root, "world_size", path);
    c.epoch = h5::read_attr_i64(root, "epoch", path);
    c.step = h5::read_attr_i64(root, "step", path);
    c.data_epoch = h5::read_attr_i64(root, "data_epoch", path);
    c.data_step = h5::read_attr_i64(root, "data_step", path);
    c.optimizer_shards = h5::read_attr_i64(root, "optimizer_shards", path);
    try {
      c.metadata = nlohmann::json::parse(h5::read_attr_string(root, "metadata", path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("metadata attribute is not valid JSON: ") + e.what(), path);
    }
    if (h5::has_link(file, "/loss_scaler")) {
      h5::Id ls = h5::make(H5Gopen2(file, "/loss_scaler", H5P_DEFAULT), "H5Gopen", path);
      H5O_info_t oi;
      h5check(H5Oget_info2(ls, &oi, H5O_INFO_NUM_ATTRS), "H5Oget_info", path);
      for (hsize_t i = 0; i < oi.num_attrs; ++i) {
        char name[1024] = {0};
        h5check(H5Aget_name_by_idx(ls, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT),
                "H5Aget_name_by_idx", path);
        c.loss_scaler[name] = h5::read_attr_f64(ls, name, path + ":/loss_scaler");
      }
    }
    if (h5::has_link(file, "/rng")) {
      h5::Id rng = h5::make(H5Gopen2(file, "/rng", H5P_DEFAULT), "H5Gopen", path);
      struct Names {
        std::vector<std::string> v;
      } groups;
      auto cb = [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
        if (info->type == H5O_TYPE_GROUP && std::string(name) != ".") static_cast<Names*>(data)->v.emplace_back(name);
        return 0;
      };
      h5check(H5Ovisit2(rng, H5_INDEX_NAME, H5_ITER_INC, cb, &groups, H5O_INFO_BASIC), "H5Ovisit /rng", path);
      for (const auto& name : groups.v) {
        h5::Id g = h5::make(H5Gopen2(rng, name.c_str(), H5P_DEFAULT), "H5Gopen /rng/" + name, path);
        if (!h5::has_attr(g, "state")) continue;  // an intermediate group of a nested name
        const auto s = h5::read_attr_u64s(g, "state", path + ":/rng/" + name);
        if (s.size() != 3) throw Error("rng state " + name + " has " + std::to_string(s.size()) + " words, expected 3", path);
        c.rng[name] = RngState{s[0], s[1], s[2]};
      }
    }
    c.params = read_tensors(file, "/params", path);
    c.optimizer = read_tensors(file, "/optimizer", path);
  }
  if (c.optimizer_shards > 0 && !expect.allow_sharded_optimizer)
    throw Error("checkpoint keeps its optimizer state in " + std::to_string(c.optimizer_shards) +
                    " per-rank shard files, which this loader does not read",
                path);
  check_compatible(c, expect, path);
  return c;
}

void check_compatible(const Checkpoint& c, const CheckpointExpectation& expect, const std::string& path) {
  if (!expect.model_name.empty() && c.model_name != expect.model_name)
    throw Error("checkpoint is of model '" + c.model_name + "' but this run trains '" + expect.model_name + "'", path);
  if (!expect.model_config.empty() && c.model_config != expect.model_config)
    throw Error("checkpoint model config '" + c.model_config + "' differs from this run's '" + expect.model_config + "'",
                path);
  if (expect.params.empty()) return;
  for (const auto& [name, want] : expect.params) {
    auto it = c.params.find(name);
    if (it == c.params.end()) throw Error("parameter '" + name + "' is missing from the checkpoint", path);
    if (!(it->second.shape() == want.first) || it->second.dtype() != want.second)
      throw Error("parameter '" + name + "' is " + std::string(dtype_name(it->second.dtype())) + " " +
                      it->second.shape().str() + " in the checkpoint but the model has " +
                      std::string(dtype_name(want.second)) + " " + want.first.str(),
                  path);
  }
  for (const auto& [name, t] : c.params)
    if (!expect.params.count(name)) throw Error("checkpoint has parameter '" + name + "', which the model does not", path);
}

std::string shard_path(const std::string& path, int rank, int world) {
  fs::path p(path);
  const std::string stem = p.stem().string();
  return (p.parent_path() / (stem + ".rank" + std::to_string(rank) + "of" + std::to_string(world) + ".h5")).string();
}

// ---- CheckpointDirectory ---------------------------------------------------------------------

CheckpointDirectory::CheckpointDirectory(std::string dir, int keep, std::string prefix)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), keep_(keep) {
  HPDT_CHECK(keep_ >= 1, "keep at least one checkpoint (keep = ", keep_, ")");
}

std::string CheckpointDirectory::path_for(int64_t step) const {
  char name[64];
  std::snprintf(name, sizeof name, "-%09lld.h5", (long long)step);
  return dir_ + "/" + prefix_ + name;
}

std::vector<std::string> CheckpointDirectory::list() const {
  std::vector<std::pair<int64_t, std::string>> found;
  if (!fs::is_directory(dir_)) return {};
  const std::regex re(prefix_ + "-([0-9]+)\\.h5");
  for (const auto& e : fs::directory_iterator(dir_)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, re)) found.emplace_back(std::stoll(m[1].str()), e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::optional<std::string> CheckpointDirectory::latest() const {
  auto l = list();
  if (l.empty()) return std::nullopt;
  return l.back();
}

std::string CheckpointDirectory::save(const Checkpoint& ckpt) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  HPDT_CHECK(fs::is_directory(dir_), "cannot create checkpoint directory ", dir_, (ec ? ": " + ec.message() : ""));
  // Temporary files of saves that crashed (killed jobs) are garbage now.
  const std::regex stale(prefix_ + "-[0-9]+\\.h5\\.tmp-[0-9]+");
  for (const auto& e : fs::directory_iterator(dir_))
    if (std::regex_match(e.path().filename().string(), stale)) fs::remove(e.path(), ec);
  const std::string path = path_for(ckpt.step);
  save_checkpoint(path, ckpt);
  auto all = list();
  for (size_t i = 0; i + size_t(keep_) < all.size(); ++i) fs::remove(all[i], ec);
  return path;
}

}  // namespace hpdt::io
