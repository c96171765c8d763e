// Scaled dot-product attention on the CPU: one (batch, head) pair per OpenMP iteration, three GEMMs
// forward and four backward, reading q, k, v in place from the packed QKV rows (stride 3 * heads * dh).
#include "hpdt/kernels/cpu/attention.h"

#include <cmath>
#include <vector>

#include "hpdt/kernels/cpu/activation.h"
#include "hpdt/kernels/cpu/gemm.h"

namespace hpdt::kernels::cpu {

template <class T>
void attention_forward(int64_t b, int64_t t, int64_t heads, int64_t dh, const T* qkv, T* probs, T* out) {
  const int64_t d = heads * dh, ld = 3 * d;
  const T scale = T(1) / std::sqrt(T(dh));
#pragma omp parallel for schedule(static) if (b * heads > 1)
  for (int64_t bh = 0; bh < b * heads; ++bh) {
    const int64_t bi = bh / heads, h = bh % heads;
    const T* q = qkv + bi * t * ld + h * dh;
    const T* k = q + d;
    const T* v = q + 2 * d;
    T* p = probs + bh * t * t;
    gemm<T>(false, true, t, t, dh, scale, q, ld, k, ld, T(0), p, t);
    softmax_forward<T>(t, t, p, p);
    gemm<T>(false, false, t, dh, t, T(1), p, t, v, ld, T(0), out + bi * t * d + h * dh, d);
  }
}

template <class T>
void attention_backward(int64_t b, int64_t t, int64_t heads, int64_t dh, const T* qkv, const T* probs,
                        const T* dout, T* dqkv) {
  const int64_t d = heads * dh, ld = 3 * d;
  const T scale = T(1) / std::sqrt(T(dh));
#pragma omp parallel for schedule(static) if (b * heads > 1)
  for (int64_t bh = 0; bh < b * heads; ++bh) {
    static thread_local std::vector<T> ds_buf;
    if (ds_buf.size() < size_t(t * t)) ds_buf.resize(size_t(t * t));
    T* ds = ds_buf.data();
    const int64_t bi = bh / heads, h = bh % heads;
    const T* q = qkv + bi * t * ld + h * dh;
    const T* k = q + d;
    const T* v = q + 2 * d;
    const T* p = probs + bh * t * t;
    const T* go = dout + bi * t * d + h * dh;
    T* dq = dqkv + bi * t * ld + h * dh;
    T* dk = dq + d;
    T* dv = dq + 2 * d;
    gemm<T>(false, true, t, t, dh, T(1), go, d, v, ld, T(0), ds, t);  // dP = dO V^T
    gemm<T>(true, false, t, dh, t, T(1), p, t, go, d, T(0), dv, ld);  // dV = P^T dO
    softmax_backward<T>(t, t, p, ds, ds);                                // dS
    gemm<T>(false, false, t, dh, t, scale, ds, t, k, ld, T(0), dq, ld);  // dQ = scale dS K
    gemm<T>(true, false, t, dh, t, scale, ds, t, q, ld, T(0), dk, ld);   // dK = scale dS^T Q
  }
}

template void attention_forward<float>(int64_t, int64_t, int64_t, int64_t, const float*, float*, float*);
template void attention_forward<double>(int64_t, int64_t, int64_t, int64_t, const double*, double*, double*);
template void attention_backward<float>(int64_t, int64_t, int64_t, int64_t, const float*, const float*,
                                        const float*, float*);
template void attention_backward<double>(int64_t, int64_t, int64_t, int64_t, const double*, const double*,
                                         const double*, double*);

}  // namespace hpdt::kernels::cpu
