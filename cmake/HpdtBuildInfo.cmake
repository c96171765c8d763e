# Writes build_info.cpp (git commit, compiler, library versions) at every build, but only touches the
# file when its content changes, so results JSON always names the commit that produced it.
set(HPDT_BUILD_INFO_CPP ${CMAKE_BINARY_DIR}/generated/build_info.cpp)
set(_hpdt_cuda_ver "")
if(HPDT_HAVE_CUDA)
  set(_hpdt_cuda_ver "${CUDAToolkit_VERSION}")
endif()
add_custom_target(hpdt_build_info
  COMMAND ${CMAKE_COMMAND}
          -DSRC=${CMAKE_SOURCE_DIR} -DOUT=${HPDT_BUILD_INFO_CPP}
          "-DCOMPILER=${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}"
          -DBUILD_TYPE=${CMAKE_BUILD_TYPE} -DHAVE_CUDA=${HPDT_HAVE_CUDA}
          -DCUDA_VERSION=${_hpdt_cuda_ver} -DNCCL_VERSION=${NCCL_VERSION} -DCUDNN_VERSION=${CUDNN_VERSION}
          -DCUDA_ARCHS=${CMAKE_CUDA_ARCHITECTURES} -DHDF5_VERSION=${HDF5_VERSION}
          -DVERSION=${PROJECT_VERSION}
          -P ${CMAKE_CURRENT_LIST_DIR}/WriteBuildInfo.cmake
  BYPRODUCTS ${HPDT_BUILD_INFO_CPP}
  COMMENT "hpdt build info (git commit)" VERBATIM)
