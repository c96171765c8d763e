// Shim <nccl.h> of the CPU emulator of CUDA (tests/cuda_emu, docs/cuda-emulator.md): the subset of NCCL hpdt
// uses, over MPI, so that comm/'s GPU paths (NcclTransport, the nccl all-reduce, our algorithms on device
// memory) run on the CPU with one emulated GPU per MPI process. Real CUDA builds never see it.
//
// Semantics kept from NCCL: a communicator of nranks ranks made from one ncclUniqueId; send/recv match in
// posting order per pair whatever the group; ncclGroupStart/End fuse point-to-point operations, which then
// progress together and complete together. Because emulated streams run everything at once, a group runs at
// ncclGroupEnd (a lone send/recv at its call) and returns when all its operations are complete: a group that
// would deadlock on a GPU (a receive whose matching send the peer only issues after its own group completes)
// hangs here too, and is reported after CUDA_EMU_NCCL_TIMEOUT_S seconds (default 60) instead of hanging.
// Collectives (ncclAllReduce) run at once, also inside a group; in a CUDA graph capture ncclAllReduce is kept for the
// graph and runs at each launch, the launch running at once (send/recv are refused in a capture, ncclInvalidUsage);
// f16/bf16 are summed in f32 and rounded once (NCCL rounds after every addition). ncclCommInitRank with nranks > 1 is
// collective over MPI_COMM_WORLD (every world rank creates a communicator at the same time, as hpdt's Communicator
// does); ncclCommSplit is collective over its parent, as in NCCL.
#pragma once

#include <cstddef>

#include "cuda_runtime.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_VERSION_CODE 22800
#define NCCL_SPLIT_NOCOLOR -1

typedef struct ncclComm* ncclComm_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef struct {
  int blocking = 1;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER \
  {}

extern "C" {
ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
}
