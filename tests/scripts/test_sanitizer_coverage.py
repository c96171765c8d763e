#!/usr/bin/env python3
"""scripts/gpu/sanitizer_coverage.py on made-up launch logs and a made-up sanitize.txt: gtest's filter syntax as
run.sh passes it, a binary without lines run whole, a binary with lines only through them, the kernels no run of a
tool reaches named with the cheapest case that reaches them, an incomplete set of logs skipped, bad input named."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "gpu", "sanitizer_coverage.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import sanitizer_coverage as sc  # noqa: E402

K_SMALL = "void hpdt::kernels::cuda::small_kernel(float*)"
K_V3 = "void hpdt::kernels::cuda::{anonymous}::v3_kernel(const float*) [with Pipeline P = pingpong]"
K_V3B = "void hpdt::kernels::cuda::{anonymous}::v3_kernel(const float*) [with Pipeline P = barrier]"
K_NORM = "void hpdt::kernels::cuda::norm_kernel(float*)"
K_ONLY_EMU = "void hpdt::kernels::cuda::emu_only_kernel(float*)"

LOGS = {  # (exe, gtest name): {kernel: (launches, emulated seconds)}
    ("test_gemm_cuda_emu", "GemmCuda.Small"): {K_SMALL: (3, 0.01)},
    ("test_gemm_cuda_emu", "GemmCuda.V3Edges"): {K_V3B: (40, 2.5), K_SMALL: (1, 0.0)},
    ("test_gemm_cuda_emu", "GemmCuda.V3PingpongLarge"): {K_V3: (2, 8.0)},
    ("test_gemm_cuda_emu", "GemmCuda.V3Pingpong"): {K_V3: (8, 0.5)},
    ("test_norm_cuda_emu", "Norm/NormCuda.Forward/f32"): {K_NORM: (2, 0.1)},
    ("test_norm_cuda_emu", "Norm/NormCuda.Errors/f32"): {},
    # emulator-only (#if HPDT_CUDA_EMU: not in the GPU binary) and skipped on a GPU: their kernels do not count
    ("test_norm_cuda_emu", "NormCuda.EmulatedBankConflicts"): {K_ONLY_EMU: (1, 0.1)},
    ("test_gemm_cuda_emu", "GemmCuda.V3PipelineByRuleFollowsTheKLoop"): {K_ONLY_EMU: (1, 0.1)},
}
ON_GPU_TOO = [key for key in LOGS if key[1] != "NormCuda.EmulatedBankConflicts"]
SANITIZE = """# racecheck gemm only through two filters; memcheck everything whole
racecheck test_gemm_cuda GemmCuda.Small:GemmCuda.V3E?ges
racecheck test_gemm_cuda -GemmCuda.*Pingpong*:GemmCuda.Small
"""


class SanitizerCoverage(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.TemporaryDirectory()
        self.logs = os.path.join(self.d.name, "launches")
        os.mkdir(self.logs)
        for n, ((exe, case), kernels) in enumerate(LOGS.items()):
            with open(os.path.join(self.logs, f"{exe}.{100 + n}.launches"), "w") as f:
                f.write(f"# /build/tests/cuda_emu/{exe} --gtest_filter={case} --gtest_also_run_disabled_tests\n")
                f.writelines(f"{n}\t{t:.6f}\t{k}\n" for k, (n, t) in kernels.items())
        with open(os.path.join(self.logs, "hpdt-train-emu.7.launches"), "w") as f:  # not a test case: ignored
            f.write(f"# hpdt-train-emu --device cuda\n5\t1.0\t{K_NORM}\n")
        self.sources = os.path.join(self.d.name, "kernels")
        os.mkdir(self.sources)
        self.write("kernels/a.cu", "template <int P>\n__global__ void __launch_bounds__(256) v3_kernel(const float* x) {}\n"
                   "__global__ void small_kernel(float*) {}\n")
        self.write("kernels/b.cuh", "__global__\nvoid norm_kernel(float* y) {}\n")
        self.cases = self.write("cases.txt", "".join(f"{exe}.{case}\n" for exe, case in LOGS) +
                                "".join(f"{exe[:-4]}.{case}\n" for exe, case in ON_GPU_TOO))
        self.sanitize = self.write("sanitize.txt", SANITIZE)

    def tearDown(self):
        self.d.cleanup()

    def write(self, name, text):
        path = os.path.join(self.d.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_script(self, *extra, cases=None, sanitize=None):
        return subprocess.run([sys.executable, SCRIPT, "--launches", self.logs, "--cases", cases or self.cases,
                               "--sanitize-list", sanitize or self.sanitize, "--kernel-sources", self.sources, *extra],
                              capture_output=True, text=True)

    def test_gtest_filters(self):
        self.assertTrue(sc.gtest_match("GemmCuda.V3Edges", "GemmCuda.Small:GemmCuda.V3E?ges"))
        self.assertFalse(sc.gtest_match("GemmCuda.V3Pingpong", "-GemmCuda.*Pingpong*:GemmCuda.Small"))
        self.assertTrue(sc.gtest_match("GemmCuda.V3Edges", "-GemmCuda.*Pingpong*:GemmCuda.Small"))
        self.assertTrue(sc.gtest_match("Norm/NormCuda.Forward/f32", "*"))
        self.assertFalse(sc.gtest_match("A.B", "A.*-A.B"))
        self.assertTrue(sc.gtest_match("A.[x]", "A.[x]"))  # '[' is no character class in gtest

    def test_names_what_a_tool_does_not_reach(self):
        r = self.run_script()
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("4 kernels (template instances) launched by 6 emulated cases of 2 binaries (not counted: 2 "
                      "cases that do not run on a GPU)", r.stdout)
        self.assertNotIn("emu_only_kernel", r.stdout)
        self.assertIn("memcheck: reaches 4 of 4", r.stdout)
        self.assertIn("racecheck: reaches 3 of 4", r.stdout)
        self.assertIn("not reached: v3_kernel [Pipeline P = pingpong]", r.stdout)
        # the cheapest case first: by emulated seconds, not launches
        self.assertIn("launched by: test_gemm_cuda GemmCuda.V3Pingpong (8 launches, 0.50 s emulated); "
                      "test_gemm_cuda GemmCuda.V3PingpongLarge (2 launches, 8.00 s emulated)", r.stdout)
        self.assertNotIn("barrier]", r.stdout)  # reached by racecheck's first line (V3E?ges)

    def test_a_line_that_reaches_it_passes_and_writes_json(self):
        sanitize = self.write("s2.txt", SANITIZE + "racecheck test_gemm_cuda GemmCuda.V3Pingpong\n")
        out = os.path.join(self.d.name, "c.json")
        r = self.run_script("--json", out, sanitize=sanitize)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("racecheck: reaches 4 of 4", r.stdout)
        with open(out) as f:
            self.assertIn('"not_reached"', f.read())

    def test_a_kernel_function_no_case_launches_fails(self):
        sanitize = self.write("s2.txt", SANITIZE + "racecheck test_gemm_cuda GemmCuda.V3Pingpong\n")
        self.assertEqual(self.run_script(sanitize=sanitize).returncode, 0)
        self.write("kernels/c.cu", "__global__ void lonely_kernel(int n) {}\n"
                   "__global__ void epilogue_inplace(float* y) {}\n")  # a vendor path's: not counted
        r = self.run_script(sanitize=sanitize)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("no emulated case launches lonely_kernel", r.stdout)
        self.assertNotIn("epilogue_inplace", r.stdout)

    def test_incomplete_logs_skip(self):
        with open(self.cases) as f:
            cases = self.write("more.txt", f.read() + "test_pool_cuda_emu.PoolCuda.Max\n")
        r = self.run_script(cases=cases)
        self.assertEqual(r.returncode, 77, r.stdout + r.stderr)
        self.assertIn("incomplete: 1 of 9", r.stdout)
        self.assertIn("test_pool_cuda_emu.PoolCuda.Max", r.stdout)

    def test_suggests_the_cheapest_cases(self):
        r = self.run_script("--suggest")
        self.assertIn("suggested (8 launches, 0.50 s emulated): racecheck test_gemm_cuda GemmCuda.V3Pingpong\n",
                      r.stdout)

    def test_parts_add_up_their_cases(self):
        r = self.run_script("--parts")
        # line 1: Small + V3Edges (3 + 41 launches); line 2: all but the pingpongs and Small; norm: whole
        self.assertIn("racecheck part (44 launches, 2.51 s emulated): test_gemm_cuda GemmCuda.Small:GemmCuda.V3E?ges",
                      r.stdout)
        self.assertIn("racecheck part (41 launches, 2.50 s emulated): test_gemm_cuda -GemmCuda.*Pingpong*:", r.stdout)
        self.assertIn("racecheck part (2 launches, 0.10 s emulated): test_norm_cuda (whole)", r.stdout)

    def test_without_a_gpu_build_it_skips(self):
        emu_only = self.write("emu.txt", "".join(f"{exe}.{case}\n" for exe, case in LOGS))
        r = self.run_script(cases=emu_only)
        self.assertEqual(r.returncode, 77, r.stdout + r.stderr)
        self.assertIn("no GPU test binary in this build", r.stdout)

    def test_a_build_without_cuda_skips(self):
        # (its GPU binaries list only the cases outside #if HPDT_HAVE_CUDA: a sanitize.txt line may select none)
        r = self.run_script("--cuda-build", "OFF")
        self.assertEqual(r.returncode, 77, r.stdout + r.stderr)
        self.assertIn("a build without CUDA", r.stdout)

    def test_bad_input_is_named(self):
        bad_line = self.write("bad.txt", "racecheck\n")
        r = self.run_script(sanitize=bad_line)
        self.assertEqual(r.returncode, 1)
        self.assertIn("bad.txt:1: a run needs TOOL BINARY [FILTER]", r.stderr)
        r = self.run_script(sanitize=os.path.join(self.d.name, "absent.txt"))
        self.assertIn("--sanitize-list", r.stderr)
        self.assertEqual(r.returncode, 1)
        for line, says in (("racecheck test_gemm_cuda GemmCuda.Renamed\n", "selects none of test_gemm_cuda's cases"),
                           ("memcheck test_gemm_cud\n", "'memcheck test_gemm_cud' names no GPU test binary")):
            r = self.run_script(sanitize=self.write("typo.txt", SANITIZE + line))
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn(says, r.stderr)
        bad_case = self.write("badcase.txt", "gemm_cuda.GemmCuda.Small\n")
        r = self.run_script(cases=bad_case)
        self.assertIn("is not test_<family>_cuda[_emu].<gtest name>", r.stderr)
        with open(os.path.join(self.logs, "test_gemm_cuda_emu.999.launches"), "w") as f:
            f.write("no header\n")
        r = self.run_script()
        self.assertEqual(r.returncode, 1)
        self.assertIn("test_gemm_cuda_emu.999.launches: not a launch log", r.stderr)
        with open(os.path.join(self.logs, "test_gemm_cuda_emu.999.launches"), "w") as f:
            f.write("# test_gemm_cuda_emu --gtest_filter=GemmCuda.Small\n3\tkernel_without_seconds\n")
        r = self.run_script()
        self.assertEqual(r.returncode, 1)
        self.assertIn("a line is not '<launches><TAB><seconds><TAB><kernel>'", r.stderr)
        r = subprocess.run([sys.executable, SCRIPT, "--launches", os.path.join(self.d.name, "none"), "--cases",
                            self.cases], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a directory", r.stderr)


if __name__ == "__main__":
    unittest.main()
