#include "hpdt/kernels/compress.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "hpdt/kernels/cpu/gemm.h"
#include "hpdt/kernels/dispatch.h"
#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/compress.h"
#endif

namespace hpdt::kernels {

int64_t topk_count(int64_t n, double ratio) {
  HPDT_CHECK(ratio > 0 && ratio <= 1, "topk_count: the ratio ", ratio, " must be in (0, 1]");
  if (n == 0) return 0;
  return std::min<int64_t>(n, std::max<int64_t>(1, int64_t(std::ceil(ratio * double(n)))));
}

int64_t qsgd_chunks(int64_t n) { return (n + kQsgdChunk - 1) / kQsgdChunk; }
int64_t qsgd_packed_bytes(int64_t n, int bits) { return (n * bits + 7) / 8; }

namespace {
void check_bits(std::string_view op, int bits) {
  HPDT_CHECK(bits >= 2 && bits <= 8, op, ": QSGD bits ", bits, " must be 2..8");
}
}  // namespace

void topk_select(const Tensor& x, int64_t k, Tensor& indices, Tensor& values, const Stream& s) {
  const Device dev = detail::common_device("topk_select", {&x, &indices, &values}, s);
  check_dtype("topk_select", "x", x, DType::f32);
  check_dtype("topk_select", "indices", indices, DType::i32);
  check_dtype("topk_select", "values", values, DType::f32);
  const int64_t n = x.numel();
  HPDT_CHECK(n <= INT32_MAX, "topk_select: ", n, " values exceed 32-bit indices");
  HPDT_CHECK(k >= 0 && k <= n, "topk_select: k = ", k, " must be in [0, ", n, "]");
  HPDT_CHECK(indices.numel() == k && values.numel() == k, "topk_select: indices ", indices.str(), " and values ",
             values.str(), " must hold k = ", k, " elements");
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::topk_select(x, k, indices, values, s));
    return;
  }
  cpu::topk_select(n, x.data<float>(), k, indices.data<int32_t>(), values.data<float>());
}

void qsgd_quantize(const Tensor& x, int bits, const QsgdRandom& rng, Tensor& packed, Tensor& scales, Tensor* residual,
                   const Stream& s) {
  constexpr std::string_view op = "qsgd_quantize";
  const Device dev = residual ? detail::common_device(op, {&x, &packed, &scales, residual}, s)
                              : detail::common_device(op, {&x, &packed, &scales}, s);
  check_bits(op, bits);
  check_dtype(op, "x", x, DType::f32);
  check_dtype(op, "packed", packed, DType::u8);
  check_dtype(op, "scales", scales, DType::f32);
  const int64_t n = x.numel();
  HPDT_CHECK(packed.numel() == qsgd_packed_bytes(n, bits), op, ": packed ", packed.str(), " must hold ",
             qsgd_packed_bytes(n, bits), " bytes for ", n, " values of ", bits, " bits");
  HPDT_CHECK(scales.numel() == qsgd_chunks(n), op, ": scales ", scales.str(), " must hold ", qsgd_chunks(n),
             " values (one per 512)");
  if (residual) {
    check_dtype(op, "residual", *residual, DType::f32);
    check_same_numel(op, x, *residual);
  }
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::qsgd_quantize(x, bits, rng, packed, scales, residual, s));
    return;
  }
  cpu::qsgd_quantize(n, x.data<float>(), bits, rng, packed.data<uint8_t>(), scales.data<float>(),
                     residual ? residual->data<float>() : nullptr);
}

void qsgd_dequantize(const Tensor& packed, const Tensor& scales, int bits, Tensor& out, bool accumulate,
                     const Stream& s) {
  constexpr std::string_view op = "qsgd_dequantize";
  const Device dev = detail::common_device(op, {&packed, &scales, &out}, s);
  check_bits(op, bits);
  check_dtype(op, "packed", packed, DType::u8);
  check_dtype(op, "scales", scales, DType::f32);
  check_dtype(op, "out", out, DType::f32);
  const int64_t n = out.numel();
  HPDT_CHECK(packed.numel() == qsgd_packed_bytes(n, bits), op, ": packed ", packed.str(), " must hold ",
             qsgd_packed_bytes(n, bits), " bytes for ", n, " values of ", bits, " bits");
  HPDT_CHECK(scales.numel() == qsgd_chunks(n), op, ": scales ", scales.str(), " must hold ", qsgd_chunks(n),
             " values (one per 512)");
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::qsgd_dequantize(packed, scales, bits, out, accumulate, s));
    return;
  }
  cpu::qsgd_dequantize(n, packed.data<uint8_t>(), scales.data<float>(), bits, out.data<float>(), accumulate);
}

void sparse_accumulate(const Tensor& indices, const Tensor& values, Tensor& out, const Stream& s) {
  const Device dev = detail::common_device("sparse_accumulate", {&indices, &values, &out}, s);
  check_dtype("sparse_accumulate", "indices", indices, DType::i32);
  check_dtype("sparse_accumulate", "values", values, DType::f32);
  check_dtype("sparse_accumulate", "out", out, DType::f32);
  check_same_numel("sparse_accumulate", indices, values);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::sparse_accumulate(indices, values, out, s));
    return;
  }
  const int32_t* idx = indices.data<int32_t>();
  for (int64_t j = 0; j < indices.numel(); ++j)
    HPDT_CHECK(idx[j] >= 0 && idx[j] < out.numel(), "sparse_accumulate: index ", idx[j], " outside ", out.str());
  cpu::sparse_accumulate(indices.numel(), idx, values.data<float>(), out.data<float>());
}

void powersgd_product(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, Tensor& c, const Stream& s) {
  const Device dev = detail::common_device("powersgd_product", {&a, &b, &c}, s);
  check_dtype("powersgd_product", "a", a, DType::f32);
  check_dtype("powersgd_product", "b", b, DType::f32);
  check_dtype("powersgd_product", "c", c, DType::f32);
  HPDT_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "powersgd_product: a, b and c must be matrices, got ",
             a.str(), ", ", b.str(), ", ", c.str());
  const int64_t m = trans_a ? a.size(1) : a.size(0), k = trans_a ? a.size(0) : a.size(1);
  const int64_t kb = trans_b ? b.size(1) : b.size(0), n = trans_b ? b.size(0) : b.size(1);
  HPDT_CHECK(k == kb && c.size(0) == m && c.size(1) == n, "powersgd_product: op(a) ", m, " x ", k, " times op(b) ", kb,
             " x ", n, " does not give c ", c.str());
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::powersgd_product(trans_a, trans_b, a, b, c, s));
    return;
  }
  if (m == 0 || n == 0) return;
  cpu::gemm<float>(trans_a, trans_b, m, n, k, 1.0f, a.data<float>(), a.size(1), b.data<float>(), b.size(1), 0.0f,
                   c.data<float>(), n);
}

void sparse_fill(const Tensor& indices, float value, Tensor& x, const Stream& s) {
  const Device dev = detail::common_device("sparse_fill", {&indices, &x}, s);
  check_dtype("sparse_fill", "indices", indices, DType::i32);
  check_dtype("sparse_fill", "x", x, DType::f32);
  if (dev.is_cuda()) {
    HPDT_ON_CUDA(cuda::sparse_fill(indices, value, x, s));
    return;
  }
  const int32_t* idx = indices.data<int32_t>();
  for (int64_t j = 0; j < indices.numel(); ++j)
    HPDT_CHECK(idx[j] >= 0 && idx[j] < x.numel(), "sparse_fill: index ", idx[j], " outside ", x.str());
  cpu::sparse_fill(indices.numel(), idx, value, x.data<float>());
}

}  // namespace hpdt::kernels
