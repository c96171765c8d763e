#include "hpdt/kernels/dispatch.h"

namespace hpdt::kernels::detail {

Device common_device(std::string_view op, std::initializer_list<const Tensor*> tensors, const Stream& stream) {
  const Tensor* first = *tensors.begin();
  for (const Tensor* t : tensors) {
    HPDT_CHECK(t->defined(), op, ": an argument is an undefined tensor");
    check_same_device(op, *first, *t);
  }
  const Device d = first->device();
  if (d.is_cuda()) {
    HPDT_CHECK(HPDT_HAVE_CUDA, op, ": tensor on ", d.str(), " but hpdt was built without CUDA");
    HPDT_CHECK(stream.is_cuda() && stream.device() == d, op, ": tensors on ", d.str(), " need a CUDA stream of that device, got a stream on ",
               stream.device().str());
  }
  return d;
}

}  // namespace hpdt::kernels::detail
