#!/usr/bin/env python3
"""Benchmark of BERT batching strategies on the same examples: for pad, bucket and pack, train the
same model for the same steps (same examples: step s uses examples s*B..s*B+B-1; bucketing regroups
them within pools of 8 steps) and report the fraction of computed tokens that are real and the
training throughput in real tokens/s and computed tokens/s (first 3 steps skipped as warm-up).

Usage: scripts/experiments/bert_batching.py [--steps 40] [--batch 16] [--preset mini] [--threads 2]
Writes runs/bert-batching-<strategy>/ and prints a Markdown table."""
import argparse
import os
import csv
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("ATTNKIT_CLI", str(ROOT / "build" / "attnkit"))  # the attnkit binary to run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--preset", default="mini")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for strategy in ("pad", "bucket", "pack"):
        out = ROOT / "runs" / f"bert-batching-{strategy}"
        cmd = [CLI, "train", "bert", "--objective", "mlm", "--preset", args.preset,
               "--batching", strategy, "--steps", str(args.steps), "--batch", str(args.batch),
               "--seq", str(args.seq), "--eval-every", "0", "--eval-examples", "16",
               "--checkpoint-every", "0", "--threads", str(args.threads), "--quiet", "--out", str(out)]
        print(" ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        log = list(csv.DictReader(open(out / "log.csv")))[3:]
        real = sum(int(r["real_tokens"]) for r in log)
        computed = sum(int(r["computed_tokens"]) for r in log)
        seconds = sum(float(r["seconds"]) for r in log)
        rows.append((strategy, real / computed, real / seconds, computed / seconds, seconds / len(log)))
    print("\n| batching | real / computed tokens | real tokens/s | computed tokens/s | s/step |")
    print("|---|---|---|---|---|")
    for s, frac, rt, ct, sp in rows:
        print(f"| {s} | {frac:.3f} | {rt:.0f} | {ct:.0f} | {sp:.3f} |")
    pad = rows[0]
    for s, frac, rt, _, _ in rows[1:]:
        print(f"{s}: real tokens/s {rt / pad[2]:.2f}x pad's; real fraction {frac / pad[1]:.2f}x pad's")


if __name__ == "__main__":
    main()
