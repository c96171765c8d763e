# Test helpers.
#
#   hpdt_add_test(NAME <name> SOURCES <files...> [LIBS <targets...>] [LABELS <labels...>] [GPU])
#     A GoogleTest binary whose cases ctest lists one by one. GPU: labelled `gpu`; cases call
#     HPDT_REQUIRE_GPU() and show as *skipped* (not passed) where no GPU is usable.
#
#   hpdt_add_mpi_test(NAME <name> SOURCES <files...> NP <n...> [LIBS ...] [LABELS ...] [TIMEOUT <s>] [GPU])
#     One binary run under `mpiexec -n N` for each N, as tests <name>.npN labelled `mpi`. Each run is
#     wrapped in `timeout` so that a hang fails the test instead of blocking CI.

include(GoogleTest)

# Test code itself (the sources under tests/) is built at -O1 in optimised configurations: the code under
# test lives in the libraries, built as the preset says, and -O1 compiles a gtest file 20-35 % faster
# than -O3 (CI builds everything from scratch on 2 cores). Kernel sources a test compiles itself (the
# NHWC variants, the emulated kernels) keep the configuration's optimisation.
#   hpdt_test_sources_opt(<files...>)   in the folder that creates the target
set(HPDT_TEST_SOURCE_OPT $<$<NOT:$<CONFIG:Debug>>:-O1> CACHE INTERNAL "")
function(hpdt_test_sources_opt)
  foreach(src IN LISTS ARGN)
    get_filename_component(abs ${src} ABSOLUTE)
    if(abs MATCHES "^${PROJECT_SOURCE_DIR}/tests/" AND abs MATCHES "\\.cpp$")
      set_property(SOURCE ${src} APPEND PROPERTY COMPILE_OPTIONS ${HPDT_TEST_SOURCE_OPT})
    endif()
  endforeach()
endfunction()

add_library(hpdt_test_main STATIC ${CMAKE_SOURCE_DIR}/tests/support/gtest_main.cpp)
target_link_libraries(hpdt_test_main PUBLIC GTest::gtest hpdt::core)
target_include_directories(hpdt_test_main PUBLIC ${CMAKE_SOURCE_DIR}/tests/support)
hpdt_target_defaults(hpdt_test_main)

add_library(hpdt_mpi_test_main STATIC ${CMAKE_SOURCE_DIR}/tests/support/mpi_gtest_main.cpp)
target_link_libraries(hpdt_mpi_test_main PUBLIC GTest::gtest hpdt::core MPI::MPI_CXX)
target_include_directories(hpdt_mpi_test_main PUBLIC ${CMAKE_SOURCE_DIR}/tests/support)
hpdt_target_defaults(hpdt_mpi_test_main)

# The string gtest prints for a skipped case; ctest then reports "Skipped" instead of "Passed".
set(HPDT_GTEST_SKIP_REGEX "\\[  SKIPPED \\]")

# Environment of every test: quiet logs, no sanitizer false alarms from MPI/OpenMP internals.
set(HPDT_TEST_ENV "HPDT_LOG_LEVEL=warn" "OMP_NUM_THREADS=2")
if(HPDT_SANITIZE)
  list(APPEND HPDT_TEST_ENV
       "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/support/lsan.supp:print_suppressions=0"
       "ASAN_OPTIONS=detect_odr_violation=0:protect_shadow_gap=0"
       "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  # MPI's plugins have no frame pointers: the fast unwinder stops inside them and LeakSanitizer cannot
  # see the libmpi frames the suppressions name. MPI tests unwind fully (slower, still exact).
  set(HPDT_MPI_SANITIZE_ENV "ASAN_OPTIONS=detect_odr_violation=0:protect_shadow_gap=0:fast_unwind_on_malloc=0")
endif()
# Only the sanitizer settings (empty without HPDT_SANITIZE), for script-driven tests that run MPI
# programs and must keep their own log level and thread count (train.*, cluster.*).
set(HPDT_SANITIZE_ENV "")
if(HPDT_SANITIZE)
  set(_san ${HPDT_TEST_ENV})
  list(FILTER _san INCLUDE REGEX "^(LSAN|UBSAN)_OPTIONS=")
  set(HPDT_SANITIZE_ENV ${_san} ${HPDT_MPI_SANITIZE_ENV})
endif()

# mpiexec flags: Open MPI needs --oversubscribe for more ranks than cores, and root needs permission.
# odls_base_sigkill_timeout=0: when a rank exits non-zero, Open MPI 4's mpiexec waits this long (1 s by default)
# between SIGTERM and SIGKILL to the job's processes even when they have all exited: 1 s more a run for every test
# that expects a failing run (train.bad-input: 44 -> 14 s, 25 runs). Our ranks leave MPI_Finalize together (it
# synchronises), so nothing is cut short.
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _mpiexec_version ERROR_VARIABLE _mpiexec_version)
set(HPDT_MPIEXEC_FLAGS "")
set(HPDT_MPI_ENV "")
if(_mpiexec_version MATCHES "Open MPI|OpenRTE")
  set(HPDT_MPIEXEC_FLAGS --oversubscribe --bind-to none)
  set(HPDT_MPI_ENV "OMPI_ALLOW_RUN_AS_ROOT=1" "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" "OMPI_MCA_mpi_yield_when_idle=1"
                   "OMPI_MCA_rmaps_base_oversubscribe=1" "OMPI_MCA_odls_base_sigkill_timeout=0")
endif()
find_program(HPDT_TIMEOUT_EXECUTABLE timeout REQUIRED)

function(hpdt_add_test)
  cmake_parse_arguments(T "GPU" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  hpdt_test_sources_opt(${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE hpdt_test_main ${T_LIBS})
  hpdt_target_defaults(${T_NAME})
  set(labels cpu ${T_LABELS})
  if(T_GPU)
    set(labels gpu ${T_LABELS})
    set_property(GLOBAL APPEND PROPERTY HPDT_GPU_TEST_TARGETS ${T_NAME})
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  # DISCOVERY_TIMEOUT: listing a binary's cases loads its libraries; with cuBLAS and cuDNN (~1 GB) from a cold page
  # cache that took past the default 5 s on a fresh clone (2026-12-01: test_resnet50_convs, and the CI run stopped).
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60
    TEST_PREFIX "${T_NAME}."
    PROPERTIES SKIP_REGULAR_EXPRESSION "${HPDT_GTEST_SKIP_REGEX}")
  hpdt_set_discovered_test_properties(${T_NAME} LABELS "${labels}" ENVIRONMENT "${HPDT_TEST_ENV}" TIMEOUT ${T_TIMEOUT})
endfunction()

# Properties of the cases gtest_discover_tests(<target>) finds, set by a script ctest includes after
# discovery. gtest_discover_tests' own PROPERTIES flattens list values (CMake 3.25): LABELS "cpu;gpu"
# or a two-entry ENVIRONMENT turn into stray property names, and the properties after them are lost.
#   hpdt_set_discovered_test_properties(<target> <property> <value> [<property> <value>...])
function(hpdt_set_discovered_test_properties target)
  # ARGV<i>, not ARGN: ARGN is itself a list and would split "cpu;gpu" again.
  math(EXPR pairs "(${ARGC} - 1) % 2")
  if(ARGC LESS 3 OR NOT pairs EQUAL 0)
    message(FATAL_ERROR "hpdt_set_discovered_test_properties(${target} ...): needs <property> <value> pairs")
  endif()
  set(args "")
  math(EXPR last "${ARGC} - 1")
  foreach(i RANGE 1 ${last} 2)
    math(EXPR v "${i} + 1")
    set(value "${ARGV${v}}")
    string(REPLACE "\\" "\\\\" value "${value}")
    string(REPLACE "\"" "\\\"" value "${value}")
    string(REPLACE "$" "\\$" value "${value}")
    string(APPEND args " ${ARGV${i}} \"${value}\"")
  endforeach()
  set(script ${CMAKE_CURRENT_BINARY_DIR}/${target}_properties.cmake)
  file(WRITE ${script} "if(${target}_TESTS)\n  set_tests_properties(\${${target}_TESTS} PROPERTIES${args})\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${script})
endfunction()

function(hpdt_add_mpi_test)
  cmake_parse_arguments(T "GPU" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;NP;ENV" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(HPDT_SANITIZE)
    # Debug with ASan/UBSan and full unwinding runs an MPI test ~5-10x slower (test_io_reader.np3: >120 s, ~20 s in
    # Release): the same limit would cut it, not find a hang sooner.
    math(EXPR T_TIMEOUT "${T_TIMEOUT} * 5")
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  hpdt_test_sources_opt(${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE hpdt_mpi_test_main ${T_LIBS})
  hpdt_target_defaults(${T_NAME})
  if(T_GPU)
    set_property(GLOBAL APPEND PROPERTY HPDT_GPU_TEST_TARGETS ${T_NAME})
  endif()
  foreach(np IN LISTS T_NP)
    set(labels mpi np${np} ${T_LABELS})
    if(T_GPU)
      list(APPEND labels gpu)
    endif()
    add_test(NAME ${T_NAME}.np${np}
             COMMAND ${HPDT_TIMEOUT_EXECUTABLE} --kill-after=10 ${T_TIMEOUT}
                     ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${HPDT_MPIEXEC_FLAGS} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${T_NAME}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${T_NAME}.np${np} PROPERTIES LABELS "${labels}"
                         ENVIRONMENT "${HPDT_TEST_ENV};${HPDT_MPI_SANITIZE_ENV};${HPDT_MPI_ENV};${T_ENV}" TIMEOUT ${T_TIMEOUT} PROCESSORS ${np})
    if(T_GPU)
      set_tests_properties(${T_NAME}.np${np} PROPERTIES SKIP_REGULAR_EXPRESSION "${HPDT_GTEST_SKIP_REGEX}")
    endif()
  endforeach()
endfunction()
