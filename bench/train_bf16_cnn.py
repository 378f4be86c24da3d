#!/usr/bin/env python3
"""bf16 mixed-precision CNN training: its accuracy cost in attnkit and in PyTorch's autocast.

The residual CNN with CBAM (models/cnn.hpp, widths 32/64/128) trained on Debian's Fashion-MNIST
(60 000 training images, the 10 000 test images scored) for --epochs epochs, in float32 and in bf16,
once per seed of --seeds, by each framework:

- attnkit: `attnkit train cnn --precision f32|bf16 --seed S --no-augment` (batch 128, AdamW with
  weight decay 0.05 on matrices and kernels, warmup of half an epoch, cosine from 2e-3 to 2e-5);
  bf16 runs the convolutions' and linear layers' products with bf16 inputs (docs/bf16.md).
- PyTorch 1.13: the same network in torch.nn.functional (tests/python/test_cnn.py), initialised by
  attnkit's initialiser with the same seed, the same batch, optimizer, weight-decay split and
  schedule, the images in a seeded random order; bf16 is torch.autocast("cpu", dtype=torch.bfloat16)
  around the forward pass and the loss (training and evaluation).

Reported per run: the test accuracy and test loss after the last epoch (evaluated in the run's
precision; attnkit's bf16 models also in f32 by `attnkit eval`), and the mean training loss of its
last epoch. Runs of the same seed start from the same weights and see the same batches, so
f32 against bf16 within a framework and seed is the mode's cost, and f32 of one seed against f32
of another is the seed-to-seed spread it should be compared with. The frameworks differ in their
data order, so compare within a framework, not across.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/train_bf16_cnn.py [--epochs 3]
       [--seeds 1,2] [--threads 2] [--of attnkit,torch]
Speed: scripts/experiments/cnn_speed.py --in-process --precisions f32,bf16.
"""
import argparse
import json
import math
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLI = os.environ.get("ATTNKIT_CLI", str(ROOT / "build" / "attnkit"))
FASHION = "/usr/share/datasets/fashion-mnist"
CFG = {"model_type": "cnn", "attention": "cbam", "widths": [32, 64, 128], "reduction": 8, "spatial_kernel": 7}
BATCH, MAX_LR, MIN_LR, WARMUP_EPOCHS, WEIGHT_DECAY = 128, 2e-3, 2e-5, 0.5, 0.05


def attnkit_run(args, precision, seed):
    """(test accuracy, test loss, mean training loss of the last epoch, seconds) of one CLI run,
    and the test accuracy and loss of its model evaluated in f32 (`attnkit eval`)."""
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        r = subprocess.run([CLI, "train", "cnn", "--out", out, "--epochs", str(args.epochs), "--batch", str(BATCH),
                            "--lr", str(MAX_LR), "--min-lr", str(MIN_LR), "--warmup-epochs", str(WARMUP_EPOCHS),
                            "--weight-decay", str(WEIGHT_DECAY), "--no-augment", "--seed", str(seed),
                            "--threads", str(args.threads), "--precision", precision, "--json"],
                           check=True, capture_output=True, text=True)
        seconds = time.perf_counter() - t
        ev = subprocess.run([CLI, "eval", "--model", out, "--data-dir", FASHION], check=True, capture_output=True,
                            text=True).stdout
    last = json.loads(r.stdout)["epochs"][-1]
    m = re.search(r"test accuracy ([0-9.]+)\s+loss ([0-9.]+)", ev)
    return last["test_accuracy"], last["test_loss"], last["train_loss"], seconds, (float(m[1]), float(m[2]))


def torch_run(args, autocast, seed):
    """The same for PyTorch (test_cnn.torch_cnn), f32 or under bf16 autocast."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    from test_cnn import torch_cnn
    import attnkit
    torch.manual_seed(seed)
    torch.set_num_threads(args.threads)
    model = attnkit.ImageModel(json.dumps(CFG))
    model.init_random(seed)
    p = {n: torch.tensor(np.array(model.parameter(n)), requires_grad=True) for n in model.parameter_names()}
    buffers = {n: torch.tensor(np.array(model.buffer(n))) for n in model.buffer_names()}
    decay = [t for t in p.values() if t.dim() >= 2]
    rest = [t for t in p.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": rest, "weight_decay": 0.0}],
                            lr=MAX_LR)

    def load(split):
        x, y = attnkit.load_fashion_mnist(FASHION, split)
        x = np.asarray(x, np.float32) / 255.0
        return x, np.asarray(y, np.int64)

    x_train, y_train = load("train")
    mean, std = float(x_train.mean()), float(x_train.std())
    x_train = torch.from_numpy(((x_train - mean) / std)[:, None].copy())
    y_train = torch.from_numpy(y_train)
    x_test, y_test = load("test")
    x_test = torch.from_numpy(((x_test - mean) / std)[:, None].copy())
    y_test = torch.from_numpy(y_test)
    per_epoch = len(x_train) // BATCH
    total, warmup = per_epoch * args.epochs, int(WARMUP_EPOCHS * per_epoch)

    def lr_at(s):
        if s < warmup:
            return MAX_LR * (s + 1) / warmup
        q = (s - warmup) / max(1, total - warmup)
        return MIN_LR + 0.5 * (MAX_LR - MIN_LR) * (1 + math.cos(math.pi * q))

    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    step = 0
    for epoch in range(args.epochs):
        order = torch.from_numpy(rng.permutation(len(x_train)))
        losses = []
        for b in range(per_epoch):
            idx = order[b * BATCH:(b + 1) * BATCH]
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = F.cross_entropy(torch_cnn(p, buffers, x_train[idx], CFG, True).float(), y_train[idx])
            loss.backward()
            opt.step()
            losses.append(float(loss))
            step += 1
    seconds = time.perf_counter() - t
    correct, loss_sum = 0, 0.0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        for b in range(0, len(x_test), 500):
            logits = torch_cnn(p, buffers, x_test[b:b + 500], CFG, False).float()
            loss_sum += float(F.cross_entropy(logits, y_test[b:b + 500], reduction="sum"))
            correct += int((logits.argmax(1) == y_test[b:b + 500]).sum())
    return correct / len(x_test), loss_sum / len(x_test), statistics.mean(losses), seconds, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seeds", default="1,2", help="comma-separated seeds; each runs f32 and bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--of", default="attnkit,torch", help="which frameworks to run")
    args = ap.parse_args()
    import attnkit
    if not attnkit.bf16_available():
        sys.exit("bf16 is not available here: no AVX512-BF16 / AMX, or attnkit was built without oneDNN")
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"CNN (cbam, widths 32,64,128) on Fashion-MNIST, {args.epochs} epochs of 60 000 images, batch {BATCH}, "
          f"{args.threads} threads; load {os.getloadavg()[0]:.2f}", flush=True)
    runs = []
    if "attnkit" in args.of:
        runs += [("attnkit", p, s, lambda p=p, s=s: attnkit_run(args, p, s)) for s in seeds for p in ("f32", "bf16")]
    if "torch" in args.of:
        runs += [("PyTorch", p, s, lambda p=p, s=s: torch_run(args, p == "bf16", s)) for s in seeds for p in ("f32", "bf16")]
    for who, precision, seed, run in runs:
        acc, loss, train_loss, seconds, in_f32 = run()
        evaluated = f" (evaluated in f32: {in_f32[0]:.4f}, {in_f32[1]:.4f})" if in_f32 and precision != "f32" else ""
        print(f"  {who:8s} {precision:5s} seed {seed}: test accuracy {acc:.4f}, test loss {loss:.4f}{evaluated}, "
              f"last epoch's training loss {train_loss:.4f} ({seconds:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
