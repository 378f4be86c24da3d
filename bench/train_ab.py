#!/usr/bin/env python3
"""Compares `attnkit train MODEL` throughput of two or more attnkit binaries in alternating rounds.

Each round runs every binary once, in forward order on even rounds and reverse order on odd ones,
so slow minutes on a shared machine hit all binaries alike. Every run trains into a fresh
temporary `--out` directory (removed afterwards) and its throughput is read from that run's
`log.csv`, not from stdout:

    gpt         median `tokens_per_s` of the logged steps after the first 5 (warm-up)
    bert        median real tokens/s (`real_tokens` / `seconds`) of the steps after the first 5
    vit, cnn,   median `images_per_second` of the epochs (one epoch by default)
    deformable

Prints, per binary, the median throughput over rounds, its min-max, and the median of the
per-round ratios to the first binary (binary / first within each round: the figure to report).

    bench/train_ab.py old/attnkit new/attnkit --model gpt --rounds 6
    bench/train_ab.py old/attnkit new/attnkit --model cnn --rounds 4 -- --train-limit 6400 --epochs 1

Arguments after `--` replace the model's default arguments entirely (give all that you want; a
bare `--` leaves attnkit's own defaults); `--out` is always the script's. The defaults:

    gpt   --preset small --steps 30 --batch 8 --seq 256 --eval-every 0 --checkpoint-every 0 --quiet
    bert  --preset mini --steps 30 --batch 16 --seq 128 --eval-every 0 --checkpoint-every 0 --quiet
    vit, cnn, deformable  --train-limit 12800 --eval-limit 100 --epochs 1
"""
import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench_common import parse_ab

GPT_LIKE = ("--eval-every", "0", "--checkpoint-every", "0", "--quiet")
IMAGES = ("--train-limit", "12800", "--eval-limit", "100", "--epochs", "1")
DEFAULTS = {
    "gpt": ("--preset", "small", "--steps", "30", "--batch", "8", "--seq", "256", *GPT_LIKE),
    "bert": ("--preset", "mini", "--steps", "30", "--batch", "16", "--seq", "128", *GPT_LIKE),
    "vit": IMAGES,
    "cnn": IMAGES,
    "deformable": IMAGES,
}
WARMUP_STEPS = 5  # gpt and bert: logged steps left out of the median
UNIT = {"gpt": "tokens/s", "bert": "real tok/s"}  # the image models: images/s


def column(rows, name, where):
    """The values of column `name` in the csv rows (dicts) as floats; ValueError naming `where`
    when the column is missing or a value is not a number."""
    if not rows or name not in rows[0]:
        raise ValueError(f"{where} has no column {name}")
    try:
        return [float(r[name]) for r in rows]
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: column {name} holds a non-number") from e


def throughput(model, log_path):
    """The run's throughput from its log.csv (see the module docstring); ValueError when the file
    is missing, lacks the column, has too few rows or a throughput that is not positive."""
    try:
        with open(log_path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ValueError(f"cannot read log.csv: {e.strerror or e}") from e
    where = "log.csv"
    if model in ("gpt", "bert"):
        if model == "gpt":
            values = column(rows, "tokens_per_s", where)
        else:
            tokens, seconds = column(rows, "real_tokens", where), column(rows, "seconds", where)
            values = [t / s if s > 0 else 0.0 for t, s in zip(tokens, seconds)]
        if len(values) <= WARMUP_STEPS:
            raise ValueError(f"log.csv has {len(values)} steps; more than {WARMUP_STEPS} are needed "
                             f"(the first {WARMUP_STEPS} are warm-up)")
        values = values[WARMUP_STEPS:]
    else:
        values = column(rows, "images_per_second", where)
    value = statistics.median(values)
    if not value > 0:
        raise ValueError(f"log.csv gives throughput {value}")
    return value


def run_once(binary, model, args):
    """One `attnkit train MODEL --out TMP ARGS` run of `binary` in a fresh temporary directory;
    returns its throughput. Raises ValueError when it cannot run, fails or logs no throughput."""
    tmp = tempfile.mkdtemp(prefix="train_ab-")
    try:
        cmd = [binary, "train", model, "--out", os.path.join(tmp, "run"), *args]
        try:
            done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        except OSError as e:
            raise ValueError(f"cannot run {binary}: {e.strerror or e}") from e
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            raise ValueError(f"{binary} train {model} failed (exit {done.returncode}): "
                             f"{lines[-1] if lines else 'no stderr'}")
        try:
            return throughput(model, os.path.join(tmp, "run", "log.csv"))
        except ValueError as e:
            raise ValueError(f"{binary} train {model}: {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Arguments after -- replace the model's defaults for "
                                        "`attnkit train MODEL` entirely (see the module docstring).")
    ap.add_argument("--model", required=True, choices=list(DEFAULTS), help="what to train")
    opts, rest = parse_ab(ap, argv)
    args = list(DEFAULTS[opts.model]) if rest is None else rest
    runs = {b: [] for b in opts.binaries}
    try:
        if any(a == "--out" or a.startswith("--out=") for a in args):
            raise ValueError("--out is the script's (a fresh temporary directory per run)")
        for b in opts.binaries:
            if shutil.which(b) is None:
                raise ValueError(f"not an executable: {b}")
        for r in range(opts.rounds):
            for b in opts.binaries if r % 2 == 0 else opts.binaries[::-1]:
                runs[b].append(run_once(b, opts.model, args))
    except ValueError as e:
        print(f"train_ab: {e}", file=sys.stderr)
        return 1
    unit = UNIT.get(opts.model, "images/s")
    first = runs[opts.binaries[0]]
    w = max(32, *(len(b) for b in opts.binaries))
    print(f"{opts.rounds} alternating rounds of `attnkit train {opts.model} {' '.join(args)}`")
    print(f"medians over rounds; min-max over rounds; ratio = binary / {opts.binaries[0]} within a round")
    print(f"{'binary':<{w}} {unit:>12} {'min':>10} {'max':>10} {'ratio':>7}")
    for b, values in runs.items():
        ratio = statistics.median(v / f for v, f in zip(values, first))
        print(f"{b:<{w}} {statistics.median(values):>12.1f} {min(values):>10.1f} {max(values):>10.1f} "
              f"{ratio:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
