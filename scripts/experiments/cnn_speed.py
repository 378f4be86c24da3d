#!/usr/bin/env python3
"""Training images/s of the CNN (models/cnn.hpp: residual, CBAM by default) in attnkit and in
PyTorch 1.13, the same network, batch, optimizer (AdamW) and threads, measured in one run,
alternating the two so the machine's load affects both alike.

attnkit is timed through `attnkit train cnn` (augmentation, forward, backward, AdamW; its
epoch line reports images/s of the training steps); PyTorch runs the same network written with
torch.nn.functional on pre-loaded float32 tensors (no augmentation cost), its forward, backward
and torch.optim.AdamW step. Both use OpenBLAS with the AVX-512 kernels: attnkit selects them
itself on CPUs OpenBLAS 0.3.21 does not know; PyTorch's process gets OPENBLAS_CORETYPE=SkylakeX
when the CPU has AVX-512 and the caller set none (its default there is the SSE3 Prescott
kernels), so neither side is handicapped by OpenBLAS's CPU table. The module is build/python's
unless PYTHONPATH names another (e.g. build-avx2/python); --in-process prints the one it loaded. PyTorch's convolutions run through oneDNN (MKL-DNN).

attnkit's rate includes its first (cold) step, PyTorch's excludes a warm-up step: the default of
50 steps (6 400 images) keeps that difference near 2 %.

With --in-process, both train in one process instead: the same pre-loaded batches and initial
weights, alternating rounds of --steps steps (who goes first alternates too), attnkit through
ImageModel + attnkit.train.AdamW without augmentation; the median of the per-round ratios is the
figure (machine load swings of a few seconds then hit both alike); on a machine loaded enough that
whole rounds stall, the ratio of the best rounds is the steadier figure, and it is printed too.

With --engines builtin,auto (--in-process), attnkit is timed once per conv2d engine in the same
rotation (attnkit.set_conv2d_engine), so the engines' ratios to PyTorch come from one run.

With --precisions f32,bf16 (--in-process), attnkit runs in each matmul precision
(attnkit.set_matmul_precision) and PyTorch in float32 and under torch.autocast("cpu",
dtype=torch.bfloat16), all four in one rotation; each attnkit entry is compared with PyTorch in the
same precision.

With --profile-torch, PyTorch's training step is broken down by op class instead (see
TORCH_PROFILE_CHILD).

Usage: scripts/experiments/cnn_speed.py [--attention cbam] [--threads 2] [--batch 128]
       [--images 6400] [--rounds 2] [--in-process [--steps 5] [--engines builtin,auto]
       [--precisions f32,bf16]]
       [--profile-torch]"""
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


# Shared by both child scripts: argv = [tests/python, cfg, threads, batch, n_images, ...]; the
# attnkit model with its initial weights, the torch copy with AdamW, the first n_images training
# images (normalised, [N, 1, 28, 28]) and one torch step on batch i.
CHILD_SETUP = r'''
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
x_np = ((np.asarray(x_all[:images], np.float32) / 255.0 - 0.286) / 0.353)[:, None].copy()
y_np = np.asarray(y_all[:images], np.int64)
x_all, y_all = torch.from_numpy(x_np), torch.from_numpy(y_np)
def step(i, autocast=False):
    x, y = x_all[i * batch:(i + 1) * batch], y_all[i * batch:(i + 1) * batch]
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = torch.nn.functional.cross_entropy(torch_cnn(p, buffers, x, cfg, True), y)
    loss.backward(); opt.step()
'''

TORCH_CHILD = CHILD_SETUP + r'''
step(0)  # warm-up
steps = images // batch
t = time.perf_counter()
for i in range(steps):
    step(i)
print(json.dumps({"images_per_second": steps * batch / (time.perf_counter() - t)}))
'''


# --in-process: both trainers in one process on the same 50 pre-loaded batches, the same initial
# weights, alternating rounds of a few steps each, so that the machine's load swings hit both
# alike. attnkit's step here is ImageModel forward/backward plus attnkit.train.AdamW (no data
# augmentation, as for PyTorch); the softmax cross-entropy gradient is computed in numpy.
IN_PROCESS_CHILD = CHILD_SETUP + r'''
from attnkit.train import AdamW
rounds, steps, warmup = (int(v) for v in sys.argv[6:9])
engines = sys.argv[9].split(",") if sys.argv[9] else []
precisions = sys.argv[10].split(",")
attnkit.set_num_threads(threads)
model.set_training(True)
names = model.parameter_names()
opt_a = AdamW({n: model.parameter(n) for n in names}, {n: model.gradient(n) for n in names},
              weight_decay=0.05)
n_batches = images // batch
rows = np.arange(batch)
def step_attnkit(i):
    sl = slice((i % n_batches) * batch, (i % n_batches + 1) * batch)
    model.zero_grad()
    logits = model.forward(x_np[sl])
    q = np.exp(logits - logits.max(axis=1, keepdims=True))
    q /= q.sum(axis=1, keepdims=True)
    q[rows, y_np[sl]] -= 1.0
    model.backward((q / batch).astype(np.float32))
    opt_a.step(1e-3)
def torch_in(precision):
    return lambda i: step(i % n_batches, autocast=precision == "bf16")
def attnkit_in(engine, precision):
    def run(i):
        if engine:
            attnkit.set_conv2d_engine(engine)
        attnkit.set_matmul_precision(precision)
        try:
            step_attnkit(i)
        finally:
            attnkit.set_matmul_precision("f32")
    return run
suffix = lambda pr: "_" + pr if len(precisions) > 1 else ""
order = [("attnkit" + ("_" + e if e else "") + suffix(pr), attnkit_in(e, pr)) for pr in precisions for e in engines or [""]]
order += [("torch" + suffix(pr), torch_in(pr)) for pr in precisions]
import os
print(json.dumps({"module": attnkit.__file__, "openblas": os.environ.get("OPENBLAS_CORETYPE", "")}), flush=True)
for i in range(warmup):
    for _, run in order:
        run(i)
done = warmup
for r in range(rounds):
    rate = {}
    rotated = order[r % len(order):] + order[:r % len(order)]  # who goes first rotates
    for name, run in rotated:
        t = time.perf_counter()
        for i in range(steps):
            run(done + i)
        rate[name] = steps * batch / (time.perf_counter() - t)
    done += steps
    print(json.dumps(rate), flush=True)
'''


# --profile-torch: PyTorch's step by op class (torch.autograd.profiler self CPU time over 6 steps),
# with the step's process CPU time measured outside the profiler (whose wall-clock times a loaded
# machine inflates): the classes' shares of that CPU time are the breakdown.
TORCH_PROFILE_CHILD = CHILD_SETUP + r'''
import collections
for i in range(3):
    step(i)
t = time.process_time()
for i in range(6):
    step(i)
cpu = (time.process_time() - t) / 6
with torch.autograd.profiler.profile() as prof:
    for i in range(6):
        step(i)
def op_class(name):
    if "convolution" in name: return "convolutions (forward and backward)"
    if "batch_norm" in name: return "batch norm"
    if "max_pool2d" in name: return "max pool"
    if name in ("aten::clamp_min", "aten::threshold_backward", "aten::relu"): return "ReLU"
    if name in ("aten::addcdiv_", "aten::sqrt") or "Optimizer" in name: return "AdamW (addcdiv, sqrt)"
    return "CBAM, residual adds, global pool, head, the rest"
share = collections.Counter()
for e in prof.key_averages():
    share[op_class(e.key)] += e.self_cpu_time_total
total = sum(share.values())
print(json.dumps({"step_cpu_ms": cpu * 1e3, "classes": {k: v / total for k, v in share.most_common()}}))
'''


PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable  # Debian torch


def child_env(threads):
    """The children's environment: the caller's, with the thread counts; OPENBLAS_CORETYPE=SkylakeX
    on AVX-512 CPUs unless the caller set one; build/python after the caller's PYTHONPATH, so
    PYTHONPATH=build-avx2/python times that build's module."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    if avx512():
        env.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT / "build" / "python")) if p)
    return env


def in_process(a, cfg):
    """Alternating rounds in one process; prints each round and the medians."""
    proc = subprocess.Popen([PYTHON, "-c", IN_PROCESS_CHILD, str(ROOT / "tests" / "python"), json.dumps(cfg),
                             str(a.threads), str(a.batch), str(50 * a.batch), str(a.rounds), str(a.steps), "2",
                             a.engines, a.precisions],
                            env=child_env(a.threads), stdout=subprocess.PIPE, text=True)
    precisions = a.precisions.split(",")
    suffix = lambda pr: "_" + pr if len(precisions) > 1 else ""
    engines = ["_" + e for e in a.engines.split(",")] if a.engines else [""]
    names = ["attnkit" + e + suffix(pr) for pr in precisions for e in engines]
    torch_of = {"attnkit" + e + suffix(pr): "torch" + suffix(pr) for pr in precisions for e in engines}
    torches = ["torch" + suffix(pr) for pr in precisions]
    rates = {n: [] for n in names + torches}
    ratios = {n: [] for n in names}
    lines = iter(proc.stdout)
    setup = json.loads(next(lines))
    print(f"attnkit module {setup['module']}; OPENBLAS_CORETYPE {setup['openblas'] or '(unset)'}", flush=True)
    for r, line in enumerate(lines):
        rate = json.loads(line)
        for n in rates:
            rates[n].append(rate[n])
        for n in names:
            ratios[n].append(rate[n] / rate[torch_of[n]])
        print(f"round {r + 1}: " + ", ".join(f"{n} {rate[n]:.0f}" for n in names + torches) +
              " images/s, ratio " + ", ".join(f"{ratios[n][-1]:.2f}x" for n in names), flush=True)
    if proc.wait() != 0:
        raise SystemExit(f"in-process child failed with status {proc.returncode}")
    med = lambda v: sorted(v)[len(v) // 2]
    for n in names:
        t = torch_of[n]
        print(f"CNN ({a.attention}, widths {a.widths}), batch {a.batch}, {a.threads} threads, in one process, "
              f"{a.rounds} rounds of {a.steps} steps each: {n} {med(rates[n]):.0f} images/s, PyTorch 1.13 "
              f"({t}) {med(rates[t]):.0f} images/s (medians); median of the per-round ratios {med(ratios[n]):.2f}x "
              f"(rounds {min(ratios[n]):.2f}-{max(ratios[n]):.2f}x); best rounds {max(rates[n]):.0f} vs "
              f"{max(rates[t]):.0f} images/s, {max(rates[n]) / max(rates[t]):.2f}x")


def profile_torch(a, cfg):
    """Prints PyTorch's step CPU time and its shares by op class (TORCH_PROFILE_CHILD)."""
    out = subprocess.run([PYTHON, "-c", TORCH_PROFILE_CHILD, str(ROOT / "tests" / "python"), json.dumps(cfg),
                          str(a.threads), str(a.batch), str(9 * a.batch)], env=child_env(a.threads), check=True,
                         capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    print(f"PyTorch 1.13 CNN ({a.attention}) training step, batch {a.batch}, {a.threads} threads: "
          f"{r['step_cpu_ms']:.1f} ms of process CPU time")
    for name, frac in r["classes"].items():
        print(f"  {name}: {100 * frac:.1f} % ({frac * r['step_cpu_ms']:.1f} ms)")


def torch_rate(cfg, threads, batch, images):
    out = subprocess.run([PYTHON, "-c", TORCH_CHILD, str(ROOT / "tests" / "python"), json.dumps(cfg),
                          str(threads), str(batch), str(images)], env=child_env(threads), check=True,
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
    ap.add_argument("--in-process", action="store_true",
                    help="both trainers in one process, alternating rounds of --steps steps")
    ap.add_argument("--steps", type=int, default=5, help="steps per round with --in-process")
    ap.add_argument("--engines", default="",
                    help="with --in-process: comma-separated conv2d engines (auto, builtin, onednn) timed as "
                         "separate attnkit entries in the same rotation (default: the process default)")
    ap.add_argument("--precisions", default="f32",
                    help="with --in-process: f32, bf16 or f32,bf16; bf16 runs attnkit with "
                         "set_matmul_precision('bf16') and PyTorch under torch.autocast('cpu', bfloat16), "
                         "each compared with PyTorch in the same precision")
    ap.add_argument("--profile-torch", action="store_true",
                    help="print PyTorch's step CPU time by op class (torch.autograd.profiler) and exit")
    a = ap.parse_args()
    cfg = {"model_type": "cnn", "attention": a.attention, "widths": [int(w) for w in a.widths.split(",")],
           "reduction": 8, "spatial_kernel": 7}
    if a.profile_torch:
        return profile_torch(a, cfg)
    if a.in_process:
        return in_process(a, cfg)
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
