#include "h5.h"

#include <cstring>

namespace hpdt::io {

std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

}  // namespace hpdt::io

namespace hpdt::io::h5 {

namespace {
herr_t close_any(hid_t id) {
  switch (H5Iget_type(id)) {
    case H5I_FILE: return H5Fclose(id);
    case H5I_GROUP: return H5Gclose(id);
    case H5I_DATATYPE: return H5Tclose(id);
    case H5I_DATASPACE: return H5Sclose(id);
    case H5I_DATASET: return H5Dclose(id);
    case H5I_ATTR: return H5Aclose(id);
    case H5I_GENPROP_LST: return H5Pclose(id);
    default: return -1;
  }
}

Id open_attr(hid_t obj, const std::string& name, const std::string& where) {
  if (H5Aexists(obj, name.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw Error("attribute '" + name + "' is missing", where);
  }
  return make(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "H5Aopen " + name, where);
}

// Replaces an attribute of the same name, then creates it with `type` and `space`.
Id create_attr(hid_t obj, const std::string& name, hid_t type, hid_t space, const std::string& where) {
  if (H5Aexists(obj, name.c_str()) > 0) h5check(H5Adelete(obj, name.c_str()), "H5Adelete " + name, where);
  return make(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), "H5Acreate " + name, where);
}

int64_t attr_numel(hid_t attr, const std::string& name, const std::string& where) {
  Id space = make(H5Aget_space(attr), "H5Aget_space " + name, where);
  return h5check(H5Sget_simple_extent_npoints(space), "H5Sget_simple_extent_npoints " + name, where);
}

void require_class(hid_t attr, H5T_class_t cls, const char* what, const std::string& name, const std::string& where) {
  Id type = make(H5Aget_type(attr), "H5Aget_type " + name, where);
  if (H5Tget_class(type) != cls) throw Error("attribute '" + name + "' is not " + what, where);
}
}  // namespace

void Id::reset() {
  if (id_ >= 0) {
    close_any(id_);  // errors on close of non-file objects are not actionable
    id_ = H5I_INVALID_HID;
  }
}

void Id::close_checked(const std::string& where) {
  if (id_ < 0) return;
  const hid_t id = std::exchange(id_, H5I_INVALID_HID);
  h5check(close_any(id), "closing", where);
}

bool has_link(hid_t loc, const std::string& name) {
  const htri_t r = H5Lexists(loc, name.c_str(), H5P_DEFAULT);
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

bool has_attr(hid_t obj, const std::string& name) {
  const htri_t r = H5Aexists(obj, name.c_str());
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

void write_attr_string(hid_t obj, const std::string& name, const std::string& value, const std::string& where) {
  Id type = make(H5Tcopy(H5T_C_S1), "H5Tcopy", where);
  h5check(H5Tset_size(type, value.empty() ? 1 : value.size()), "H5Tset_size", where);
  h5check(H5Tset_strpad(type, H5T_STR_NULLPAD), "H5Tset_strpad", where);
  Id space = make(H5Screate(H5S_SCALAR), "H5Screate", where);
  Id attr = create_attr(obj, name, type, space, where);
  const char zero = 0;
  h5check(H5Awrite(attr, type, value.empty() ? &zero : value.data()), "H5Awrite " + name, where);
}

void write_attr_strings(hid_t obj, const std::string& name, const std::vector<std::string>& values,
                        const std::string& where) {
  size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size());
  std::vector<char> buf(width * std::max<size_t>(values.size(), 1), 0);
  for (size_t i = 0; i < values.size(); ++i) std::memcpy(&buf[i * width], values[i].data(), values[i].size());
  Id type = make(H5Tcopy(H5T_C_S1), "H5Tcopy", where);
  h5check(H5Tset_size(type, width), "H5Tset_size", where);
  h5check(H5Tset_strpad(type, H5T_STR_NULLPAD), "H5Tset_strpad", where);
  const hsize_t n = values.size();
  Id space = make(n ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_NULL), "H5Screate", where);
  Id attr = create_attr(obj, name, type, space, where);
  if (n) h5check(H5Awrite(attr, type, buf.data()), "H5Awrite " + name, where);
}

void write_attr_i64(hid_t obj, const std::string& name, int64_t value, const std::string& where) {
  Id space = make(H5Screate(H5S_SCALAR), "H5Screate", where);
  Id attr = create_attr(obj, name, H5T_STD_I64LE, space, where);
  h5check(H5Awrite(attr, H5T_NATIVE_INT64, &value), "H5Awrite " + name, where);
}

void write_attr_u64s(hid_t obj, const std::string& name, const std::vector<uint64_t>& values, const std::string& where) {
  const hsize_t n = values.size();
  Id space = make(H5Screate_simple(1, &n, nullptr), "H5Screate_simple", where);
  Id attr = create_attr(obj, name, H5T_STD_U64LE, space, where);
  h5check(H5Awrite(attr, H5T_NATIVE_UINT64, values.data()), "H5Awrite " + name, where);
}

void write_attr_f64(hid_t obj, const std::string& name, double value, const std::string& where) {
  Id space = make(H5Screate(H5S_SCALAR), "H5Screate", where);
  Id attr = create_attr(obj, name, H5T_IEEE_F64LE, space, where);
  h5check(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value), "H5Awrite " + name, where);
}

void write_attr_f32s(hid_t obj, const std::string& name, const std::vector<float>& values, const std::string& where) {
  const hsize_t n = values.size();
  Id space = make(H5Screate_simple(1, &n, nullptr), "H5Screate_simple", where);
  Id attr = create_attr(obj, name, H5T_IEEE_F32LE, space, where);
  h5check(H5Awrite(attr, H5T_NATIVE_FLOAT, values.data()), "H5Awrite " + name, where);
}

std::string read_attr_string(hid_t obj, const std::string& name, const std::string& where) {
  auto v = read_attr_strings(obj, name, where);
  if (v.size() != 1) throw Error("attribute '" + name + "' holds " + std::to_string(v.size()) + " strings, expected 1", where);
  return v[0];
}

std::vector<std::string> read_attr_strings(hid_t obj, const std::string& name, const std::string& where) {
  Id attr = open_attr(obj, name, where);
  require_class(attr, H5T_STRING, "a string", name, where);
  Id ftype = make(H5Aget_type(attr), "H5Aget_type", where);
  if (H5Tis_variable_str(ftype) > 0) throw Error("attribute '" + name + "' is a variable-length string (expected fixed-length)", where);
  const size_t width = H5Tget_size(ftype);
  const int64_t n = attr_numel(attr, name, where);
  if (n == 0) return {};
  Id mtype = make(H5Tcopy(H5T_C_S1), "H5Tcopy", where);
  h5check(H5Tset_size(mtype, width), "H5Tset_size", where);
  h5check(H5Tset_strpad(mtype, H5T_STR_NULLPAD), "H5Tset_strpad", where);
  std::vector<char> buf(width * size_t(n), 0);
  h5check(H5Aread(attr, mtype, buf.data()), "H5Aread " + name, where);
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) {
    const char* p = &buf[size_t(i) * width];
    out.emplace_back(p, strnlen(p, width));
  }
  return out;
}

int64_t read_attr_i64(hid_t obj, const std::string& name, const std::string& where) {
  Id attr = open_attr(obj, name, where);
  require_class(attr, H5T_INTEGER, "an integer", name, where);
  if (attr_numel(attr, name, where) != 1) throw Error("attribute '" + name + "' is not a scalar", where);
  int64_t v = 0;
  h5check(H5Aread(attr, H5T_NATIVE_INT64, &v), "H5Aread " + name, where);
  return v;
}

std::vector<uint64_t> read_attr_u64s(hid_t obj, const std::string& name, const std::string& where) {
  Id attr = open_attr(obj, name, where);
  require_class(attr, H5T_INTEGER, "an integer array", name, where);
  std::vector<uint64_t> v(size_t(attr_numel(attr, name, where)));
  if (!v.empty()) h5check(H5Aread(attr, H5T_NATIVE_UINT64, v.data()), "H5Aread " + name, where);
  return v;
}

double read_attr_f64(hid_t obj, const std::string& name, const std::string& where) {
  Id attr = open_attr(obj, name, where);
  if (attr_numel(attr, name, where) != 1) throw Error("attribute '" + name + "' is not a scalar", where);
  double v = 0;
  h5check(H5Aread(attr, H5T_NATIVE_DOUBLE, &v), "H5Aread " + name, where);
  return v;
}

std::vector<float> read_attr_f32s(hid_t obj, const std::string& name, const std::string& where) {
  Id attr = open_attr(obj, name, where);
  require_class(attr, H5T_FLOAT, "a float array", name, where);
  std::vector<float> v(size_t(attr_numel(attr, name, where)));
  if (!v.empty()) h5check(H5Aread(attr, H5T_NATIVE_FLOAT, v.data()), "H5Aread " + name, where);
  return v;
}

}  // namespace hpdt::io::h5
