#!/usr/bin/env python3
"""Training speed of the same ViT in PyTorch 1.13 and in attnkit (through the Python module), in
one run with the same threads: images/s of full training steps (forward, softmax cross-entropy,
backward, AdamW) on random images of Fashion-MNIST's geometry. Rounds of steps alternate between
the two so both see the same machine load; the median and the best round of each are reported.

The torch model is Hugging Face's ViTForImageClassification written out with standard modules
(Conv2d patch embedding with stride P, [CLS] + learned positions, pre-LN layers with separate
q/k/v Linear layers, explicit matmul + softmax attention as torch 1.13 has no SDPA, exact GELU,
final LayerNorm, classifier on [CLS]); attnkit runs attnkit.ImageModel with the same config.
Both use float32 and `--threads` threads (torch.set_num_threads and OPENBLAS_NUM_THREADS, which
this script sets before torch loads; attnkit.set_num_threads).

Usage: scripts/experiments/vit_speed.py [--threads 2] [--batch 128] [--steps 3] [--rounds 5]
                                         [--warmup 2] [--compare-packed]
                                         [--patch 4] [--dim 96] [--layers 6] [--heads 4]
                                         [--mlp-dim 192] [--pool cls]
Run from the repository root after building; the module is build/python's unless PYTHONPATH
names another (e.g. build-avx2/python), and the summary names the one loaded."""
import argparse
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--compare-packed", action="store_true",
                    help="also time attnkit with its linear layers on OpenBLAS (set_packed_gemm(False))")
    ap.add_argument("--image", type=int, default=28)
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--patch", type=int, default=4)
    ap.add_argument("--dim", type=int, default=96)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--mlp-dim", type=int, default=192)
    ap.add_argument("--pool", choices=("cls", "mean"), default="cls")
    return ap.parse_args()


ARGS = parse()
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)  # torch's BLAS ignores set_num_threads
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))
sys.path.append(str(ROOT / "build" / "python"))  # after PYTHONPATH: PYTHONPATH=build-avx2/python wins

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import attnkit  # noqa: E402
from attnkit.train import AdamW  # noqa: E402


class TorchVit(nn.Module):
    """HF ViTForImageClassification (pre-LN), written with standard torch modules."""

    def __init__(self, a):
        super().__init__()
        c, s = a.dim, (a.image // a.patch) ** 2 + 1
        self.heads, self.pool = a.heads, a.pool
        self.proj = nn.Conv2d(a.channels, c, a.patch, stride=a.patch)
        self.cls = nn.Parameter(torch.randn(1, 1, c) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, s, c) * 0.02)
        self.layers = nn.ModuleList()
        for _ in range(a.layers):
            self.layers.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(c, eps=1e-12), "q": nn.Linear(c, c), "k": nn.Linear(c, c),
                "v": nn.Linear(c, c), "o": nn.Linear(c, c), "ln2": nn.LayerNorm(c, eps=1e-12),
                "fc1": nn.Linear(c, a.mlp_dim), "fc2": nn.Linear(a.mlp_dim, c)}))
        self.ln = nn.LayerNorm(c, eps=1e-12)
        self.head = nn.Linear(c, a.classes)

    def forward(self, x):
        e = self.proj(x).flatten(2).transpose(1, 2)  # [N, Np, C]
        n, _, c = e.shape
        h, d = self.heads, c // self.heads
        x = torch.cat([self.cls.expand(n, -1, -1), e], dim=1) + self.pos
        for ly in self.layers:
            y = ly["ln1"](x)
            q, k, v = (ly[t](y).view(n, -1, h, d).transpose(1, 2) for t in ("q", "k", "v"))
            p = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1)
            x = x + ly["o"]((p @ v).transpose(1, 2).reshape(n, -1, c))
            x = x + ly["fc2"](F.gelu(ly["fc1"](ly["ln2"](x))))
        y = self.ln(x)
        return self.head(y[:, 0] if self.pool == "cls" else y[:, 1:].mean(dim=1))


def vit_config(a):
    return json.dumps({
        "model_type": "vit", "hidden_size": a.dim, "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads, "intermediate_size": a.mlp_dim, "image_size": a.image,
        "patch_size": a.patch, "num_channels": a.channels, "num_labels": a.classes,
        "qkv_bias": True, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pooling": a.pool})


def torch_trainer(a, x, y):
    """A closure running one torch training step, and the model's parameter count."""
    torch.manual_seed(0)
    model = TorchVit(a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(xt), yt).backward()
        opt.step()
    return step, sum(p.numel() for p in model.parameters())


def attnkit_trainer(a, x, y):
    """A closure running one attnkit training step (softmax cross-entropy gradient in numpy)."""
    m = attnkit.ImageModel(vit_config(a))
    m.init_random(0)
    names = m.parameter_names()
    opt = AdamW({n: m.parameter(n) for n in names}, {n: m.gradient(n) for n in names})
    rows = np.arange(a.batch)

    def step():
        m.zero_grad()
        logits = m.forward(x)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[rows, y] -= 1.0  # d(mean cross-entropy)/d(logits)
        m.backward((p / a.batch).astype(np.float32))
        opt.step(1e-3)
    return step, sum(m.parameter(n).size for n in names)


def blas_core():
    """OpenBLAS's kernel family (e.g. Prescott when it does not recognise the CPU), or '?'."""
    import ctypes
    for lib in ("libopenblas.so.0", "libblas.so.3"):
        try:
            f = ctypes.CDLL(lib).openblas_get_corename
            f.restype = ctypes.c_char_p
            return f().decode()
        except (OSError, AttributeError):
            continue
    return "?"


def main():
    a = ARGS
    rng = np.random.default_rng(0)
    x = rng.standard_normal((a.batch, a.channels, a.image, a.image)).astype(np.float32)
    y = rng.integers(0, a.classes, a.batch).astype(np.int32)
    torch.set_num_threads(a.threads)
    attnkit.set_num_threads(a.threads)
    ours, n_ours = attnkit_trainer(a, x, y)
    theirs, n_theirs = torch_trainer(a, x, y)
    assert n_ours == n_theirs, (n_ours, n_theirs)
    for _ in range(a.warmup):
        ours()
        theirs()
    # Alternate rounds so both see the same machine load; report the median round of each.
    rates = {"attnkit": [], "torch": []}
    runs = [("attnkit", ours), ("torch", theirs)]
    if a.compare_packed:
        rates["attnkit OpenBLAS linear"] = []
        runs.append(("attnkit OpenBLAS linear", ours))
    for r in range(a.rounds):
        for name, step in (runs if r % 2 == 0 else runs[::-1]):
            if a.compare_packed:
                attnkit.set_packed_gemm(name != "attnkit OpenBLAS linear")
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step()
            rates[name].append(a.batch * a.steps / (time.perf_counter() - t0))
    med = {k: float(np.median(v)) for k, v in rates.items()}
    best = {k: max(v) for k, v in rates.items()}  # the least disturbed round on a shared machine
    print(f"ViT patch {a.patch} dim {a.dim} layers {a.layers} heads {a.heads} mlp {a.mlp_dim} "
          f"pool {a.pool}: {n_ours} parameters; {a.image}x{a.image}x{a.channels} images, batch "
          f"{a.batch}; {a.threads} threads; OpenBLAS core {blas_core()}; {a.rounds} rounds of "
          f"{a.steps} training steps after {a.warmup} warm-up steps; attnkit module {attnkit.__file__}")
    for k in ("torch", "attnkit"):
        label = f"torch {torch.__version__}" if k == "torch" else "attnkit"
        print(f"{label}: {med[k]:.1f} images/s median, {best[k]:.1f} best (rounds "
              f"{', '.join(f'{v:.0f}' for v in rates[k])})")
    print(f"ratio attnkit / torch: {med['attnkit'] / med['torch']:.2f}x median, "
          f"{best['attnkit'] / best['torch']:.2f}x best")
    if a.compare_packed:
        k = "attnkit OpenBLAS linear"
        print(f"{k}: {med[k]:.1f} images/s median, {best[k]:.1f} best (rounds "
              f"{', '.join(f'{v:.0f}' for v in rates[k])}); packed / OpenBLAS linear "
              f"{med['attnkit'] / med[k]:.2f}x median; OpenBLAS linear / torch {med[k] / med['torch']:.2f}x")


if __name__ == "__main__":
    main()
