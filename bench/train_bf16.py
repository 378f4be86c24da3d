#!/usr/bin/env python3
"""bf16 mixed-precision GPT training, speed and accuracy cost, in one run.

attnkit f32 vs `--precision bf16` vs PyTorch 1.13 f32 vs PyTorch's
torch.autocast("cpu", dtype=torch.bfloat16).

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/train_bf16.py [--preset small]
       [--steps 20] [--rounds 3] [--threads 2] [--accuracy-steps 200] [--accuracy-threads 1]
       [--accuracy-of attnkit,torch] [--skip-speed]

Speed: tokens/s of the four, measured in --rounds alternating rounds (the order rotates each
round), each the median of steps 4..--steps (bench/train_throughput.py's models, random tokens);
the table gives the median over rounds and the ratio of medians of per-round ratios.
Accuracy: --accuracy-steps optimizer steps of each on Debian's fortunes with the same seed, so the
f32 and bf16 runs of one framework start from the same weights and see the same windows:
attnkit through `attnkit train gpt --seed 1` (its warmup + cosine schedule; validation loss of
its own held-out documents, 16 windows, evaluated in the run's precision and again in f32 by
`attnkit eval`); PyTorch with the windows of attnkit.train's sample_batch over the fortunes files'
bytes (the first 90 % train, the rest held out), AdamW at lr 1e-3. Reported: the mean training
loss of the last 20 steps and the held-out loss. Frameworks differ in data split, schedule and
initialisation, so compare f32 with bf16 within a framework, not across.
"""
import argparse
import csv
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_throughput as tt  # noqa: E402


def attnkit_accuracy(args, precision):
    """Training losses and the held-out loss (in the run's precision, and in f32) of one run."""
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.run([tt.CLI, "train", "gpt", "--preset", args.preset, "--steps", str(args.accuracy_steps),
                              "--batch", str(args.batch), "--seq", str(args.seq), "--out", out, "--seed", "1",
                              "--eval-every", "0", "--checkpoint-every", "0", "--quiet",
                              "--threads", str(args.accuracy_threads), "--precision", precision],
                             check=True, capture_output=True, text=True, env=tt.blas_env(args.blas_attnkit))
        val = float(re.search(r"validation loss ([0-9.]+)", run.stdout).group(1))
        with open(os.path.join(out, "log.csv")) as f:
            losses = [float(r["loss"]) for r in csv.DictReader(f)]
        ev = subprocess.run([tt.CLI, "eval", "--model", out, "--windows", "16"], check=True, capture_output=True,
                            text=True, env=tt.blas_env(args.blas_attnkit))
        val_f32 = float(re.search(r"loss ([0-9.]+)", ev.stdout).group(1))
    return losses, val, val_f32


def fortune_tokens():
    from attnkit import _attnkit
    files = sorted(p for p in glob.glob("/usr/share/games/fortunes/*")
                   if os.path.isfile(p) and not os.path.islink(p) and not p.endswith((".dat", ".u8")))
    data = b"".join(open(p, "rb").read() for p in files)
    return _attnkit._train.encode(data)


def torch_accuracy(args, cfg, autocast):
    import numpy as np
    import torch
    from attnkit import _attnkit
    tokens = fortune_tokens()
    cut = int(len(tokens) * 0.9)
    train, held = tokens[:cut], tokens[cut:]
    batches = lambda s: torch.from_numpy(
        _attnkit._train.sample_batch(train, args.batch, args.seq, 1, s).astype(np.int64))
    steps, args.steps = args.steps, args.accuracy_steps
    threads, args.threads = args.threads, args.accuracy_threads
    run = tt.torch_trainer(args, cfg, autocast=autocast, batches=batches)
    _, losses = run()
    args.steps, args.threads = steps, threads
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        held_losses = [float(run.forward(torch.from_numpy(
            _attnkit._train.sample_batch(held, args.batch, args.seq, 2, s).astype(np.int64)))) for s in range(2)]
    return losses, statistics.mean(held_losses)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tt.add_run_args(ap, rounds=3)
    ap.add_argument("--accuracy-steps", type=int, default=200, help="0 = skip the accuracy runs")
    ap.add_argument("--accuracy-threads", type=int, default=1)
    ap.add_argument("--accuracy-of", default="attnkit,torch", help="which frameworks' accuracy runs")
    ap.add_argument("--skip-speed", action="store_true")
    args = ap.parse_args()
    args.blas_attnkit = tt.shared_openblas_setup(ap, args)
    import torch
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)")
    import attnkit.train
    cfg = attnkit.train.gpt_preset(args.preset)
    names = ["attnkit f32", "attnkit bf16", "PyTorch f32", "PyTorch bf16 autocast"]
    if not args.skip_speed:
        torch_f32, torch_bf16 = tt.torch_trainer(args, cfg), tt.torch_trainer(args, cfg, autocast=True)
        runs = [lambda: tt.attnkit_tokens_per_s(args)[0], lambda: tt.attnkit_tokens_per_s(args, "bf16")[0],
                torch_f32, torch_bf16]
        rounds = []
        for r in range(args.rounds):
            order = [(i + r) % 4 for i in range(4)]
            rates = [0.0] * 4
            for i in order:
                rates[i] = runs[i]()
            rounds.append(rates)
            print(f"  round {r + 1} (load {os.getloadavg()[0]:.2f}): " +
                  ", ".join(f"{n} {x:.0f}" for n, x in zip(names, rates)) + " tokens/s", file=sys.stderr)
        med = [statistics.median(rd[i] for rd in rounds) for i in range(4)]
        ratio = lambda a, b: statistics.median(rd[a] / rd[b] for rd in rounds)
        print(f"GPT preset {args.preset}, batch {args.batch}, context {args.seq}, {args.threads} threads, "
              f"{args.rounds} alternating rounds, torch {torch.__version__}")
        for n, x in zip(names, med):
            print(f"  {n:24s} {x:8.0f} tokens/s")
        print(f"  attnkit bf16 / attnkit f32  {ratio(1, 0):.2f}x   PyTorch bf16 / PyTorch f32  {ratio(3, 2):.2f}x")
        print(f"  attnkit f32 / PyTorch f32   {ratio(0, 2):.2f}x   attnkit bf16 / PyTorch bf16 {ratio(1, 3):.2f}x")
    if args.accuracy_steps > 0:
        print(f"accuracy: {args.accuracy_steps} steps, seed 1, {args.accuracy_threads} thread(s) per run")
        for precision in ["f32", "bf16"] if "attnkit" in args.accuracy_of else []:
            losses, val, val_f32 = attnkit_accuracy(args, precision)
            print(f"  attnkit {precision:5s} train loss (mean of last 20 steps) {statistics.mean(losses[-20:]):.4f}, "
                  f"validation {val:.4f} (evaluated in f32: {val_f32:.4f})", flush=True)
        for autocast in [False, True] if "torch" in args.accuracy_of else []:
            losses, held = torch_accuracy(args, cfg, autocast)
            print(f"  PyTorch {'bf16' if autocast else 'f32 ':5s} train loss (mean of last 20 steps) "
                  f"{statistics.mean(losses[-20:]):.4f}, held-out {held:.4f}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1/5/15 min)")


if __name__ == "__main__":
    sys.exit(main())
