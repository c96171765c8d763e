#!/usr/bin/env python3
"""scripts/gpu/kernel_instances.py: the demangler's and GCC's spellings of one instance match (namespaces, typedefs
and alias templates GCC lists, "short unsigned int", enum arguments), and on a made-up build tree (PTX .entry names in
a .cu.o) and launch logs the compiled instances no case launched are listed; bad input is named."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "gpu", "kernel_instances.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import kernel_instances as ki  # noqa: E402


class KernelInstances(unittest.TestCase):
    def test_one_instance_two_spellings(self):
        pairs = [
            ("void hpdt::kernels::cuda::{anonymous}::maxpool_forward_kernel(const T*) [with Index = unsigned int; "
             "T = hpdt::bf16_t; int32_t = int; FlatDiv<Index> = hpdt::kernels::cuda::FastDiv]",
             "void hpdt::kernels::cuda::(anonymous namespace)::maxpool_forward_kernel<unsigned int, hpdt::bf16_t>"
             "(hpdt::bf16_t const*, hpdt::kernels::cuda::FastDiv)"),
            ("void hpdt::kernels::cuda::{anonymous}::fused_step_kernel(G*) [with hpdt::kernels::OptimizerKind K = "
             "hpdt::kernels::OptimizerKind::adamw; G = float; M = NoCopy; int64_t = long int]",
             "void hpdt::kernels::cuda::(anonymous namespace)::fused_step_kernel<(hpdt::kernels::OptimizerKind)1, "
             "float, hpdt::kernels::cuda::(anonymous namespace)::NoCopy>(float*)"),
            ("void hpdt::kernels::cuda::{anonymous}::narrow_transpose_kernel(const E*) [with E = short unsigned int; "
             "bool kToInterleaved = false; int64_t = long int]",
             "void hpdt::kernels::cuda::(anonymous namespace)::narrow_transpose_kernel<unsigned short, false>"
             "(unsigned short const*, long)"),
            ("void hpdt::kernels::cuda::gemm_detail::{anonymous}::gemm_v3_kernel(CUtensorMap) [with T = hpdt::bf16_t; "
             "C = hpdt::kernels::cuda::sm90a::Cfg<128, 6>; bool WS = false; CUtensorMap = CUtensorMap_st]",
             "void hpdt::kernels::cuda::gemm_detail::(anonymous namespace)::gemm_v3_kernel<hpdt::bf16_t, "
             "hpdt::kernels::cuda::sm90a::Cfg<128, 6>, false>(CUtensorMap_st)"),
            ("void hpdt::kernels::cuda::{anonymous}::accumulate_kernel(float*, const float*, size_t)",
             "hpdt::kernels::cuda::(anonymous namespace)::accumulate_kernel(float*, float const*, unsigned long)"),
        ]
        for pretty, demangled in pairs:
            self.assertEqual(ki.from_pretty(pretty), ki.from_demangled(demangled), pretty)
        self.assertEqual(ki.from_pretty(pairs[0][0]), ("maxpool_forward_kernel", ("unsigned", "bf16_t")))
        self.assertEqual(ki.from_pretty(pairs[1][0])[1][0], "enum OptimizerKind")

    def test_lists_what_no_case_launched(self):
        with tempfile.TemporaryDirectory() as d:
            objs, logs = os.path.join(d, "build", "kernels"), os.path.join(d, "logs")
            os.makedirs(objs)
            os.mkdir(logs)
            with open(os.path.join(objs, "k.cu.o"), "wb") as f:  # PTX inside an object: bytes around it
                f.write(b"\x7fELF\x00junk\n.visible .entry _Z9my_kernelIfEvPT_(\n\x00.entry _Z9my_kernelIiEvPT_(\n")
            with open(os.path.join(logs, "test_x_cuda_emu.1.launches"), "w") as f:
                f.write("# test_x_cuda_emu --gtest_filter=X.Y\n3\t0.01\tvoid my_kernel(T*) [with T = float]\n")
            out = os.path.join(d, "r.json")
            r = subprocess.run([sys.executable, SCRIPT, "--launches", logs, "--objects", os.path.join(d, "build"),
                                "--json", out], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("2 kernel instances compiled; 1 launched by no emulated case (1 cases logged)", r.stdout)
            self.assertIn("  my_kernel: <int>\n", r.stdout)
            with open(out) as f:
                self.assertIn('"never_launched"', f.read())
            r = subprocess.run([sys.executable, SCRIPT, "--launches", logs, "--objects", logs],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("no CUDA object with PTX entries", r.stderr)


if __name__ == "__main__":
    unittest.main()
