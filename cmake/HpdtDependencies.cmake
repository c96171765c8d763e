# Every external dependency is found here, once, with a message that names the package to install
# when it is missing. Debian/Ubuntu package names are given; scripts/install-deps.sh installs them.

function(hpdt_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "hpdt needs ${what}, which was not found.\n"
                        "  Debian/Ubuntu: apt-get install ${package}   (or run scripts/install-deps.sh)\n"
                        "  HPC sites: module load the matching module, then re-run cmake.")
  endif()
endfunction()

# --- MPI (required) ---------------------------------------------------------------------------
find_package(MPI COMPONENTS C CXX QUIET)
hpdt_require(MPI_CXX_FOUND "MPI (C and C++ bindings)" "openmpi-bin libopenmpi-dev")

# --- parallel HDF5 (required) -----------------------------------------------------------------
set(HDF5_PREFER_PARALLEL TRUE)   # must be set before find_package(HDF5)
find_package(HDF5 COMPONENTS C QUIET)
hpdt_require(HDF5_FOUND "parallel HDF5" "libhdf5-openmpi-dev")
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "hpdt needs *parallel* HDF5 (MPI-IO), but the HDF5 found is serial "
                      "(${HDF5_C_INCLUDE_DIRS}).\n"
                      "  Debian/Ubuntu: apt-get install libhdf5-openmpi-dev   (or run scripts/install-deps.sh)\n"
                      "  If a serial h5cc comes first in PATH (conda, spack), put h5pcc first or set HDF5_ROOT.")
endif()
if(NOT TARGET hdf5::hdf5)   # FindHDF5 of CMake < 3.19 made no imported target
  add_library(hdf5::hdf5 INTERFACE IMPORTED)
  target_include_directories(hdf5::hdf5 INTERFACE ${HDF5_C_INCLUDE_DIRS})
  target_link_libraries(hdf5::hdf5 INTERFACE ${HDF5_C_LIBRARIES})
  target_compile_definitions(hdf5::hdf5 INTERFACE ${HDF5_C_DEFINITIONS})
endif()

# --- OpenMP (required) ------------------------------------------------------------------------
find_package(OpenMP COMPONENTS CXX QUIET)
hpdt_require(OpenMP_CXX_FOUND "OpenMP for C++" "g++ (libgomp ships with GCC) or libomp-dev for clang")

# --- third-party libraries from the distribution -----------------------------------------------
find_package(nlohmann_json 3 QUIET)
hpdt_require(nlohmann_json_FOUND "nlohmann-json" "nlohmann-json3-dev")
find_package(CLI11 QUIET)
hpdt_require(CLI11_FOUND "CLI11" "libcli11-dev")
find_package(ZLIB QUIET)
hpdt_require(ZLIB_FOUND "zlib" "zlib1g-dev")
find_package(Threads REQUIRED)
if(HPDT_BUILD_TESTS)
  find_package(GTest QUIET)
  hpdt_require(GTest_FOUND "GoogleTest" "libgtest-dev libgmock-dev")
endif()
if(HPDT_BUILD_BENCH)
  find_package(benchmark QUIET)
  hpdt_require(benchmark_FOUND "Google Benchmark" "libbenchmark-dev")
endif()

# --- CUDA, NCCL, cuDNN (optional) ---------------------------------------------------------------
set(HPDT_HAVE_CUDA OFF)
string(TOUPPER "${HPDT_CUDA}" _hpdt_cuda)
if(NOT _hpdt_cuda MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "HPDT_CUDA must be AUTO, ON or OFF (got '${HPDT_CUDA}')")
endif()
if(NOT _hpdt_cuda STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)   # the usual place, even when not on PATH
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)   # H100; override with -DCMAKE_CUDA_ARCHITECTURES=80;90
    endif()
    enable_language(CUDA)
    # CMake 3.25 predates nvcc's C++20 support: tell it the flag, then ask for the standard as usual.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    find_package(NCCL QUIET)
    find_package(CUDNN QUIET)
    if(NOT NCCL_FOUND)
      message(FATAL_ERROR "CUDA is enabled but NCCL was not found. Install NCCL (libnccl-dev from NVIDIA's "
                          "repository), set NCCL_ROOT, or configure with -DHPDT_CUDA=OFF.")
    endif()
    if(NOT CUDNN_FOUND)
      message(FATAL_ERROR "CUDA is enabled but cuDNN was not found. Install cuDNN 9 (libcudnn9-dev-cuda-*), "
                          "set CUDNN_ROOT, or configure with -DHPDT_CUDA=OFF.")
    endif()
    set(HPDT_HAVE_CUDA ON)
  elseif(_hpdt_cuda STREQUAL "ON")
    message(FATAL_ERROR "HPDT_CUDA=ON but no CUDA compiler (nvcc) was found. Install the CUDA toolkit, "
                        "put nvcc on PATH or set CMAKE_CUDA_COMPILER, or configure with -DHPDT_CUDA=AUTO/OFF.")
  else()
    message(STATUS "hpdt: nvcc not found, building the CPU backend only (HPDT_CUDA=AUTO)")
  endif()
endif()
