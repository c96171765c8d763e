#!/usr/bin/env python3
"""scripts/gpu/plan_lease.py on a made-up benchmarks.txt and summary: seconds from the summary by name (and by
executable in the old format, where one line has it; never from a run cut short), estimates by kind, --rows first,
a peer whose prewarm is still running going after the entries that follow it, and the deadline's cut and unrun."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "gpu"))
import plan_lease  # noqa: E402

BENCHMARKS = """# a comment
bench/train_step/hpdt-bench-train-step --model resnet50 --out {out}/train_step_a.json --kernel-trace {out}/trace_a.json
prewarm torch_compile python3 peer.py --modes compile --steps 1
peer torch_compile python3 peer.py --modes compile
peer ncu_x ncu -o {out}/x bench/kernels/hpdt-bench-conv-cuda
bench/kernels/hpdt-bench-conv-cuda --benchmark_min_time=0.05 --benchmark_out={out}/bench_conv_cuda.json
bench/kernels/hpdt-bench-gemm-cuda --benchmark_out={out}/bench_gemm_cuda.json
bench/kernels/hpdt-bench-attention-cuda --benchmark_out={out}/bench_attention_cuda.json
bench/train_step/hpdt-bench-train-step --model vit_b --gemm-tuning find --out {out}/train_step_b.json
"""
SUMMARY = """ok        bench train_step_a                           rc=0      7s  hpdt-bench-train-step.log  (at 80s; load at start: x)
ok        prewarm torch_compile                        rc=0    100s  torch_compile.prewarm.log
CUT SHORT bench hpdt-bench-gemm-cuda                   rc=124    9s  hpdt-bench-gemm-cuda.log
ok        bench hpdt-bench-attention-cuda              rc=0     31s  hpdt-bench-attention-cuda.log
ok        bench hpdt-bench-train-step                  rc=0      6s  hpdt-bench-train-step.301.log
ok        bench hpdt-bench-train-step                  rc=0      6s  hpdt-bench-train-step.307.log
"""


class PlanLease(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.TemporaryDirectory()
        self.bench, self.summary = (os.path.join(self.d.name, n) for n in ("benchmarks.txt", "summary.txt"))
        with open(self.bench, "w") as f:
            f.write(BENCHMARKS)
        with open(self.summary, "w") as f:
            f.write(SUMMARY)

    def tearDown(self):
        self.d.cleanup()

    def plan(self, deadline, rows=None):
        items = plan_lease.entries(self.bench)
        return {name: (start, secs, src, status) for _, name, start, secs, src, status in
                plan_lease.plan(items, plan_lease.measured([self.summary]), deadline, 80, rows or {})}

    def test_seconds_and_order(self):
        p = self.plan(1000, {"bench_conv_cuda": 100})
        self.assertEqual(p["train_step_a"], (80, 7, "measured", "ok"))
        self.assertEqual(p["ncu_x"], (87, 40, "estimate", "ok"))
        # the prewarm (100 s) had not ended at the peer's turn (87 s): the peer ran after the next entry, then conv
        self.assertEqual(p["torch_compile"], (127, 25, "estimate", "ok"))
        self.assertEqual(p["bench_conv_cuda"], (152, 40.0, "estimate, 100 rows", "ok"))
        # its cut run (9 s) is no measurement
        self.assertEqual(p["bench_gemm_cuda"][1:3], (60, "estimate"))
        # the old format's one attention line counts; its two train-step lines do not
        self.assertEqual(p["bench_attention_cuda"][1:3], (31, "measured"))
        self.assertEqual(p["train_step_b"][1:3], (12, "estimate"))

    def test_the_deadline(self):
        p = self.plan(200, {"bench_conv_cuda": 100})
        self.assertEqual(p["bench_gemm_cuda"][3], "cut")       # starts at 192
        self.assertEqual(p["bench_attention_cuda"][3], "not run")
        self.assertEqual(p["train_step_b"][3], "not run")


class BadInput(unittest.TestCase):
    """A malformed --rows or a missing file: a message naming it and exit 1."""

    def run_plan(self, *args):
        script = os.path.join(HERE, "..", "..", "scripts", "gpu", "plan_lease.py")
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True)

    def test_messages(self):
        bench = os.path.join(HERE, "..", "..", "scripts", "gpu", "benchmarks.txt")
        for args, needle in (([bench, "--rows", "x=y"], "--rows x=y: expected NAME=COUNT"),
                             (["no/such/benchmarks.txt"], "no/such/benchmarks.txt"),
                             ([bench, "--summary", "no/such/summary.txt"], "no/such/summary.txt")):
            r = self.run_plan(*args)
            self.assertEqual(r.returncode, 1, args)
            self.assertIn(needle, r.stderr)
            self.assertEqual(r.stdout, "")


if __name__ == "__main__":
    unittest.main()
