# Warning and sanitizer flags, applied per target with hpdt_target_defaults(<target>) so that
# third-party code is never compiled with our -Werror.

set(HPDT_SANITIZER_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)

function(hpdt_target_defaults target)
  get_target_property(_type ${target} TYPE)
  set(_scope PRIVATE)
  if(_type STREQUAL "INTERFACE_LIBRARY")
    return()
  endif()
  target_compile_options(${target} ${_scope}
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wno-unknown-pragmas>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${HPDT_WARNINGS_AS_ERRORS}>>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr -lineinfo>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${HPDT_WARNINGS_AS_ERRORS}>>:-Werror=all-warnings -Xcompiler=-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${HPDT_PTXAS_VERBOSE}>>:-Xptxas=-v>)
  if(HPDT_SANITIZE)
    target_compile_options(${target} ${_scope} $<$<COMPILE_LANGUAGE:CXX>:${HPDT_SANITIZER_FLAGS}>)
    target_link_options(${target} ${_scope} ${HPDT_SANITIZER_FLAGS})
  endif()
endfunction()

option(HPDT_PTXAS_VERBOSE "Print register/spill use of every CUDA kernel (-Xptxas -v)" OFF)

# x86-64: build for the machine unless told otherwise (HPDT_CPU_ARCH=native|x86-64-v3|...).
set(HPDT_CPU_ARCH "native" CACHE STRING "Value for -march= on x86-64 (native, x86-64-v3, x86-64-v4, or empty)")
if(HPDT_CPU_ARCH AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=${HPDT_CPU_ARCH}>)
endif()
