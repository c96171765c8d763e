// conv2d on the CPU, NCHW: per image an im2col buffer [c_in*kh*kw, oh*ow] and one GEMM with the weights
// [c_out, c_in*kh*kw]. 1x1 stride-1 unpadded convolutions use the input plane directly (no copy).
// Images are split over OpenMP threads (each GEMM then runs on its thread); one image runs the GEMM
// threaded instead.
#include "hpdt/kernels/cpu/conv.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "hpdt/kernels/cpu/gemm.h"

namespace hpdt::kernels {

std::string Conv2dShape::str() const {
  std::ostringstream os;
  os << "x [" << n << ", " << c_in << ", " << h << ", " << w << "] * w [" << c_out << ", " << c_in << ", " << kh
     << ", " << kw << "] stride " << stride << " pad " << pad;
  return os.str();
}

namespace cpu {

namespace {

bool is_direct(const Conv2dShape& s) { return s.kh == 1 && s.kw == 1 && s.stride == 1 && s.pad == 0; }

template <class T>
void im2col(const Conv2dShape& s, const T* x, T* col) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  for (int64_t ci = 0; ci < s.c_in; ++ci)
    for (int64_t ky = 0; ky < s.kh; ++ky)
      for (int64_t kx = 0; kx < s.kw; ++kx) {
        T* dst = col + ((ci * s.kh + ky) * s.kw + kx) * oh * ow;
        const T* plane = x + ci * s.h * s.w;
        for (int64_t oy = 0; oy < oh; ++oy) {
          const int64_t iy = oy * s.stride - s.pad + ky;
          T* row = dst + oy * ow;
          if (iy < 0 || iy >= s.h) {
            std::fill(row, row + ow, T(0));
            continue;
          }
          const T* src = plane + iy * s.w;
          if (s.stride == 1) {
            // contiguous run: ox in [lo, hi) has ix = ox - pad + kx inside the row
            const int64_t lo = std::clamp<int64_t>(s.pad - kx, 0, ow), hi = std::clamp<int64_t>(s.w + s.pad - kx, lo, ow);
            std::fill(row, row + lo, T(0));
            std::memcpy(row + lo, src + lo - s.pad + kx, size_t(hi - lo) * sizeof(T));
            std::fill(row + hi, row + ow, T(0));
          } else {
            for (int64_t ox = 0; ox < ow; ++ox) {
              const int64_t ix = ox * s.stride - s.pad + kx;
              row[ox] = (ix >= 0 && ix < s.w) ? src[ix] : T(0);
            }
          }
        }
      }
}

template <class T>
void col2im(const Conv2dShape& s, const T* col, T* x) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  std::fill(x, x + s.c_in * s.h * s.w, T(0));
  for (int64_t ci = 0; ci < s.c_in; ++ci)
    for (int64_t ky = 0; ky < s.kh; ++ky)
      for (int64_t kx = 0; kx < s.kw; ++kx) {
        const T* src = col + ((ci * s.kh + ky) * s.kw + kx) * oh * ow;
        T* plane = x + ci * s.h * s.w;
        for (int64_t oy = 0; oy < oh; ++oy) {
          const int64_t iy = oy * s.stride - s.pad + ky;
          if (iy < 0 || iy >= s.h) continue;
          T* dst = plane + iy * s.w;
          const T* row = src + oy * ow;
          for (int64_t ox = 0; ox < ow; ++ox) {
            const int64_t ix = ox * s.stride - s.pad + kx;
            if (ix >= 0 && ix < s.w) dst[ix] += row[ox];
          }
        }
      }
}

template <class T>
T* scratch(size_t n) {
  static thread_local std::vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace

template <class T>
void conv2d_forward(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
  const int64_t ohw = s.out_h() * s.out_w(), K = s.c_in * s.kh * s.kw;
  const bool direct = is_direct(s);
#pragma omp parallel for schedule(static) if (s.n > 1)
  for (int64_t n = 0; n < s.n; ++n) {
    const T* xn = x + n * s.c_in * s.h * s.w;
    T* yn = y + n * s.c_out * ohw;
    const T* col = xn;
    if (!direct) {
      T* buf = scratch<T>(size_t(K * ohw));
      im2col(s, xn, buf);
      col = buf;
    }
    gemm<T>(false, false, s.c_out, ohw, K, T(1), w, K, col, ohw, T(0), yn, ohw);
    if (bias)
      for (int64_t co = 0; co < s.c_out; ++co) {
        T* row = yn + co * ohw;
        for (int64_t i = 0; i < ohw; ++i) row[i] += bias[co];
      }
  }
}

template <class T>
void conv2d_backward_data(const Conv2dShape& s, const T* dy, const T* w, T* dx) {
  const int64_t ohw = s.out_h() * s.out_w(), K = s.c_in * s.kh * s.kw;
  const bool direct = is_direct(s);
  if (!direct && s.stride == 1 && s.kh == s.kw && s.pad <= s.kh - 1) {
    // Stride 1: dx = conv(dy, w rotated 180 degrees with in/out channels swapped, padding k-1-p). An
    // im2col copy and a GEMM instead of a GEMM and a col2im scatter-add (which cost 18% of a ResNet-20 step).
    std::vector<T> wf(size_t(s.c_in * s.c_out * s.kh * s.kw));
    for (int64_t co = 0; co < s.c_out; ++co)
      for (int64_t ci = 0; ci < s.c_in; ++ci)
        for (int64_t ky = 0; ky < s.kh; ++ky)
          for (int64_t kx = 0; kx < s.kw; ++kx)
            wf[size_t(((ci * s.c_out + co) * s.kh + ky) * s.kw + kx)] =
                w[((co * s.c_in + ci) * s.kh + (s.kh - 1 - ky)) * s.kw + (s.kw - 1 - kx)];
    const Conv2dShape t{s.n, s.c_out, s.out_h(), s.out_w(), s.c_in, s.kh, s.kw, 1, s.kh - 1 - s.pad};
    conv2d_forward<T>(t, dy, wf.data(), nullptr, dx);
    return;
  }
#pragma omp parallel for schedule(static) if (s.n > 1)
  for (int64_t n = 0; n < s.n; ++n) {
    const T* dyn = dy + n * s.c_out * ohw;
    T* dxn = dx + n * s.c_in * s.h * s.w;
    if (direct) {
      gemm<T>(true, false, K, ohw, s.c_out, T(1), w, K, dyn, ohw, T(0), dxn, ohw);
    } else {
      T* col = scratch<T>(size_t(K * ohw));
      gemm<T>(true, false, K, ohw, s.c_out, T(1), w, K, dyn, ohw, T(0), col, ohw);
      col2im(s, col, dxn);
    }
  }
}

template <class T>
void conv2d_backward_filter(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* dbias, bool accumulate) {
  const int64_t ohw = s.out_h() * s.out_w(), K = s.c_in * s.kh * s.kw, wsize = s.c_out * K;
  const bool direct = is_direct(s);
  const int threads = s.n > 1 ? std::min<int>(omp_get_max_threads(), int(s.n)) : 1;
  // one private dw (+ dbias) per thread, summed at the end in thread order
  std::vector<T> partial(size_t(threads) * size_t(wsize + s.c_out), T(0));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t n = 0; n < s.n; ++n) {
    T* pw = partial.data() + size_t(omp_get_thread_num()) * size_t(wsize + s.c_out);
    T* pb = pw + wsize;
    const T* xn = x + n * s.c_in * s.h * s.w;
    const T* dyn = dy + n * s.c_out * ohw;
    const T* col = xn;
    if (!direct) {
      T* buf = scratch<T>(size_t(K * ohw));
      im2col(s, xn, buf);
      col = buf;
    }
    gemm<T>(false, true, s.c_out, K, ohw, T(1), dyn, ohw, col, ohw, T(1), pw, K);
    if (dbias)
      for (int64_t co = 0; co < s.c_out; ++co) {
        const T* row = dyn + co * ohw;
        T acc = 0;
        for (int64_t i = 0; i < ohw; ++i) acc += row[i];
        pb[co] += acc;
      }
  }
  for (int64_t i = 0; i < wsize; ++i) {
    T acc = accumulate ? dw[i] : T(0);
    for (int t = 0; t < threads; ++t) acc += partial[size_t(t) * size_t(wsize + s.c_out) + size_t(i)];
    dw[i] = acc;
  }
  if (dbias)
    for (int64_t co = 0; co < s.c_out; ++co) {
      T acc = accumulate ? dbias[co] : T(0);
      for (int t = 0; t < threads; ++t) acc += partial[size_t(t) * size_t(wsize + s.c_out) + size_t(wsize + co)];
      dbias[co] = acc;
    }
}

#define HPDT_INSTANTIATE(T)                                                                          \
  template void conv2d_forward<T>(const Conv2dShape&, const T*, const T*, const T*, T*);            \
  template void conv2d_backward_data<T>(const Conv2dShape&, const T*, const T*, T*);                \
  template void conv2d_backward_filter<T>(const Conv2dShape&, const T*, const T*, T*, T*, bool);
HPDT_INSTANTIATE(float)
HPDT_INSTANTIATE(double)
#undef HPDT_INSTANTIATE

}  // namespace cpu
}  // namespace hpdt::kernels
