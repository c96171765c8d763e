#!/usr/bin/env python3
"""Writes the manifest of what scripts/gpu/run.sh runs, from ctest's view of a build directory.

Each line: kind<TAB>ranks<TAB>executable (relative to the build dir)<TAB>arguments
  smoke  hpdt-smoke under mpiexec: MPI, parallel HDF5, CUDA kernels against the CPU
  test   a gpu-labelled test binary, run whole (all its cases) under mpiexec -n ranks when ranks > 0
  check  a command from scripts/gpu/checks.txt (end-to-end runs: the trainer, the all-reduce benchmark);
         the executable column holds the check's name
  bench  a GPU benchmark from scripts/gpu/benchmarks.txt
  peer   a named command from benchmarks.txt (PyTorch peers, profiles); the executable column holds its name
  prewarm  a named command from benchmarks.txt that run.sh starts in the background after the smoke, and the
         benchmark or peer of the same name waits for (torch.compile filling its caches); the name column as peer's
usage: manifest.py BUILD_DIR BENCHMARKS_TXT [CHECKS_TXT]
"""
import json
import os
import re
import subprocess
import sys

build, bench_file = sys.argv[1], sys.argv[2]
info = json.loads(subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                                 check=True, capture_output=True, text=True).stdout)
# First the smoke check: MPI, parallel HDF5 and CUDA kernels at 2 ranks sharing the GPU.
smoke = "apps/smoke/hpdt-smoke"
if not os.access(os.path.join(build, smoke), os.X_OK):
    sys.exit(f"manifest.py: {smoke} was not built in {build}")
print(f"smoke\t2\t{smoke}\t")
seen = set()
for test in info.get("tests", []):
    props = {p["name"]: p["value"] for p in test.get("properties", [])}
    if "gpu" not in props.get("LABELS", []):
        continue
    cmd = test.get("command", [])
    ranks = 0
    for i, arg in enumerate(cmd):
        if arg in ("-n", "-np") and i + 1 < len(cmd):
            ranks = int(cmd[i + 1])
    exe = next((c for c in cmd if c.startswith(os.path.abspath(build)) and os.access(c, os.X_OK)), None)
    if exe is None:
        sys.exit(f"manifest.py: cannot find the executable of gpu test {test['name']}: {cmd}")
    key = (ranks, exe)
    if key in seen:
        continue
    seen.add(key)
    print(f"test\t{ranks}\t{os.path.relpath(exe, build)}\t")
if len(sys.argv) > 3:
    with open(sys.argv[3]) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, command = line.partition(" ")
            for exe in re.findall(r"\{bin\}/(\S+)", command):
                if not os.access(os.path.join(build, exe), os.X_OK):
                    sys.exit(f"manifest.py: check {name} runs {exe}, which was not built")
            print(f"check\t0\t{name}\t{command}")
with open(bench_file) as f:
    for line in f:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        for kind in ("peer", "prewarm"):
            if line.startswith(kind + " "):
                name, _, command = line[len(kind) + 1:].partition(" ")
                print(f"{kind}\t0\t{name}\t{command}")
                break
        else:
            kind = None
        if kind:
            continue
        exe, _, args = line.partition(" ")
        if not os.access(os.path.join(build, exe), os.X_OK):
            sys.exit(f"manifest.py: benchmark {exe} listed in {bench_file} was not built")
        print(f"bench\t0\t{exe}\t{args}")
