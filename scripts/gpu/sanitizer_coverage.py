#!/usr/bin/env python3
"""Do the GPU's compute-sanitizer runs reach every kernel the GPU suite launches?

scripts/gpu/run.sh --sanitize runs each single-process GPU test binary under memcheck and racecheck: whole, or, for
a binary with lines in scripts/gpu/sanitize.txt, only the gtest filters those lines give (racecheck slows the long
cases 100-1000x). Whether those filters still reach every kernel cannot be read off their names. The CUDA emulator
can tell: with CUDA_EMU_LAUNCH_LOG=DIR every emulated test process writes the kernels it launched
(DIR/<exe>.<pid>.launches, its first line the process's arguments), and ctest runs every case of
test_<family>_cuda_emu as a process of its own. This script maps each case to its kernels, applies sanitize.txt's
filters as run.sh does, and lists per tool the kernels (template instances) no sanitizer run reaches, with the
cases that would.

What the emulator cannot say: kernels chosen only at the shapes a test shrinks for the emulator (under racecheck the
tests shrink them too, test::small_shapes; not memcheck, nor a test's own #if HPDT_CUDA_EMU branches), vendor
kernels (not ours, not emulated), cases that ctest leaves to the GPU (test_nn_models_cuda_emu's filter), the GPU
tests without an emulated build (test_kernel_trace_cuda, the MPI tests). Cases that exist only on the emulator or
that a GPU skips (GPU_SKIPS) are left out of the count.

usage: sanitizer_coverage.py --launches DIR (--ctest-dir BUILD [--ctest CTEST] | --cases FILE) [--cuda-build ON|OFF]
                             [--sanitize-list FILE] [--tools "memcheck racecheck"] [--json OUT] [--suggest] [--parts]
  --cases FILE   the registered cases, one "<exe>.<gtest name>" a line, the emulated ones (test_<family>_cuda_emu)
                 and the GPU binaries' (test_<family>_cuda: which cases exist on a GPU), instead of asking ctest
  --suggest      also print sanitize.txt lines of the cases that reach a tool's missing kernels (chosen greedily by
                 kernels reached per emulated second), each with its launches and emulated seconds
  --parts        print each racecheck run's launches and emulated seconds (its cost, as far as the logs tell)
Also: every __global__ function of kernels/cuda (--kernel-sources) must be launched by some emulated case.
exit: 0 every kernel reached by every tool; 1 some not (named), a kernel function no case launches, a sanitize.txt line that names no GPU test binary
or selects none of its cases, or other bad input; 77 the logs are incomplete (a case registered but not logged: a
partial ctest run) or the build has no GPU test binaries, nothing checked.
"""
import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys

EMU_EXE = re.compile(r"^(test_\w+_cuda)_emu$")
GPU_EXE = re.compile(r"^(test_\w+_cuda)$")
SKIP = 77
# Cases that the GPU binary has but skips on a GPU: what they launch on the emulator, no sanitizer sees.
GPU_SKIPS = {("test_gemm_cuda", "GemmCuda.V3PipelineByRuleFollowsTheKLoop")}  # counts launches: emulator only
# Kernels of ours that run only beside the vendor's (conv_vendor.cu), which the emulator cannot run: element-wise,
# no shared memory; memcheck runs them in the GPU's vendor cases.
VENDOR_PATH_KERNELS = {"epilogue_inplace", "filter_from_krsc"}


def fail(msg):
    print(f"sanitizer_coverage.py: {msg}", file=sys.stderr)
    sys.exit(1)


def gtest_match(name, gtest_filter):
    """gtest's --gtest_filter: POSITIVE[-NEGATIVE], each ':'-separated patterns with * and ?."""
    pos, _, neg = gtest_filter.partition("-")

    def any_of(patterns):
        return any(fnmatch.fnmatchcase(name, p.replace("[", "[[]")) for p in patterns.split(":") if p)

    return (any_of(pos) if pos else True) and not any_of(neg)


def read_sanitize_list(path):
    """(tool, binary, filter) lines of sanitize.txt, as run.sh reads them (`read -r tool bin filter`)."""
    runs = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                fields = line.split(None, 2)
                if not fields or fields[0].startswith("#"):
                    continue
                if len(fields) < 2:
                    fail(f"{path}:{n}: a run needs TOOL BINARY [FILTER], got {line.strip()!r}")
                runs.append((fields[0], fields[1], fields[2].strip() if len(fields) > 2 else ""))
    except OSError as e:
        fail(f"--sanitize-list {path}: {e.strerror}")
    return runs


def read_logs(directory):
    """{(gpu binary, gtest name): {kernel: (launches, emulated seconds)}} from the emulator's launch logs."""
    if not os.path.isdir(directory):
        fail(f"--launches {directory}: not a directory (run the emulated tests with CUDA_EMU_LAUNCH_LOG={directory})")
    cases = {}
    for entry in sorted(os.listdir(directory)):
        if not entry.endswith(".launches"):
            continue
        path = os.path.join(directory, entry)
        with open(path) as f:
            lines = f.read().splitlines()
        if not lines or not lines[0].startswith("# "):
            fail(f"{path}: not a launch log (its first line is not '# <arguments>')")
        args = lines[0][2:].split(" ")
        m = EMU_EXE.match(os.path.basename(args[0]))
        filters = [a.split("=", 1)[1] for a in args if a.startswith("--gtest_filter=")]
        if not m or len(filters) != 1:
            continue  # not one case of an emulated test binary (the trainer, a whole binary run by hand)
        kernels = cases.setdefault((m.group(1), filters[0]), {})
        for line in lines[1:]:
            fields = line.split("\t", 2)
            try:
                launches, seconds, kernel = int(fields[0]), float(fields[1]), fields[2]
            except (ValueError, IndexError):
                fail(f"{path}: a line is not '<launches><TAB><seconds><TAB><kernel>': {line!r}")
            n, t = kernels.get(kernel, (0, 0.0))
            kernels[kernel] = (n + launches, t + seconds)
    return cases


def registered_cases(ctest, ctest_dir):
    """The cases ctest registers, emulated and GPU: '<exe>.<gtest name>' run with that gtest filter."""
    try:
        out = subprocess.run([ctest, "--test-dir", ctest_dir, "--show-only=json-v1"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"--ctest-dir {ctest_dir}: ctest --show-only failed: {e}")
    names = []
    for test in json.loads(out).get("tests", []):
        command = test.get("command") or []
        if not command:
            continue
        exe = os.path.basename(command[0])
        filters = [a.split("=", 1)[1] for a in command if a.startswith("--gtest_filter=")]
        # a parameterized case's name ends in "  # GetParam() = ..."
        name = f"{exe}.{filters[0]}" if len(filters) == 1 else None
        if (EMU_EXE.match(exe) or GPU_EXE.match(exe)) and name and test["name"].split("  # ")[0] == name:
            names.append(name)
    return names


def split_cases(names):
    """({(gpu binary, case)} of the emulated cases, {(gpu binary, case)} of the GPU binaries' cases)."""
    emu, gpu = set(), set()
    for name in names:
        exe, _, case = name.partition(".")
        m, g = EMU_EXE.match(exe), GPU_EXE.match(exe)
        if not (m or g) or not case:
            fail(f"--cases: {name!r} is not test_<family>_cuda[_emu].<gtest name>")
        (emu if m else gpu).add(((m or g).group(1), case))
    return emu, gpu


# What a case costs under a sanitizer is not known here; its launches and emulated seconds are what the logs give.
# On the H200 (2026-11-27/29) racecheck took 0.01-0.02 s a launch of the small kernels (test_norm_cuda whole: 4,731
# launches, 50 s) but ~0.16 s a launch of attention's (AttentionCuda.OddHeadDims: 440 launches, 0.85 s emulated,
# 70-100 s) and of the models' steps (F32StepMatchesTheCpuThenSgd/resnet20: 270, 1.0 s, 35 s): neither count alone
# predicts it, and the suggestions rank by emulated seconds, the work of every thread's every access.
def cost(kernels):
    """(launches, emulated seconds) of a case whose launch log is `kernels`."""
    return sum(n for n, _ in kernels.values()), sum(t for _, t in kernels.values())


def describe(kernels):
    n, t = cost(kernels)
    return f"{n} launches, {t:.2f} s emulated"


def function_name(kernel):
    """'void ns::k(args) [with T = x]' -> 'k'."""
    return kernel.partition(" [with ")[0].split("(", 1)[0].split(" ")[-1].split("::")[-1]


def short(kernel):
    """'void ns::k(args) [with T = x]' -> 'k [T = x]'."""
    with_ = kernel.partition(" [with ")[2]
    return function_name(kernel) + (" [" + with_ if with_ else "")


def kernel_functions(source_dir):
    """{name: file} of the __global__ functions under source_dir (*.cu, *.cuh)."""
    found = {}
    for base, _, files in os.walk(source_dir):
        for name in sorted(files):
            if not name.endswith((".cu", ".cuh")):
                continue
            path = os.path.join(base, name)
            with open(path) as f:
                text = f.read()
            for m in re.finditer(r"__global__", text):
                rest = re.sub(r"__launch_bounds__\s*\([^)]*\)", "", text[m.end():m.end() + 400])
                fn = re.search(r"([A-Za-z_]\w*)\s*\(", rest)
                if fn:
                    found.setdefault(fn.group(1), path)
    return found


def unlaunched(cases, source_dir):
    """The kernel functions of source_dir that no emulated case launches, less VENDOR_PATH_KERNELS: {name: file}."""
    launched = {function_name(k) for kernels in cases.values() for k in kernels}
    return {n: f for n, f in kernel_functions(source_dir).items() if n not in launched | VENDOR_PATH_KERNELS}


def check_lines(runs, on_gpu, path):
    """A line that names no GPU test binary, or whose filter selects none of its cases (a case renamed), runs
    nothing on the GPU (run.sh passes it over, or runs an empty part): an error naming it."""
    binaries = {b for b, _ in on_gpu}
    for tool, binary, f in runs:
        if binary not in binaries:
            fail(f"{path}: '{tool} {binary}' names no GPU test binary of this build")
        if not any(gtest_match(c, f or "*") for b, c in on_gpu if b == binary):
            fail(f"{path}: '{tool} {binary} {f}' selects none of {binary}'s cases (renamed?)")


def tool_runs(runs, tool, binaries):
    """The (binary, gtest filter) runs of `tool` as run.sh makes them: a binary's sanitize.txt lines, or, where it has
    none, the binary whole ("*")."""
    listed = [(b, f or "*") for t, b, f in runs if t == tool]
    return listed + [(b, "*") for b in sorted(set(binaries) - {b for b, _ in listed})]


def selected(cases, binary, gtest_filter):
    """The cases (keys and launch logs) that one run selects."""
    return [(key, k) for key, k in cases.items() if key[0] == binary and gtest_match(key[1], gtest_filter)]


def coverage(cases, runs, tools):
    """{tool: {kernel: [cases reaching it, cheapest first]}} of the kernels no run of that tool reaches (a case
    as (emulated seconds, binary, gtest name))."""
    every = {}
    for (binary, case), kernels in cases.items():
        for k in kernels:
            every.setdefault(k, []).append((cost(kernels)[1], binary, case))
    missing = {}
    for tool in tools:
        reached = set()
        for binary, f in tool_runs(runs, tool, {b for b, _ in cases}):
            for _, kernels in selected(cases, binary, f):
                reached.update(kernels)
        missing[tool] = {k: sorted(every[k])[:3] for k in sorted(set(every) - reached, key=short)}
    return every, missing


def suggest(cases, missing):
    """The cases that reach a tool's missing kernels, picked greedily by kernels reached per emulated second:
    {binary: [gtest names]}, for new sanitize.txt lines."""
    left, picked = set(missing), {}
    while left:
        def value(item):
            (binary, case), kernels = item
            seconds = cost(kernels)[1]
            return len(left & set(kernels)) / (seconds + 0.05), -seconds
        (binary, case), kernels = max(cases.items(), key=value)
        picked.setdefault(binary, []).append(case)
        left -= set(kernels)
    return picked


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launches", required=True)
    ap.add_argument("--ctest-dir")
    ap.add_argument("--cases")
    ap.add_argument("--ctest", default="ctest")
    ap.add_argument("--cuda-build", choices=["ON", "OFF"], default="ON",
                    help="OFF: the build has no CUDA, so its GPU test binaries lack the cases inside #if HPDT_HAVE_CUDA "
                         "(which cases exist on a GPU is unknown: exit 77)")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--sanitize-list", default=os.path.join(here, "sanitize.txt"))
    ap.add_argument("--tools", default="memcheck racecheck")
    ap.add_argument("--json")
    ap.add_argument("--kernel-sources", default=os.path.join(here, "..", "..", "kernels", "cuda"),
                    help="where the __global__ functions are that some case must launch (default kernels/cuda)")
    ap.add_argument("--parts", action="store_true", help="print each racecheck run's launches and emulated seconds")
    ap.add_argument("--suggest", action="store_true",
                    help="print sanitize.txt lines that would reach the kernels a tool misses")
    a = ap.parse_args()
    if bool(a.ctest_dir) == bool(a.cases):
        fail("give one of --ctest-dir BUILD and --cases FILE")
    runs = read_sanitize_list(a.sanitize_list)
    cases = read_logs(a.launches)
    if a.cases:
        try:
            with open(a.cases) as f:
                names = [line.strip() for line in f if line.strip()]
        except OSError as e:
            fail(f"--cases {a.cases}: {e.strerror}")
    else:
        names = registered_cases(a.ctest, a.ctest_dir)
    expected, on_gpu = split_cases(names)
    if not expected:
        fail("no emulated test case is registered: nothing to check")
    if not on_gpu:
        print("no GPU test binary in this build (a build without CUDA): which cases exist on a GPU is unknown; "
              "nothing checked")
        return SKIP
    if a.cuda_build == "OFF":
        print("a build without CUDA (--cuda-build OFF): its GPU test binaries hold only the cases outside "
              "#if HPDT_HAVE_CUDA, so which cases exist on a GPU is unknown; nothing checked")
        return SKIP
    unlogged = sorted(expected - set(cases))
    if unlogged:
        print(f"incomplete: {len(unlogged)} of {len(expected)} emulated cases left no launch log in {a.launches} "
              f"(a partial ctest run, or a case that crashed), e.g. {unlogged[0][0]}_emu.{unlogged[0][1]}; "
              "nothing checked")
        return SKIP
    # the emulator-only cases (#if HPDT_CUDA_EMU) and those a GPU skips reach no kernel under a GPU's sanitizer
    emu_only = {key for key in expected if key not in on_gpu or key in GPU_SKIPS}
    cases = {key: k for key, k in cases.items() if key in expected and key not in emu_only}
    tools = a.tools.split()
    check_lines(runs, on_gpu, a.sanitize_list)
    every, missing = coverage(cases, runs, tools)
    print(f"{len(every)} kernels (template instances) launched by {len(cases)} emulated cases of "
          f"{len({b for b, _ in cases})} binaries (not counted: {len(emu_only)} cases that do not run on a GPU); "
          f"the sanitizer runs of {a.sanitize_list}:")
    for tool in tools:
        print(f"  {tool}: reaches {len(every) - len(missing[tool])} of {len(every)}")
        for kernel, reaching in missing[tool].items():
            print(f"    not reached: {short(kernel)}")
            print("      launched by: " + "; ".join(f"{b} {c} ({describe(cases[(b, c)])})" for _, b, c in reaching))
    never = unlaunched(cases, a.kernel_sources)
    for name, path in sorted(never.items()):
        print(f"  no emulated case launches {name} ({os.path.relpath(path)}): no test reaches it on the emulator, "
              "no sanitizer run on a GPU")
    if a.parts:
        for binary, f in tool_runs(runs, "racecheck", {b for b, _ in cases}):
            costs = [cost(k) for _, k in selected(cases, binary, f)]
            print(f"racecheck part ({sum(n for n, _ in costs)} launches, {sum(t for _, t in costs):.2f} s emulated): "
                  f"{binary} {'(whole)' if f == '*' else f}")
    if a.suggest:
        for tool in tools:
            for binary, picked in suggest(cases, missing[tool]).items():
                for c in picked:
                    print(f"suggested ({describe(cases[(binary, c)])}): {tool} {binary} {c}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"kernels": len(every), "cases": len(cases),
                       "not_reached": {t: {short(k): [f"{b} {c}" for _, b, c in r] for k, r in m.items()}
                                       for t, m in missing.items()}}, f, indent=1)
    return 1 if any(missing.values()) or never else 0


if __name__ == "__main__":
    sys.exit(main())
