#!/usr/bin/python3
"""PyTorch 1.13 CPU twin of hpdt-bench-train-step: the same models (definitions shared with the golden
fixtures, tests/golden/make_fixtures.py), the same step (forward, cross-entropy, backward, SGD with
Nesterov momentum), timed per step after warm-up. Prints one JSON line.

    /usr/bin/python3 bench/peers/torch_train_step.py --model resnet20 --threads 2 [--channels-last]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in tests/golden
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden"))
from make_fixtures import ResNetCifar, ViT  # noqa: E402


def build(name, cin, image, patch, classes):
    if name == "resnet20":
        return ResNetCifar(3, cin, classes)
    if name == "resnet56":
        return ResNetCifar(9, cin, classes)
    if name == "vit_ti":
        return ViT(cin, image, patch, 192, 12, 3, classes)
    if name == "vit_s":
        return ViT(cin, image, patch, 384, 12, 6, classes)
    raise SystemExit("torch_train_step.py: unknown model " + name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--image", type=int, default=28)
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--patch", type=int, default=4)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(7)
    model = build(a.model, a.channels, a.image, a.patch, a.classes)
    x = torch.randn(a.batch, a.channels, a.image, a.image)
    y = torch.randint(0, a.classes, (a.batch,))
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4, nesterov=True)
    times = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)
    med = sorted(times)[len(times) // 2]
    print(json.dumps({"impl": "pytorch" + ("-channels_last" if a.channels_last else ""), "model": a.model,
                      "batch": a.batch, "threads": torch.get_num_threads(),
                      "params": sum(p.numel() for p in model.parameters()), "loss": loss.item(),
                      "img_per_s_median": a.batch / med, "step_s": times}))


if __name__ == "__main__":
    main()
