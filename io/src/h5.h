// Private HDF5 helpers of io/: an owning handle that closes whatever it holds, attribute reads and
// writes with errors naming the file and object, and the process-wide lock that serialises HDF5
// (the Debian parallel build is not thread-safe, and the reader calls it from its I/O thread).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hpdt/core/check_hdf5.h"
#include "hpdt/io/hdf5_lock.h"

namespace hpdt::io::h5 {

// Owns one HDF5 identifier of any kind and closes it with the matching H5?close.
class Id {
 public:
  Id() = default;
  explicit Id(hid_t id) : id_(id) {}
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  ~Id() { reset(); }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: used in HDF5 calls
  bool valid() const { return id_ >= 0; }
  void reset();
  // Closes a file now and reports failure (closing flushes; an error there means data was lost).
  void close_checked(const std::string& where);

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Checked creation: h5check then wrap.
inline Id make(hid_t id, const std::string& what, const std::string& where) { return Id(h5check(id, what, where)); }

bool has_link(hid_t loc, const std::string& name);
bool has_attr(hid_t obj, const std::string& name);

void write_attr_string(hid_t obj, const std::string& name, const std::string& value, const std::string& where);
void write_attr_strings(hid_t obj, const std::string& name, const std::vector<std::string>& values,
                        const std::string& where);
void write_attr_i64(hid_t obj, const std::string& name, int64_t value, const std::string& where);
void write_attr_u64s(hid_t obj, const std::string& name, const std::vector<uint64_t>& values, const std::string& where);
void write_attr_f64(hid_t obj, const std::string& name, double value, const std::string& where);
void write_attr_f32s(hid_t obj, const std::string& name, const std::vector<float>& values, const std::string& where);

// Reads throw hpdt::Error naming `where` and the attribute when it is missing or of the wrong kind.
std::string read_attr_string(hid_t obj, const std::string& name, const std::string& where);
std::vector<std::string> read_attr_strings(hid_t obj, const std::string& name, const std::string& where);
int64_t read_attr_i64(hid_t obj, const std::string& name, const std::string& where);
std::vector<uint64_t> read_attr_u64s(hid_t obj, const std::string& name, const std::string& where);
double read_attr_f64(hid_t obj, const std::string& name, const std::string& where);
std::vector<float> read_attr_f32s(hid_t obj, const std::string& name, const std::string& where);

}  // namespace hpdt::io::h5
