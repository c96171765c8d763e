// The dataset file: validation on open, and the collective writer (temp name + rename).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <mutex>

#include "dataset_internal.h"
#include "h5.h"
#include "hpdt/core/build_info.h"
#include "hpdt/core/check_mpi.h"
#include "hpdt/core/error.h"
#include "hpdt/core/log.h"
#include "hpdt/io/dataset.h"

namespace hpdt::io {

namespace fs = std::filesystem;

Layout parse_layout(const std::string& name) {
  if (name == "contiguous") return Layout::contiguous;
  if (name == "chunked") return Layout::chunked;
  throw Error("unknown layout '" + name + "' (expected contiguous or chunked)", "--layout");
}

const char* layout_name(Layout layout) { return layout == Layout::contiguous ? "contiguous" : "chunked"; }

namespace detail {

namespace {
// Rank and dims of a dataset, with its element type checked against (class, size, sign).
std::vector<hsize_t> checked_dims(hid_t file, const std::string& name, const std::string& path, int rank,
                                  const char* rank_meaning, H5T_class_t cls, size_t size, H5T_sign_t sign,
                                  const char* type_name) {
  const std::string where = path + ":" + name;
  if (!h5::has_link(file, name))
    throw Error("dataset " + name + " is missing (not an hpdt dataset? write it with hpdt-prepare-data)", where);
  h5::Id dset = h5::make(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "H5Dopen", where);
  h5::Id type = h5::make(H5Dget_type(dset), "H5Dget_type", where);
  if (H5Tget_class(type) != cls || H5Tget_size(type) != size || H5Tget_sign(type) != sign)
    throw Error("dataset " + name + " has the wrong element type (expected " + type_name + ")", where);
  h5::Id space = h5::make(H5Dget_space(dset), "H5Dget_space", where);
  const int nd = h5check(H5Sget_simple_extent_ndims(space), "H5Sget_simple_extent_ndims", where);
  if (nd != rank)
    throw Error("dataset " + name + " has rank " + std::to_string(nd) + ", expected " + std::to_string(rank) + " " +
                    rank_meaning,
                where);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  h5check(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "H5Sget_simple_extent_dims", where);
  return dims;
}
}  // namespace

DatasetInfo read_dataset_info(hid_t file, const std::string& path, bool check_labels,
                              std::vector<int32_t>* labels_out) {
  DatasetInfo info;
  info.path = path;
  h5::Id root = h5::make(H5Gopen2(file, "/", H5P_DEFAULT), "H5Gopen /", path);
  const auto idims = checked_dims(file, "/images", path, 4, "(N, C, H, W)", H5T_INTEGER, 1, H5T_SGN_NONE, "u8");
  const auto ldims = checked_dims(file, "/labels", path, 1, "(N)", H5T_INTEGER, 4, H5T_SGN_2, "i32");
  info.n = int64_t(idims[0]);
  info.c = int64_t(idims[1]);
  info.h = int64_t(idims[2]);
  info.w = int64_t(idims[3]);
  if (int64_t(ldims[0]) != info.n)
    throw Error("/labels has " + std::to_string(ldims[0]) + " entries but /images has " + std::to_string(info.n) +
                    " samples",
                path + ":/labels");
  if (info.n == 0) throw Error("the dataset has zero samples", path + ":/images");
  if (info.c == 0 || info.h == 0 || info.w == 0) throw Error("/images has an empty sample shape", path + ":/images");

  const std::string fmt = h5::read_attr_string(root, "hpdt_format", path + ":/");
  if (fmt != kDatasetFormatName)
    throw Error("attribute hpdt_format is '" + fmt + "', expected '" + kDatasetFormatName + "'", path + ":/");
  info.format_version = h5::read_attr_i64(root, "format_version", path + ":/");
  if (info.format_version != kDatasetFormatVersion)
    throw Error("dataset format_version " + std::to_string(info.format_version) + " is not supported (this build reads " +
                    std::to_string(kDatasetFormatVersion) + "); re-create it with this hpdt-prepare-data",
                path + ":/");
  info.num_classes = h5::read_attr_i64(root, "num_classes", path + ":/");
  if (info.num_classes < 1) throw Error("num_classes is " + std::to_string(info.num_classes), path + ":/");
  info.class_names = h5::read_attr_strings(root, "class_names", path + ":/");
  if (int64_t(info.class_names.size()) != info.num_classes)
    throw Error("class_names has " + std::to_string(info.class_names.size()) + " names for num_classes " +
                    std::to_string(info.num_classes),
                path + ":/");
  info.mean = h5::read_attr_f32s(root, "mean", path + ":/");
  info.std = h5::read_attr_f32s(root, "std", path + ":/");
  if (int64_t(info.mean.size()) != info.c || int64_t(info.std.size()) != info.c)
    throw Error("mean/std have " + std::to_string(info.mean.size()) + "/" + std::to_string(info.std.size()) +
                    " entries for " + std::to_string(info.c) + " channels",
                path + ":/");
  for (float s : info.std)
    if (!(s > 0.0f)) throw Error("std has a non-positive entry (" + std::to_string(s) + ")", path + ":/");
  info.source = h5::read_attr_string(root, "source", path + ":/");
  info.source_checksum = h5::read_attr_string(root, "source_checksum", path + ":/");
  if (h5::has_attr(root, "created_by")) info.created_by = h5::read_attr_string(root, "created_by", path + ":/");

  // Layout, from the dataset creation properties.
  {
    h5::Id dset = h5::make(H5Dopen2(file, "/images", H5P_DEFAULT), "H5Dopen", path + ":/images");
    h5::Id dcpl = h5::make(H5Dget_create_plist(dset), "H5Dget_create_plist", path + ":/images");
    const H5D_layout_t layout = H5Pget_layout(dcpl);
    if (layout == H5D_CHUNKED) {
      info.layout = Layout::chunked;
      hsize_t chunk[4] = {0, 0, 0, 0};
      h5check(H5Pget_chunk(dcpl, 4, chunk), "H5Pget_chunk", path + ":/images");
      info.chunk_samples = int64_t(chunk[0]);
      info.compressed = H5Pget_nfilters(dcpl) > 0;
    } else {
      info.layout = Layout::contiguous;
    }
  }

  if (check_labels || labels_out) {
    std::vector<int32_t> labels(size_t(info.n));
    h5::Id dset = h5::make(H5Dopen2(file, "/labels", H5P_DEFAULT), "H5Dopen", path + ":/labels");
    h5check(H5Dread(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()), "H5Dread", path + ":/labels");
    if (check_labels) {
      for (int64_t i = 0; i < info.n; ++i) {
        const int32_t l = labels[size_t(i)];
        if (l < 0 || l >= info.num_classes)
          throw Error("label " + std::to_string(l) + " of sample " + std::to_string(i) + " is outside [0, " +
                          std::to_string(info.num_classes) + ")",
                      path + ":/labels");
      }
    }
    if (labels_out) *labels_out = std::move(labels);
  }
  return info;
}

}  // namespace detail

namespace {
h5::Id open_serial(const std::string& path) {
  if (!fs::exists(path)) throw Error("dataset file does not exist", path);
  if (fs::is_directory(path)) throw Error("dataset path is a directory, not a file", path);
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw Error("not an HDF5 file", path);
  }
  return h5::make(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", path);
}
}  // namespace

DatasetInfo inspect_dataset(const std::string& path, bool check_labels) {
  std::lock_guard lock(hdf5_mutex());
  quiet_hdf5_errors();
  h5::Id file = open_serial(path);
  return detail::read_dataset_info(file, path, check_labels, nullptr);
}

void read_samples(const std::string& path, int64_t first, int64_t count, std::vector<uint8_t>& images,
                  std::vector<int32_t>& labels) {
  std::lock_guard lock(hdf5_mutex());
  quiet_hdf5_errors();
  h5::Id file = open_serial(path);
  const DatasetInfo info = detail::read_dataset_info(file, path, false, nullptr);
  HPDT_CHECK(first >= 0 && count >= 0 && first + count <= info.n, "read_samples: [", first, ", ", first + count,
             ") is outside the ", info.n, " samples of ", path);
  images.assign(size_t(count * info.sample_bytes()), 0);
  labels.assign(size_t(count), 0);
  if (count == 0) return;
  for (const char* name : {"/images", "/labels"}) {
    const bool img = name[1] == 'i';
    h5::Id dset = h5::make(H5Dopen2(file, name, H5P_DEFAULT), "H5Dopen", path + ":" + name);
    h5::Id fspace = h5::make(H5Dget_space(dset), "H5Dget_space", path + ":" + name);
    const hsize_t start[4] = {hsize_t(first), 0, 0, 0};
    const hsize_t cnt[4] = {hsize_t(count), hsize_t(info.c), hsize_t(info.h), hsize_t(info.w)};
    h5check(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, cnt, nullptr), "H5Sselect_hyperslab", path);
    h5::Id mspace = h5::make(H5Screate_simple(img ? 4 : 1, cnt, nullptr), "H5Screate_simple", path);
    if (img)
      h5check(H5Dread(dset, H5T_NATIVE_UINT8, mspace, fspace, H5P_DEFAULT, images.data()), "H5Dread", path + ":" + name);
    else
      h5check(H5Dread(dset, H5T_NATIVE_INT32, mspace, fspace, H5P_DEFAULT, labels.data()), "H5Dread", path + ":" + name);
  }
}

// ---- writer -----------------------------------------------------------------------------------

namespace {

struct Comm {
  MPI_Comm comm;
  int rank = 0, size = 1;
  explicit Comm(MPI_Comm c) : comm(c) {
    HPDT_MPI_CHECK(MPI_Comm_rank(c, &rank));
    HPDT_MPI_CHECK(MPI_Comm_size(c, &size));
  }
};

// Raises on every rank when any rank had an error, with rank `r`'s message (the lowest failing rank).
void agree_on_error(const Comm& c, const std::string& local_error, const std::string& where) {
  const int mine = local_error.empty() ? c.size : c.rank;
  int first = c.size;
  HPDT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c.comm));
  if (first == c.size) return;
  char msg[2048] = {0};
  if (c.rank == first) std::snprintf(msg, sizeof msg, "%s", local_error.c_str());
  HPDT_MPI_CHECK(MPI_Bcast(msg, sizeof msg, MPI_CHAR, first, c.comm));
  throw Error(std::string(msg) + (first == c.rank ? "" : " (on rank " + std::to_string(first) + ")"), where);
}

}  // namespace

DatasetInfo write_dataset(MPI_Comm comm, const std::string& path, const DatasetSpec& spec, const SampleFill& fill,
                          const WriteOptions& options) {
  const Comm c(comm);
  quiet_hdf5_errors();
  // Checks every rank can make on its own, identically.
  HPDT_CHECK(spec.n > 0, "cannot write a dataset of zero samples to ", path);
  HPDT_CHECK(spec.c > 0 && spec.h > 0 && spec.w > 0, "sample shape ", spec.c, "x", spec.h, "x", spec.w, " for ", path,
             " has an empty dimension");
  HPDT_CHECK(!spec.class_names.empty(), "a dataset needs at least one class (", path, ")");
  HPDT_CHECK(options.deflate_level >= 0 && options.deflate_level <= 9, "deflate level ", options.deflate_level,
             " is outside 0..9");
  HPDT_CHECK(options.deflate_level == 0 || options.layout == Layout::chunked,
             "compression needs the chunked layout (", path, ")");
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  HPDT_CHECK(fs::is_directory(dir), "output directory ", dir.string(), " does not exist (for ", path, ")");
  HPDT_CHECK(!fs::is_directory(target), "output path ", path, " is a directory");

  const int64_t sample_bytes = spec.c * spec.h * spec.w;
  int64_t chunk = 1;  // unit of the rank split: whole chunks per rank
  if (options.layout == Layout::chunked) {
    chunk = options.chunk_samples > 0 ? options.chunk_samples : std::max<int64_t>(1, (int64_t(1) << 20) / sample_bytes);
    chunk = std::min(chunk, spec.n);
    HPDT_CHECK(chunk * sample_bytes < (int64_t(1) << 32), "chunk of ", chunk, " samples is over HDF5's 4 GiB limit");
  }
  const int64_t units = (spec.n + chunk - 1) / chunk;
  const int64_t u0 = units * c.rank / c.size, u1 = units * (c.rank + 1) / c.size;
  const int64_t lo = std::min(spec.n, u0 * chunk), hi = std::min(spec.n, u1 * chunk);
  const int64_t block = std::max<int64_t>(chunk, options.block_bytes / sample_bytes / chunk * chunk);
  int64_t my_rounds = (hi - lo + block - 1) / block, rounds = 0;
  HPDT_MPI_CHECK(MPI_Allreduce(&my_rounds, &rounds, 1, MPI_INT64_T, MPI_MAX, comm));

  // One temporary name for all ranks, in the target's directory (so that rename is atomic).
  char tmp_name[4096] = {0};
  if (c.rank == 0)
    std::snprintf(tmp_name, sizeof tmp_name, "%s.tmp-%d", path.c_str(), int(getpid()));
  HPDT_MPI_CHECK(MPI_Bcast(tmp_name, sizeof tmp_name, MPI_CHAR, 0, comm));
  const std::string tmp = tmp_name;

  std::lock_guard lock(hdf5_mutex());
  std::string local_error;
  std::vector<double> sum(size_t(spec.c), 0.0), sumsq(size_t(spec.c), 0.0);
  int64_t bad_labels = 0, first_bad = -1;
  int32_t first_bad_value = 0;
  bool collective = true;
  std::vector<float> mean(size_t(spec.c)), stdev(size_t(spec.c));
  try {
    h5::Id fapl = h5::make(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", tmp);
    h5check(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL), "H5Pset_fapl_mpio", tmp);
    h5check(H5Pset_all_coll_metadata_ops(fapl, true), "H5Pset_all_coll_metadata_ops", tmp);
    h5check(H5Pset_coll_metadata_write(fapl, true), "H5Pset_coll_metadata_write", tmp);
    // Large contiguous datasets start on a 1 MiB boundary (a typical parallel file system stripe).
    h5check(H5Pset_alignment(fapl, 4 << 20, 1 << 20), "H5Pset_alignment", tmp);
    h5::Id file = h5::make(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "H5Fcreate", tmp);

    const hsize_t idims[4] = {hsize_t(spec.n), hsize_t(spec.c), hsize_t(spec.h), hsize_t(spec.w)};
    const hsize_t ldims[1] = {hsize_t(spec.n)};
    h5::Id ispace = h5::make(H5Screate_simple(4, idims, nullptr), "H5Screate_simple", tmp);
    h5::Id lspace = h5::make(H5Screate_simple(1, ldims, nullptr), "H5Screate_simple", tmp);
    h5::Id dcpl = h5::make(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", tmp);
    h5check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time", tmp);
    if (options.layout == Layout::chunked) {
      const hsize_t cdims[4] = {hsize_t(chunk), hsize_t(spec.c), hsize_t(spec.h), hsize_t(spec.w)};
      h5check(H5Pset_chunk(dcpl, 4, cdims), "H5Pset_chunk", tmp);
      if (options.deflate_level > 0) h5check(H5Pset_deflate(dcpl, unsigned(options.deflate_level)), "H5Pset_deflate", tmp);
    } else {
      h5check(H5Pset_layout(dcpl, H5D_CONTIGUOUS), "H5Pset_layout", tmp);
    }
    h5::Id images = h5::make(H5Dcreate2(file, "/images", H5T_STD_U8LE, ispace, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                             "H5Dcreate /images", tmp);
    h5::Id lcpl = h5::make(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", tmp);
    h5check(H5Pset_fill_time(lcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time", tmp);
    h5::Id labels = h5::make(H5Dcreate2(file, "/labels", H5T_STD_I32LE, lspace, H5P_DEFAULT, lcpl, H5P_DEFAULT),
                             "H5Dcreate /labels", tmp);
    h5::Id dxpl = h5::make(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", tmp);
    h5check(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio", tmp);

    std::vector<uint8_t> ibuf;
    std::vector<int32_t> lbuf;
    for (int64_t r = 0; r < rounds; ++r) {
      const int64_t b0 = std::min(hi, lo + r * block), b1 = std::min(hi, b0 + block), cnt = b1 - b0;
      ibuf.resize(size_t(std::max<int64_t>(cnt, 1) * sample_bytes));
      lbuf.resize(size_t(std::max<int64_t>(cnt, 1)));
      if (cnt > 0) {
        fill(b0, cnt, ibuf.data(), lbuf.data());
        for (int64_t i = 0; i < cnt; ++i) {
          const int32_t l = lbuf[size_t(i)];
          if (l < 0 || l >= int64_t(spec.class_names.size())) {
            if (bad_labels++ == 0) first_bad = b0 + i, first_bad_value = l;
          }
          for (int64_t ch = 0; ch < spec.c; ++ch) {
            const uint8_t* p = &ibuf[size_t(i * sample_bytes + ch * spec.h * spec.w)];
            uint64_t s = 0, s2 = 0;
            for (int64_t k = 0; k < spec.h * spec.w; ++k) s += p[k], s2 += uint32_t(p[k]) * p[k];
            sum[size_t(ch)] += double(s) / 255.0;
            sumsq[size_t(ch)] += double(s2) / (255.0 * 255.0);
          }
        }
      }
      const hsize_t start[4] = {hsize_t(b0), 0, 0, 0};
      const hsize_t count[4] = {hsize_t(cnt), hsize_t(spec.c), hsize_t(spec.h), hsize_t(spec.w)};
      h5::Id fsel = h5::make(H5Scopy(ispace), "H5Scopy", tmp);
      h5::Id lsel = h5::make(H5Scopy(lspace), "H5Scopy", tmp);
      const hsize_t mcount[4] = {hsize_t(std::max<int64_t>(cnt, 1)), count[1], count[2], count[3]};
      h5::Id mspace = h5::make(H5Screate_simple(4, mcount, nullptr), "H5Screate_simple", tmp);
      h5::Id lmspace = h5::make(H5Screate_simple(1, mcount, nullptr), "H5Screate_simple", tmp);
      if (cnt > 0) {
        h5check(H5Sselect_hyperslab(fsel, H5S_SELECT_SET, start, nullptr, count, nullptr), "H5Sselect_hyperslab", tmp);
        h5check(H5Sselect_hyperslab(lsel, H5S_SELECT_SET, start, nullptr, count, nullptr), "H5Sselect_hyperslab", tmp);
      } else {  // this rank has no more rows but must join the collective call
        for (hid_t s : {fsel.get(), lsel.get(), mspace.get(), lmspace.get()}) h5check(H5Sselect_none(s), "H5Sselect_none", tmp);
      }
      h5check(H5Dwrite(images, H5T_NATIVE_UINT8, mspace, fsel, dxpl, ibuf.data()), "H5Dwrite", tmp + ":/images");
      H5D_mpio_actual_io_mode_t mode{};
      h5check(H5Pget_mpio_actual_io_mode(dxpl, &mode), "H5Pget_mpio_actual_io_mode", tmp);
      if (mode == H5D_MPIO_NO_COLLECTIVE && cnt > 0) collective = false;
      h5check(H5Dwrite(labels, H5T_NATIVE_INT32, lmspace, lsel, dxpl, lbuf.data()), "H5Dwrite", tmp + ":/labels");
    }

    // Global statistics and attributes (attribute writes are collective: same values on every rank).
    std::vector<double> gsum(sum.size()), gsumsq(sum.size());
    HPDT_MPI_CHECK(MPI_Allreduce(sum.data(), gsum.data(), int(sum.size()), MPI_DOUBLE, MPI_SUM, comm));
    HPDT_MPI_CHECK(MPI_Allreduce(sumsq.data(), gsumsq.data(), int(sum.size()), MPI_DOUBLE, MPI_SUM, comm));
    const double count = double(spec.n) * double(spec.h * spec.w);
    for (size_t ch = 0; ch < sum.size(); ++ch) {
      const double m = gsum[ch] / count;
      const double v = std::max(0.0, gsumsq[ch] / count - m * m);
      mean[ch] = float(m);
      stdev[ch] = float(std::max(std::sqrt(v), 1e-6));  // a constant channel still normalises finitely
    }
    h5::Id root = h5::make(H5Gopen2(file, "/", H5P_DEFAULT), "H5Gopen /", tmp);
    h5::write_attr_string(root, "hpdt_format", kDatasetFormatName, tmp);
    h5::write_attr_i64(root, "format_version", kDatasetFormatVersion, tmp);
    h5::write_attr_i64(root, "num_classes", int64_t(spec.class_names.size()), tmp);
    h5::write_attr_strings(root, "class_names", spec.class_names, tmp);
    h5::write_attr_f32s(root, "mean", mean, tmp);
    h5::write_attr_f32s(root, "std", stdev, tmp);
    h5::write_attr_string(root, "source", spec.source, tmp);
    h5::write_attr_string(root, "source_checksum", spec.source_checksum, tmp);
    h5::write_attr_string(root, "created_by", std::string("hpdt ") + build_info().version + " (" +
                                                  build_info().git_commit + ")", tmp);
    root.reset();
    images.reset();
    labels.reset();
    file.close_checked(tmp);
  } catch (const std::exception& e) {
    local_error = e.what();
  }
  // Label errors are data errors every rank must agree on before the file is kept.
  if (local_error.empty() && bad_labels > 0)
    local_error = "label " + std::to_string(first_bad_value) + " of sample " + std::to_string(first_bad) +
                  " is outside [0, " + std::to_string(spec.class_names.size()) + ")";
  try {
    agree_on_error(c, local_error, path);
  } catch (...) {
    if (c.rank == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }
  if (c.rank == 0) {
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) local_error = "rename " + tmp + " -> " + path + " failed: " + ec.message();
  }
  try {
    agree_on_error(c, local_error, path);
  } catch (...) {
    if (c.rank == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }
  if (!collective) {
    HPDT_LOG(warn) << "HDF5 fell back to independent writes for " << path;
  }
  DatasetInfo info;
  info.path = path;
  info.n = spec.n;
  info.c = spec.c;
  info.h = spec.h;
  info.w = spec.w;
  info.num_classes = int64_t(spec.class_names.size());
  info.class_names = spec.class_names;
  info.source = spec.source;
  info.source_checksum = spec.source_checksum;
  info.format_version = kDatasetFormatVersion;
  info.layout = options.layout;
  info.chunk_samples = options.layout == Layout::chunked ? chunk : 0;
  info.compressed = options.deflate_level > 0;
  info.mean = mean;
  info.std = stdev;
  return info;
}

}  // namespace hpdt::io
