#!/usr/bin/env python3
"""Which kernel instances does the build compile that no emulated test case launches?

Every template instance of a __global__ function that nvcc compiles is an `.entry` of the PTX the CUDA objects embed
(a build for sm_90 keeps the PTX beside the SASS). The CUDA emulator's launch logs (CUDA_EMU_LAUNCH_LOG, written by
ctest's emulated cases: docs/gpu-machine.md) name every instance a case launched. This lists, per kernel, the
compiled instances no case launched: untested on the emulator, and so reached by no sanitizer run either (on a GPU
some may run, at the full shapes the emulator shrinks: read each as a question, not a verdict).

A report, not a gate: instances are matched by the kernel's name and its template arguments, the demangler's spelling
against GCC's (__PRETTY_FUNCTION__); an enum argument matches any value of its type (GCC names the enumerator, the
demangler prints a number), so instances that differ only there count as one.

usage: kernel_instances.py --launches DIR --objects BUILD [--json OUT]
  --objects BUILD  the build tree whose CUDA objects (*.cu.o, not the emulator's) hold the PTX, e.g. build/ci
exit: 0 (a report), 1 bad input.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sanitizer_coverage  # noqa: E402  (read_logs: the launch logs)

# GCC's __PRETTY_FUNCTION__ lists typedefs and alias templates used in the signature beside the template parameters
# ("int64_t = long int", "FlatDiv<Index> = FastDiv"); they are not arguments of the instance.
TYPEDEFS = {"int64_t", "uint64_t", "int32_t", "uint32_t", "uint16_t", "uint8_t", "size_t", "CUtensorMap"}
ENTRY = re.compile(rb"\.entry\s+(_Z\w+)")


def fail(msg):
    print(f"kernel_instances.py: {msg}", file=sys.stderr)
    sys.exit(1)


def split_top(s, sep=","):
    """s split at `sep` outside <> and ()."""
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += (ch in "<(") - (ch in ">)")
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


def norm(value):
    """One spelling of a template argument: no namespaces of ours, no spaces, GCC's and the demangler's type names."""
    v = re.sub(r"\(anonymous namespace\)::|\{anonymous\}::", "", value)
    v = re.sub(r"\b(hpdt|kernels|cuda|sm90a|\w+_detail)::", "", v)
    v = v.replace("short unsigned int", "unsigned short").replace("long unsigned int", "unsigned long")
    v = v.replace("long int", "long").replace("unsigned int", "unsigned").replace(" ", "")
    m = re.fullmatch(r"\((\w+)\)-?\d+", v)  # the demangler's enum value: (Kind)1
    if m:
        return "enum " + m.group(1)
    m = re.fullmatch(r"(\w+)::\w+", v)  # GCC's: Kind::adamw (after the namespaces went)
    if m and m.group(1)[0].isupper():
        return "enum " + m.group(1)
    return v


def from_demangled(d):
    """'void ns::name<A, B>(params)' -> ('name', ('A', 'B'))."""
    d = d.replace("(anonymous namespace)::", "")
    d = d[5:] if d.startswith("void ") else d
    depth = 0
    for i in range(len(d) - 1, -1, -1):  # the parameters: the last top-level (...)
        depth += (d[i] == ")") - (d[i] == "(")
        if depth == 0 and d[i] == "(":
            break
    sig, args = d[:i], []
    if sig.endswith(">"):
        depth = 0
        for j in range(len(sig) - 1, -1, -1):
            depth += (sig[j] == ">") - (sig[j] == "<")
            if depth == 0 and sig[j] == "<":
                break
        sig, args = sig[:j], split_top(sig[j + 1:-1])
    return sig.split("::")[-1], tuple(norm(a) for a in args)


def from_pretty(kernel):
    """GCC's 'void ns::name(params) [with T = A; int B = 2; int64_t = long int]' -> ('name', ('A', '2'))."""
    head, _, with_ = kernel.partition(" [with ")
    name = head.split("(", 1)[0].split(" ")[-1].split("::")[-1]
    args = []
    for part in split_top(with_[:-1], ";") if with_ else []:
        lhs, _, rhs = part.partition(" = ")
        if lhs not in TYPEDEFS and "<" not in lhs:
            args.append(norm(rhs))
    return name, tuple(args)


def compiled_entries(build):
    """The mangled .entry names of the PTX in build's CUDA objects (the emulator's are C++ and hold none)."""
    names = set()
    for base, _, files in os.walk(build):
        for f in files:
            if f.endswith(".cu.o"):
                with open(os.path.join(base, f), "rb") as fh:
                    names.update(m.decode() for m in ENTRY.findall(fh.read()))
    if not names:
        fail(f"--objects {build}: no CUDA object with PTX entries (a build with CUDA for sm_90, e.g. build/ci)")
    return sorted(names)


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"c++filt failed: {e}")
    return out.splitlines()


def never_launched(compiled, cases):
    """{kernel name: [template arguments of each compiled instance no case launched]}."""
    launched = {from_pretty(k) for kernels in cases.values() for k in kernels}
    out = {}
    for name, args in sorted(compiled - launched):
        out.setdefault(name, []).append(args)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launches", required=True)
    ap.add_argument("--objects", required=True)
    ap.add_argument("--json")
    a = ap.parse_args()
    cases = sanitizer_coverage.read_logs(a.launches)
    compiled = {from_demangled(d) for d in demangle(compiled_entries(a.objects))}
    missing = never_launched(compiled, cases)
    total = len(compiled)
    n = sum(len(v) for v in missing.values())
    print(f"{total} kernel instances compiled; {n} launched by no emulated case ({len(cases)} cases logged):")
    for name, instances in missing.items():
        print(f"  {name}: " + "; ".join("<" + ", ".join(i) + ">" for i in instances))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"compiled": total, "never_launched": missing}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
