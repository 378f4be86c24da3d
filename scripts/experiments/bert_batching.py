#!/usr/bin/env python3
"""Benchmark of BERT batching strategies on the same examples: for pad, bucket and pack, train the
same model for the same steps (same examples: step s uses examples s*B..s*B+B-1; bucketing regroups
them within pools of 8 steps) and report the fraction of computed tokens that are real and the
training throughput in real tokens/s and computed tokens/s (first 3 steps skipped as warm-up).

With --repeat N the three strategies run N times, interleaved (pad, bucket, pack, pad, ...), and
the table also gives the "per-step minimum" throughput: each step's fastest time over the N runs,
summed. Steps are deterministic (same examples, same work), so the minimum filters out the time
other processes took from a shared machine; compare strategies by it when the machine is loaded.

Usage: scripts/experiments/bert_batching.py [--steps 40] [--batch 16] [--preset mini] [--threads 2]
                                            [--repeat 1]
Writes runs/bert-batching-<strategy>[-<run>]/ and prints a Markdown table."""
import argparse
import os
import csv
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("ATTNKIT_CLI", str(ROOT / "build" / "attnkit"))  # the attnkit binary to run
STRATEGIES = ("pad", "bucket", "pack")


def run(strategy, args, out):
    cmd = [CLI, "train", "bert", "--objective", "mlm", "--preset", args.preset,
           "--batching", strategy, "--steps", str(args.steps), "--batch", str(args.batch),
           "--seq", str(args.seq), "--eval-every", "0", "--eval-examples", "16",
           "--checkpoint-every", "0", "--threads", str(args.threads), "--quiet", "--overwrite", "--out", str(out)]
    print(" ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return list(csv.DictReader(open(out / "log.csv")))[3:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--preset", default="mini")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="interleaved runs of each strategy")
    args = ap.parse_args()
    logs = {s: [] for s in STRATEGIES}
    for r in range(args.repeat):
        for strategy in STRATEGIES:
            name = f"bert-batching-{strategy}" + (f"-{r + 1}" if args.repeat > 1 else "")
            logs[strategy].append(run(strategy, args, ROOT / "runs" / name))
    rows = []
    for s in STRATEGIES:
        first = logs[s][0]
        real = sum(int(x["real_tokens"]) for x in first)
        computed = sum(int(x["computed_tokens"]) for x in first)
        per_run = [sum(float(x["seconds"]) for x in log) for log in logs[s]]
        best = sum(min(float(log[i]["seconds"]) for log in logs[s]) for i in range(len(first)))
        rows.append((s, real / computed, [real / t for t in per_run], real / best, computed / best,
                     best / len(first)))
    print("\n| batching | real / computed tokens | real tokens/s (each run) | real tokens/s, "
          "per-step min | computed tokens/s, per-step min | s/step, per-step min |")
    print("|---|---|---|---|---|---|")
    for s, frac, rts, rt, ct, sp in rows:
        print(f"| {s} | {frac:.3f} | {', '.join(f'{x:.0f}' for x in rts)} | {rt:.0f} | {ct:.0f} | {sp:.3f} |")
    pad = rows[0]
    for s, frac, _, rt, _, _ in rows[1:]:
        print(f"{s}: real tokens/s (per-step min) {rt / pad[3]:.3f}x pad's; real fraction "
              f"{frac / pad[1]:.3f}x pad's")


if __name__ == "__main__":
    main()
