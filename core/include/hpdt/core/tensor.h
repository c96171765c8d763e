// Tensor: a typed, shaped, contiguous view of memory on the CPU or a CUDA device.
//
// A tensor either owns its memory (shared by its views, freed with the last of them) or wraps memory
// it does not own. Layout is always contiguous row-major; views are reshapes and slices that keep it
// contiguous. Shapes up to 8 dimensions.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hpdt/core/device.h"
#include "hpdt/core/dtype.h"
#include "hpdt/core/error.h"

namespace hpdt {

class Stream;

class Shape {
 public:
  static constexpr int kMaxDims = 8;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);
  int ndim() const { return n_; }
  int64_t operator[](int i) const;  // negative i counts from the back
  int64_t numel() const;
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + n_; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  std::string str() const;  // "[2, 3, 4]"
  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

struct AllocOptions {
  bool pinned = false;            // host tensors: page-locked (when CUDA is usable; else pageable)
  const Stream* stream = nullptr;  // device tensors: the stream the memory is first used on
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no memory, no shape

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(), AllocOptions opts = {});
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu(), AllocOptions opts = {});
  // A view of memory the tensor does not own; the caller keeps it alive.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device = Device::cpu());
  // A CPU tensor holding a copy of `values` (values.size() must equal shape.numel()).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return defined_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t size(int dim) const { return shape_[dim]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_cpu() const { return device_.is_cpu(); }
  bool is_cuda() const { return device_.is_cuda(); }
  bool is_owning() const { return storage_ != nullptr; }
  std::vector<int64_t> strides() const;  // in elements, contiguous row-major

  void* data() const { return data_; }
  template <class T>
  T* data() const {
    HPDT_CHECK(dtype_of_v<T> == dtype_, "tensor of dtype ", dtype_name(dtype_), " accessed as ",
               dtype_name(dtype_of_v<T>));
    return static_cast<T*>(data_);
  }

  Tensor view(const Shape& shape) const;               // same numel
  Tensor view(std::initializer_list<int64_t> dims) const;  // same numel; one dimension may be -1
  Tensor slice(int64_t begin, int64_t end) const;      // rows [begin, end) of dimension 0
  Tensor flat(int64_t offset, int64_t count) const;    // 1-D view of elements [offset, offset+count)
  Tensor clone(const Stream& stream) const;            // a new owning copy on the same device
  Tensor to(Device device, const Stream& stream, AllocOptions opts = {}) const;  // copy to a device
  std::string str() const;  // "Tensor(f32 [2, 3] cpu)"

  // Reads a CPU tensor into a vector (for tests and small host-side work).
  template <class T>
  std::vector<T> to_vector() const;

 private:
  Tensor view_impl(std::vector<int64_t> dims) const;

  std::shared_ptr<void> storage_;  // keeps owned memory alive; null for wrapped memory
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
  bool defined_ = false;
};

// dst <- src for any pair of devices. Same dtype and element count (shapes may differ). Asynchronous
// on CUDA streams; call stream.synchronize() before reading a CPU destination.
void copy(const Tensor& src, Tensor& dst, const Stream& stream);

// Throws hpdt::Error naming `op` unless the tensors agree. Used at the top of every kernel.
void check_same_device(std::string_view op, const Tensor& a, const Tensor& b);
void check_same_dtype(std::string_view op, const Tensor& a, const Tensor& b);
void check_same_numel(std::string_view op, const Tensor& a, const Tensor& b);
void check_shape(std::string_view op, std::string_view name, const Tensor& t, const Shape& expected);
void check_dtype(std::string_view op, std::string_view name, const Tensor& t, DType expected);

// ---- templates ---------------------------------------------------------------------------------

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  HPDT_CHECK(int64_t(values.size()) == shape.numel(), "Tensor::from_vector: ", values.size(),
             " values for shape ", shape.str());
  Tensor t = empty(shape, dtype_of_v<T>);
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * sizeof(T));
  return t;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  HPDT_CHECK(is_cpu(), "Tensor::to_vector needs a CPU tensor, got ", str());
  const T* p = data<T>();
  return std::vector<T>(p, p + numel());
}

}  // namespace hpdt
