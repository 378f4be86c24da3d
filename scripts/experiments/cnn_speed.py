#!/usr/bin/env python3
"""Training images/s of the CNN (models/cnn.hpp: residual, CBAM by default) in attnkit and in
PyTorch 1.13, the same network, batch, optimizer (AdamW) and threads, measured in one run,
alternating the two so the machine's load affects both alike.

attnkit is timed through `attnkit train cnn` (augmentation, forward, backward, AdamW; its
epoch line reports images/s of the training steps); PyTorch runs the same network written with
torch.nn.functional on pre-loaded float32 tensors (no augmentation cost), its forward, backward
and torch.optim.AdamW step. Both use OpenBLAS with the AVX-512 kernels: attnkit selects them
itself on CPUs OpenBLAS 0.3.21 does not know; PyTorch's process gets OPENBLAS_CORETYPE=SkylakeX
when the CPU has AVX-512 (its default there is the SSE3 Prescott kernels), so neither side is
handicapped by OpenBLAS's CPU table. PyTorch's convolutions run through oneDNN (MKL-DNN).

attnkit's rate includes its first (cold) step, PyTorch's excludes a warm-up step: the default of
50 steps (6 400 images) keeps that difference near 2 %.

Usage: scripts/experiments/cnn_speed.py [--attention cbam] [--threads 2] [--batch 128]
       [--images 6400] [--rounds 2]"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("ATTNKIT_CLI", str(ROOT / "build" / "attnkit"))


def avx512():
    flags = pathlib.Path("/proc/cpuinfo").read_text()
    return all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


TORCH_CHILD = r'''
import json, sys, time
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
from test_cnn import torch_cnn
import attnkit
cfg = json.loads(sys.argv[2]); threads, batch, images = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
model = attnkit.ImageModel(json.dumps(cfg)); model.init_random(1)
p = {n: torch.tensor(np.array(model.parameter(n)), requires_grad=True) for n in model.parameter_names()}
buffers = {n: torch.tensor(np.array(model.buffer(n))) for n in model.buffer_names()}
opt = torch.optim.AdamW(p.values(), lr=1e-3, weight_decay=0.05)
x_all, y_all = attnkit.load_fashion_mnist("/usr/share/datasets/fashion-mnist", "train")
x_all = torch.tensor((np.asarray(x_all[:images], np.float32) / 255.0 - 0.286) / 0.353)[:, None]
y_all = torch.tensor(np.asarray(y_all[:images], np.int64))
def step(i):
    x, y = x_all[i * batch:(i + 1) * batch], y_all[i * batch:(i + 1) * batch]
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(torch_cnn(p, buffers, x, cfg, True), y)
    loss.backward(); opt.step()
step(0)  # warm-up
steps = images // batch
t = time.perf_counter()
for i in range(steps):
    step(i)
print(json.dumps({"images_per_second": steps * batch / (time.perf_counter() - t)}))
'''


def torch_rate(cfg, threads, batch, images):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    if avx512():
        env["OPENBLAS_CORETYPE"] = "SkylakeX"
    env["PYTHONPATH"] = str(ROOT / "build" / "python")
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # Debian torch
    out = subprocess.run([python, "-c", TORCH_CHILD, str(ROOT / "tests" / "python"), json.dumps(cfg),
                          str(threads), str(batch), str(images)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["images_per_second"]


def attnkit_rate(attention, widths, threads, batch, images):
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run([CLI, "train", "cnn", "--out", out, "--attention", attention, "--widths", widths,
                            "--batch", str(batch), "--train-limit", str(images), "--eval-limit", "100",
                            "--epochs", "1", "--threads", str(threads), "--json"],
                           check=True, capture_output=True, text=True).stdout
    return json.loads(r)["images_per_second"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attention", default="cbam", choices=["none", "se", "cbam"])
    ap.add_argument("--widths", default="32,64,128")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--images", type=int, default=6400)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    cfg = {"model_type": "cnn", "attention": a.attention, "widths": [int(w) for w in a.widths.split(",")],
           "reduction": 8, "spatial_kernel": 7}
    rows = []
    for r in range(a.rounds):
        ours = attnkit_rate(a.attention, a.widths, a.threads, a.batch, a.images)
        theirs = torch_rate(cfg, a.threads, a.batch, a.images)
        rows.append((ours, theirs))
        print(f"round {r + 1}: attnkit {ours:.0f} images/s, PyTorch {theirs:.0f} images/s, ratio {ours / theirs:.2f}x",
              flush=True)
    ours = sorted(o for o, _ in rows)[len(rows) // 2]
    theirs = sorted(t for _, t in rows)[len(rows) // 2]
    print(f"CNN ({a.attention}, widths {a.widths}), batch {a.batch}, {a.threads} threads: "
          f"attnkit {ours:.0f} images/s, PyTorch 1.13 {theirs:.0f} images/s, ratio {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
