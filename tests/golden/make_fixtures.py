#!/usr/bin/python3
"""Golden fixtures for hpdt's CPU layers, from PyTorch (Debian's python3-torch 1.13).

    /usr/bin/python3 tests/golden/make_fixtures.py [out_dir]      (default: tests/golden/fixtures)

Writes one JSON file per layer family (inputs, weights, outputs, gradients: small shapes, full
arrays) and one per training step of ResNet-20 and ViT-Ti (loss, logits, every parameter gradient,
and every parameter after one SGD and one AdamW step). The training-step files summarise each
parameter tensor (sum, sum of squares and four sampled entries) instead of storing it: the models
have 0.27M and 5.5M parameters and the files must stay small. Initial weights of the models come from
a closed formula both sides evaluate (det_init below, mirrored in test_golden.cpp), so no weights are
stored either. Deterministic: running it again reproduces the committed files byte for byte on any
x86-64 CPU with AVX2 (the ctest golden.regenerate checks it). PyTorch's oneDNN and OpenBLAS pick
kernels by instruction set (unpinned, files made on an AVX-512 machine differ from AVX2 ones in the
last digits: up to 1e-5 relative in conv2d.json, 2e-2 in a ViT parameter sum), and so does ATen's own
CPU dispatch (forced to avx512, five files change), so this script pins all three to AVX2 before
torch is loaded. Checked on an Intel Xeon with AVX-512:
pinned, it reproduces the nine files made unpinned on an AMD Zen 3 (AVX2) byte for byte, and
conv2d.json (made unpinned on AVX-512) was regenerated pinned.
Floats are written with 9 significant digits (round-trips f32).
"""
import json
import math
import os
import sys

# Same kernels on every AVX2-or-better CPU (must be set before torch and its BLAS are loaded).
os.environ["DNNL_MAX_CPU_ISA"] = "AVX2"
os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"
os.environ["OPENBLAS_CORETYPE"] = "Haswell"
os.environ["ATEN_CPU_CAPABILITY"] = "avx2"  # PyTorch's own vectorised kernels (norms, pointwise, pools)

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


def flt(v):
    return float("%.9g" % v)


def arr(t):
    return [flt(v) for v in t.detach().double().reshape(-1).tolist()]


def write(out_dir, name, obj):
    path = os.path.join(out_dir, name + ".json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def rand(*shape, scale=1.0):
    return (torch.rand(*shape, dtype=torch.float64) * 2 - 1).float() * scale


def grads_of(loss, tensors):
    return torch.autograd.grad(loss, tensors)


# ---- per-layer fixtures ----------------------------------------------------------------------------

def conv_cases():
    cases = []
    for (n, ci, h, w, co, k, s, p, bias) in [(2, 3, 7, 6, 4, 3, 1, 1, False), (2, 3, 7, 7, 4, 3, 2, 1, True),
                                             (2, 4, 6, 6, 3, 1, 2, 0, False), (1, 2, 11, 11, 3, 7, 2, 3, False),
                                             (2, 2, 8, 8, 5, 4, 4, 0, True)]:
        x = rand(n, ci, h, w).requires_grad_()
        wt = rand(co, ci, k, k, scale=0.5).requires_grad_()
        b = rand(co).requires_grad_() if bias else None
        y = F.conv2d(x, wt, b, stride=s, padding=p)
        dy = rand(*y.shape)
        g = grads_of((y * dy).sum(), [x, wt] + ([b] if bias else []))
        case = {"shape": [n, ci, h, w, co, k, s, p], "x": arr(x), "w": arr(wt), "y": arr(y), "dy": arr(dy),
                "dx": arr(g[0]), "dw": arr(g[1])}
        if bias:
            case.update({"b": arr(b), "db": arr(g[2])})
        cases.append(case)
    return {"cases": cases}


def batchnorm_case():
    bn = nn.BatchNorm2d(4)
    with torch.no_grad():
        bn.weight.copy_(1 + 0.5 * rand(4))
        bn.bias.copy_(rand(4))
        bn.running_mean.copy_(rand(4))
        bn.running_var.copy_(1 + 0.5 * rand(4).abs())
    rm0, rv0 = arr(bn.running_mean), arr(bn.running_var)
    x = (rand(3, 4, 5, 5) * 2 + 0.5).requires_grad_()
    bn.eval()
    y_eval = bn(x)
    bn.train()
    y = bn(x)
    dy = rand(*y.shape)
    g = grads_of((y * dy).sum(), [x, bn.weight, bn.bias])
    return {"shape": [3, 4, 5, 5], "x": arr(x), "gamma": arr(bn.weight), "beta": arr(bn.bias), "running_mean0": rm0,
            "running_var0": rv0, "y_eval": arr(y_eval), "y": arr(y), "running_mean": arr(bn.running_mean),
            "running_var": arr(bn.running_var), "dy": arr(dy), "dx": arr(g[0]), "dgamma": arr(g[1]),
            "dbeta": arr(g[2])}


def pointwise_case():
    x = (rand(4, 10) * 3).requires_grad_()
    dy = rand(4, 10)
    out = {"x": arr(x), "dy": arr(dy)}
    for name, fn in [("relu", F.relu), ("gelu_erf", lambda t: F.gelu(t)),
                     ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh")), ("softmax", lambda t: F.softmax(t, -1))]:
        y = fn(x)
        out[name] = {"y": arr(y), "dx": arr(grads_of((y * dy).sum(), [x])[0])}
    return out


def pool_case():
    x = rand(2, 3, 7, 6).requires_grad_()
    y = F.max_pool2d(x, 3, 2, 1)
    dy = rand(*y.shape)
    dx = grads_of((y * dy).sum(), [x])[0]
    ya = x.mean(dim=(2, 3))
    dya = rand(*ya.shape)
    dxa = grads_of((ya * dya).sum(), [x])[0]
    return {"x": arr(x), "maxpool": {"y": arr(y), "dy": arr(dy), "dx": arr(dx), "shape": list(y.shape)},
            "avgpool": {"y": arr(ya), "dy": arr(dya), "dx": arr(dxa)}}


def linear_layernorm_case():
    x = rand(5, 7).requires_grad_()
    lin = nn.Linear(7, 4)
    y = lin(x)
    dy = rand(*y.shape)
    g = grads_of((y * dy).sum(), [x, lin.weight, lin.bias])
    ln = nn.LayerNorm(7, eps=1e-6)
    with torch.no_grad():
        ln.weight.copy_(1 + 0.5 * rand(7))
        ln.bias.copy_(rand(7))
    z = ln(x)
    dz = rand(*z.shape)
    h = grads_of((z * dz).sum(), [x, ln.weight, ln.bias])
    return {"x": arr(x),
            "linear": {"w": arr(lin.weight), "b": arr(lin.bias), "y": arr(y), "dy": arr(dy), "dx": arr(g[0]),
                       "dw": arr(g[1]), "db": arr(g[2])},
            "layernorm": {"gamma": arr(ln.weight), "beta": arr(ln.bias), "y": arr(z), "dy": arr(dz),
                          "dx": arr(h[0]), "dgamma": arr(h[1]), "dbeta": arr(h[2])}}


def attention_case():
    b, t, d, heads = 2, 5, 6, 2
    mha = nn.MultiheadAttention(d, heads, batch_first=True)
    with torch.no_grad():
        mha.in_proj_bias.copy_(rand(3 * d, scale=0.3))
        mha.out_proj.bias.copy_(rand(d, scale=0.3))
    x = rand(b, t, d).requires_grad_()
    y, _ = mha(x, x, x, need_weights=False)
    dy = rand(*y.shape)
    g = grads_of((y * dy).sum(), [x, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias])
    return {"shape": [b, t, d, heads], "x": arr(x), "in_w": arr(mha.in_proj_weight), "in_b": arr(mha.in_proj_bias),
            "out_w": arr(mha.out_proj.weight), "out_b": arr(mha.out_proj.bias), "y": arr(y), "dy": arr(dy),
            "dx": arr(g[0]), "din_w": arr(g[1]), "din_b": arr(g[2]), "dout_w": arr(g[3]), "dout_b": arr(g[4])}


def embed_loss_case():
    b, d, gh = 2, 3, 2
    p = gh * gh
    patches = rand(b, d, gh, gh).requires_grad_()
    cls = rand(d).requires_grad_()
    pos = rand(p + 1, d).requires_grad_()
    tokens = torch.cat([cls.expand(b, 1, d), patches.flatten(2).transpose(1, 2)], dim=1) + pos
    dy = rand(*tokens.shape)
    g = grads_of((tokens * dy).sum(), [patches, cls, pos])
    logits = (rand(4, 5) * 3).requires_grad_()
    labels = torch.tensor([0, 4, 2, 2])
    out = {"tokens": {"shape": [b, d, gh, gh], "patches": arr(patches), "cls": arr(cls), "pos": arr(pos),
                      "y": arr(tokens), "dy": arr(dy), "dpatches": arr(g[0]), "dcls": arr(g[1]), "dpos": arr(g[2])},
           "cross_entropy": {"logits": arr(logits), "labels": labels.tolist(), "cases": []}}
    for eps in (0.0, 0.1):
        loss = F.cross_entropy(logits, labels, label_smoothing=eps)
        out["cross_entropy"]["cases"].append(
            {"smoothing": eps, "loss": flt(loss.item()), "dlogits": arr(grads_of(loss, [logits])[0])})
    return out


def optim_case():
    n = 6
    p0 = rand(n)
    grads = [rand(n) for _ in range(3)]
    out = {"p0": arr(p0), "grads": [arr(g) for g in grads], "runs": []}
    for kind, kw in [("sgd", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
                     ("sgd", dict(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)),
                     ("sgd", dict(lr=0.05)),
                     ("adamw", dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1))]:
        p = nn.Parameter(p0.clone())
        opt = torch.optim.SGD([p], **kw) if kind == "sgd" else torch.optim.AdamW([p], **kw)
        after = []
        for g in grads:
            p.grad = g.clone()
            opt.step()
            after.append(arr(p))
        out["runs"].append({"kind": kind, "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()},
                            "after": after})
    ps = [nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(2))]
    ps[0].grad, ps[1].grad = rand(3) * 4, rand(2) * 4
    grads_in = [arr(p.grad) for p in ps]
    total = torch.nn.utils.clip_grad_norm_(ps, 1.0)
    out["clip"] = {"grads": grads_in, "norm": flt(total.item()), "clipped": [arr(p.grad) for p in ps]}
    return out


def image_decode_case():
    """The reader's augmentation and normalisation as torchvision composes them: RandomCrop(padding=P) of the zero-
    padded image, then RandomHorizontalFlip, ToTensor (v / 255), Normalize(mean, std), here with the crop offsets and
    flips written out (dy, dx in [-P, P]; the first sample plain). Its own generator, so the other files keep their
    bytes."""
    g = torch.Generator().manual_seed(20261201)
    n, c, h, w, pad = 6, 3, 5, 7, 2
    pixels = torch.randint(0, 256, (n, c, h, w), generator=g, dtype=torch.int64)
    crops = torch.randint(-pad, pad + 1, (n, 2), generator=g)
    flips = torch.randint(0, 2, (n,), generator=g)
    crops[0] = 0
    flips[0] = 0
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    m = torch.tensor(mean, dtype=torch.float32).view(c, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(c, 1, 1)
    out = []
    for i in range(n):
        img = F.pad(pixels[i].float(), (pad, pad, pad, pad))  # zeros around: the padding's pixel value 0
        dy, dx = int(crops[i, 0]), int(crops[i, 1])
        win = img[:, pad + dy:pad + dy + h, pad + dx:pad + dx + w]
        if int(flips[i]):
            win = torch.flip(win, [-1])
        out.append((win / 255.0 - m) / s)
    return {"shape": [n, c, h, w], "pixels": [int(v) for v in pixels.reshape(-1).tolist()],
            "crops": [int(v) for v in torch.cat([crops, flips.view(n, 1)], 1).reshape(-1).tolist()],
            "mean": mean, "std": std, "y": arr(torch.stack(out))}


# ---- models ----------------------------------------------------------------------------------------

class Block(nn.Module):  # torchvision BasicBlock (projection shortcut)
    def __init__(self, cin, w, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, w, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.conv2 = nn.Conv2d(w, w, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(w)
        self.downsample = None
        if stride != 1 or cin != w:
            self.downsample = nn.Sequential(nn.Conv2d(cin, w, 1, stride, bias=False), nn.BatchNorm2d(w))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNetCifar(nn.Module):
    def __init__(self, n, cin, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, c = [], 16
        for s, w in enumerate((16, 32, 64)):
            blocks = []
            for b in range(n):
                blocks.append(Block(c, w, 2 if (s > 0 and b == 0) else 1))
                c = w
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = layers
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(x.mean(dim=(2, 3)))


class EncoderBlock(nn.Module):  # torchvision EncoderBlock
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(d, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln_1(x)
        h, _ = self.self_attention(h, h, h, need_weights=False)
        x = x + h
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):  # torchvision VisionTransformer layout
    def __init__(self, cin, image, patch, d, depth, heads, classes):
        super().__init__()
        self.conv_proj = nn.Conv2d(cin, d, patch, patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, d))
        self.pos_embedding = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, d))
        self.layers = nn.Sequential(*[EncoderBlock(d, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(d, eps=1e-6)
        self.head = nn.Linear(d, classes)

    def ordered_named_parameters(self):
        # execution order (hpdt's registration order); named_parameters() lists a module's own
        # parameters (class_token, pos_embedding) before its children's
        first = ["conv_proj.weight", "conv_proj.bias", "class_token", "pos_embedding"]
        named = dict(self.named_parameters())
        return [(n, named[n]) for n in first] + [(n, p) for n, p in self.named_parameters() if n not in first]

    def forward(self, x):
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        return self.head(self.ln(self.layers(x))[:, 0])


def hash_uniform(k, n):
    """n numbers in [-1, 1) for parameter k: splitmix64 of (k << 32) + i, top 53 bits. Integer
    arithmetic, so both sides get the same bits; mirrored in test_golden.cpp. (A smooth pattern such as
    sin(0.37 i) made every filter a shifted copy of its neighbour: ResNet-20's logits then moved by
    3e-4 between two CPUs running the same PyTorch.)"""
    with np.errstate(over="ignore"):
        z = (np.uint64(k) << np.uint64(32)) + np.arange(n, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (2.0 ** -52) - 1.0


def det_init(k, name, shape):
    """Parameter k (registration order) of the given name and shape; mirrored in test_golden.cpp."""
    n = int(np.prod(shape))
    s = hash_uniform(k, n)
    if name.endswith("bias"):
        v = 0.1 * s
    elif "token" in name or "pos_embedding" in name:
        v = 0.02 * s
    elif n == shape[0]:
        v = 1.0 + 0.1 * s
    else:
        v = s * math.sqrt(3.0 / (n // shape[0]))
    return torch.from_numpy(v.astype(np.float32)).reshape(shape)


def summary(t):
    v = t.detach().double().reshape(-1)
    n = v.numel()
    idx = [0, n // 3, (2 * n) // 3, n - 1]
    return {"numel": n, "sum": flt(v.sum().item()), "sumsq": flt((v * v).sum().item()),
            "idx": idx, "at": [flt(v[i].item()) for i in idx]}


def training_step(model, x, labels, smoothing, sgd_kw, adamw_kw):
    params = model.ordered_named_parameters() if hasattr(model, "ordered_named_parameters") else list(model.named_parameters())
    with torch.no_grad():
        for k, (name, p) in enumerate(params):
            p.copy_(det_init(k, name, tuple(p.shape)))
    init = [p.detach().clone() for _, p in params]
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits, labels, label_smoothing=smoothing)
    grads = torch.autograd.grad(loss, [p for _, p in params])
    out = {"loss": flt(loss.item()), "logits": arr(logits), "x": arr(x), "labels": labels.tolist(),
           "params": [{"name": name, "numel": p.numel()} for name, p in params],
           "grads": [summary(g) for g in grads]}
    for kind, kw in (("sgd", sgd_kw), ("adamw", adamw_kw)):
        ps = [nn.Parameter(t.clone()) for t in init]
        opt = torch.optim.SGD(ps, **kw) if kind == "sgd" else torch.optim.AdamW(ps, **kw)
        for p, g in zip(ps, grads):
            p.grad = g.clone()
        opt.step()
        out[kind] = {"options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()},
                     "params": [summary(p) for p in ps]}
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(20240611)
    write(out_dir, "conv2d", conv_cases())
    write(out_dir, "batchnorm", batchnorm_case())
    write(out_dir, "pointwise", pointwise_case())
    write(out_dir, "pool", pool_case())
    write(out_dir, "linear_layernorm", linear_layernorm_case())
    write(out_dir, "attention", attention_case())
    write(out_dir, "embed_loss", embed_loss_case())
    write(out_dir, "optim", optim_case())
    sgd = dict(lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    adamw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
    x = rand(4, 1, 8, 8)
    labels = torch.tensor([3, 1, 0, 7])
    step = training_step(ResNetCifar(3, 1, 10), x, labels, 0.1, sgd, adamw)
    step["config"] = {"model": "resnet20", "in_channels": 1, "image_size": 8, "classes": 10}
    write(out_dir, "step_resnet20", step)
    x = rand(2, 1, 8, 8)
    labels = torch.tensor([2, 9])
    step = training_step(ViT(1, 8, 4, 192, 12, 3, 10), x, labels, 0.1, sgd, adamw)
    step["config"] = {"model": "vit_ti", "in_channels": 1, "image_size": 8, "patch": 4, "classes": 10}
    write(out_dir, "step_vit_ti", step)
    write(out_dir, "image_decode", image_decode_case())


if __name__ == "__main__":
    main()
