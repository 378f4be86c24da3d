#!/usr/bin/env python3
"""Training tokens/s of attnkit and of PyTorch 1.13 for the same GPT (Llama architecture) on the
same data shape, in one run, with the same number of threads.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/train_throughput.py [--preset small]
       [--steps 20] [--batch 8] [--seq 256] [--threads 2]
The torch model: embedding, RMSNorm, q/k/v/o projections, rotate-half RoPE, causal softmax
attention with K/V repeated to H heads (torch 1.13 has no fused CPU attention), SwiGLU MLP,
tied LM head, AdamW. Timings exclude the first 3 steps (warm-up). On AVX-512 CPUs both processes
get OPENBLAS_CORETYPE=SkylakeX (unless set), so they use the same OpenBLAS kernels.
"""
import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLI = os.path.join(HERE, "..", "build", "attnkit")


def attnkit_tokens_per_s(args):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([CLI, "train", "gpt", "--preset", args.preset, "--steps", str(args.steps),
                        "--batch", str(args.batch), "--seq", str(args.seq), "--out", out,
                        "--eval-every", "0", "--checkpoint-every", "0", "--quiet",
                        "--threads", str(args.threads)], check=True, capture_output=True)
        with open(os.path.join(out, "log.csv")) as f:
            rates = [float(r["tokens_per_s"]) for r in csv.DictReader(f)][3:]
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
    return statistics.median(rates), cfg


def torch_tokens_per_s(args, cfg):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    c, h, hkv, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    f, v, n_layers, eps = cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    p = lambda *s: torch.nn.Parameter(torch.randn(*s) * 0.02)
    params = {"emb": p(v, c), "norm": torch.nn.Parameter(torch.ones(c))}
    for i in range(n_layers):
        params.update({f"{i}.n1": torch.nn.Parameter(torch.ones(c)), f"{i}.n2": torch.nn.Parameter(torch.ones(c)),
                       f"{i}.qkv": p((h + 2 * hkv) * d, c), f"{i}.o": p(c, h * d),
                       f"{i}.g": p(f, c), f"{i}.u": p(f, c), f"{i}.dn": p(c, f)})
    opt = torch.optim.AdamW(params.values(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    inv = 1.0 / cfg["rope_theta"] ** (torch.arange(0, d, 2).float() / d)
    ang = torch.arange(args.seq).float()[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    mask = torch.full((args.seq, args.seq), -math.inf).triu(1)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rope(x):  # [B, heads, L, D]
        return x * cos + torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1) * sin

    def step(tokens):
        x = params["emb"][tokens[:, :-1]]
        b, l = x.shape[:2]
        for i in range(n_layers):
            qkv = rms(x, params[f"{i}.n1"]) @ params[f"{i}.qkv"].T
            q, k, vv = qkv.split([h * d, hkv * d, hkv * d], -1)
            q = rope(q.view(b, l, h, d).transpose(1, 2))
            k = rope(k.view(b, l, hkv, d).transpose(1, 2)).repeat_interleave(h // hkv, 1)
            vv = vv.view(b, l, hkv, d).transpose(1, 2).repeat_interleave(h // hkv, 1)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + mask, -1) @ vv
            x = x + att.transpose(1, 2).reshape(b, l, h * d) @ params[f"{i}.o"].T
            hh = rms(x, params[f"{i}.n2"])
            x = x + (F.silu(hh @ params[f"{i}.g"].T) * (hh @ params[f"{i}.u"].T)) @ params[f"{i}.dn"].T
        logits = rms(x, params["norm"]) @ params["emb"].T
        loss = F.cross_entropy(logits.reshape(-1, v), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()

    rates = []
    for s in range(args.steps):
        tokens = torch.randint(0, 256, (args.batch, args.seq + 1))
        t0 = time.perf_counter()
        step(tokens)
        rates.append(args.batch * args.seq / (time.perf_counter() - t0))
    return statistics.median(rates[3:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    # OpenBLAS 0.3.21 falls back to SSE3 kernels on AVX-512 CPUs it does not know; attnkit then
    # selects SkylakeX itself (attnkit bench roofline prints it), torch (same OpenBLAS) needs this.
    with open("/proc/cpuinfo") as f:
        if " avx512f" in f.read():
            os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
    ours, cfg = attnkit_tokens_per_s(args)
    theirs = torch_tokens_per_s(args, cfg)
    print(f"GPT preset {args.preset}: {cfg['num_hidden_layers']} layers, d_model {cfg['hidden_size']}, "
          f"{cfg['num_attention_heads']} heads / {cfg['num_key_value_heads']} KV heads, context {args.seq}, "
          f"batch {args.batch}, {args.threads} threads")
    print(f"  attnkit   {ours:9.0f} tokens/s")
    print(f"  PyTorch   {theirs:9.0f} tokens/s  (torch {__import__('torch').__version__})")
    print(f"  ratio     {ours / theirs:9.2f}x")


if __name__ == "__main__":
    sys.exit(main())
