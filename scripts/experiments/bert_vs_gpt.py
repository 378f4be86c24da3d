#!/usr/bin/env python3
"""BERT masked LM vs GPT causal LM at equal training compute on Debian's fortunes.

Both models have the same width and depth (hidden 128, 4 layers, 4 heads of 32, context 128;
GPT's SwiGLU width 344 ≈ 8C/3 matches BERT's 4C GELU MLP in parameters and FLOPs) and train for
the same steps on the same number of computed tokens per step (GPT: 16 windows of 128; BERT:
packed rows of 128, examples per step chosen so the packed tokens match). Neither uses dropout.
Reports the fraction of positions that carry a loss and each model's validation loss on its own
objective, then fine-tunes the BERT on the fortune-file task and reports accuracy vs the
majority baseline.

Usage: scripts/experiments/bert_vs_gpt.py [--steps 400] [--threads 2]"""
import argparse
import os
import csv
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("ATTNKIT_CLI", str(ROOT / "build" / "attnkit"))  # the attnkit binary to run


def run(cmd):
    print("build/attnkit " + " ".join(cmd), flush=True)
    return subprocess.run([CLI] + cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--bert-batch", type=int, default=24)
    ap.add_argument("--finetune-steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "runs"), help="directory for the three model directories")
    ap.add_argument("--eval-windows", type=int, default=400, help="GPT validation windows (BERT: 5x examples)")
    a = ap.parse_args()
    runs = pathlib.Path(a.out)
    common = ["--steps", str(a.steps), "--seq", "128", "--checkpoint-every", "0", "--threads", str(a.threads),
              "--quiet", "--warmup", str(min(30, max(1, a.steps // 10))), "--overwrite"]
    run(["train", "gpt", "--config", str(ROOT / "scripts/experiments/gpt_mini.json"), "--data", "fortunes",
         "--batch", "16", "--eval-every", "0", "--out", str(runs / "cmp-gpt")] + common)
    run(["train", "bert", "--objective", "mlm", "--preset", "mini", "--batching", "pack", "--dropout", "0",
         "--batch", str(a.bert_batch), "--eval-every", "0", "--eval-examples", "16",
         "--out", str(runs / "cmp-bert")] + common)
    gpt_eval = run(["eval", "--model", str(runs / "cmp-gpt"), "--data", "fortunes", "--windows", str(a.eval_windows)])
    bert_eval = run(["eval", "--model", str(runs / "cmp-bert"), "--data", "fortunes", "--windows", str(5 * a.eval_windows)])
    print(gpt_eval.strip())
    print(bert_eval.strip())
    gpt_log = list(csv.DictReader(open(runs / "cmp-gpt" / "log.csv")))
    bert_log = list(csv.DictReader(open(runs / "cmp-bert" / "log.csv")))
    gpt_tokens = 16 * 128 * len(gpt_log)
    bert_computed = sum(int(r["computed_tokens"]) for r in bert_log)
    bert_real = sum(int(r["real_tokens"]) for r in bert_log)
    bert_loss_pos = sum(int(r["loss_positions"]) for r in bert_log)
    gpt_val = float(re.search(r"loss ([0-9.]+)", gpt_eval).group(1))
    bert_val = float(re.search(r"masked-LM loss ([0-9.]+)", bert_eval).group(1))
    print("\n| model | steps | computed tokens | positions with a loss | validation loss (own objective, nats/byte) |")
    print("|---|---|---|---|---|")
    print(f"| GPT (causal LM) | {len(gpt_log)} | {gpt_tokens} | {gpt_tokens} (100 %) | {gpt_val:.3f} (next byte) |")
    print(f"| BERT (masked LM) | {len(bert_log)} | {bert_computed} ({bert_real} real) | {bert_loss_pos} "
          f"({100 * bert_loss_pos / bert_real:.1f} % of real tokens) | {bert_val:.3f} (masked byte) |")
    if a.finetune_steps <= 0:
        return
    ft = run(["finetune", "bert", "--task", "fortune-file", "--init", str(runs / "cmp-bert"), "--steps",
              str(a.finetune_steps), "--batch", "16", "--seq", "128", "--eval-every", "0", "--checkpoint-every", "0",
              "--threads", str(a.threads), "--quiet", "--overwrite", "--out", str(runs / "cmp-bert-ft")])
    print(ft.strip())


if __name__ == "__main__":
    main()
