# FindCUDNN: cuDNN headers and library. Defines CUDNN_FOUND, CUDNN_VERSION and the target CUDNN::cudnn.
# Hints: CUDNN_ROOT, CUDNN_PATH, CUDAToolkit_LIBRARY_ROOT.
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_PATH} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
  PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn
  HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_PATH} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
set(_cudnn_ver_h "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
if(CUDNN_INCLUDE_DIR AND EXISTS "${_cudnn_ver_h}")
  file(STRINGS "${_cudnn_ver_h}" _v REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) [0-9]+")
  string(REGEX REPLACE ".*CUDNN_MAJOR ([0-9]+).*" "\\1" _maj "${_v}")
  string(REGEX REPLACE ".*CUDNN_MINOR ([0-9]+).*" "\\1" _min "${_v}")
  string(REGEX REPLACE ".*CUDNN_PATCHLEVEL ([0-9]+).*" "\\1" _pat "${_v}")
  set(CUDNN_VERSION "${_maj}.${_min}.${_pat}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                                                INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
