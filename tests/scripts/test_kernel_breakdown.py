#!/usr/bin/env python3
"""scripts/gpu/kernel_breakdown.py on made-up traces: kernel names into families (ours, cuBLAS's, cuDNN's,
PyTorch's), per-model tables of hpdt's --kernel-trace files beside the PyTorch peer's, and bad input."""
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "gpu", "kernel_breakdown.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import kernel_breakdown as kb  # noqa: E402


def trace(kernels, busy, span=None):
    return {"steps": 2, "activities": 10, "sum_ms_per_step": sum(ms for _, ms in kernels), "busy_ms_per_step": busy,
            "span_ms_per_step": span or busy,
            "kernels": [{"name": n, "count_per_step": 1.0, "ms_per_step": ms} for n, ms in kernels]}


class Families(unittest.TestCase):
    def test_names(self):
        cases = {
            "void hpdt::kernels::cuda::gemm_detail::(anonymous namespace)::gemm_v3_kernel<bf16_t, hpdt::kernels::cuda::"
            "sm90a::Cfg<256, 4>, false, 1, false, false>(CUtensorMap_st, CUtensorMap_st, hpdt::kernels::cuda::"
            "gemm_detail::Params, int)": "GEMM",
            "void hpdt::kernels::cuda::conv_detail::conv_gemm_tc<bf16_t>(hpdt::kernels::cuda::gemm_detail::Params)":
                "convolution",
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64": "convolution",
            "nvjet_hsh_256x128_64x4_2x1_v_bz_coopB_NNT": "GEMM",
            "cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8>(Params)": "GEMM",
            "void hpdt::kernels::cuda::(anonymous namespace)::convert_kernel<float, bf16_t>(float const*, bf16_t*, long)":
                "cast, copy, fill",
            "void hpdt::kernels::cuda::(anonymous namespace)::bn_apply_kernel<bf16_t, 2>(int)": "norm (batch, layer)",
            "void hpdt::kernels::cuda::(anonymous namespace)::bn_apply_flat_kernel<bf16_t, true>(int)": "norm (batch, layer)",
            "void hpdt::kernels::cuda::conv_detail::(anonymous namespace)::space_to_depth_kernel<bf16_t, false>(int)":
                "convolution",
            "void hpdt::kernels::cuda::conv_detail::(anonymous namespace)::space_to_depth_filter<bf16_t>(int)":
                "convolution",
            "void hpdt::kernels::cuda::conv_detail::(anonymous namespace)::depth_to_space_kernel<bf16_t, true>(int)":
                "convolution",
            # max pool's backward with the stem batch norm's sums: pooling (it holds no "bn_")
            "void hpdt::kernels::cuda::(anonymous namespace)::maxpool_backward_sums_kernel<bf16_t, 4>(int)": "pooling",
            "void at::native::batch_norm_collect_statistics_channels_last_kernel<c10::BFloat16>(int)": "norm (batch, layer)",
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int)": "norm (batch, layer)",
            "attention_backward_dkdv_v2_kernel": "attention",
            "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>>(Params)": "attention",
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
            "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)": "cast, copy, fill",
            "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)"
            "::{lambda()#1}, std::array<char*, 2ul> >(int)": "elementwise (activations, adds)",
            "[memcpy DtoD]": "cast, copy, fill",
            "Memset (Device)": "cast, copy, fill",
            "void hpdt::kernels::cuda::(anonymous namespace)::maxpool_forward_kernel<bf16_t>(int)": "pooling",
            "void hpdt::kernels::cuda::(anonymous namespace)::ce_rows_kernel<bf16_t>(int)": "softmax, loss",
            "void hpdt::kernels::cuda::(anonymous namespace)::fused_step_kernel<bf16_t>(int)": "optimizer",
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<3>>(int)": "optimizer",
            "void hpdt::kernels::cuda::(anonymous namespace)::column_partials_kernel<bf16_t, 8>(int)":
                "reduction (bias grads, sums)",
            "void nchwToNhwcKernel<__nv_bfloat16>(int)": "layout (transposes)",
            # cuDNN's Find-chosen algorithms (--cudnn-algo find; PyTorch's cudnn.benchmark)
            "void cudnn::winograd_nonfused::winogradForwardData4x4<float, __nv_bfloat16>(cudnn::winograd_nonfused::"
            "WinogradDataParams<float, __nv_bfloat16>)": "convolution",
            "void fft2d_r2c_32x32<float, false, 1u, true>(float2*, float const*, int)": "convolution",
            "void flip_filter<__nv_bfloat16, float>(float*, __nv_bfloat16 const*, int, int, int, int)": "convolution",
            "void computeOffsetsKernel<false, false>(cudnn::kernel_detail::computeOffsetsParams)": "convolution",
            "something_new_kernel": "other",
        }
        for name, fam in cases.items():
            with self.subTest(name=name[:60]):
                self.assertEqual(kb.family(name), fam)

    def test_base_name(self):
        self.assertEqual(kb.base_name("void a::(anonymous namespace)::f<x<y>, 2>(int, z<w>)"), "f")
        self.assertEqual(kb.base_name("nvjet_abc"), "nvjet_abc")


class Summarize(unittest.TestCase):
    """The PyTorch peer's per-step summary: the numbers tests/bench/test_kernel_trace.cpp expects of hpdt's."""

    def test_union_and_totals(self):
        acts = [("gemm", 0, 3), ("norm", 2, 4), ("gemm", 5, 6), ("[memcpy DtoD]", 8, 8.5), ("tiny", 5.2, 5.4)]
        s = kb.summarize(acts, 1)
        self.assertEqual(s["activities"], 5)
        self.assertEqual([k["name"] for k in s["kernels"]], ["gemm", "norm", "[memcpy DtoD]", "tiny"])
        self.assertEqual(s["kernels"][0]["count_per_step"], 2)
        self.assertAlmostEqual(s["sum_ms_per_step"], 6.7)
        self.assertAlmostEqual(s["busy_ms_per_step"], 5.5)
        self.assertAlmostEqual(s["span_ms_per_step"], 8.5)
        s2 = kb.summarize(list(reversed(acts)), 2)
        self.assertAlmostEqual(s2["busy_ms_per_step"], 2.75)
        self.assertAlmostEqual(s2["kernels"][0]["count_per_step"], 1.0)

    def test_empty_and_bad(self):
        self.assertEqual(kb.summarize([], 3)["busy_ms_per_step"], 0.0)
        with self.assertRaisesRegex(ValueError, "'back' ends before"):
            kb.summarize([("back", 2, 1)], 1)
        with self.assertRaisesRegex(ValueError, "steps >= 1"):
            kb.summarize([], 0)


class Tables(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = os.path.join(self.dir.name, "bench")
        os.makedirs(d)
        ours = trace([("gemm_v3_kernel", 20.0), ("bn_apply_kernel", 5.0), ("mystery_kernel", 1.5)], 27.0, 28.0)
        vendor = trace([("nvjet_hsh_1", 10.0), ("bn_apply_kernel", 5.0)], 15.5)
        for key, t in (("resnet50_bf16_ours", ours), ("resnet50_bf16_vendor", vendor)):
            with open(os.path.join(d, f"trace_{key}.json"), "w") as f:
                json.dump({"impl": "hpdt", "model": "resnet50", "trace": t}, f)
        torch_doc = {"train_step": [
            {"model": "resnet50", "mode": "eager", "img_per_s_median": 1.0,
             "kernel_trace": trace([("sm90_xmma_fprop_implicit_gemm_x", 12.0), ("batch_norm_collect_statistics_kernel", 4.0)],
                                   16.0)},
            {"model": "resnet50", "mode": "compile", "img_per_s_median": 1.0, "kernel_trace_error": "RuntimeError: boom"},
            {"model": "vit_b16", "mode": "eager", "img_per_s_median": 1.0}]}  # no trace: no column
        with open(os.path.join(d, "torch_gpu_train_step_eager.json"), "w") as f:
            json.dump(torch_doc, f)

    def tearDown(self):
        self.dir.cleanup()

    def test_table_per_model(self):
        by_model = kb.collect([self.dir.name])
        self.assertEqual(sorted(by_model), ["resnet50"])
        self.assertEqual(sorted(by_model["resnet50"]), ["hpdt ours", "hpdt vendor", "torch compile",
                                                        "torch eager"])
        rows, numbers = [], []
        kb.tables(by_model, rows, numbers)
        text = "\n".join(rows)
        self.assertIn("| ResNet-50: ms a step | hpdt ours | hpdt vendor | torch eager |", text)
        self.assertIn("| GEMM | 20.00 | 10.00 | — |", text)
        self.assertIn("| convolution | — | — | 12.00 |", text)
        self.assertIn("| norm (batch, layer) | 5.00 | 5.00 | 4.00 |", text)
        self.assertIn("| **GPU busy (their union)** | 27.00 | 15.50 | 16.00 |", text)
        self.assertIn("| **GPU idle inside the step** | 1.00 | 0.00 | 0.00 |", text)
        self.assertIn("1.500 ms `mystery_kernel`", text)  # 'other' kernels are named, not hidden
        self.assertIn("- torch compile: no kernel trace (RuntimeError: boom)", text)
        fams = {n["trace"]: n["families_ms"] for n in numbers}
        self.assertAlmostEqual(fams["hpdt ours"]["other"], 1.5)

    def test_cli_and_bad_input(self):
        out = subprocess.run([sys.executable, SCRIPT, self.dir.name], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("hpdt ours", out.stdout)
        bad = os.path.join(self.dir.name, "trace_bad.json")
        with open(bad, "w") as f:
            json.dump({"impl": "hpdt"}, f)
        out = subprocess.run([sys.executable, SCRIPT, "--traces", bad], capture_output=True, text=True)
        self.assertEqual(out.returncode, 1)
        self.assertIn("trace_bad.json", out.stderr)
        self.assertIn("--kernel-trace", out.stderr)
        empty = tempfile.mkdtemp(dir=self.dir.name)
        out = subprocess.run([sys.executable, SCRIPT, empty], capture_output=True, text=True)
        self.assertEqual(out.returncode, 1)
        self.assertIn("no kernel traces found", out.stderr)


if __name__ == "__main__":
    unittest.main()
