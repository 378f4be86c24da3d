#!/usr/bin/env python3
"""Fashion-MNIST test accuracy of the residual CNN with no channel attention, SE and CBAM, over
several seeds, at equal epochs and at equal training time, as a Markdown table.

Equal epochs: one `attnkit train cnn --attention A --epochs E --seed S --json` run per attention and
seed (same schedule, augmentation and threads). Equal time: one run per attention and seed with
`--max-minutes T --anneal-by-time` (the cosine decay follows the clock and ends at T), where T is
--minutes or, by default, the mean training time of the CBAM runs at equal epochs. Every run is
scored on the 10 000 test images (or --eval-limit); the table gives mean ± sample standard
deviation over seeds, the range, the parameter count, and the images each run trained on.

Runs are single-threaded by default and started --jobs at a time at nice 19 (--nice), so on a
shared machine the equal-time runs share the load they meet; the images trained on show what
each run got. Every command is appended to OUT/commands.log; all numbers go to OUT/results.json.

Usage: scripts/experiments/cnn_attention_table.py [--epochs 2] [--seeds 1 2 3] [--train-limit 0]
       [--threads 1] [--jobs 2] [--minutes 0] [--no-equal-time] [--out runs/cnn_attention]"""
import argparse
import concurrent.futures as cf
import json
import os
import pathlib
import statistics
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("ATTNKIT_CLI", str(ROOT / "build" / "attnkit"))
ATTENTIONS = ("none", "se", "cbam")


def train(a, attention, seed, budget):
    """One `train cnn` run (reused if OUT/<run>/result.json exists); returns its JSON result."""
    name = f"{budget}_{attention}_seed{seed}"
    out = os.path.join(a.out, name)
    done = os.path.join(a.out, name + ".json")
    if os.path.exists(done):
        return json.load(open(done))
    cmd = ["train", "cnn", "--attention", attention, "--seed", seed, "--threads", a.threads, "--out", out,
           "--overwrite", "--json"]
    cmd += ["--epochs", a.epochs] if budget == "epochs" else ["--epochs", 1000, "--max-minutes", a.minutes,
                                                              "--anneal-by-time"]
    if a.train_limit:
        cmd += ["--train-limit", a.train_limit]
    if a.eval_limit:
        cmd += ["--eval-limit", a.eval_limit]
    cmd = ["nice", "-n", str(a.nice), CLI] + [str(c) for c in cmd]
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    with open(os.path.join(a.out, "commands.log"), "a") as f:
        f.write(f"$ {' '.join(cmd)}\n# exit {p.returncode}, {time.time() - t0:.1f} s\n")
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr}")
    j = json.loads(p.stdout)
    j["images_trained"] = sum(e["images_per_second"] * e["seconds"] for e in j["epochs"])
    json.dump(j, open(done, "w"), indent=1)
    return j


def stats(xs):
    return {"mean": statistics.mean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "min": min(xs), "max": max(xs), "values": xs}


def run_all(a, pool, budget):
    jobs = {(att, s): pool.submit(train, a, att, s, budget) for s in a.seeds for att in ATTENTIONS}
    return {k: j.result() for k, j in jobs.items()}


def table(a, results, budget, title):
    lines = [f"\n{title}\n", "| attention | parameters | test accuracy (mean ± std) | range | per seed | "
             "training min (mean) | images trained (mean) |", "|---|---|---|---|---|---|---|"]
    summary = {}
    for att in ATTENTIONS:
        rs = [results[(att, s)] for s in a.seeds]
        acc = stats([r["test_accuracy"] for r in rs])
        summary[att] = acc
        lines.append(f"| {att} | {rs[0]['parameters']:,} | {acc['mean']:.4f} ± {acc['std']:.4f} | "
                     f"{acc['min']:.4f}–{acc['max']:.4f} | {' / '.join(f'{x:.4f}' for x in acc['values'])} | "
                     f"{statistics.mean(r['train_seconds'] for r in rs) / 60:.2f} | "
                     f"{statistics.mean(r['images_trained'] for r in rs):,.0f} |")
    return lines, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--train-limit", type=int, default=0, help="train on the first N images (0: all 60 000)")
    ap.add_argument("--eval-limit", type=int, default=0, help="score on the first N test images (0: all 10 000)")
    ap.add_argument("--threads", type=int, default=1, help="threads per run")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once")
    ap.add_argument("--nice", type=int, default=19)
    ap.add_argument("--minutes", type=float, default=0,
                    help="equal-time budget per run (0: the mean CBAM training time at equal epochs)")
    ap.add_argument("--no-equal-time", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "runs" / "cnn_attention"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with cf.ThreadPoolExecutor(a.jobs) as pool:
        by_epochs = run_all(a, pool, "epochs")
        if not a.minutes:
            a.minutes = round(statistics.mean(by_epochs[("cbam", s)]["train_seconds"] for s in a.seeds) / 60, 2)
        by_time = None if a.no_equal_time else run_all(a, pool, "time")
    data = f"the first {a.train_limit} training images" if a.train_limit else "all 60 000 training images"
    lines, s_epochs = table(a, by_epochs, "epochs", f"Equal epochs: {a.epochs} epochs on {data}, seeds "
                            f"{', '.join(map(str, a.seeds))}, {a.threads} thread(s) per run, {a.jobs} runs at once.")
    s_time = None
    if by_time:
        more, s_time = table(a, by_time, "time", f"Equal time: {a.minutes} min of training per run "
                             "(--max-minutes, --anneal-by-time), same data and seeds.")
        lines += more
    text = "\n".join(lines)
    open(os.path.join(a.out, "table.md"), "w").write(text + "\n")
    key = lambda d: {f"{att}/seed{s}": r for (att, s), r in d.items()} if d else None
    json.dump({"args": vars(a), "equal_epochs": key(by_epochs), "equal_time": key(by_time),
               "summary": {"equal_epochs": s_epochs, "equal_time": s_time}},
              open(os.path.join(a.out, "results.json"), "w"), indent=1)
    print(text)


if __name__ == "__main__":
    main()
