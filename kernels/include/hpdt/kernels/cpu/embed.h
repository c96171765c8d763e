// CPU ViT token embedding: patch features (the patch conv's NCHW output) to a token sequence with a
// class token in front and a learned position embedding added; and picking the class token at the end.
#pragma once

#include <cstdint>

namespace hpdt::kernels::cpu {

// x [b, d, p] (p = grid_h * grid_w), cls [d], pos [p + 1, d] -> y [b, p + 1, d]
template <class T>
void tokens_forward(int64_t b, int64_t d, int64_t p, const T* x, const T* cls, const T* pos, T* y);
// dx [b, d, p] overwritten; dcls [d] and dpos [p + 1, d] accumulated (+=).
template <class T>
void tokens_backward(int64_t b, int64_t d, int64_t p, const T* dy, T* dx, T* dcls, T* dpos);
// y [b, d] = x [b, t, d] at token 0; backward writes dy into token 0 and zeros elsewhere.
template <class T>
void cls_select_forward(int64_t b, int64_t t, int64_t d, const T* x, T* y);
template <class T>
void cls_select_backward(int64_t b, int64_t t, int64_t d, const T* dy, T* dx);

}  // namespace hpdt::kernels::cpu
