#!/usr/bin/env python3
"""bench/peers/torch_sdpa_profile.py (the SDPA peer Nsight Compute profiles, scripts/gpu/benchmarks.txt) on the CPU.

This machine's PyTorch (Debian's 1.13) has no F.scaled_dot_product_attention: the script must say so and exit 2. With
one put in its place (the plain softmax(q k^T / sqrt(dh)) v), the script must run its calls, each a forward and a
backward that reaches q, k and v, and print the shape and a time. Run by /usr/bin/python3 (torch); exits 77 (ctest:
skipped) where torch cannot be imported.
"""
import contextlib
import io
import math
import sys
import unittest

from peer_support import load_peer
import torch
import torch.nn.functional as F


def load():
    return load_peer("torch_sdpa_profile")


def run(mod, argv):
    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["torch_sdpa_profile.py"] + argv
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            mod.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
        if not isinstance(e.code, int):
            err.write(str(e.code))
    finally:
        sys.argv = old
    return code, out.getvalue(), err.getvalue()


class SdpaProfile(unittest.TestCase):
    def test_runs_forward_and_backward_calls(self):
        calls = []

        def sdpa(q, k, v):
            calls.append(q.shape)
            s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            return torch.softmax(s, dim=-1) @ v

        had = hasattr(F, "scaled_dot_product_attention")
        old = getattr(F, "scaled_dot_product_attention", None)
        F.scaled_dot_product_attention = sdpa
        try:
            grads = []
            real_backward = torch.Tensor.backward

            def backward(self, g=None, *a, **kw):  # the grads of q, k, v after each call's backward
                real_backward(self, g, *a, **kw)
                grads.append(len(calls))

            torch.Tensor.backward = backward
            try:
                code, out, err = run(load(), ["--device", "cpu", "--b", "1", "--heads", "2", "--t", "5", "--dh", "4",
                                              "--calls", "3"])
            finally:
                torch.Tensor.backward = real_backward
        finally:
            if had:
                F.scaled_dot_product_attention = old
            else:
                del F.scaled_dot_product_attention
        self.assertEqual(code, 0, err)
        self.assertEqual(calls, [torch.Size([1, 2, 5, 4])] * 3)
        self.assertEqual(grads, [1, 2, 3])
        self.assertIn("SDPA forward + backward, b 1, heads 2, t 5, dh 4, torch.float32, backend default: 3 calls, "
                      "median after the first", out)

    def test_says_when_sdpa_is_missing(self):
        if hasattr(F, "scaled_dot_product_attention"):
            self.skipTest(f"torch {torch.__version__} has SDPA")
        code, _, err = run(load(), ["--device", "cpu"])
        self.assertEqual(code, 2)
        self.assertIn("has no F.scaled_dot_product_attention", err)

    def test_bad_sizes_name_the_flag(self):
        code, _, err = run(load(), ["--device", "cpu", "--t", "0"])
        self.assertNotEqual(code, 0)
        self.assertIn("--t must be at least 1, got 0", err)


if __name__ == "__main__":
    unittest.main()
