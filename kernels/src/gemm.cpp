#include "hpdt/kernels/gemm.h"

#include <algorithm>

#include "hpdt/kernels/cpu/gemm.h"
#include "hpdt/kernels/dispatch.h"

#if HPDT_HAVE_CUDA
#include "hpdt/kernels/cuda/gemm.h"
#endif

namespace hpdt::kernels {

void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta, const Stream& s) {
  // CPU: every tensor f32. CUDA: a and b one floating dtype, c f32 or that dtype.
  const Device dev = detail::common_device("matmul", {&a, &b, &c}, s);
  if (dev.is_cpu()) {
    detail::float_op_device("matmul", {&a, &b, &c}, s);
  } else {
    detail::float_op_device("matmul", {&a, &b}, s);
    HPDT_CHECK(c.dtype() == DType::f32 || c.dtype() == a.dtype(), "matmul: c has dtype ", dtype_name(c.dtype()),
               "; on CUDA c is f32 or the dtype of a and b (", dtype_name(a.dtype()), ")");
  }
  HPDT_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "matmul: needs 2-D tensors, got a ", a.shape().str(),
             ", b ", b.shape().str(), ", c ", c.shape().str());
  const int64_t M = ta ? a.size(1) : a.size(0), K = ta ? a.size(0) : a.size(1);
  const int64_t Kb = tb ? b.size(1) : b.size(0), N = tb ? b.size(0) : b.size(1);
  HPDT_CHECK(K == Kb && c.size(0) == M && c.size(1) == N, "matmul: op(a) ", M, "x", K, " times op(b) ", Kb, "x", N,
             " into c ", c.shape().str(), " do not agree");
  if (dev.is_cuda()) {
    // Leading dimensions of empty tensors may be 0: gemm needs >= 1 (nothing is read then).
    HPDT_ON_CUDA(cuda::gemm(ta, tb, M, N, K, alpha, a.data(), std::max<int64_t>(1, a.size(1)), b.data(),
                            std::max<int64_t>(1, b.size(1)), beta, c.data(), std::max<int64_t>(1, N), a.dtype(),
                            c.dtype(), {}, s));
    return;
  }
  cpu::gemm<float>(ta, tb, M, N, K, alpha, a.data<float>(), a.size(1), b.data<float>(), b.size(1), beta,
                   c.data<float>(), N);
}

}  // namespace hpdt::kernels
