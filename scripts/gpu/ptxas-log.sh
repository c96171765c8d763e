#!/usr/bin/env bash
# CUDA compiler launcher of builds with HPDT_PTXAS_VERBOSE (the gpu-bundle preset): runs the compile command it is
# given and keeps what the compiler printed (ptxas -v's registers and spills of every kernel) beside the object, in
# OBJECT.ptxas.log, as well as printing it. scripts/gpu/prepare.sh gathers these files into the bundle's
# ptxas.log, so that the log covers every kernel of the build, not only those a build recompiled (a build with
# nothing to recompile printed nothing, and the bundle's log was empty). Through ccache the report comes back on a
# cache hit too: ccache replays the compiler's output.
# usage (CMake): CMAKE_CUDA_COMPILER_LAUNCHER = this script, then any other launcher, then the compiler command.
set -u
obj=
prev=
for a in "$@"; do
  [ "$prev" = "-o" ] && obj=$a
  prev=$a
done
if [ -z "$obj" ]; then exec "$@"; fi
tmp="$obj.ptxas.log.tmp"
"$@" 2> "$tmp"
rc=$?
cat "$tmp" >&2
if [ "$rc" -eq 0 ]; then mv -f "$tmp" "$obj.ptxas.log"; else rm -f "$tmp" "$obj.ptxas.log"; fi
exit "$rc"
