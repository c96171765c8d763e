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

}  // namespace hpdt::kernels::cpu
