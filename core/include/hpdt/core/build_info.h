// What this binary was built from: version, git commit, compiler, CUDA/NCCL/cuDNN/HDF5 versions.
// Generated at build time by cmake/WriteBuildInfo.cmake.
#pragma once

namespace hpdt {

struct BuildInfo {
  const char* version;
  const char* git_commit;  // "<sha>" or "<sha>-dirty" or "unknown"
  const char* compiler;
  const char* build_type;
  bool cuda;
  const char* cuda_version;
  const char* cuda_architectures;
  const char* nccl_version;
  const char* cudnn_version;
  const char* hdf5_version;
};

const BuildInfo& build_info();

}  // namespace hpdt
