#!/usr/bin/python3
"""MHA → GQA/MQA conversion against training from scratch (issues 10 and 25), over several seeds.

For each seed: a small Llama-style MHA model (H query heads of --head-dim) is trained on Debian's
fortunes for --steps steps; it is converted to each Hkv of --kv by `attnkit convert-gqa` with mean
pooling, the group's first head and a random head of each group; each converted model is uptrained
(`attnkit train gpt --init`, a fresh optimizer) on each --fractions percentage of the base model's
training tokens; and a model with that Hkv is trained from scratch for the same total budget (base +
uptraining steps). Every model's validation loss (nats per byte, `attnkit eval`) is measured; the
table gives the mean ± the sample standard deviation over seeds, and the range.

Optionally (--context > 0): KV bytes per token (`kv-plan`) and decode ms/token at that context
(`bench generate`) of the MHA model and the scratch models of the first seed.

Usage: scripts/experiments/gqa_uptrain.py [--out runs/gqa_exp] [--steps 1200] [--seeds 1 2 3]
       [--heads 8 --head-dim 16] [--kv 4 2 1] [--fractions 5] [--jobs 2] [--context 16384]
Each process is single-threaded and niced (19); finished runs are reused when the script is re-run.
Prints a Markdown table (also written to OUT/table.md, and every number to OUT/results.json);
every CLI call is appended to OUT/commands.log.
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("ATTNKIT_CLI", os.path.join(ROOT, "build", "attnkit"))
METHODS = ["mean", "first", "random"]
BATCH, SEQ = 8, 128
COMMON = ["--batch", BATCH, "--seq", SEQ, "--threads", "1", "--quiet", "--eval-every", "0",
          "--checkpoint-every", "0"]
LOG = None


def run(args):
    """Runs `attnkit ARGS` at nice 19 (1 thread via the environment); logs it; returns stdout."""
    cmd = ["nice", "-n", "19", CLI, *map(str, args)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    with open(LOG, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n# exit {r.returncode}, {time.time() - t0:.1f} s\n")
    if r.returncode != 0:
        sys.exit(f"failed: attnkit {' '.join(map(str, args))}\n{r.stderr}")
    return r.stdout


def done(d):
    return os.path.exists(os.path.join(d, "model.safetensors"))


def config(a, kv):
    return {"vocab_size": 261, "hidden_size": a.heads * a.head_dim, "intermediate_size": a.ffn,
            "num_hidden_layers": a.layers, "num_attention_heads": a.heads, "num_key_value_heads": kv,
            "head_dim": a.head_dim, "max_position_embeddings": SEQ, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "tie_word_embeddings": True, "hidden_act": "silu"}


def train_scratch(a, out, kv, steps, seed):
    if not done(out):
        os.makedirs(out, exist_ok=True)
        cfg = out + ".config.json"
        with open(cfg, "w") as f:
            json.dump(config(a, kv), f)
        run(["train", "gpt", "--config", cfg, "--out", out, "--steps", steps, "--seed", seed, "--lr", a.lr,
             "--overwrite", *COMMON])
    return out


def uptrain(src, out, steps, seed):
    if not done(out):
        run(["train", "gpt", "--init", src, "--out", out, "--steps", steps, "--lr", "3e-4",
             "--min-lr", "1e-4", "--warmup", min(5, steps), "--seed", seed, "--overwrite", *COMMON])
    return out


def val_loss(model, windows):
    out = run(["eval", "--model", model, "--windows", windows])
    return float(re.search(r"loss ([0-9.]+)", out).group(1))


def stats(xs):
    """mean, sample standard deviation (0 for one value), min, max."""
    return {"mean": statistics.mean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            "min": min(xs), "max": max(xs), "values": xs}


def one_seed(a, seed, pool):
    """Trains, converts, uptrains and evaluates every model of one seed; returns {key: loss}."""
    p = lambda *n: os.path.join(a.out, f"seed{seed}", *n)
    up_steps = {f: -(-a.steps * f // 100) for f in a.fractions}
    jobs = [pool.submit(train_scratch, a, p("mha"), a.heads, a.steps, seed)]
    jobs += [pool.submit(train_scratch, a, p(f"scratch{kv}_{f}"), kv, a.steps + up_steps[f], seed)
             for kv in a.kv for f in a.fractions]
    for j in jobs:
        j.result()
    convs = {}
    for kv in a.kv:
        for m in METHODS:
            d = p(f"conv_{m}{kv}")
            if not done(d):
                run(["convert-gqa", "--in", p("mha"), "--out", d, "--kv-heads", kv, "--method", m, "--seed", seed])
            convs[(m, kv)] = d
    ups = {(m, kv, f): pool.submit(uptrain, d, p(f"up{f}_{m}{kv}"), up_steps[f], seed + 100)
           for (m, kv), d in convs.items() for f in a.fractions}
    models = {("base",): p("mha")}
    models.update({("conv", m, kv): d for (m, kv), d in convs.items()})
    models.update({("up", m, kv, f): j.result() for (m, kv, f), j in ups.items()})
    models.update({("scratch", kv, f): p(f"scratch{kv}_{f}") for kv in a.kv for f in a.fractions})
    evals = {k: pool.submit(val_loss, d, a.windows) for k, d in models.items()}
    return {k: j.result() for k, j in evals.items()}, up_steps


def fmt(s):
    return f"{s['mean']:.4f} ± {s['std']:.4f}"


def main():
    global LOG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "gqa_exp"))
    ap.add_argument("--steps", type=int, default=1200, help=f"base training steps of {BATCH} × {SEQ} tokens")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--heads", type=int, default=8, help="query heads H")
    ap.add_argument("--head-dim", type=int, default=16, help="head dimension D (model width H·D)")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--ffn", type=int, default=344, help="SwiGLU hidden width")
    ap.add_argument("--lr", type=float, default=1e-3, help="peak learning rate of base and scratch training")
    ap.add_argument("--kv", type=int, nargs="+", default=None, help="KV heads after conversion (default H/2 H/4 1)")
    ap.add_argument("--fractions", type=int, nargs="+", default=[5], help="uptraining tokens, %% of the base's")
    ap.add_argument("--windows", type=int, default=200, help=f"validation windows of {SEQ} tokens")
    ap.add_argument("--jobs", type=int, default=2, help="processes at once (1 thread each)")
    ap.add_argument("--context", type=int, default=16384, help="context of the decode timing (0: skip it)")
    a = ap.parse_args()
    a.kv = a.kv or sorted({a.heads // 2, a.heads // 4, 1} - {0}, reverse=True)
    if any(a.heads % kv for kv in a.kv):
        sys.exit("gqa_uptrain: every --kv must divide --heads")
    os.makedirs(a.out, exist_ok=True)
    LOG = os.path.join(a.out, "commands.log")
    t0 = time.time()
    per_seed = {}
    with cf.ThreadPoolExecutor(a.jobs) as pool:
        for seed in a.seeds:
            per_seed[seed], up_steps = one_seed(a, seed, pool)
    minutes = (time.time() - t0) / 60
    keys = per_seed[a.seeds[0]].keys()
    agg = {k: stats([per_seed[s][k] for s in a.seeds]) for k in keys}
    tokens = a.steps * BATCH * SEQ
    lines = [f"Base: MHA (H = Hkv = {a.heads}, D = {a.head_dim}, L = {a.layers}, C = {a.heads * a.head_dim}), "
             f"{a.steps} steps × {BATCH * SEQ} tokens = {tokens} tokens of fortunes, lr {a.lr}. Uptraining: "
             + ", ".join(f"{f} % = {up_steps[f]} steps" for f in a.fractions) +
             " (lr 3e-4 → 1e-4, fresh optimizer). Scratch: the same Hkv trained for base + uptraining steps. "
             f"Validation loss in nats per byte over {a.windows} windows of {SEQ} held-out tokens; "
             f"mean ± sample standard deviation over seeds {', '.join(map(str, a.seeds))}.",
             "",
             f"MHA base: {fmt(agg[('base',)])}.",
             "",
             "| Hkv | method | after conversion | " +
             " | ".join(f"after {f} % uptraining | scratch, same total ({f} %) | gap to scratch ({f} %)"
                        for f in a.fractions) + " |",
             "|---|---|---|" + "---|---|---|" * len(a.fractions)]
    gaps = {}
    for kv in a.kv:
        for m in METHODS:
            cells = [f"{kv}{' (MQA)' if kv == 1 else ''}", m, fmt(agg[("conv", m, kv)])]
            for f in a.fractions:
                gap = stats([per_seed[s][("up", m, kv, f)] - per_seed[s][("scratch", kv, f)] for s in a.seeds])
                gaps[(m, kv, f)] = gap
                cells += [fmt(agg[("up", m, kv, f)]), fmt(agg[("scratch", kv, f)]),
                          f"{gap['mean']:+.4f} ± {gap['std']:.4f}"]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Per seed (after the largest uptraining), method ranking:"]
    f = max(a.fractions)
    for s in a.seeds:
        for kv in a.kv:
            order = sorted(METHODS, key=lambda m: per_seed[s][("up", m, kv, f)])
            lines.append(f"- seed {s}, Hkv {kv}: " + " < ".join(
                f"{m} {per_seed[s][('up', m, kv, f)]:.4f}" for m in order))
    if a.context:
        def kv_bytes(kv):
            j = json.loads(run(["kv-plan", "--layers", a.layers, "--heads", a.heads, "--kv-heads", kv,
                                "--head-dim", a.head_dim, "--dtype", "f32", "--context", a.context, "--json"]))
            return j["bytes_per_token"]

        def decode_ms(model):
            out = run(["bench", "generate", "--model", model, "--context", a.context, "--tokens", 64,
                       "--threads", 1, "--json"])
            return json.loads(out)["ms_per_token"]
        s0, f0 = a.seeds[0], a.fractions[0]
        lines += ["", f"| Hkv | KV bytes/token (f32) | decode ms/token at {a.context} (seed {s0}) |", "|---|---|---|"]
        for kv in [a.heads] + a.kv:
            model = os.path.join(a.out, f"seed{s0}", "mha" if kv == a.heads else f"scratch{kv}_{f0}")
            lines.append(f"| {kv} | {kv_bytes(kv)} | {decode_ms(model):.3f} |")
    lines += ["", f"Wall time of this invocation: {minutes:.1f} min ({a.jobs} single-threaded niced jobs at a "
              "time; runs already in OUT are reused, not retrained)."]
    table = "\n".join(lines)
    with open(os.path.join(a.out, "table.md"), "w") as fh:
        fh.write(table + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as fh:
        json.dump({"args": vars(a), "up_steps": up_steps,
                   "per_seed": {s: {"/".join(map(str, k)): v for k, v in r.items()} for s, r in per_seed.items()},
                   "stats": {"/".join(map(str, k)): v for k, v in agg.items()},
                   "gap_to_scratch": {"/".join(map(str, k)): v for k, v in gaps.items()}}, fh, indent=1)
    print(table)


if __name__ == "__main__":
    main()
