#include "hpdt/core/tensor.h"

#include <cstring>

#include "hpdt/core/allocator.h"
#include "hpdt/core/stream.h"

#if HPDT_HAVE_CUDA
#include "hpdt/core/check_cuda.h"
#endif

namespace hpdt {

// ---- Shape ----------------------------------------------------------------------------------------

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  HPDT_CHECK(dims.size() <= size_t(kMaxDims), "a shape has at most ", kMaxDims, " dimensions, got ", dims.size());
  for (int64_t d : dims) HPDT_CHECK(d >= 0, "negative dimension ", d, " in a shape");
  n_ = int(dims.size());
  for (int i = 0; i < n_; ++i) d_[size_t(i)] = dims[size_t(i)];
}

int64_t Shape::operator[](int i) const {
  const int j = i < 0 ? i + n_ : i;
  HPDT_CHECK(j >= 0 && j < n_, "dimension ", i, " out of range for shape ", str());
  return d_[size_t(j)];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i) n *= d_[size_t(i)];
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < n_; ++i) s += (i ? ", " : "") + std::to_string(d_[size_t(i)]);
  return s + "]";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.n_ != b.n_) return false;
  for (int i = 0; i < a.n_; ++i)
    if (a.d_[size_t(i)] != b.d_[size_t(i)]) return false;
  return true;
}

// ---- Tensor ---------------------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, AllocOptions opts) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.defined_ = true;
  const size_t bytes = t.nbytes();
  if (device.is_cpu()) {
    t.storage_ = allocate_host(bytes, opts.pinned);
  } else {
    if (opts.stream) HPDT_CHECK(opts.stream->device() == device, "tensor on ", device.str(), " allocated for a stream on ", opts.stream->device().str());
    t.storage_ = allocate_device(bytes, device.index, opts.stream);
  }
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, AllocOptions opts) {
  Tensor t = empty(shape, dtype, device, opts);
  if (device.is_cpu()) {
    std::memset(t.data_, 0, t.nbytes());
  } else {
#if HPDT_HAVE_CUDA
    if (opts.stream) {
      HPDT_CUDA_CHECK(cudaMemsetAsync(t.data_, 0, t.nbytes(), static_cast<cudaStream_t>(opts.stream->handle())));
    } else {
      // Without a stream the zeros must be there when this returns: cudaMemset of device memory is
      // asynchronous to the host and unordered with the non-blocking streams hpdt's work runs on.
      HPDT_CUDA_CHECK(cudaMemset(t.data_, 0, t.nbytes()));
      HPDT_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    }
#endif
  }
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device) {
  HPDT_CHECK(data != nullptr || shape.numel() == 0, "Tensor::wrap of a null pointer with shape ", shape.str());
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.defined_ = true;
  return t;
}

std::vector<int64_t> Tensor::strides() const {
  std::vector<int64_t> s(size_t(ndim()), 1);
  for (int i = ndim() - 2; i >= 0; --i) s[size_t(i)] = s[size_t(i) + 1] * shape_[i + 1];
  return s;
}

Tensor Tensor::view(const Shape& shape) const {
  HPDT_CHECK(defined_, "view of an undefined tensor");
  // Shape rejects negative sizes, so -1 ("infer") is resolved from the raw dimensions first.
  return view_impl(shape.vec());
}

Tensor Tensor::view_impl(std::vector<int64_t> dims) const {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      HPDT_CHECK(infer < 0, "view ", str(), ": more than one dimension is -1");
      infer = int(i);
    } else {
      known *= dims[i];
    }
  }
  if (infer >= 0) {
    HPDT_CHECK(known > 0 && numel() % known == 0, "view of ", str(), ": cannot infer a dimension");
    dims[size_t(infer)] = numel() / known;
  }
  Shape s(dims);
  HPDT_CHECK(s.numel() == numel(), "view of ", str(), " as ", s.str(), ": element counts differ");
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::view(std::initializer_list<int64_t> dims) const { return view_impl(std::vector<int64_t>(dims)); }

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  HPDT_CHECK(ndim() >= 1, "slice of a 0-d tensor ", str());
  HPDT_CHECK(0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ", end, ") out of range for ", str());
  const int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  std::vector<int64_t> dims = shape_.vec();
  dims[0] = end - begin;
  Tensor t = *this;
  t.shape_ = Shape(dims);
  t.data_ = static_cast<char*>(data_) + size_t(begin * row) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::flat(int64_t offset, int64_t count) const {
  HPDT_CHECK(offset >= 0 && count >= 0 && offset + count <= numel(), "flat view [", offset, ", ", offset + count,
             ") out of range for ", str());
  Tensor t = *this;
  t.shape_ = Shape{count};
  t.data_ = static_cast<char*>(data_) + size_t(offset) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::clone(const Stream& stream) const {
  AllocOptions opts;
  if (device_.is_cuda()) opts.stream = &stream;
  Tensor t = empty(shape_, dtype_, device_, opts);
  copy(*this, t, stream);
  return t;
}

Tensor Tensor::to(Device device, const Stream& stream, AllocOptions opts) const {
  if (device.is_cuda() && !opts.stream && stream.is_cuda()) opts.stream = &stream;
  Tensor t = empty(shape_, dtype_, device, opts);
  copy(*this, t, stream);
  return t;
}

std::string Tensor::str() const {
  if (!defined_) return "Tensor(undefined)";
  return "Tensor(" + std::string(dtype_name(dtype_)) + " " + shape_.str() + " " + device_.str() + ")";
}

// ---- copy and checks ------------------------------------------------------------------------------

void copy(const Tensor& src, Tensor& dst, const Stream& stream) {
  check_same_dtype("copy", src, dst);
  check_same_numel("copy", src, dst);
  const size_t bytes = src.nbytes();
  if (bytes == 0 || src.data() == dst.data()) return;
  if (src.is_cpu() && dst.is_cpu()) {
    std::memmove(dst.data(), src.data(), bytes);
    return;
  }
#if HPDT_HAVE_CUDA
  HPDT_CHECK(stream.is_cuda(), "copy between ", src.str(), " and ", dst.str(), " needs a CUDA stream");
  cudaMemcpyKind kind = src.is_cpu() ? cudaMemcpyHostToDevice : dst.is_cpu() ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice;
  if (src.is_cuda() && dst.is_cuda() && src.device() != dst.device()) {
    HPDT_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data(), dst.device().index, src.data(), src.device().index, bytes,
                                        static_cast<cudaStream_t>(stream.handle())));
    return;
  }
  HPDT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, kind, static_cast<cudaStream_t>(stream.handle())));
#else
  (void)stream;
  HPDT_FAIL("copy between ", src.str(), " and ", dst.str(), ": hpdt was built without CUDA");
#endif
}

void check_same_device(std::string_view op, const Tensor& a, const Tensor& b) {
  HPDT_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.str(), " and ", b.str());
}
void check_same_dtype(std::string_view op, const Tensor& a, const Tensor& b) {
  HPDT_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", a.str(), " and ", b.str());
}
void check_same_numel(std::string_view op, const Tensor& a, const Tensor& b) {
  HPDT_CHECK(a.numel() == b.numel(), op, ": element counts differ: ", a.str(), " and ", b.str());
}
void check_shape(std::string_view op, std::string_view name, const Tensor& t, const Shape& expected) {
  HPDT_CHECK(t.shape() == expected, op, ": ", name, " has shape ", t.shape().str(), ", expected ", expected.str());
}
void check_dtype(std::string_view op, std::string_view name, const Tensor& t, DType expected) {
  HPDT_CHECK(t.dtype() == expected, op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", expected ",
             dtype_name(expected));
}

}  // namespace hpdt
