#!/usr/bin/env python3
"""Prefill time of one model shape at Hkv = H, H/4 and 1 (the GQA claim "prefill barely moves").

Builds three Llama-shaped GPTs that differ only in their number of KV heads (random weights; the
query, output and MLP weights are identical across them) and times one forward (`Model.logits`)
over a prompt of --seq tokens: the prefill. Rounds alternate the three models so that load from
other processes hits them alike; the table gives each model's median and fastest forward, and the
time relative to MHA. Also counts each model's parameters and the forward's multiply-adds.

Usage: OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 \
         scripts/experiments/prefill_vs_hkv.py [--seq 2048] [--rounds 5] [--threads 1] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import attnkit


def config(c, layers, heads, kv_heads, ffn, context):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "vocab_size": 261, "hidden_size": c, "intermediate_size": ffn,
            "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "head_dim": c // heads,
            "max_position_embeddings": context, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": True}


def weights(cfg, seed):
    """Llama-named float32 weights; every tensor but k/v_proj is the same for every Hkv."""
    rng = np.random.default_rng(seed)
    c, h, hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d, f, v = c // h, cfg["intermediate_size"], cfg["vocab_size"]
    s = 1 / np.sqrt(c)
    w = {"model.embed_tokens.weight": rng.normal(0, 1, (v, c)), "model.norm.weight": np.ones(c)}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = np.ones(c)
        w[p + "post_attention_layernorm.weight"] = np.ones(c)
        w[p + "self_attn.q_proj.weight"] = rng.normal(0, s, (h * d, c))
        kv = rng.normal(0, s, (2, h * d, c))  # drawn at full width, then cut: same stream per Hkv
        w[p + "self_attn.k_proj.weight"] = kv[0, : hkv * d]
        w[p + "self_attn.v_proj.weight"] = kv[1, : hkv * d]
        w[p + "self_attn.o_proj.weight"] = rng.normal(0, s, (c, h * d))
        w[p + "mlp.gate_proj.weight"] = rng.normal(0, s, (f, c))
        w[p + "mlp.up_proj.weight"] = rng.normal(0, s, (f, c))
        w[p + "mlp.down_proj.weight"] = rng.normal(0, 1 / np.sqrt(f), (c, f))
    return {k: x.astype(np.float32) for k, x in w.items()}


def macs(cfg, t):
    """Multiply-adds of one causal forward over t tokens: projections, MLP, scores and P·V, head."""
    c, h, hkv, L = (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
                    cfg["num_hidden_layers"])
    d, f, v = c // h, cfg["intermediate_size"], cfg["vocab_size"]
    proj = t * c * (2 * h * d + 2 * hkv * d)     # q, o and k, v
    mlp = t * 3 * c * f
    attn = 2 * h * d * t * (t + 1) // 2          # QKᵀ and P·V over the causal triangle
    return {"projections": L * proj, "mlp": L * mlp, "attention": L * attn, "head": t * c * v,
            "total": L * (proj + mlp + attn) + t * c * v}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=1408)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()
    attnkit.set_num_threads(a.threads)
    kvs = [a.heads, a.heads // 4, 1]
    tmp = tempfile.mkdtemp(prefix="prefill_vs_hkv_")
    models, cfgs = {}, {}
    for kv in kvs:
        cfg = config(a.hidden, a.layers, a.heads, kv, a.ffn, a.seq)
        d = os.path.join(tmp, f"kv{kv}")
        os.makedirs(d)
        attnkit.save_safetensors(os.path.join(d, "model.safetensors"), weights(cfg, 1))
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        models[kv], cfgs[kv] = attnkit.load_model(d), cfg
    tokens = np.random.default_rng(2).integers(0, 256, a.seq).astype(np.int32)
    for kv in kvs:  # warm-up: allocations, page faults
        models[kv].logits(tokens)
    times = {kv: [] for kv in kvs}
    for r in range(a.rounds):
        order = kvs if r % 2 == 0 else kvs[::-1]
        for kv in order:
            t0 = time.perf_counter()
            models[kv].logits(tokens)
            times[kv].append(time.perf_counter() - t0)
    base = statistics.median(times[a.heads])
    rows = []
    print(f"prefill of {a.seq} tokens, C = {a.hidden}, L = {a.layers}, H = {a.heads}, D = "
          f"{a.hidden // a.heads}, F = {a.ffn}, {a.threads} thread(s), {a.rounds} rounds; load "
          f"average {os.getloadavg()[0]:.1f}")
    print("| Hkv | parameters | GMAC | ms (median) | ms (fastest) | vs MHA (median) |")
    print("|---|---|---|---|---|---|")
    for kv in kvs:
        n = sum(x.size for x in weights(cfgs[kv], 1).values())
        m = macs(cfgs[kv], a.seq)
        med, best = statistics.median(times[kv]), min(times[kv])
        rows.append({"kv_heads": kv, "parameters": n, "macs": m, "ms_median": 1e3 * med,
                     "ms_min": 1e3 * best, "ms_all": [1e3 * x for x in times[kv]],
                     "relative_to_mha": med / base})
        print(f"| {kv} | {n:,} | {m['total'] / 1e9:.2f} | {1e3 * med:.0f} | {1e3 * best:.0f} | "
              f"{med / base:.3f} |")
    if a.json:
        json.dump({"args": vars(a), "load_average": os.getloadavg(), "rows": rows},
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
