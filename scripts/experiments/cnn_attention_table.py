#!/usr/bin/env python3
"""Fashion-MNIST test accuracy of the residual CNN with no channel attention, SE and CBAM at equal
epochs (same seed, schedule, augmentation and threads), as a Markdown table.

Each row is one `attnkit train cnn --attention A --epochs E --json` run on the 60 000 training
images, scored on the 10 000 test images; the table also gives the parameter count and the
training images/s of each run (the runs are sequential, so the machine's load may differ).

Usage: scripts/experiments/cnn_attention_table.py [--epochs 2] [--threads 2] [--out DIR]"""
import argparse
import json
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("ATTNKIT_CLI", str(ROOT / "build" / "attnkit"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="runs/cnn_attention")
    a = ap.parse_args()
    rows = []
    for attention in ("none", "se", "cbam"):
        cmd = ["train", "cnn", "--attention", attention, "--epochs", str(a.epochs), "--threads", str(a.threads),
               "--out", f"{a.out}/{attention}", "--overwrite", "--json"]
        print("build/attnkit " + " ".join(cmd), flush=True)
        j = json.loads(subprocess.run([CLI] + cmd, check=True, capture_output=True, text=True).stdout)
        rows.append((attention, j))
    print(f"\n| attention | parameters | test accuracy after {a.epochs} epochs | training min | images/s |")
    print("|---|---|---|---|---|")
    for attention, j in rows:
        print(f"| {attention} | {j['parameters']:,} | {j['test_accuracy']:.4f} | {j['train_seconds'] / 60:.1f} | "
              f"{j['images_per_second']:.0f} |")


if __name__ == "__main__":
    main()
