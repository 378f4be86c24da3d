#!/usr/bin/env python3
"""attnkit's ViT vs the same network in PyTorch 1.13, trained side by side on Fashion-MNIST:
same initial weights (attnkit's init_random copied into torch), same batches, same AdamW with the
same weight-decay exclusions, same warmup + cosine schedule, no augmentation. Prints both training
losses every --every steps, the largest loss gap, one step's per-tensor gradient error, and both
models' test accuracy at the end. Either side can also run alone (--only torch|attnkit), which
is how recipe variants (init, learning rate, warmup, label smoothing) were compared.

Usage: scripts/experiments/vit_torch_compare.py [--steps 300] [--batch 128] [--lr 1e-3]
           [--wd 0.05] [--warmup 100] [--total 0 (=steps)] [--pool mean] [--patch 4] [--dim 96]
           [--layers 6] [--heads 4] [--mlp-dim 192] [--only both|torch|attnkit]
           [--torch-init] [--label-smoothing 0] [--test 2000]
Run from the repository root after building; sets 1 BLAS thread unless --threads says otherwise.
"""
import argparse
import gzip
import json
import math
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--min-lr", type=float, default=1e-5)
ap.add_argument("--wd", type=float, default=0.05)
ap.add_argument("--warmup", type=int, default=100)
ap.add_argument("--total", type=int, default=0, help="cosine length in steps (0: --steps)")
ap.add_argument("--pool", default="mean")
ap.add_argument("--patch", type=int, default=4)
ap.add_argument("--dim", type=int, default=96)
ap.add_argument("--layers", type=int, default=6)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--mlp-dim", type=int, default=192)
ap.add_argument("--only", choices=("both", "torch", "attnkit"), default="both")
ap.add_argument("--torch-init", action="store_true",
                help="torch's default Linear/Conv2d init instead of HF's truncated normal (both sides)")
ap.add_argument("--label-smoothing", type=float, default=0.0)
ap.add_argument("--test", type=int, default=2000, help="test images evaluated at the end")
ap.add_argument("--every", type=int, default=25)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--threads", type=int, default=1)
A = ap.parse_args()
os.environ["OPENBLAS_NUM_THREADS"] = str(A.threads)
os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
os.environ.setdefault("OMP_NUM_THREADS", str(A.threads))
sys.path.insert(0, str(ROOT / "build" / "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import attnkit  # noqa: E402
from attnkit.train import AdamW  # noqa: E402

DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")


def idx(name):
    with gzip.open(DATA / name) as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load():
    xtr, ytr = idx("train-images-idx3-ubyte.gz"), idx("train-labels-idx1-ubyte.gz")
    xte, yte = idx("t10k-images-idx3-ubyte.gz"), idx("t10k-labels-idx1-ubyte.gz")
    v = xtr.astype(np.float64) / 255.0
    mean, std = v.mean(), v.std()  # the trainer's pixel_mean_std
    norm = lambda x: ((x.astype(np.float32) / 255.0 - mean) / std).astype(np.float32)[:, None]
    return norm(xtr), ytr.astype(np.int64), norm(xte), yte.astype(np.int64)


def config():
    return json.dumps({
        "model_type": "vit", "hidden_size": A.dim, "num_hidden_layers": A.layers,
        "num_attention_heads": A.heads, "intermediate_size": A.mlp_dim, "image_size": 28,
        "patch_size": A.patch, "num_channels": 1, "num_labels": 10, "qkv_bias": True,
        "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pooling": A.pool})


def no_decay(name, shape):
    """The image trainer's exclusions (image_trainer.cpp no_decay_for)."""
    return len(shape) < 2 or "embeddings.cls_token" in name or "position_embeddings" in name


def torch_default_init(params):
    """nn.Linear / nn.Conv2d reset_parameters: U(±1/sqrt(fan_in)) for weights and biases
    (kaiming_uniform with a = sqrt(5) gives the same bound for the weight)."""
    g = torch.Generator().manual_seed(A.seed)
    for n, p in params.items():
        if "layernorm" in n or "embeddings.cls_token" in n or "position_embeddings" in n:
            continue
        base = n.rsplit(".", 1)[0]
        w = params[base + ".weight"]
        fan_in = int(np.prod(w.shape[1:]))
        b = 1.0 / math.sqrt(fan_in)
        p.copy_(torch.empty(p.shape).uniform_(-b, b, generator=g))


def forward(P, x):
    """HF ViTForImageClassification (pre-LN) over parameters P {HF name: tensor}."""
    c, h = A.dim, A.heads
    d = c // h
    e = F.conv2d(x, P["vit.embeddings.patch_embeddings.projection.weight"],
                 P["vit.embeddings.patch_embeddings.projection.bias"], stride=A.patch)
    e = e.flatten(2).transpose(1, 2)
    n = e.shape[0]
    z = torch.cat([P["vit.embeddings.cls_token"].expand(n, -1, -1), e], 1)
    z = z + P["vit.embeddings.position_embeddings"]
    for l in range(A.layers):
        p = f"vit.encoder.layer.{l}."
        y = F.layer_norm(z, (c,), P[p + "layernorm_before.weight"], P[p + "layernorm_before.bias"], 1e-12)
        q, k, v = (F.linear(y, P[p + f"attention.attention.{t}.weight"], P[p + f"attention.attention.{t}.bias"])
                   .view(n, -1, h, d).transpose(1, 2) for t in ("query", "key", "value"))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), -1) @ v
        z = z + F.linear(a.transpose(1, 2).reshape(n, -1, c), P[p + "attention.output.dense.weight"],
                         P[p + "attention.output.dense.bias"])
        y = F.layer_norm(z, (c,), P[p + "layernorm_after.weight"], P[p + "layernorm_after.bias"], 1e-12)
        y = F.gelu(F.linear(y, P[p + "intermediate.dense.weight"], P[p + "intermediate.dense.bias"]))
        z = z + F.linear(y, P[p + "output.dense.weight"], P[p + "output.dense.bias"])
    y = F.layer_norm(z, (c,), P["vit.layernorm.weight"], P["vit.layernorm.bias"], 1e-12)
    pooled = y[:, 0] if A.pool == "cls" else y[:, 1:].mean(1)
    return F.linear(pooled, P["classifier.weight"], P["classifier.bias"])


def lr_at(s):
    """train/schedule.cpp warmup_cosine_lr."""
    total = A.total or A.steps
    if s < A.warmup:
        return A.lr * (s + 1) / A.warmup
    if s >= total:
        return A.min_lr
    r = (s - A.warmup) / (total - A.warmup)
    return A.min_lr + 0.5 * (1 + math.cos(math.pi * r)) * (A.lr - A.min_lr)


def ce_grad(logits, y, eps):
    """Mean (label-smoothed) cross-entropy and its gradient with respect to logits (numpy)."""
    z = logits - logits.max(1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(1, keepdims=True))
    k = logits.shape[1]
    t = np.full_like(lp, eps / k)
    t[np.arange(len(y)), y] += 1 - eps
    loss = -(t * lp).sum(1).mean()
    return float(loss), ((np.exp(lp) - t) / len(y)).astype(np.float32)


def accuracy(fn, x, y):
    right = 0
    for b in range(0, len(x), 500):
        right += int((fn(x[b:b + 500]).argmax(1) == y[b:b + 500]).sum())
    return right / len(x)


def main():
    torch.set_num_threads(A.threads)
    attnkit.set_num_threads(A.threads)
    xtr, ytr, xte, yte = load()
    m = attnkit.ImageModel(config())
    m.init_random(A.seed)
    names = m.parameter_names()
    P = {n: torch.tensor(np.array(m.parameter(n))) for n in names}
    if A.torch_init:
        with torch.no_grad():
            torch_default_init(P)
        for n in names:
            m.parameter(n)[...] = P[n].numpy()
    for t in P.values():
        t.requires_grad_(True)
    excluded = [n for n in names if no_decay(n, P[n].shape)]
    opt_t = torch.optim.AdamW(
        [{"params": [P[n] for n in names if n not in excluded], "weight_decay": A.wd},
         {"params": [P[n] for n in excluded], "weight_decay": 0.0}], lr=A.lr, eps=1e-8)
    opt_a = AdamW({n: m.parameter(n) for n in names}, {n: m.gradient(n) for n in names},
                  weight_decay=A.wd, no_decay=excluded)
    rng = np.random.default_rng(A.seed)
    order = np.concatenate([rng.permutation(len(xtr)) for _ in range(A.steps * A.batch // len(xtr) + 1)])
    run_t, run_a = A.only in ("both", "torch"), A.only in ("both", "attnkit")
    losses_t, losses_a = [], []
    t_time = a_time = 0.0
    for s in range(A.steps):
        ids = order[s * A.batch:(s + 1) * A.batch]
        xb, yb = xtr[ids], ytr[ids]
        lr = lr_at(s)
        if run_t:
            t0 = time.perf_counter()
            for g in opt_t.param_groups:
                g["lr"] = lr
            opt_t.zero_grad(set_to_none=True)
            loss = F.cross_entropy(forward(P, torch.from_numpy(xb)), torch.from_numpy(yb),
                                   label_smoothing=A.label_smoothing)
            loss.backward()
            if s == 0 and run_a:
                grads_t = {n: P[n].grad.detach().numpy().copy() for n in names}
            opt_t.step()
            losses_t.append(loss.item())
            t_time += time.perf_counter() - t0
        if run_a:
            t0 = time.perf_counter()
            m.set_training(True, s)
            m.zero_grad()
            loss, d = ce_grad(m.forward(xb), yb, A.label_smoothing)
            m.backward(d)
            if s == 0 and run_t:
                # Relative to the largest gradient of any tensor: the key bias's true gradient is
                # 0 (softmax ignores a per-query constant), so a per-tensor ratio is noise there.
                scale = max(np.abs(g).max() for g in grads_t.values())
                worst = max(names, key=lambda n: np.abs(m.gradient(n) - grads_t[n]).max())
                rel = np.abs(m.gradient(worst) - grads_t[worst]).max() / scale
                print(f"step 0 gradients: max|attnkit - torch| / max|torch grad| = {rel:.2e} ({worst})")
            opt_a.step(lr)
            losses_a.append(loss)
            a_time += time.perf_counter() - t0
        if (s + 1) % A.every == 0 or s + 1 == A.steps:
            w = slice(max(0, s + 1 - A.every), s + 1)
            line = f"step {s + 1:5d} lr {lr:.2e}"
            if run_t:
                line += f" | torch loss {np.mean(losses_t[w]):.4f}"
            if run_a:
                line += f" | attnkit loss {np.mean(losses_a[w]):.4f}"
            print(line, flush=True)
    if run_t and run_a:
        gap = np.abs(np.array(losses_t) - np.array(losses_a))
        print(f"loss gap: max {gap.max():.4f}, mean {gap.mean():.4f}; first 50 steps max {gap[:50].max():.2e}")
    xt, yt = xte[:A.test], yte[:A.test]
    if run_t:
        with torch.no_grad():
            acc = accuracy(lambda x: forward(P, torch.from_numpy(x)).numpy(), xt, yt)
        print(f"torch: test accuracy {acc:.4f} on {len(xt)} images, {A.steps * A.batch / t_time:.0f} img/s")
    if run_a:
        m.set_training(False)
        acc = accuracy(lambda x: np.array(m.forward(x)), xt, yt)
        print(f"attnkit: test accuracy {acc:.4f} on {len(xt)} images, {A.steps * A.batch / a_time:.0f} img/s")


if __name__ == "__main__":
    main()
