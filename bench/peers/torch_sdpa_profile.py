#!/usr/bin/env python3
"""PyTorch SDPA's forward and backward on one attention shape, a few times: the peer that Nsight Compute profiles
beside hpdt's own attention backward (scripts/gpu/benchmarks.txt, ncu_sdpa_bwd; issue 7's attention target).

hpdt-bench-attention-cuda times our kernels and torch_gpu_train_step.py times SDPA on the same shapes; this script
only runs SDPA so that a profiler sees its kernels (FlashAttention-2's, cuDNN's or the memory-efficient ones,
whichever PyTorch picks: their names say which) on the shape where ours falls short, b 8, 16 heads, t 4096, dh 128.
It prints the backend PyTorch can choose from and the median time of the calls after the first (a profiler's
replays inflate it: read the profile's own durations).

usage: torch_sdpa_profile.py [--b 8] [--heads 16] [--t 4096] [--dh 128] [--calls 2] [--backend default]
Exits 2 with a message when this PyTorch has no SDPA or no GPU and --device cuda was asked for.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--b", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--t", type=int, default=4096)
    ap.add_argument("--dh", type=int, default=128)
    ap.add_argument("--calls", type=int, default=2, help="forward + backward calls (the profiler takes each)")
    ap.add_argument("--backend", default="default", choices=["default", "flash", "cudnn", "efficient", "math"],
                    help="pin SDPA's backend (torch.nn.attention.sdpa_kernel); default: PyTorch's choice")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    for name in ("b", "heads", "t", "dh", "calls"):
        if getattr(a, name) < 1:
            sys.exit(f"torch_sdpa_profile.py: --{name} must be at least 1, got {getattr(a, name)}")
    if not hasattr(F, "scaled_dot_product_attention"):
        print(f"torch_sdpa_profile.py: torch {torch.__version__} has no F.scaled_dot_product_attention", file=sys.stderr)
        sys.exit(2)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_sdpa_profile.py: --device cuda, but torch sees no GPU", file=sys.stderr)
        sys.exit(2)
    device = torch.device(a.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    q, k, v = (torch.randn(a.b, a.heads, a.t, a.dh, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    do = torch.randn_like(q)

    def call():
        o = F.scaled_dot_product_attention(q, k, v)
        o.backward(do)
        q.grad = k.grad = v.grad = None

    context = None
    if a.backend != "default":
        from torch.nn.attention import SDPBackend, sdpa_kernel  # PyTorch >= 2.3
        backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                   "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[a.backend]
        context = sdpa_kernel([backend])
        context.__enter__()
    if device.type == "cuda":
        b = torch.backends.cuda
        enabled = {name: getattr(b, f"{name}_sdp_enabled")() for name in ("flash", "cudnn", "mem_efficient", "math")
                   if hasattr(b, f"{name}_sdp_enabled")}
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}; SDPA backends enabled: {enabled}")
    times = []
    for _ in range(a.calls):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if context is not None:
        context.__exit__(None, None, None)
    shown = times[1:] or times
    print(f"SDPA forward + backward, b {a.b}, heads {a.heads}, t {a.t}, dh {a.dh}, {dtype}, backend {a.backend}: "
          f"{len(times)} calls, median after the first {statistics.median(shown) * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
