// CPU softmax cross-entropy with optional label smoothing (PyTorch CrossEntropyLoss semantics, mean over
// the batch): target q = (1 - eps) * onehot(label) + eps / classes.
#pragma once

#include <cstdint>

namespace hpdt::kernels::cpu {

// logits [b, classes], labels [b] in [0, classes) -> returns the mean loss; dlogits [b, classes] =
// (softmax - q) / b * grad_scale (skipped when dlogits is null). Labels out of range throw.
template <class T>
double softmax_cross_entropy(int64_t b, int64_t classes, const T* logits, const int32_t* labels, double smoothing,
                             T* dlogits, double grad_scale);

// Rows whose label is the first class holding the row's largest logit (NaNs are never the largest; a row of
// NaNs has none; a label outside [0, classes) is not correct): top-1 accuracy's count.
template <class T>
int64_t count_correct(int64_t b, int64_t classes, const T* logits, const int32_t* labels);

}  // namespace hpdt::kernels::cpu
