#include "hpdt/nccl_log/model.h"

namespace hpdt::nccl_log {

const char* datatype_name(int d) {
  static const char* kNames[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                 "float16", "float32", "float64", "bfloat16"};
  return d >= 0 && d < 10 ? kNames[d] : "?";
}

int datatype_size(int d) {
  static const int kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return d >= 0 && d < 10 ? kSizes[d] : 0;
}

const char* redop_name(int op) {
  static const char* kNames[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < 5 ? kNames[op] : "?";
}

const char* nccl_result_name(int r) {
  static const char* kNames[] = {"ncclSuccess",        "ncclUnhandledCudaError", "ncclSystemError",
                                 "ncclInternalError",  "ncclInvalidArgument",    "ncclInvalidUsage",
                                 "ncclRemoteError",    "ncclInProgress"};
  return r >= 0 && r < 8 ? kNames[r] : "ncclResult?";
}

}  // namespace hpdt::nccl_log
