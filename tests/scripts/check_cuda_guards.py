#!/usr/bin/env python3
"""Do the GPU tests still compile where CUDA is not built?

The gpu-labelled test binaries are built in every preset; without CUDA (the cpu and debug-asan presets, HPDT_HAVE_CUDA
0) their cases skip, visibly. There the CUDA runtime's header is absent and hpdt::kernels::cuda is neither declared
in full nor defined, so a test source may use them only inside `#if HPDT_HAVE_CUDA`. CI builds with CUDA, where a
use outside the guard compiles: three slipped through on 2026-11-30/12-01 (a check_cuda.h include, the all-reduce
kernels, gemm_resolve) and the CPU-only presets stopped building. This reads the sources, not a build: each line
that names the CUDA runtime (cuda_runtime.h, check_cuda.h, cudaXxx, CUtensorMap) or kernels::cuda must lie inside a
`#if HPDT_HAVE_CUDA` (or `#ifdef`/`#if defined(...)`) block and not in its `#else`.

usage: check_cuda_guards.py FILE...   (exit 1 listing file:line of each unguarded use)
       check_cuda_guards.py --self-test (the rule on made-up sources: what it must flag and what it must pass)
"""
import re
import sys

USE = re.compile(r"#\s*include\s*[<\"](cuda_runtime\.h|hpdt/core/check_cuda\.h|cuda\.h|nccl\.h)[>\"]"
                 r"|\bkernels::cuda::|\bcuda[A-Z]\w*|\bCUtensorMap\w*|\bnccl[A-Z]\w*")
# (the emulator's builds are CUDA builds: HPDT_CUDA_EMU implies HPDT_HAVE_CUDA)
GUARD = re.compile(r"#\s*if\s+(HPDT_HAVE_CUDA\b|HPDT_CUDA_EMU\b|defined\s*\(?\s*HPDT_(HAVE_CUDA|CUDA_EMU))"
                   r"|#\s*ifdef\s+HPDT_(HAVE_CUDA|CUDA_EMU)\b")
NEG = re.compile(r"#\s*if\s*!\s*(HPDT_HAVE_CUDA|defined)")


def unguarded(path):
    out = []
    stack = []  # per open #if: True where the branch being read is CUDA-only
    in_block_comment = False
    with open(path, encoding="utf-8") as f:
        for no, raw in enumerate(f, 1):
            line = raw
            if in_block_comment:
                if "*/" not in line:
                    continue
                line = line.split("*/", 1)[1]
                in_block_comment = False
            code = re.sub(r"/\*.*?\*/", "", line)
            if "/*" in code:
                code, in_block_comment = code.split("/*", 1)[0], True
            code = code.split("//", 1)[0]
            s = code.strip()
            if s.startswith("#"):
                if re.match(r"#\s*if", s):
                    stack.append(bool(GUARD.match(s)) and not NEG.match(s))
                elif re.match(r"#\s*el", s) and stack:
                    stack[-1] = False  # #else / #elif of a CUDA guard: the CPU-only branch
                elif re.match(r"#\s*endif", s) and stack:
                    stack.pop()
            if USE.search(code) and not any(stack):
                out.append((no, raw.rstrip()))
    return out


SELF_TEST = [
    # (source, lines the rule must flag)
    ('#include <cuda_runtime.h>\nint x;\n', [1]),
    ('#if HPDT_HAVE_CUDA\n#include "hpdt/core/check_cuda.h"\n#endif\n', []),
    ('#if HPDT_HAVE_CUDA\nvoid f() { kernels::cuda::spin(1, s); }\n#else\nvoid f() { cudaDeviceSynchronize(); }\n#endif\n',
     [4]),
    ('#if defined(HPDT_CUDA_EMU) && HPDT_CUDA_EMU\n#include <cuda_runtime.h>\n#endif\n', []),
    ('#if !HPDT_HAVE_CUDA\ncudaStream_t s;\n#endif\n', [2]),
    ('#if HPDT_HAVE_CUDA\n#if SOMETHING\nCUtensorMap m;\n#endif\n#endif\nkernels::cuda::GemmVariant v;\n', [6]),
    ('// kernels::cuda::gemm in a comment\n/* cudaMalloc\n   cudaFree */ int y;\n', []),
    ('TEST(A, B) {\n#if HPDT_HAVE_CUDA\n  kernels::cuda::convert(d, t, s, f, n, h);\n#endif\n}\n', []),
]


def self_test():
    import os
    import tempfile
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        for i, (src, want) in enumerate(SELF_TEST):
            path = os.path.join(d, f"case{i}.cpp")
            with open(path, "w", encoding="utf-8") as f:
                f.write(src)
            got = [no for no, _ in unguarded(path)]
            if got != want:
                print(f"self-test case {i}: flagged lines {got}, expected {want}:\n{src}")
                bad += 1
    print(f"self-test: {len(SELF_TEST) - bad} of {len(SELF_TEST)} cases as expected")
    return 1 if bad else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 2:
        print(__doc__)
        return 2
    bad = 0
    for path in argv[1:]:
        for no, text in unguarded(path):
            print(f"{path}:{no}: CUDA outside #if HPDT_HAVE_CUDA: {text.strip()}")
            bad += 1
    if bad:
        print(f"{bad} unguarded use(s): the cpu and debug-asan presets (no CUDA) would not build these tests")
        return 1
    print(f"{len(argv) - 1} GPU test sources: every CUDA use guarded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
