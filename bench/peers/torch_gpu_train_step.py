#!/usr/bin/env python3
"""PyTorch GPU peer of hpdt's GPU training-step and attention benchmarks (issue 7), run on the GPU
machine beside hpdt's own numbers (scripts/gpu/run.sh calls it).

  training step:  ResNet-50 (3x224x224, batch 256) and ViT-B/16 (224, batch 64): forward, cross-entropy,
                  backward, SGD with Nesterov momentum; autocast bf16 (AMP) with f32 master weights,
                  channels_last for the ResNet; eager and torch.compile; img/s as the median of timed
                  steps after warm-up, each step timed with CUDA events.
  attention:      F.scaled_dot_product_attention (cuDNN / flash backends) forward and forward+backward on
                  the shapes hpdt-bench-attention-cuda uses, in TFLOP/s.

The models are the same definitions hpdt's golden fixtures use (tests/golden/make_fixtures.py: torchvision
layouts) plus a torchvision-layout ResNet-50 here; their parameter counts are asserted against the
reference architectures (25,557,032 and 86,567,656).

    python3 bench/peers/torch_gpu_train_step.py --out results.json [--models resnet50,vit_b16]
        [--modes eager,compile] [--steps 20] [--warmup 5] [--no-attention] [--device cuda]

--kernel-trace-steps N (--device cuda): after the timed steps of each (model, mode), N more under torch.profiler
(CUDA activities: CUPTI, the source of hpdt-bench-train-step --kernel-trace), summarised per kernel in the layout of
hpdt's (bench/kernel_trace/include/hpdt/bench/kernel_trace.h: summary_json) as the record's "kernel_trace";
scripts/gpu/kernel_breakdown.py puts the two side by side. The timed steps are not profiled.

--device cpu (with tiny --batch/--image) only checks that the script runs; it is what CI-free machines can do.
Writes one JSON document: environment (GPU, driver, torch, CUDA, cuDNN), one record per (model, mode),
and the attention records.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden"))
from make_fixtures import ViT  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "gpu"))
import kernel_breakdown  # noqa: E402


class Bottleneck(nn.Module):  # torchvision Bottleneck (v1.5: the stride sits on the 3x3)
    def __init__(self, cin, w, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, w, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.conv2 = nn.Conv2d(w, w, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(w)
        self.conv3 = nn.Conv2d(w, 4 * w, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(4 * w)
        self.downsample = None
        if stride != 1 or cin != 4 * w:
            self.downsample = nn.Sequential(nn.Conv2d(cin, 4 * w, 1, stride, bias=False), nn.BatchNorm2d(4 * w))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet50(nn.Module):  # torchvision resnet50 layout
    def __init__(self, cin=3, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, c = [], 64
        for i, (w, n) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
            blocks = []
            for b in range(n):
                blocks.append(Bottleneck(c, w, 2 if (i > 0 and b == 0) else 1))
                c = 4 * w
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


REFERENCE_PARAMS = {"resnet50": 25_557_032, "vit_b16": 86_567_656}


def build(name, image, classes):
    if name == "resnet50":
        return ResNet50(3, classes)
    if name == "vit_b16":
        return ViT(3, image, 16, 768, 12, 12, classes)
    raise SystemExit(f"torch_gpu_train_step.py: unknown model {name!r} (resnet50, vit_b16)")


class Timer:
    """Wall time of a region on the device: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.a.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.b.record()
            self.b.synchronize()
            self.seconds = self.a.elapsed_time(self.b) / 1e3
        else:
            self.seconds = time.perf_counter() - self.t0


class GpuAloneTimer:
    """One call at a time on the GPU alone, as hpdt's op benchmarks time theirs (bench/kernels/gpu_timing.h): a spin
    kernel (torch.cuda._sleep) holds the stream while the host issues the call, so the time between the events is
    the GPU's alone, not the Python and dispatch time before its kernels start. An iteration whose start event the
    GPU reached before the host had queued the stop event counts in launch_gaps, and the next spin is twice as long
    (up to 10 ms); calibrate() finds the sleep on untimed calls first."""
    MAX_SPIN_S = 10e-3

    def __init__(self):
        self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.a.record()
        torch.cuda._sleep(1_000_000)
        self.b.record()
        self.b.synchronize()
        self.cycles_per_s = 1e6 / (self.a.elapsed_time(self.b) / 1e3)
        self.spin_s, self.launch_gaps = 50e-6, 0

    def calibrate(self, fn):
        """Untimed calls until one has no gap (or the sleep is at its cap), then the count from zero."""
        while True:
            gaps = self.launch_gaps
            self.seconds(fn)
            if self.launch_gaps == gaps or self.spin_s >= self.MAX_SPIN_S:
                break
        self.launch_gaps = 0

    def seconds(self, fn):
        torch.cuda._sleep(int(self.spin_s * self.cycles_per_s))
        self.a.record()
        fn()
        self.b.record()
        gap = self.a.query()  # the GPU got to the start before the host had queued the stop
        self.b.synchronize()
        if gap:
            self.launch_gaps += 1
            self.spin_s = min(2 * self.spin_s, self.MAX_SPIN_S)
        return self.a.elapsed_time(self.b) / 1e3


def median(v):
    s = sorted(v)
    return s[len(s) // 2]


def kernel_trace(step, steps):
    """`steps` calls of step() under torch.profiler (CUDA activities), as hpdt's per-step kernel summary
    (scripts/gpu/kernel_breakdown.py: summarize)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    acts = [(e.name, e.time_range.start / 1e3, e.time_range.end / 1e3)  # us -> ms
            for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not acts:
        raise RuntimeError("torch.profiler recorded no CUDA activity")
    return kernel_breakdown.summarize(acts, steps)


def train_step_record(a, name, mode, device):
    torch.manual_seed(7)
    batch = a.batch or (256 if name == "resnet50" else 64)
    model = build(name, a.image, a.classes)
    params = sum(p.numel() for p in model.parameters())
    if a.image == 224 and a.classes == 1000 and params != REFERENCE_PARAMS[name]:
        raise SystemExit(f"{name}: {params} parameters, the reference architecture has {REFERENCE_PARAMS[name]}")
    model = model.to(device)
    x = torch.randn(batch, 3, a.image, a.image, device=device)
    y = torch.randint(0, a.classes, (batch,), device=device)
    if name == "resnet50":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-5, nesterov=True)
    step_model = model
    if mode == "compile":
        if not hasattr(torch, "compile"):
            return {"model": name, "mode": mode, "skipped": f"torch {torch.__version__} has no torch.compile"}
        step_model = torch.compile(model)
    amp_dtype = torch.bfloat16

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=device.type == "cuda"):
            loss = F.cross_entropy(step_model(x), y)
        loss.backward()  # bf16 autocast: no loss scaling needed (GradScaler is for fp16)
        opt.step()
        return loss

    times = []
    t_compile = time.perf_counter()
    for s in range(a.warmup + a.steps):
        with Timer(device) as t:
            loss = step()
        if s == 0:
            first_step_s = time.perf_counter() - t_compile
        if s >= a.warmup:
            times.append(t.seconds)
    med = median(times)
    precision = "bf16-autocast" if device.type == "cuda" else "f32 (cpu check)"
    rec = {"model": name, "mode": mode, "precision": precision, "batch": batch, "image": a.image,
           "channels_last": name == "resnet50", "params": params, "loss": float(loss.item()),
           "first_step_s": first_step_s, "step_s": times, "step_s_median": med, "img_per_s_median": batch / med}
    if a.kernel_trace_steps:
        try:
            rec["kernel_trace"] = kernel_trace(step, a.kernel_trace_steps)
        except Exception as e:  # noqa: BLE001 -- the timing stands; say why the breakdown is missing
            rec["kernel_trace_error"] = f"{type(e).__name__}: {e}"
    return rec


def attention_records(a, device):
    """SDPA on the hpdt-bench-attention-cuda shapes, bf16; flops = 4*b*h*t^2*dh forward, 2.5x that backward."""
    shapes = [(64, 12, 197, 64), (8, 16, 1024, 64), (8, 16, 4096, 64), (8, 16, 1024, 128), (8, 16, 4096, 128)]
    if device.type != "cuda":
        shapes = [(2, 3, 17, 64)]
    if not hasattr(F, "scaled_dot_product_attention"):
        return [{"skipped": f"torch {torch.__version__} has no F.scaled_dot_product_attention"}]
    out = []
    for b, h, t, dh in shapes:
        q, k, v = (torch.randn(b, h, t, dh, device=device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32,
                               requires_grad=True) for _ in range(3))
        do = torch.randn_like(q)
        flops_fwd = 4.0 * b * h * t * t * dh
        rec = {"b": b, "heads": h, "t": t, "dh": dh, "dtype": str(q.dtype).replace("torch.", "")}
        for what in ("forward", "forward_backward"):
            def call():
                o = F.scaled_dot_product_attention(q, k, v)
                if what == "forward_backward":
                    o.backward(do)
            times = []
            timer = GpuAloneTimer() if device.type == "cuda" else None
            if timer:
                timer.calibrate(call)
            for s in range(a.warmup + a.steps):
                if timer:
                    sec = timer.seconds(call)
                else:
                    with Timer(device) as tm:
                        call()
                    sec = tm.seconds
                if s >= a.warmup:
                    times.append(sec)
                q.grad = k.grad = v.grad = None
            med = median(times)
            flops = flops_fwd * (1.0 if what == "forward" else 3.5)
            rec[what] = {"s_median": med, "tflops": flops / med / 1e12}
            if timer:  # since 2026-11-30: each call on the GPU alone (before, with its Python and dispatch time)
                rec[what].update({"timing": "gpu_alone", "launch_gaps": timer.launch_gaps})
        out.append(rec)
    return out


def environment(device):
    env = {"torch": torch.__version__, "python": platform.python_version(), "host": platform.node(),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if device.type == "cuda":
        env.update({"gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version(),
                    "capability": ".".join(map(str, torch.cuda.get_device_capability(0)))})
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError) as e:
            env["driver"] = f"unknown ({e})"
    try:
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        env["git_commit"] = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                                           text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        env["git_commit"] = os.environ.get("HPDT_GIT_COMMIT", "unknown")
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--models", default="resnet50,vit_b16")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--batch", type=int, default=0, help="0: 256 for ResNet-50, 64 for ViT-B/16")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-attention", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--kernel-trace-steps", type=int, default=0,
                    help="after timing, trace this many more steps kernel by kernel (--device cuda)")
    a = ap.parse_args()
    device = torch.device(a.device)
    if a.kernel_trace_steps < 0 or (a.kernel_trace_steps and device.type != "cuda"):
        raise SystemExit("torch_gpu_train_step.py: --kernel-trace-steps N needs N >= 0 and --device cuda "
                         "(it traces GPU kernels)")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_gpu_train_step.py: --device cuda but torch.cuda.is_available() is False")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    records = []
    for name in a.models.split(","):
        for mode in a.modes.split(","):
            try:
                records.append(train_step_record(a, name, mode, device))
            except torch.cuda.OutOfMemoryError as e:  # say so, keep the other records
                records.append({"model": name, "mode": mode, "error": f"out of memory: {e}"})
            print(json.dumps(records[-1])[:300], file=sys.stderr)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    doc = {"environment": environment(device), "train_step": records,
           "attention": [] if a.no_attention else attention_records(a, device)}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"torch_gpu_train_step.py: wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
