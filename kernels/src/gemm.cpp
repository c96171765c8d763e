#include "hpdt/kernels/gemm.h"

#include "hpdt/kernels/cpu/gemm.h"
#include "hpdt/kernels/dispatch.h"

namespace hpdt::kernels {

void matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha, float beta, const Stream& s) {
  detail::cpu_f32_only("matmul", {&a, &b, &c}, s);
  HPDT_CHECK(a.ndim() == 2 && b.ndim() == 2 && c.ndim() == 2, "matmul: needs 2-D tensors, got a ", a.shape().str(),
             ", b ", b.shape().str(), ", c ", c.shape().str());
  const int64_t M = ta ? a.size(1) : a.size(0), K = ta ? a.size(0) : a.size(1);
  const int64_t Kb = tb ? b.size(1) : b.size(0), N = tb ? b.size(0) : b.size(1);
  HPDT_CHECK(K == Kb && c.size(0) == M && c.size(1) == N, "matmul: op(a) ", M, "x", K, " times op(b) ", Kb, "x", N,
             " into c ", c.shape().str(), " do not agree");
  cpu::gemm<float>(ta, tb, M, N, K, alpha, a.data<float>(), a.size(1), b.data<float>(), b.size(1), beta,
                   c.data<float>(), N);
}

}  // namespace hpdt::kernels
