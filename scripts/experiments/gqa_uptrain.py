#!/usr/bin/python3
"""MHA → GQA experiment (issue 10): a tiny Llama-style model trained as MHA on Debian's fortunes,
converted to Hkv ∈ {H/2, H/4, 1} by mean pooling, first head and a random head; validation loss
right after conversion and after uptraining on 5 % of the original tokens; models trained from
scratch with the same Hkv for the same total tokens (base + uptraining); KV bytes per token
(kv-plan) and decode ms/token at a long context (`attnkit bench generate`).

Usage: scripts/experiments/gqa_uptrain.py [--out runs/gqa_exp] [--steps 1200] [--context 16384]
Runs two single-threaded jobs at a time; finished runs are reused when the script is re-run.
Prints a Markdown table (also written to OUT/table.md).
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("ATTNKIT_CLI", os.path.join(ROOT, "build", "attnkit"))
H, D, L = 8, 16, 3
CONFIG = {"vocab_size": 261, "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": L,
          "num_attention_heads": H, "num_key_value_heads": H, "head_dim": D,
          "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
          "tie_word_embeddings": True, "hidden_act": "silu"}
KV = [H // 2, H // 4, 1]
METHODS = ["mean", "first", "random"]
COMMON = ["--batch", "8", "--seq", "128", "--threads", "1", "--quiet", "--eval-every", "0",
          "--checkpoint-every", "0"]


def run(args):
    r = subprocess.run(["nice", "-n", "10", CLI, *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: attnkit {' '.join(map(str, args))}\n{r.stderr}")
    return r.stdout


def done(d):
    return os.path.exists(os.path.join(d, "model.safetensors"))


def train_scratch(out, kv, steps):
    if not done(out):
        os.makedirs(out, exist_ok=True)
        cfg = os.path.join(out + ".config.json")
        with open(cfg, "w") as f:
            json.dump({**CONFIG, "num_key_value_heads": kv}, f)
        run(["train", "gpt", "--config", cfg, "--out", out, "--steps", steps, "--seed", 1, "--overwrite", *COMMON])
    return out


def uptrain(src, out, tokens):
    if not done(out):
        run(["train", "gpt", "--init", src, "--out", out, "--tokens", tokens, "--lr", "3e-4",
             "--min-lr", "1e-4", "--warmup", "5", "--seed", 2, "--overwrite", *COMMON])
    return out


def val_loss(model, windows):
    out = run(["eval", "--model", model, "--windows", windows])
    return float(re.search(r"loss ([0-9.]+)", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "gqa_exp"))
    ap.add_argument("--steps", type=int, default=1200, help="base training steps of 8 × 128 tokens")
    ap.add_argument("--windows", type=int, default=200, help="validation windows of 128 tokens")
    ap.add_argument("--context", type=int, default=16384, help="context of the decode timing")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    p = lambda *n: os.path.join(a.out, *n)
    tokens_per_step = 8 * 128
    base_tokens = a.steps * tokens_per_step
    up_tokens = base_tokens * 5 // 100
    up_steps = -(-up_tokens // tokens_per_step)
    t0 = time.time()
    with cf.ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(train_scratch, p("mha"), H, a.steps)]
        jobs += [pool.submit(train_scratch, p(f"scratch{kv}"), kv, a.steps + up_steps) for kv in KV]
        for j in jobs:
            j.result()
        convs = {}
        for kv in KV + [H]:
            for m in (METHODS if kv != H else ["mean"]):
                d = p(f"conv_{m}{kv}")
                if not done(d):
                    run(["convert-gqa", "--in", p("mha"), "--out", d, "--kv-heads", kv, "--method", m,
                         "--seed", 3])
                convs[(m, kv)] = d
        ups = {k: pool.submit(uptrain, d, d.replace("conv_", "up_"), up_tokens) for k, d in convs.items()}
        ups = {k: f.result() for k, f in ups.items()}
        evals = {k: pool.submit(val_loss, d, a.windows) for k, d in
                 [(("conv",) + k, d) for k, d in convs.items()] + [(("up",) + k, d) for k, d in ups.items()] +
                 [(("scratch", kv), p(f"scratch{kv}")) for kv in KV] + [(("base",), p("mha"))]}
        loss = {k: f.result() for k, f in evals.items()}
    train_seconds = time.time() - t0

    def kv_bytes(kv):
        j = json.loads(run(["kv-plan", "--layers", L, "--heads", H, "--kv-heads", kv, "--head-dim", D,
                            "--dtype", "f32", "--context", a.context, "--json"]))
        return j["bytes_per_token"]

    def decode_ms(model):
        out = run(["bench", "generate", "--model", model, "--context", a.context, "--tokens", 64,
                   "--threads", 1, "--json"])
        return json.loads(out)["ms_per_token"]

    decode = {kv: decode_ms(p("mha") if kv == H else p(f"scratch{kv}")) for kv in [H] + KV}
    lines = [f"Base: MHA (H = Hkv = {H}, D = {D}, L = {L}, C = 128), {a.steps} steps × {tokens_per_step} tokens "
             f"= {base_tokens} tokens; uptraining {up_steps} steps ({up_tokens} tokens, 5 %); scratch models "
             f"{a.steps + up_steps} steps. Validation loss in nats per byte over {a.windows} windows of 128 "
             f"held-out tokens. Decode: f32 cache filled to {a.context} tokens, 1 thread.",
             "",
             "| Hkv | method | loss after conversion | after uptraining (5 %) | from scratch (equal tokens) | "
             "KV bytes/token | decode ms/token |",
             "|---|---|---|---|---|---|---|",
             f"| {H} (MHA) | base | {loss[('base',)]:.4f} | {loss[('up', 'mean', H)]:.4f} | "
             f"{loss[('base',)]:.4f} ({a.steps} steps) | {kv_bytes(H)} | {decode[H]:.3f} |"]
    for kv in KV:
        for m in METHODS:
            lines.append(f"| {kv}{' (MQA)' if kv == 1 else ''} | {m} | {loss[('conv', m, kv)]:.4f} | "
                         f"{loss[('up', m, kv)]:.4f} | {loss[('scratch', kv)]:.4f} | {kv_bytes(kv)} | "
                         f"{decode[kv]:.3f} |")
    lines.append("")
    lines.append(f"Wall time of this invocation's training and evaluation: {train_seconds / 60:.1f} min "
                 "(two 1-thread jobs at a time; runs already in OUT are reused, not retrained).")
    table = "\n".join(lines)
    with open(p("table.md"), "w") as f:
        f.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
