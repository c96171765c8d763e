#!/usr/bin/env python3
"""bench/peers/torch_gpu_train_step.py's SDPA timing (GpuAloneTimer) on a simulated GPU.

The timer queues torch.cuda._sleep before each call's start event, so that the GPU reaches the start only once the
host has issued the call, and it doubles the sleep after an iteration whose start the GPU reached first. Here
torch.cuda's Event and _sleep are stand-ins over a simulated timeline (a host clock and a GPU queue): a call whose
host part is 1 ms and GPU part 0.2 ms must be timed at 0.2 ms once the sleep covers the host's millisecond, and the
iterations before count as launch gaps. Then attention_records, with a stand-in SDPA on the CPU, must carry the
timer's fields on a "cuda" device. Run by /usr/bin/python3 (torch); exits 77 (ctest: skipped) without torch.
"""
import math
import types
import unittest

from peer_support import load_peer
import torch


def load():
    return load_peer("torch_gpu_train_step")


class FakeGpu:
    """A host clock and a GPU queue (seconds). Work queued runs after what is queued before it and not before the
    host has issued it; an event completes when the GPU reaches it."""
    CYCLES_PER_S = 2e9

    def __init__(self):
        self.host = 0.0
        self.gpu = 0.0  # when the GPU's queue drains

    def issue(self, gpu_seconds, host_seconds=2e-6):
        self.host += host_seconds
        self.gpu = max(self.gpu, self.host) + gpu_seconds

    def sleep(self, cycles):
        self.issue(cycles / self.CYCLES_PER_S)

    def event_class(self):
        gpu = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                gpu.issue(0.0)
                self.t = gpu.gpu

            def query(self):
                return self.t <= gpu.host

            def synchronize(self):
                gpu.host = max(gpu.host, self.t)

            def elapsed_time(self, end):
                return (end.t - self.t) * 1e3

        return Event


class GpuAloneTimer(unittest.TestCase):
    def setUp(self):
        self.mod = load()
        self.gpu = FakeGpu()
        self.saved = (torch.cuda.Event, getattr(torch.cuda, "_sleep", None),
                      getattr(self.mod.F, "scaled_dot_product_attention", None))
        torch.cuda.Event = self.gpu.event_class()
        torch.cuda._sleep = self.gpu.sleep

    def tearDown(self):
        torch.cuda.Event = self.saved[0]
        if self.saved[1] is not None:
            torch.cuda._sleep = self.saved[1]
        if self.saved[2] is not None:
            self.mod.F.scaled_dot_product_attention = self.saved[2]
        elif hasattr(self.mod.F, "scaled_dot_product_attention"):
            del self.mod.F.scaled_dot_product_attention

    def call(self):  # 1 ms on the host, then a 0.2 ms kernel
        self.gpu.host += 1e-3
        self.gpu.issue(0.2e-3)

    def test_the_gpu_part_alone_once_the_sleep_covers_the_host(self):
        timer = self.mod.GpuAloneTimer()
        times = [timer.seconds(self.call) for _ in range(10)]
        # 50 us doubled: 50, 100, 200, 400, 800 us fall short of the host's 1 ms; 1.6 ms covers it
        self.assertEqual(timer.launch_gaps, 5)
        self.assertGreater(times[0], 0.9e-3)  # with the gap
        for t in times[5:]:
            self.assertAlmostEqual(t, 0.2e-3, delta=1e-5)

    def test_calibrated_first_no_gaps(self):
        timer = self.mod.GpuAloneTimer()
        timer.calibrate(self.call)
        self.assertEqual(timer.launch_gaps, 0)
        self.assertAlmostEqual(timer.seconds(self.call), 0.2e-3, delta=1e-5)
        self.assertEqual(timer.launch_gaps, 0)

    def test_plainly_timed_the_host_is_in(self):
        t = self.mod.Timer(types.SimpleNamespace(type="cuda"))
        with t:
            self.call()
        self.assertGreater(t.seconds, 1e-3)

    def test_attention_records_carry_the_timer(self):
        def sdpa(q, k, v):  # the plain attention, and 0.1 ms of simulated GPU work
            self.gpu.issue(1e-4)
            return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), -1) @ v
        self.mod.F.scaled_dot_product_attention = sdpa
        real_randn = torch.randn
        # on the "cuda" device: the full shapes made small, on the CPU
        torch.randn = lambda *shape, device=None, dtype=None, requires_grad=False: real_randn(
            2, 2, 8, 16, dtype=torch.float32, requires_grad=requires_grad)
        try:
            recs = self.mod.attention_records(types.SimpleNamespace(warmup=1, steps=3),
                                              types.SimpleNamespace(type="cuda"))
        finally:
            torch.randn = real_randn
        self.assertEqual(len(recs), 5)
        for r in recs:
            for what in ("forward", "forward_backward"):
                self.assertEqual(r[what]["timing"], "gpu_alone")
                self.assertIn("launch_gaps", r[what])
                self.assertAlmostEqual(r[what]["s_median"], 1e-4, delta=1e-6)


if __name__ == "__main__":
    unittest.main()
