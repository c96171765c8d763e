#!/usr/bin/env python3
"""The machine-code size of every CUDA kernel in the given objects or archives, and a limit on it.

Reads the cubins (ELF, machine EM_CUDA) embedded uncompressed in the objects' fatbins (kernels/CMakeLists.txt builds
hpdt_kernels with --compress-mode=none for this) and each kernel's .text.<name> section. A kernel over --max-kib
fails the check: on 2026-11-27 the tensor-core GEMMs' fully unrolled epilogue made each of them 1.2-2.4 MiB of SASS
(GEMM v2 1.4 MiB, v1 0.4 MiB), run once per tile through an instruction cache of a few tens of KiB, and nothing
showed it (-Xptxas -v reports registers and spills, not code size). kernels/cuda/band_epilogue.cuh says more.

--digests prints instead one line a kernel, "BYTES MD5 NAME" sorted by name (the MD5 of its machine code; the hash
GCC/nvcc put in anonymous namespaces' names replaced by ANON, so that builds in two folders compare): a refactor
that should not change the code is checked by diffing the lines of the build before it and after it (2026-11-29:
714 of 722 kernels unchanged by moving the mma.sync PTX and conv v2's warp tile into shared headers).

usage: check_sass_size.py [--max-kib N] [--top K] [--digests] FILE...   (exit 1: a kernel over the limit, or no cubin
found)
"""
import argparse
import hashlib
import re
import struct
import sys

EM_CUDA = 190


def cubins(data):
    """The ELF64 images of machine EM_CUDA inside `data`, as (start, bytes)."""
    at = 0
    while True:
        at = data.find(b"\x7fELF\x02\x01", at)
        if at < 0:
            return
        head = data[at:at + 64]
        if len(head) == 64 and struct.unpack_from("<H", head, 0x12)[0] == EM_CUDA:
            shoff, = struct.unpack_from("<Q", head, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", head, 0x3a)
            end = at + shoff + shentsize * shnum
            if shentsize == 64 and end <= len(data):
                yield at, data[at:end]
        at += 4


def text_code(elf):
    """{kernel name: its .text section's contents} of one cubin."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shnum, shstrndx = struct.unpack_from("<HH", elf, 0x3c)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + 64 * i) for i in range(shnum)]
    names_off, names_size = sections[shstrndx][4], sections[shstrndx][5]
    names = elf[names_off:names_off + names_size]
    out = {}
    for name_at, _type, _flags, _addr, off, size, *_ in sections:
        name = names[name_at:names.index(b"\0", name_at)].decode("ascii", "replace")
        if name.startswith(".text."):
            out[name[len(".text."):]] = elf[off:off + size]
    return out


def without_anonymous_hash(name):
    """A mangled name with the hash in its anonymous namespaces (_GLOBAL__N__<hex>_<len>_<file>_<hex8>) as ANON."""
    return re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_[A-Za-z0-9_]+?_[0-9a-f]{8}", "ANON", name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="objects or static archives holding CUDA code")
    ap.add_argument("--max-kib", type=float, default=None, help="fail where a kernel's machine code is larger")
    ap.add_argument("--top", type=int, default=5, help="list the K largest kernels")
    ap.add_argument("--digests", action="store_true",
                    help="print BYTES MD5 NAME a kernel, sorted by name, for comparing two builds")
    args = ap.parse_args()
    sizes, digests = [], []
    for path in args.files:
        try:
            data = open(path, "rb").read()
        except OSError as e:
            print(f"check_sass_size: cannot read {path}: {e.strerror}", file=sys.stderr)
            return 2
        for _, elf in cubins(data):
            for name, code in text_code(elf).items():
                sizes.append((len(code), name, path))
                digests.append((without_anonymous_hash(name), len(code), hashlib.md5(code).hexdigest()))
    if not sizes:
        print(f"check_sass_size: no uncompressed cubin in {', '.join(args.files)} (built without "
              "--compress-mode=none?)", file=sys.stderr)
        return 1
    if args.digests:
        for name, size, md5 in sorted(digests):
            print(size, md5, name)
        return 0
    sizes.sort(reverse=True)
    print(f"{len(sizes)} kernels, {sum(s for s, _, _ in sizes) / 2**20:.1f} MiB of machine code; the largest:")
    for size, name, _ in sizes[:args.top]:
        print(f"  {size / 1024:9.1f} KiB  {name}")
    if args.max_kib is not None:
        over = [(s, n) for s, n, _ in sizes if s > args.max_kib * 1024]
        for size, name in over:
            print(f"FAIL: {name}: {size / 1024:.1f} KiB of machine code, over the {args.max_kib:g} KiB limit",
                  file=sys.stderr)
        if over:
            return 1
        print(f"every kernel within {args.max_kib:g} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
