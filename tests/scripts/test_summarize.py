#!/usr/bin/env python3
"""scripts/gpu/summarize.py's "ResNet-50's convolutions, a step" on made-up hpdt-bench-conv-cuda medians: each shape's
three directions times its per_step counter, --conv v3 falling back to v2 where v3 did not run, cuDNN as the faster of
its heuristic's and Find's algorithms (also in the per-op table), the stem's backward-data counted 0 times, totals only
where every shape ran, and the whole tables from a results directory."""
import json
import os
import re
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "gpu"))
import summarize  # noqa: E402

DIRS = ("fwd", "bwd_data", "bwd_filter")


def rows(shape, per_step, ms, layouts=("conv", "conv_nhwc"), impls=("v2_tensor_core", "cudnn"), stem=False):
    """{name: median record} for shape in every layout, direction and implementation; ms(layout, dir, impl)."""
    out = {}
    for layout in layouts:
        for d in DIRS:
            for impl in impls:
                out[f"{layout}/{shape}/bf16/{d}/{impl}"] = {
                    "real_time": ms(layout, d, impl), "per_step": 0.0 if stem and d == "bwd_data" else float(per_step)}
    return out


class ConvStep(unittest.TestCase):
    def table(self, c):
        r, n = [], []
        summarize.conv_step_table(c, r, n)
        return r, {x.get("case", "total"): x for x in n}

    def test_weighted_sums(self):
        c = {}
        c.update(rows("1x1_64-256_56", 4, lambda l, d, i: 1.0 if i == "v2_tensor_core" else 2.0))
        c.update(rows("conv1_7x7s2_3-64_224", 1, lambda l, d, i: 10.0, stem=True))
        # v3 ran the NHWC forward of the 1x1 only: --conv v3 is v3 there, v2 for the other two directions
        c["conv_nhwc/1x1_64-256_56/bf16/fwd/v3_wgmma"] = {"real_time": 0.25, "per_step": 4.0}
        # an f32 row and a row without per_step (an older run) are not the step's
        c["conv/1x1_64-256_56/f32/fwd/v2_tensor_core"] = {"real_time": 99.0, "per_step": 4.0}
        c["conv/old/bf16/fwd/v2_tensor_core"] = {"real_time": 99.0}
        text, n = self.table(c)
        one = n["1x1_64-256_56"]
        self.assertEqual(one["per_step"], 4)
        self.assertAlmostEqual(one["nchw_v2_ms"], 4 * 3 * 1.0)
        self.assertAlmostEqual(one["nchw_cudnn_ms"], 4 * 3 * 2.0)
        self.assertAlmostEqual(one["nhwc_conv_v3_ms"], 4 * (0.25 + 1.0 + 1.0))
        stem = n["conv1_7x7s2_3-64_224"]
        self.assertAlmostEqual(stem["nchw_v2_ms"], 2 * 10.0)  # forward and backward-filter, no backward-data
        tot = n["total"]
        self.assertEqual(tot["shapes"], 2)
        self.assertAlmostEqual(tot["nchw_v2_ms"], 12.0 + 20.0)
        self.assertAlmostEqual(tot["nchw_cudnn_ms"], 24.0 + 20.0)
        self.assertAlmostEqual(tot["nhwc_conv_v3_ms"], 9.0 + 20.0)
        self.assertIn("| 1x1_64-256_56 | 4 | 12.000 | 24.000 |", "\n".join(text))
        self.assertIn("| **a step, 2 shapes** | 5 | 32.00 | 44.00 |", "\n".join(text))
        # largest per_step first
        names = [line.split(" | ")[0].strip("| ") for line in text if line.startswith("| ") and "---" not in line]
        self.assertLess(names.index("1x1_64-256_56"), names.index("conv1_7x7s2_3-64_224"))

    def test_a_missing_direction_leaves_no_total(self):
        c = rows("3x3_64-64_56", 3, lambda l, d, i: 1.0)
        del c["conv/3x3_64-64_56/bf16/bwd_filter/cudnn"]
        _, n = self.table(c)
        self.assertIsNone(n["3x3_64-64_56"]["nchw_cudnn_ms"])
        self.assertIsNone(n["total"]["nchw_cudnn_ms"])
        self.assertAlmostEqual(n["total"]["nchw_v2_ms"], 9.0)

    def test_cudnn_is_the_faster_of_heuristic_and_find(self):
        """Per direction the faster of the cudnn (heuristic) and cudnn_find rows; a shape with one of them uses it."""
        c = rows("1x1_256-64_56", 2, lambda l, d, i: 1.0 if i == "v2_tensor_core" else 4.0)
        for layout in ("conv", "conv_nhwc"):
            c[f"{layout}/1x1_256-64_56/bf16/fwd/cudnn_find"] = {"real_time": 0.5, "per_step": 2.0}   # Find wins
            c[f"{layout}/1x1_256-64_56/bf16/bwd_data/cudnn_find"] = {"real_time": 9.0, "per_step": 2.0}  # loses
        _, n = self.table(c)
        one = n["1x1_256-64_56"]
        self.assertAlmostEqual(one["nchw_cudnn_ms"], 2 * (0.5 + 4.0 + 4.0))
        self.assertAlmostEqual(one["nhwc_cudnn_ms"], 2 * (0.5 + 4.0 + 4.0))
        self.assertAlmostEqual(one["nchw_v2_ms"], 2 * 3 * 1.0)

    def test_per_op_ratio_is_against_the_faster_cudnn(self):
        c = {"conv/s/bf16/fwd/v2_tensor_core": {"real_time": 1.0}, "conv/s/bf16/fwd/cudnn": {"real_time": 3.0},
             "conv/s/bf16/fwd/cudnn_find": {"real_time": 0.5},
             "conv/t/bf16/fwd/v2_tensor_core": {"real_time": 1.0}, "conv/t/bf16/fwd/cudnn": {"real_time": 2.0}}
        r, n = [], []
        summarize.conv_table(c, r, n)
        by = {x["case"]: x for x in n}
        self.assertAlmostEqual(by["s"]["ours_over_cudnn"], 0.5)
        self.assertAlmostEqual(by["s"]["cudnn_find_ms"], 0.5)
        self.assertAlmostEqual(by["t"]["ours_over_cudnn"], 2.0)  # an older run: the heuristic's only
        self.assertIsNone(by["t"]["cudnn_find_ms"])
        self.assertIn("| s | NCHW | fwd | 1.000 | — | — | — | — | — | 3.000 | 0.500 | 0.50 | — |", "\n".join(r))

    def test_im2col_rows_beside_conv_v3(self):
        """HPDT_CONV_V3_LOAD=im2col rows (since 2026-11-30): their own per-op column, in the best v3; in the step table
        a column of --conv v3 with them where they ran, v3's (or v2's) rows elsewhere; none without any im2col row."""
        c = rows("3x3_64-64_56", 2, lambda l, d, i: {"v2_tensor_core": 4.0, "cudnn": 1.0, "v3_wgmma": 2.0}[i],
                 impls=("v2_tensor_core", "cudnn", "v3_wgmma"))
        _, n = self.table(c)
        self.assertIsNone(n["3x3_64-64_56"]["nhwc_conv_v3_im2col_ms"])  # a run before 2026-11-30
        for d in ("fwd", "bwd_data"):  # conv v3's directions: im2col faster
            c[f"conv_nhwc/3x3_64-64_56/bf16/{d}/v3_wgmma_im2col"] = {"real_time": 1.5, "per_step": 2.0}
        del c["conv_nhwc/3x3_64-64_56/bf16/bwd_filter/v3_wgmma"]  # --conv v3 on v2 there
        text, n = self.table(c)
        one = n["3x3_64-64_56"]
        self.assertAlmostEqual(one["nhwc_conv_v3_ms"], 2 * (2.0 + 2.0 + 4.0))
        self.assertAlmostEqual(one["nhwc_conv_v3_im2col_ms"], 2 * (1.5 + 1.5 + 4.0))
        self.assertAlmostEqual(n["total"]["nhwc_conv_v3_im2col_ms"], 14.0)
        self.assertIn("| 3x3_64-64_56 | 2 | 24.000 | 6.000 | 24.000 | 16.000 | 14.000 | 6.000 | 0.25 | 0.25 |",
                      "\n".join(text))
        r, n = [], []
        summarize.conv_table(c, r, n)
        fwd = [x for x in n if x["layout"] == "NHWC" and x["dir"] == "fwd"][0]
        self.assertAlmostEqual(fwd["v3_im2col_ms"], 1.5)
        self.assertAlmostEqual(fwd["best_v3_over_cudnn"], 1.0 / 1.5)

    def test_epilogue_table_pairs_the_scalar_rows_with_v2(self):
        c = {"conv/a/bf16/bwd_data/v2_tensor_core": {"real_time": 0.3},
             "conv/a/bf16/bwd_data/v2_scalar_epilogue": {"real_time": 0.6},
             "conv/b/bf16/fwd/v2_scalar_epilogue": {"real_time": 1.0}}  # no v2 row: not in the table
        r, n = [], []
        summarize.conv_epilogue_table(c, r, n)
        self.assertEqual(len(n), 1)
        self.assertEqual((n[0]["case"], n[0]["v2_ms"], n[0]["v2_scalar_epilogue_ms"]), ("a", 0.3, 0.6))
        self.assertIn("| a | NCHW | bf16 | bwd_data | 0.300 | 0.600 | 2.00 |", "\n".join(r))
        r, n = [], []
        summarize.conv_epilogue_table({}, r, n)
        self.assertIn("no v2_scalar_epilogue rows", r[0])

    def test_roofline_from_the_flop_and_bytes_counters(self):
        """Each direction at max(FLOPs at the peak, bytes at the bandwidth), times per_step; the GPU names the peaks."""
        c = rows("1x1_64-256_56", 2, lambda l, d, i: 5.0)
        for r in c.values():
            r["flop"], r["bytes"] = 989e9, 9.6e9  # 1 ms at 989 TFLOP/s, 2 ms at 4.8 TB/s
        for k, r in c.items():  # the forward moves less: 0.2 ms, so compute-bound at 1 ms (every row of it says so)
            if "/fwd/" in k:
                r["bytes"] = 0.96e9
        r, n = [], []
        summarize.conv_step_table(c, r, n, "NVIDIA H200")
        self.assertAlmostEqual(n[0]["roofline_ms"], 2 * (1.0 + 2.0 + 2.0))
        self.assertAlmostEqual(n[-1]["roofline_ms"], 10.0)
        self.assertIn("H200's nominal 989 TFLOP/s", "\n".join(r))
        r, n = [], []
        summarize.conv_step_table(c, r, n, "NVIDIA A100-SXM4-80GB")  # no peaks: no roofline, said so
        self.assertIsNone(n[0]["roofline_ms"])
        self.assertIn("no peaks for this GPU (NVIDIA A100-SXM4-80GB", "\n".join(r))
        self.assertEqual(summarize.peaks_of("NVIDIA H100 PCIe")[0], "H100 PCIe")
        self.assertEqual(summarize.peaks_of("NVIDIA H100 80GB HBM3")[0], "H100")

    def test_vit_gemm_step_adds_the_twelve_blocks(self):
        """Each GEMM's ms from its TFLOP/s and 2abc FLOPs, times 12; v3's best pipeline; a v3 row that ran v2 is out."""
        g = {}
        for name in summarize.VIT_STEP_GEMMS:
            sh = f"vitb16_b64_{name}_1000x100->500"  # 1e8 FLOP: 1 ms at 0.1 TFLOP/s
            g[f"gemm/bf16->bf16/{sh}/v3_wgmma"] = {"TFLOP/s": 0.1}
            g[f"gemm/bf16->bf16/{sh}/v3_wgmma_pingpong"] = {"TFLOP/s": 0.2}
            g[f"gemm/bf16->bf16/{sh}/vendor"] = {"TFLOP/s": 0.4}
        g["gemm/bf16->bf16/vitb16_b64_fc1_fwd_1000x100->500/vendor"] = {"TFLOP/s": 9.9}  # unfused: not the step's
        r, n = [], []
        summarize.vit_gemm_step_table(g, r, n)
        tot = n[-1]
        self.assertTrue(tot["complete"])
        self.assertAlmostEqual(tot["v3_ms"], 12 * 12 * 1.0)
        self.assertAlmostEqual(tot["v3_best_ms"], 12 * 12 * 0.5)
        self.assertAlmostEqual(tot["cublas_ms"], 12 * 12 * 0.25)
        self.assertIn("| fc1_fwd_gelu | 12 | 1.000 | 0.500 | 0.250 | 9.00 |", "\n".join(r))
        g["gemm/bf16->bf16/vitb16_b64_qkv_fwd_1000x100->500/v3_wgmma"]["label"] = "v2_mma"  # v3 did not run it
        r, n = [], []
        summarize.vit_gemm_step_table(g, r, n)
        self.assertIsNone(n[0]["v3_ms"])
        self.assertIsNone(n[-1]["v3_ms"])
        self.assertAlmostEqual(n[0]["v3_best_ms"], 0.5)
        r, n = [], []
        summarize.vit_gemm_step_table({}, r, n)
        self.assertIn("no vitb16_b64 GEMM rows", r[0])

    def test_gemm_found_table_lists_each_shape_against_the_barrier_pipeline(self):
        """One row a shape of each step run by Find: the plan taken, every candidate's ms (a column per plan seen),
        and the plan's speed-up over the barrier pipeline's best tile; steps without Find are out."""
        t = {"vit_b16_bf16_ours": {"img_per_s_median": 1.0},
             "vit_b16_bf16_ours_gemm_find": {"gemm_v3_found": [
                 {"call": "12608x3072x768 NT bf16->bf16 bias gelu(erf)", "plan": "pingpong/narrow",
                  "ms": {"barrier/narrow": 0.8, "barrier/wide": 0.6, "ws/narrow": 0.7, "ws/wide": 0.65,
                         "pingpong/narrow": 0.4}},
                 {"call": "4x10x768 NT bf16->bf16 bias", "plan": "barrier/slim",
                  "ms": {"barrier/slim": 0.01, "ws/slim": 0.02, "pingpong/slim": 0.03}}]}}
        r, n = [], []
        summarize.gemm_found_table(t, r, n)
        text = "\n".join(r)
        self.assertEqual(len(n), 2)
        self.assertIn("| vit_b16_bf16_ours_gemm_find | 12608x3072x768 NT bf16->bf16 bias gelu(erf) | pingpong/narrow | "
                      "0.800 | 0.600 | 0.700 | 0.650 | 0.400 | — | — | — | 1.50 |", text)
        self.assertIn("| — | — | — | — | — | 0.010 | 0.020 | 0.030 | 1.00 |", text)
        self.assertIn("pingpong/slim ms", r[0])
        self.assertNotIn("im2col", text)
        r, n = [], []
        summarize.gemm_found_table({"vit_b16_bf16_ours": {}}, r, n)
        self.assertIn("no step run with --gemm-tuning find", r[0])
        self.assertEqual(n, [])

    def test_im2col_table_reads_the_x_box_counters(self):
        """x_box: the boxes' time over the im2col time of a v3_wgmma_im2col row; a step's gain weighs it by per_step;
        rows without the counter are out; no rows at all says so."""
        c = {"conv_nhwc/3x3_256-256_14/bf16/fwd/v3_wgmma_im2col": {"real_time": 0.8, "x_box": 1.25, "per_step": 5.0},
             "conv_nhwc/3x3_256-256_14/bf16/bwd_filter/v3_wgmma_im2col": {"real_time": 1.0, "x_box": 0.9,
                                                                          "per_step": 5.0},
             "conv_nhwc/3x3_256-256_14/bf16/fwd/v3_wgmma": {"real_time": 1.0, "per_step": 5.0}}
        r, n = [], []
        summarize.conv_im2col_table(c, r, n)
        text = "\n".join(r)
        self.assertIn("| 3x3_256-256_14 | bf16 | fwd | 5 | 1.000 | 0.800 | 1.25 | 1.000 |", text)
        self.assertIn("| 3x3_256-256_14 | bf16 | bwd_filter | 5 | 0.900 | 1.000 | 0.90 | -0.500 |", text)
        self.assertAlmostEqual(n[-1]["gain_ms"], 0.5)
        self.assertEqual(n[-1]["directions"], 2)
        r, n = [], []
        summarize.conv_im2col_table({}, r, n)
        self.assertIn("no x_box counters", r[0])

    def test_tma_store_rows_beside_conv_v3(self):
        """v3_wgmma_tma_store rows (HPDT_CONV_V3_STORE=tma, since the fourth session of 2026-11-30): their own per-op
        column, in the best v3; their x_direct in a table of its own, weighed by per_step, not in the stem's
        space-to-depth table (v2 rows only)."""
        c = {"conv_nhwc/1x1_256-64_56/bf16/bwd_data/v2_tensor_core": {"real_time": 1.0},
             "conv_nhwc/1x1_256-64_56/bf16/bwd_data/cudnn": {"real_time": 0.5},
             "conv_nhwc/1x1_256-64_56/bf16/bwd_data/v3_wgmma": {"real_time": 0.8, "per_step": 2.0},
             "conv_nhwc/1x1_256-64_56/bf16/bwd_data/v3_wgmma_tma_store": {"real_time": 0.4, "x_direct": 2.0,
                                                                          "per_step": 2.0},
             "conv_nhwc/3x3s2_128-128_56/bf16/fwd/v3_wgmma_tma_store": {"real_time": 0.3, "x_direct": 1.0,
                                                                        "per_step": 1.0}}
        r, n = [], []
        summarize.conv_table(c, r, n)
        self.assertAlmostEqual(n[0]["v3_tma_store_ms"], 0.4)
        self.assertAlmostEqual(n[0]["best_v3_over_cudnn"], 0.5 / 0.4)
        self.assertIn("| 1x1_256-64_56 | NHWC | bwd_data | 1.000 | 0.800 | — | — | — | 0.400 | 0.500 | — | 0.50 | 1.25 |",
                      "\n".join(r))
        r, n = [], []
        summarize.conv_tma_store_table(c, r, n)
        text = "\n".join(r)
        self.assertIn("| v3 direct stores ms | v3 TMA stores ms | direct / TMA time |", text)
        self.assertIn("| 1x1_256-64_56 | bf16 | bwd_data | 2 | 0.800 | 0.400 | 2.00 | 0.800 |", text)
        self.assertIn("| 3x3s2_128-128_56 | bf16 | fwd | 1 | 0.300 | 0.300 | 1.00 | 0.000 |", text)
        self.assertEqual(n[-1], {"op": "conv_tma_store_total", "directions": 2, "gain_ms": 0.8})
        self.assertEqual(n[0]["v3_direct_ms"], 0.8)
        r, n = [], []
        summarize.conv_space_to_depth_table(c, r, n)
        self.assertTrue(r[0].startswith("(no x_direct"), r)
        r, n = [], []
        summarize.conv_tma_store_table({}, r, n)
        self.assertIn("no x_direct counters", r[0])

    def test_gemm_found_table_compares_conv_v3s_loads(self):
        """conv v3's plans by im2col (since 2026-11-30): a last column, the boxes' best over the im2col plans' best."""
        t = {"resnet50_bf16_ours_nhwc_conv_find": {"gemm_v3_found": [
            {"call": "conv v3 fwd 3x3 256->256 256x14x14 -> 14x14 bf16", "plan": "barrier/wide+im2col",
             "ms": {"barrier/wide": 0.5, "ws/wide": 0.6, "barrier/wide+im2col": 0.4, "ws/wide+im2col": 0.45}},
            {"call": "1024x256x64 NN bf16->bf16", "plan": "barrier/slim", "ms": {"barrier/slim": 0.01}}]}}
        r, n = [], []
        summarize.gemm_found_table(t, r, n)
        text = "\n".join(r)
        self.assertIn("boxes' best / im2col's best", r[0])
        self.assertIn("| 0.500 | 0.600 | 0.400 | 0.450 | — | 1.25 | 1.25 |", text)
        self.assertIn("| — | — | — | — | 0.010 | 1.00 | — |", text)

    def test_gemm_found_table_compares_gemm_v3s_stores(self):
        """GEMM v3's plans storing by TMA (since 2026-11-30): a column of the direct plans' best over theirs, beside
        the im2col one when both kinds are present; barrier's best counts neither."""
        t = {"resnet50_bf16_ours_nhwc_conv_find": {"gemm_v3_found": [
            {"call": "802816x256x64 NT bf16->bf16", "plan": "ws/wide+tma store",
             "ms": {"barrier/wide": 0.36, "ws/wide": 0.35, "barrier/wide+tma store": 0.2, "ws/wide+tma store": 0.18}},
            {"call": "conv v3 fwd 3x3 64->64 256x56x56 -> 56x56 bf16", "plan": "barrier/slim",
             "ms": {"barrier/slim": 0.3, "barrier/slim+im2col": 0.4}}]}}
        r, n = [], []
        summarize.gemm_found_table(t, r, n)
        text = "\n".join(r)
        self.assertIn("| best / barrier's best | boxes' best / im2col's best | direct stores' best / TMA stores' best |",
                      r[0])
        self.assertIn("| 0.360 | 0.350 | 0.200 | 0.180 | — | — | 2.00 | — | 1.94 |", text)
        self.assertIn("| 0.300 | 0.400 | 1.00 | 0.75 | — |", text)
        self.assertIn("TMA stores' best: above 1, storing by TMA was faster.", text)

    def test_gemm_found_table_reads_plans_both_by_im2col_and_tma_stores(self):
        """conv v3's plans loading by im2col and storing by TMA at once (since the fourth session of 2026-11-30:
        "+im2col+tma store") count in both columns, and not as barrier's."""
        t = {"resnet50_bf16_ours_nhwc_conv_find": {"gemm_v3_found": [
            {"call": "conv v3 fwd 3x3 64->64 256x56x56 -> 56x56 bf16", "plan": "barrier/slim+im2col+tma store",
             "ms": {"barrier/slim": 0.4, "barrier/slim+tma store": 0.3, "barrier/slim+im2col": 0.25,
                    "barrier/slim+im2col+tma store": 0.2}}]}}
        r, n = [], []
        summarize.gemm_found_table(t, r, n)
        text = "\n".join(r)
        # best / barrier's: 0.4 / 0.2; boxes' best / im2col's: 0.3 / 0.2; direct's best / TMA's: 0.25 / 0.2
        self.assertIn("| 0.400 | 0.300 | 0.250 | 0.200 | 2.00 | 1.50 | 1.25 |", text)

    def test_conv_found_table_totals_the_timed_convolutions(self):
        """One row a convolution (v2 untimed where v3 does not take it), and the timed ones added up each way."""
        t = {"resnet50_bf16_ours_nhwc_conv_find": {"conv_found": [
            {"call": "fwd 3x3 64->64 256x56x56 pad 1 bf16", "choice": "v3", "ms": {"v2": 0.4, "v3": 0.3}},
            {"call": "bwd_data 1x1 256->64 256x56x56 bf16", "choice": "v2", "ms": {"v2": 0.5, "v3": 1.0}},
            {"call": "fwd 7x7s2 3->64 256x224x224 pad 3 bf16", "choice": "v2", "ms": {}}]}}
        r, n = [], []
        summarize.conv_found_table(t, r, n)
        text = "\n".join(r)
        self.assertEqual(len(n), 3)
        self.assertIn("| fwd 3x3 64->64 256x56x56 pad 1 bf16 | v3 | 0.400 | 0.300 | 1.33 |", text)
        self.assertIn("| fwd 7x7s2 3->64 256x224x224 pad 3 bf16 | v2 | — | — | — |", text)
        self.assertIn("| **the timed ones, each once** | | 0.900 | 1.300 | taken: 0.800 |", text)
        r, n = [], []
        summarize.conv_found_table({}, r, n)
        self.assertIn("no step run with --conv find", r[0])

    def test_no_counters_says_so(self):
        text, n = self.table({"conv/x/bf16/fwd/v2_tensor_core": {"real_time": 1.0}})
        self.assertEqual(n, {})
        self.assertIn("no run with per_step counters", text[0])

    def test_results_directory(self):
        """summarize.py over a run directory: the census file is read beside bench_conv_cuda.json."""
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "run", "bench"))

            def gbench(recs):
                return {"benchmarks": [dict(r, run_name=k + "/manual_time", aggregate_name="median")
                                       for k, r in recs.items()]}
            with open(os.path.join(d, "run", "bench", "bench_conv_cuda.json"), "w") as f:
                json.dump(gbench(rows("3x3_64-64_56", 3, lambda l, d, i: 1.0)), f)
            with open(os.path.join(d, "run", "bench", "bench_conv_census.json"), "w") as f:
                json.dump(gbench(rows("1x1_64-64_56", 1, lambda l, d, i: 2.0)), f)
            found = summarize.collect([os.path.join(d, "run")])
            _, n = self.table(found["conv"])
            self.assertAlmostEqual(n["total"]["nchw_v2_ms"], 9.0 + 6.0)


class HpdtTrain(unittest.TestCase):
    def test_trainer_runs_beside_the_benchmark_step(self):
        """train_throughput.sh's metrics (the summary record among the step records) against the benchmark's step of
        the same model: x_bench is the trainer's img/s over the benchmark's; a model without its step says so."""
        with tempfile.TemporaryDirectory() as d:
            bench = os.path.join(d, "run", "bench")
            os.makedirs(bench)
            with open(os.path.join(bench, "train_hpdt_train_resnet50.jsonl"), "w") as f:
                f.write(json.dumps({"type": "config", "model": "resnet50"}) + "\n")
                f.write(json.dumps({"type": "step", "step": 1, "img_s": 4000.0}) + "\n")
                f.write(json.dumps({"type": "summary", "throughput_img_s": 4500.0, "step_time_s": 0.0569,
                                    "data_wait_s": 0.001, "forward_s": 0.02, "backward_s": 0.034,
                                    "exposed_comm_s": 0.0, "optimizer_s": 0.0015,
                                    "grad_sync": "none (one rank)"}) + "\n")
            with open(os.path.join(bench, "train_hpdt_train_resnet50_decode-host.jsonl"), "w") as f:  # a tagged run
                f.write(json.dumps({"type": "summary", "throughput_img_s": 4000.0, "step_time_s": 0.064}) + "\n")
            with open(os.path.join(bench, "train_hpdt_train_vit-b.jsonl"), "w") as f:
                f.write(json.dumps({"type": "summary", "throughput_img_s": 2000.0, "step_time_s": 0.032}) + "\n")
            with open(os.path.join(bench, "train_hpdt_train_resnet50_cuda-graph.jsonl"), "w") as f:  # --cuda-graph
                f.write(json.dumps({"type": "summary", "throughput_img_s": 4600.0, "step_time_s": 0.0557,
                                    "forward_s": 0.053, "backward_s": 0.0,
                                    "cuda_graph": {"captures": 1, "replays": 9, "eager_steps": 3}}) + "\n")
            with open(os.path.join(bench, "train_step_resnet50_bf16_ours_nhwc_conv_v3.json"), "w") as f:
                json.dump({"img_per_s_median": 5000.0}, f)
            found = summarize.collect([os.path.join(d, "run")])
            rows, numbers = [], []
            summarize.hpdt_train_table(found["hpdt_train"], found["train"], rows, numbers)
            by = {n["model"]: n for n in numbers}
            self.assertAlmostEqual(by["resnet50"]["x_bench"], 0.9)
            self.assertAlmostEqual(by["resnet50"]["step_ms"], 56.9)
            self.assertIsNone(by["vit-b"]["x_bench"])  # no train_step_vit_b16_bf16_ours.json in this run
            self.assertAlmostEqual(by["resnet50_decode-host"]["x_bench"], 0.8)  # beside the same benchmark step
            self.assertTrue(any(r.startswith("| ResNet-50, batch 256 (decode-host) | 4000 | 64.0 |") for r in rows), rows)
            # a graph's forward column holds forward and backward: its label says so
            self.assertTrue(any(r.startswith("| ResNet-50, batch 256 (cuda-graph) [forward = forward + backward, one "
                                             "graph] | 4600 | 55.7 | — | 53.0 | 0.0 |") for r in rows), rows)
            self.assertFalse(any("one graph" in r and "decode-host" in r for r in rows), rows)
            self.assertIn("| ResNet-50, batch 256 | 4500 | 56.9 | 1.0 | 20.0 | 34.0 | 0.0 | 1.5 | none (one rank) | 5000 "
                          "| 0.90 |", rows)
        rows = []
        summarize.hpdt_train_table({}, {}, rows, [])
        self.assertEqual(rows, ["(no train_hpdt_train_*.jsonl)"])


class CutShort(unittest.TestCase):
    """A benchmark cut at the lease's deadline leaves its JSON unfinished: the records written before the cut are
    read, the one the cut went through is not, and the summary says the file was cut."""

    def doc(self, names):
        return {"context": {"date": "2026-11-29"},
                "benchmarks": [{"name": n + "/manual_time_median", "run_name": n + "/manual_time",
                                "aggregate_name": "median", "real_time": 1.0 + i} for i, n in enumerate(names)]}

    def test_the_whole_records_before_the_cut(self):
        names = ["conv/a/bf16/fwd/v2_tensor_core", "conv/a/bf16/fwd/cudnn", "conv/b/bf16/fwd/v2_tensor_core"]
        text = json.dumps(self.doc(names), indent=2)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "bench_conv_cuda.json")
            cut_at = text.index('"conv/b/') + 5  # inside the third record
            for end, kept in ((cut_at, 2), (text.rindex("]"), 3), (len(text), 3), (text.index("[") + 1, 0)):
                with open(p, "w") as f:
                    f.write(text[:end])
                cut = []
                m = summarize.gbench_medians(p, cut)
                self.assertEqual(sorted(m), sorted(names[:kept]), end)
                self.assertEqual(cut, [] if end == len(text) else [(p, kept)])
            self.assertEqual(m, {})
            with open(p, "w") as f:  # nothing written: no JSON at all, nothing read, not listed as cut
                f.write("")
            cut = []
            self.assertEqual(summarize.gbench_medians(p, cut), {})
            self.assertEqual(cut, [])

    def test_collect_lists_the_cut_file(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "run", "bench"))
            text = json.dumps(self.doc(["attention_fwd/v2/bf16/x", "attention_fwd/v2/bf16/y"]))
            p = os.path.join(d, "run", "bench", "bench_attention_cuda.json")
            with open(p, "w") as f:
                f.write(text[:text.index("attention_fwd/v2/bf16/y")])
            found = summarize.collect([os.path.join(d, "run")])
            self.assertEqual(list(found["attention"]), ["attention_fwd/v2/bf16/x"])
            self.assertEqual(found["cut"], [(p, 1)])


class LaunchGaps(unittest.TestCase):
    def table(self, found, sdpa=None):
        rows, numbers = [], []
        summarize.launch_gaps_table(found, sdpa, rows, numbers)
        return rows, numbers

    def test_lists_the_rows_with_gaps(self):
        found = {"gemm": {"gemm/bf16->bf16/a/v3_wgmma": {"launch_gaps": 0.0, "iterations": 900},
                          "gemm/bf16->bf16/a/vendor": {"launch_gaps": 3.0, "iterations": 900}},
                 "conv": {"conv/x/bf16/fwd/cudnn": {"real_time": 1.0}}, "attention": {}, "layers": {}}
        sdpa = [{"b": 8, "heads": 16, "t": 4096, "dh": 128,
                 "forward": {"s_median": 1e-3, "launch_gaps": 0}, "forward_backward": {"s_median": 4e-3, "launch_gaps": 2}}]
        rows, numbers = self.table(found, sdpa)
        self.assertIn("4 rows carry the counter; 2 of them", rows[0])
        self.assertEqual([n["row"] for n in numbers],
                         ["gemm/bf16->bf16/a/vendor", "sdpa/b8_h16_t4096_d128/forward_backward"])

    def test_old_runs_say_so(self):
        rows, numbers = self.table({"gemm": {"g": {"real_time": 1.0}}, "conv": {}, "attention": {}, "layers": {}})
        self.assertIn("no launch_gaps counters", rows[0])
        self.assertEqual(numbers, [])


class Sass(unittest.TestCase):
    def test_each_report_summary_is_a_block(self):
        with tempfile.TemporaryDirectory() as d:
            for run, text in (("run1", "kernel: gemm_v3_kernel\n  SASS: 9,000 instructions (141 KiB)\n"),
                              ("run2", "kernel: conv_v3_kernel\n")):
                os.makedirs(os.path.join(d, run, "bench"))
                with open(os.path.join(d, run, "bench", f"ncu_{run}.sass_summary.txt"), "w") as f:
                    f.write(text)
            r = []
            summarize.sass_section([os.path.join(d, "run1"), os.path.join(d, "run2")], r)
            text = "\n".join(r)
            self.assertIn("ncu_run1 (run1; every instruction: bench/ncu_run1.sass.txt):\n\n```\nkernel: gemm_v3_kernel\n"
                          "  SASS: 9,000 instructions (141 KiB)\n```", text)
            self.assertIn("ncu_run2 (run2;", text)
            r = []
            summarize.sass_section([os.path.join(d, "nothing")], r)
            self.assertIn("No SASS in these runs", r[0])


class Attention(unittest.TestCase):
    def test_v3_backward_beside_v2_and_sdpa(self):
        """The one-pass backward (attention_bwd/v3 rows) gets its own column and ratio against SDPA's backward
        (the peer's forward_backward less its forward)."""
        key = "b8_h16_t4096_d128"
        a = {f"attention_fwd/v2/bf16/{key}": {"real_time": 4.0},
             f"attention_bwd/v2/bf16/{key}": {"real_time": 14.0},
             f"attention_bwd/v3/bf16/{key}": {"real_time": 10.0}}
        sdpa = [{"b": 8, "heads": 16, "t": 4096, "dh": 128, "forward": {"s_median": 0.003},
                 "forward_backward": {"s_median": 0.0105}}]
        r, n = [], []
        summarize.attention_table(a, sdpa, r, n)
        self.assertAlmostEqual(n[0]["bwd_ratio"], 7.5 / 14.0)
        self.assertAlmostEqual(n[0]["bwd_v3_ratio"], 0.75)
        self.assertAlmostEqual(n[0]["ours_bwd_v3_ms"], 10.0)
        self.assertIn(f"| {key} | 4.000 | — | 3.000 | 0.75 | 14.000 | — | 10.000 | 7.500 | 0.54 | 0.75 |", "\n".join(r))
        # a run from before v3: its column is empty
        del a[f"attention_bwd/v3/bf16/{key}"]
        r, n = [], []
        summarize.attention_table(a, sdpa, r, n)
        self.assertIsNone(n[0]["bwd_v3_ratio"])
        self.assertIn("| 14.000 | — | — | 7.500 | 0.54 | — | — | — |", "\n".join(r))

    def test_tall_dkdv_step_beside_the_default(self):
        """The dh-128 dK/dV pass at 64 queries a step (attention_bwd/v2_step64 rows) gets its own column and ratio
        against SDPA's backward; a shape without the row leaves them empty."""
        a = {"attention_fwd/v2/bf16/b8_h16_t4096_d128": {"real_time": 4.0},
             "attention_bwd/v2/bf16/b8_h16_t4096_d128": {"real_time": 14.0},
             "attention_bwd/v2_step64/bf16/b8_h16_t4096_d128": {"real_time": 12.5},
             "attention_fwd/v2/bf16/b8_h16_t4096_d64": {"real_time": 2.0},
             "attention_bwd/v2/bf16/b8_h16_t4096_d64": {"real_time": 6.0}}
        sdpa = [{"b": 8, "heads": 16, "t": 4096, "dh": dh, "forward": {"s_median": 0.003},
                 "forward_backward": {"s_median": 0.0105}} for dh in (64, 128)]
        r, n = [], []
        summarize.attention_table(a, sdpa, r, n)
        by = {x["shape"]: x for x in n}
        self.assertAlmostEqual(by["b8_h16_t4096_d128"]["ours_bwd_step64_ms"], 12.5)
        self.assertAlmostEqual(by["b8_h16_t4096_d128"]["bwd_step64_ratio"], 0.6)
        self.assertIsNone(by["b8_h16_t4096_d64"]["bwd_step64_ratio"])
        text = "\n".join(r)
        self.assertIn("| 7.500 | 0.54 | — | 12.500 | 0.60 |", text)
        self.assertIn("| 6.000 | — | — | 7.500 | 1.25 | — | — | — |", text)


class GemmTmaStore(unittest.TestCase):
    """The _tma_store rows (HPDT_GEMM_V3_STORE=tma): a table of their TFLOP/s and x_direct per pipeline, for the K
    sweep's shapes too, a row that fell back to v2 left out; and the K sweep's line for them."""

    def test_table_and_k_sweep(self):
        sweep = GemmTimeAgainstK()
        g = {}
        g.update(sweep.rows("v3_wgmma", 60e-6, 700.0))
        g.update(sweep.rows("v3_wgmma_tma_store", 25e-6, 700.0))
        for k in (64, 256, 768, 3072):
            g[f"gemm/bf16->bf16/ksweep_1000x2000_k{k}/v3_wgmma_tma_store"]["x_direct"] = 1.5
        g["gemm/bf16->bf16/resnet50_b256_1x1_64to256_56_fwd/v3_wgmma_tma_store"] = {
            "TFLOP/s": 90.0, "x_direct": 1.8, "label": "v3_wgmma"}
        g["gemm/bf16->bf16/resnet50_b256_1x1_64to256_56_fwd/v3_wgmma_ws_tma_store"] = {
            "TFLOP/s": 80.0, "x_direct": 1.6, "label": "v2_mma"}  # fell back: not v3's
        rows, numbers = [], []
        summarize.gemm_table(g, rows, numbers)
        text = "\n".join(rows)
        self.assertIn("| GEMM v3 by TMA stores (bf16) | barrier TFLOP/s | ws TFLOP/s | pingpong TFLOP/s "
                      "| direct / TMA (barrier) | (ws) | (pingpong) |", text)
        self.assertIn("| resnet50_b256_1x1_64to256_56_fwd | 90.0 | — | — | 1.80 | — | — |", text)
        ts = {x["shape"]: x for x in numbers if x["op"] == "gemm_tma_store"}
        self.assertEqual(ts["ksweep_1000x2000_k64"]["v3_x_direct"], 1.5)
        self.assertIsNone(ts["resnet50_b256_1x1_64to256_56_fwd"]["v3_ws_x_direct"])
        rows, numbers = [], []
        summarize.gemm_k_table(g, rows, numbers)
        n = {x["variant"]: x for x in numbers}
        self.assertAlmostEqual(n["v3_wgmma_tma_store"]["fixed_us"], 25.0, places=6)
        self.assertAlmostEqual(n["v3_wgmma"]["fixed_us"], 60.0, places=6)
        self.assertIn("| plain (1000x2000) | v3 barrier, TMA stores | ", "\n".join(rows))
        # a run without the rows: no table
        rows = []
        summarize.gemm_table({k: v for k, v in g.items() if "tma_store" not in k}, rows, [])
        self.assertNotIn("TMA stores", "\n".join(rows))


class GemmBatchNormEpilogue(unittest.TestCase):
    """GEMM v3 with batch norm's reduction in its epilogue (rows ..._bn_stats, ..._bn_grad_sums): its own table, with
    x_plain per pipeline, only where v3 ran (a row labelled v2 is left out), and not in the cuBLAS table (no vendor
    row)."""

    def test_table(self):
        sh = "resnet50_b256_1x1_64to256_56_fwd_bn_stats"
        g = {f"gemm/bf16->bf16/{sh}/v3_wgmma": {"TFLOP/s": 300.0, "x_plain": 0.9, "label": "v3_wgmma"},
             f"gemm/bf16->bf16/{sh}/v3_wgmma_ws": {"TFLOP/s": 310.0, "x_plain": 0.95, "label": "v3_wgmma"},
             f"gemm/bf16->bf16/{sh}/v3_wgmma_pingpong": {"TFLOP/s": 320.0, "x_plain": 0.97, "label": "v2_mma"}}
        rows, numbers = [], []
        summarize.gemm_table(g, rows, numbers)
        text = "\n".join(rows)
        self.assertIn(f"| {sh} | 300.0 | 310.0 | — | 0.90 | 0.95 | — |", text)
        n = [x for x in numbers if x["op"] == "gemm_bn_epilogue"]
        self.assertEqual(len(n), 1)
        self.assertEqual(n[0]["v3_x_plain"], 0.9)
        self.assertIsNone(n[0]["v3_pingpong_tflops"])
        self.assertFalse([x for x in numbers if x["op"] == "gemm"])



class GemmEpiloguePrefetch(unittest.TestCase):
    """x_no_prefetch (v3 rows whose epilogue reads inputs: HPDT_EPILOGUE_PREFETCH=off against on, same run): a table of
    its own, per pipeline, only where v3 ran; rows without the counter are not in it."""

    def test_table(self):
        sh = "resnet50_b256_1x1_256to64_56_dgrad_bn_grad_sums_residual"
        g = {f"gemm/bf16->bf16/{sh}/v3_wgmma": {"TFLOP/s": 100.0, "x_no_prefetch": 0.5, "label": "v3_wgmma"},
             f"gemm/bf16->bf16/{sh}/v3_wgmma_ws": {"TFLOP/s": 120.0, "x_no_prefetch": 0.6, "label": "v3_wgmma"},
             f"gemm/bf16->bf16/{sh}/v3_wgmma_pingpong": {"TFLOP/s": 130.0, "x_no_prefetch": 0.7, "label": "v2_mma"},
             "gemm/bf16->bf16/4096x4096x4096_nt/v3_wgmma": {"TFLOP/s": 500.0, "label": "v3_wgmma"}}
        rows, numbers = [], []
        summarize.gemm_table(g, rows, numbers)
        text = "\n".join(rows)
        self.assertIn(f"| {sh} (bf16->bf16) | 100.0 | 120.0 | — | 0.50 | 0.60 | — |", text)
        n = [x for x in numbers if x["op"] == "gemm_epilogue_prefetch"]
        self.assertEqual([x["shape"] for x in n], [sh])
        self.assertEqual(n[0]["v3_ws_x_no_prefetch"], 0.6)
        self.assertIsNone(n[0]["v3_pingpong_x_no_prefetch"])
        self.assertNotIn("GEMM v3, the next unit's inputs prefetched too", text)  # no row has x_prefetch_unit

    def test_lookahead_table(self):
        """x_prefetch_unit (HPDT_EPILOGUE_PREFETCH=unit against on): the lookahead's table, from the same rows."""
        sh = "resnet50_b256_1x1_256to64_56_dgrad_bn_grad_sums"
        g = {f"gemm/bf16->bf16/{sh}/v3_wgmma": {"TFLOP/s": 100.0, "x_prefetch_unit": 1.0, "label": "v3_wgmma"},
             f"gemm/bf16->bf16/{sh}/v3_wgmma_ws": {"TFLOP/s": 120.0, "x_prefetch_unit": 1.3, "label": "v3_wgmma"},
             f"gemm/bf16->bf16/{sh}/v3_wgmma_pingpong": {"TFLOP/s": 130.0, "x_prefetch_unit": 1.4,
                                                         "label": "v3_wgmma"}}
        rows, numbers = [], []
        summarize.gemm_table(g, rows, numbers)
        text = "\n".join(rows)
        self.assertIn("| GEMM v3, the next unit's inputs prefetched too |", text)
        self.assertIn(f"| {sh} (bf16->bf16) | 100.0 | 120.0 | 130.0 | 1.00 | 1.30 | 1.40 |", text)
        n = [x for x in numbers if x["op"] == "gemm_prefetch_ahead"]
        self.assertEqual(n[0]["v3_pingpong_x_prefetch_unit"], 1.4)


class GemmTimeAgainstK(unittest.TestCase):
    """The ksweep rows: per variant and epilogue the line t = t0 + K / rate through the times, recovered from made-up
    rows on such a line; v3 rows that fell back to v2 left out; the rows kept out of the per-shape GEMM table."""

    M, N = 1000, 2000

    def rows(self, variant, t0, tflops, gelu=False, label=None, ks=(64, 256, 768, 3072)):
        out = {}
        for k in ks:
            flop = 2.0 * self.M * self.N * k
            seconds = t0 + flop / (tflops * 1e12)
            ran = label or ("vendor" if variant == "vendor" else "v3_wgmma")
            rec = {"TFLOP/s": flop / seconds / 1e12, "label": ran}
            if gelu:
                rec["x_unfused"] = 1.25
            out[f"gemm/bf16->bf16/ksweep_{'gelu_' if gelu else ''}{self.M}x{self.N}_k{k}/{variant}"] = rec
        return out

    def test_fit(self):
        g = {}
        g.update(self.rows("v3_wgmma", 250e-6, 850.0))
        g.update(self.rows("vendor", 20e-6, 700.0))
        g.update(self.rows("v3_wgmma", 500e-6, 850.0, gelu=True))
        g.update(self.rows("v3_wgmma_ws", 100e-6, 800.0, label="v2_mma"))  # fell back: not v3's
        rows, numbers = [], []
        summarize.gemm_k_table(g, rows, numbers, "NVIDIA H200")
        text = "\n".join(rows)
        n = {(x["gelu"], x["variant"]): x for x in numbers if x["op"] == "gemm_k_sweep"}
        self.assertEqual(set(n), {(False, "v3_wgmma"), (False, "vendor"), (True, "v3_wgmma")})
        plain = n[(False, "v3_wgmma")]
        self.assertAlmostEqual(plain["fixed_us"], 250.0, places=6)
        self.assertAlmostEqual(plain["k_loop_tflops"], 850.0, places=6)
        self.assertAlmostEqual(plain["k_loop_over_peak"], 850.0 / 989.0, places=6)
        t768 = 250e-6 + 2.0 * self.M * self.N * 768 / 850e12
        self.assertAlmostEqual(plain["fixed_share_k768"], 250e-6 / t768, places=6)
        self.assertLess(plain["worst_fit_error"], 1e-9)
        self.assertAlmostEqual(n[(True, "v3_wgmma")]["fixed_us"], 500.0, places=6)
        self.assertEqual(n[(True, "v3_wgmma")]["x_unfused_k768"], 1.25)
        self.assertAlmostEqual(n[(False, "vendor")]["fixed_us"], 20.0, places=6)
        self.assertIn("| plain (1000x2000) | v3 barrier | ", text)
        self.assertIn("| GELU (erf), kept input (1000x2000) | v3 barrier | ", text)
        self.assertNotIn("v3 ws", text)
        # a time not linear in K shows in the fit error
        g = self.rows("v3_wgmma", 250e-6, 850.0)
        g["gemm/bf16->bf16/ksweep_1000x2000_k768/v3_wgmma"]["TFLOP/s"] /= 2
        rows, numbers = [], []
        summarize.gemm_k_table(g, rows, numbers)
        self.assertGreater(numbers[0]["worst_fit_error"], 0.1)
        self.assertIsNone(numbers[0]["k_loop_over_peak"])  # no GPU name, no peak

    def test_not_in_the_per_shape_table_and_none_says_so(self):
        g = self.rows("v3_wgmma", 250e-6, 850.0)
        g.update(self.rows("vendor", 20e-6, 700.0))
        rows, numbers = [], []
        summarize.gemm_table(g, rows, numbers)
        self.assertNotIn("ksweep", "\n".join(rows))
        rows = []
        summarize.gemm_k_table({}, rows, [])
        self.assertEqual(rows, ["(no ksweep rows: hpdt-bench-gemm-cuda before 2026-11-29)"])
        rows = []  # fewer than three K: no line
        summarize.gemm_k_table(self.rows("v3_wgmma", 1e-4, 800.0, ks=(64, 768)), rows, numbers := [])
        self.assertIsNone(numbers[0]["fixed_us"])


class LayersSwitchColumns(unittest.TestCase):
    """The memory-bound table's A/B columns, each a same-run ratio, empty where the row has no such counter:
    x_per_channel (NCHW batch norm on narrow planes: HPDT_BN_FLAT=off against the flat apply) and x_scalar (max pool:
    HPDT_POOL_VECTOR=off against the vector kernels), in the numbers as bf16_x_per_channel and bf16_x_scalar."""

    @staticmethod
    def table(layers):
        rows, numbers = [], []
        summarize.layers_table(layers, rows, numbers)
        return "\n".join(rows), {x["name"]: x for x in numbers}

    def test_per_channel(self):
        text, n = self.table({"layers/bf16/resnet50_bn_eval_64x2048x7x7": {"GB/s": 2400.0, "x_per_channel": 2.5},
                              "layers/f32/resnet50_bn_eval_64x2048x7x7": {"GB/s": 2600.0, "x_per_channel": 2.0},
                              "layers/bf16/resnet50_bn_eval_64x256x56x56": {"GB/s": 2700.0}})
        self.assertIn("| resnet50_bn_eval_64x2048x7x7 | 2400 | 2600 | 0.80 | 0.87 | — | 2.50 | — |", text)
        self.assertIn("| resnet50_bn_eval_64x256x56x56 | 2700 | — | 0.90 | — | — | — | — |", text)
        self.assertEqual(n["resnet50_bn_eval_64x2048x7x7"]["bf16_x_per_channel"], 2.5)
        self.assertIsNone(n["resnet50_bn_eval_64x256x56x56"]["bf16_x_per_channel"])

    def test_scalar(self):
        pool = "resnet50_maxpool_bwd_nhwc_64x112x112x64_k3s2p1"
        text, n = self.table({f"layers/bf16/{pool}": {"GB/s": 2100.0, "x_scalar": 3.2},
                              "layers/bf16/resnet50_relu_fwd_64x256x56x56": {"GB/s": 2700.0}})
        self.assertIn(f"| {pool} | 2100 | — | 0.70 | — | — | — | 3.20 |", text)
        self.assertIn("| resnet50_relu_fwd_64x256x56x56 | 2700 | — | 0.90 | — | — | — | — |", text)
        self.assertEqual(n[pool]["bf16_x_scalar"], 3.2)
        self.assertIsNone(n["resnet50_relu_fwd_64x256x56x56"]["bf16_x_scalar"])


class Elementwise(unittest.TestCase):
    """hpdt-bench-elementwise's GPU rows: GB/s from bytes_per_second, the call's time in ms whatever the time unit,
    and the channels-last decode's x_nchw_then_transpose; the CPU rows left out; none says so."""

    def test_table(self):
        rows, numbers = [], []
        summarize.elementwise_table({
            "BM_decode_images/cuda_bf16/256": {"bytes_per_second": 1.5e12, "real_time": 77.0, "time_unit": "us"},
            "BM_decode_images/cuda_bf16_nhwc/256": {"bytes_per_second": 1.2e12, "real_time": 96250.0,
                                                    "time_unit": "ns", "x_nchw_then_transpose": 1.75},
            "BM_decode_images/cpu_f32/64": {"bytes_per_second": 4e10, "real_time": 1.1, "time_unit": "ms"}},
            rows, numbers)
        text = "\n".join(rows)
        self.assertIn("| BM_decode_images/cuda_bf16/256 | 1500 | 0.077 | — |", text)
        self.assertIn("| BM_decode_images/cuda_bf16_nhwc/256 | 1200 | 0.096 | 1.75 |", text)
        self.assertNotIn("cpu_f32", text)
        self.assertEqual({n["name"]: n["x_nchw_then_transpose"] for n in numbers},
                         {"BM_decode_images/cuda_bf16/256": None, "BM_decode_images/cuda_bf16_nhwc/256": 1.75})
        rows = []
        summarize.elementwise_table({"BM_sum/cpu_f32/65536": {"bytes_per_second": 1e10}}, rows, [])
        self.assertEqual(rows, ["(no bench_elementwise.json, or no GPU rows in it)"])


class ConvSpaceToDepth(unittest.TestCase):
    """x_direct (v2's stem forward, both layouts: HPDT_CONV_SPACE_TO_DEPTH=off against on, same run): one row per row
    that has the counter, the direct time computed from it."""

    def test_table(self):
        c = {"conv/conv1_7x7s2_3-64_224/bf16/fwd/v2_tensor_core": {"real_time": 0.9, "x_direct": 2.0},
             "conv/conv1_7x7s2_3-64_224/bf16/fwd/cudnn": {"real_time": 3.0},
             "conv/3x3_64-64_56/bf16/fwd/v2_tensor_core": {"real_time": 0.47},
             "conv_nhwc/conv1_7x7s2_3-64_224/bf16/fwd/v2_tensor_core": {"real_time": 0.8, "x_direct": 1.5}}
        rows, numbers = [], []
        summarize.conv_space_to_depth_table(c, rows, numbers)
        self.assertIn("| conv1_7x7s2_3-64_224 | NCHW | bf16 | fwd | 0.900 | 1.800 | 2.00 |", rows)
        self.assertIn("| conv1_7x7s2_3-64_224 | NHWC | bf16 | fwd | 0.800 | 1.200 | 1.50 |", rows)
        self.assertEqual(len(rows), 4)
        self.assertEqual(numbers[0], {"op": "conv_space_to_depth", "case": "conv1_7x7s2_3-64_224", "layout": "NCHW",
                                      "dtype": "bf16", "dir": "fwd", "v2_ms": 0.9, "x_direct": 2.0})
        rows = []
        summarize.conv_space_to_depth_table({}, rows, [])
        self.assertTrue(rows[0].startswith("(no x_direct"))


class TorchCompileTime(unittest.TestCase):
    def test_cold_prewarm_beside_the_timed_peer(self):
        """The prewarm's JSON (run.sh's prewarm torch_compile) gives the cold first step, the peer's the warm one; the
        prewarm's one-step img/s is not the peer's (it is no torch_gpu_train_step*.json)."""
        with tempfile.TemporaryDirectory() as d:
            bench = os.path.join(d, "run", "bench")
            os.makedirs(bench)
            with open(os.path.join(bench, "prewarm_torch_compile.json"), "w") as f:
                json.dump({"train_step": [{"model": "resnet50", "mode": "compile", "first_step_s": 95.5,
                                           "img_per_s_median": 10.0},
                                          {"model": "vit_b16", "mode": "compile", "first_step_s": 61.0}]}, f)
            with open(os.path.join(bench, "torch_gpu_train_step_compile.json"), "w") as f:
                json.dump({"train_step": [{"model": "resnet50", "mode": "compile", "first_step_s": 12.25,
                                           "img_per_s_median": 4500.0}]}, f)
            found = summarize.collect([os.path.join(d, "run")])
            self.assertEqual(found["torch"][("resnet50", "compile")]["img_per_s_median"], 4500.0)
            rows, numbers = [], []
            summarize.compile_time_table(found["torch"], found["torch_prewarm"], rows, numbers)
            self.assertIn("| resnet50 | 95.5 | 12.2 | 4500.0 |", rows)
            self.assertIn("| vit_b16 | 61.0 | — | — |", rows)
            self.assertEqual(numbers[0]["cold_first_step_s"], 95.5)
            rows = []
            summarize.compile_time_table({}, {}, rows, [])
            self.assertIn("no torch.compile record", rows[0])


class CompressTable(unittest.TestCase):
    def test_device_beside_the_host_mirror(self):
        def row(c, on, b, us, in_place=False, wrong=0):
            return {"compress": c, "compress_on": on, "bytes": b, "time_us": us, "in_place": in_place, "wrong": wrong,
                    "wire_bytes": 4096}
        doc = {"ranks": 2, "results": [
            {"compress": "none", "compress_on": "none", "bytes": 1 << 20, "time_us": 5.0, "in_place": False, "wrong": 0},
            row("topk:0.01", "device", 1 << 20, 200.0), row("topk:0.01", "host mirror", 1 << 20, 900.0),
            row("topk:0.01", "device", 1 << 20, 1.0, in_place=True),  # in place: not this table's
            row("powersgd:2", "host mirror", 1 << 20, 300.0, wrong=3)]}
        r, n = [], []
        summarize.compress_table([doc], r, n)
        text = "\n".join(r)
        self.assertIn("| 2 | topk:0.01 | 1.0 | 0.200 | 0.900 | 4.50 | 4.1 | 0 / 0 |", text)
        self.assertIn("| 2 | powersgd:2 | 1.0 | — | 0.300 | — | 4.1 | — / 3 |", text)
        self.assertEqual(len(n), 2)
        self.assertAlmostEqual([x for x in n if x["compress"] == "topk:0.01"][0]["x_mirror"], 4.5)
        r = []
        summarize.compress_table([], r, [])
        self.assertEqual(r, ["(no allreduce_compress_cuda*.json)"])


class UnsteadyTrainRows(unittest.TestCase):
    """A training-step row whose timed steps spread by more than 10 %, or whose trace left the GPU idle more than a
    quarter of a step, carries a † and a line saying why; a steady one does not."""

    def test_marks(self):
        steady = {"img_per_s_median": 4000.0, "step_s": [0.064, 0.0645, 0.064],
                  "trace": {"busy_ms_per_step": 60.0, "span_ms_per_step": 64.0}}
        drifting = {"img_per_s_median": 4453.0, "step_s": [0.057, 0.057, 0.061, 0.080, 0.087]}
        idle = {"img_per_s_median": 2651.0, "step_s": [0.094, 0.096, 0.1],
                "trace": {"busy_ms_per_step": 45.6, "span_ms_per_step": 92.4}}
        self.assertEqual(summarize.unsteady_mark(steady), "")
        self.assertEqual(summarize.unsteady_mark({}), "")
        self.assertEqual(summarize.unsteady_mark(drifting), "steps 57-87 ms")
        self.assertEqual(summarize.unsteady_mark(idle), "GPU idle 46.8 of 92.4 ms a traced step")
        t = {"resnet50_bf16_ours": steady, "resnet50_bf16_vendor_nhwc": drifting,
             "resnet50_bf16_vendor_nhwc_cudnn_find": idle}
        rows, numbers = [], []
        summarize.train_table(t, {}, rows, numbers)
        text = "\n".join(rows)
        self.assertIn("| ResNet-50, 224², batch 256, NCHW | 4000.0 | — |", text)
        self.assertIn("| ResNet-50, 224², batch 256, NHWC | — | 4453.0† |", text)
        self.assertIn("- ResNet-50, 224², batch 256, NHWC, vendor: steps 57-87 ms", text)
        self.assertIn("--cudnn-algo find, vendor: GPU idle 46.8 of 92.4 ms a traced step", text)
        self.assertIsNone(numbers[0]["unsteady"])
        self.assertEqual(numbers[1]["unsteady"], {"vendor": "steps 57-87 ms"})

    def test_trace_read_beside_the_row(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "bench"))
            with open(os.path.join(d, "bench", "train_step_resnet50_bf16_vendor_nhwc.json"), "w") as f:
                json.dump({"img_per_s_median": 1.0, "step_s": [0.1, 0.1]}, f)
            with open(os.path.join(d, "bench", "trace_resnet50_bf16_vendor_nhwc.json"), "w") as f:
                json.dump({"trace": {"busy_ms_per_step": 45.6, "span_ms_per_step": 92.4}}, f)
            doc = summarize.collect([d])["train"]["resnet50_bf16_vendor_nhwc"]
            self.assertEqual(doc["trace"]["span_ms_per_step"], 92.4)


class EveryStepOfTheListHasARow(unittest.TestCase):
    """Every training step scripts/gpu/benchmarks.txt times (its --out train_step_KEY.json) has a row in the training-step
    table: a step the table does not know would be timed on a lease and never read."""

    def test_rows(self):
        with open(os.path.join(HERE, "..", "..", "scripts", "gpu", "benchmarks.txt")) as f:
            keys = re.findall(r"--out \{out\}/train_step_(\S+)\.json", f.read())
        self.assertGreater(len(keys), 30)
        t = {k: {"img_per_s_median": 1000.0 + i + 0.5} for i, k in enumerate(keys)}
        rows, numbers = [], []
        summarize.train_table(t, {}, rows, numbers)
        text = "\n".join(rows)
        missing = [k for i, k in enumerate(keys) if f"{1000.0 + i + 0.5:.1f}" not in text]
        self.assertEqual(missing, [], "steps of benchmarks.txt without a row in summarize.py's training-step table")


if __name__ == "__main__":
    unittest.main()
