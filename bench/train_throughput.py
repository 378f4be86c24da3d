#!/usr/bin/env python3
"""Training tokens/s of attnkit and of PyTorch 1.13 for the same GPT (Llama architecture) on the
same data shape, in one run, with the same number of threads.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/train_throughput.py [--preset small]
       [--steps 20] [--batch 8] [--seq 256] [--threads 2] [--rounds 1] [--variant VAR=VALUE]
The torch model: embedding, RMSNorm, q/k/v/o projections, rotate-half RoPE, causal softmax
attention with K/V repeated to H heads (torch 1.13 has no fused CPU attention), SwiGLU MLP,
tied LM head, AdamW. Timings exclude the first 3 steps of each measurement (warm-up). On AVX-512
CPUs both get OPENBLAS_CORETYPE=SkylakeX (unless set), so they use the same OpenBLAS kernels.
With --rounds R, the two alternate R times (who goes first alternates; the torch model is built
once and keeps training); the result is the median of the per-round ratios, the robust reading
on a shared machine whose speed drifts between minutes. With --variant VAR=VALUE, every round also
runs attnkit with VAR=VALUE in its environment (e.g. ATTNKIT_PACKED_GEMM=0: the linear layers on
OpenBLAS), in alternating order with the default run, and reports it beside the default.
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


def blas_env(core):
    """os.environ with OPENBLAS_CORETYPE = core, or without it when core is empty (an empty value
    would make OpenBLAS fall back to its SSE3 kernels)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if core:
        env["OPENBLAS_CORETYPE"] = core
    return env


def attnkit_tokens_per_s(args, precision="f32", variant=None):
    """Median tokens/s of `attnkit train gpt` from step 4 on (precision: --precision; variant: an
    environment VAR=VALUE for attnkit's run), and the config."""
    env = blas_env(args.blas_attnkit)
    if variant:
        name, _, value = variant.partition("=")
        env[name] = value
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([getattr(args, "cli", CLI), "train", "gpt", "--preset", args.preset, "--steps", str(args.steps),
                        "--batch", str(args.batch), "--seq", str(args.seq), "--out", out,
                        "--eval-every", "0", "--checkpoint-every", "0", "--quiet",
                        "--threads", str(args.threads), "--precision", precision], check=True,
                       capture_output=True, env=env)
        with open(os.path.join(out, "log.csv")) as f:
            rates = [float(r["tokens_per_s"]) for r in csv.DictReader(f)][3:]
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
    return statistics.median(rates), cfg


def torch_trainer(args, cfg, autocast=False, batches=None):
    """Builds the torch model and optimizer; returns run(), which trains args.steps steps and
    returns the median tokens/s of steps 4 onward. autocast: forward and loss under
    torch.autocast("cpu", dtype=torch.bfloat16). batches(step), if given, returns the step's
    [B, L+1] token windows (default: random tokens) and run() also returns the losses."""
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
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = forward(tokens)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        return float(loss)

    def forward(tokens):
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
        return F.cross_entropy(logits.reshape(-1, v).float(), tokens[:, 1:].reshape(-1))

    def run():
        rates, losses = [], []
        for s in range(args.steps):
            tokens = batches(s) if batches else torch.randint(0, 256, (args.batch, args.seq + 1))
            t0 = time.perf_counter()
            losses.append(step(tokens))
            rates.append(args.batch * args.seq / (time.perf_counter() - t0))
        return (statistics.median(rates[3:]), losses) if batches else statistics.median(rates[3:])

    run.forward = forward
    return run


def add_run_args(ap, rounds=1, rounds_help=None):
    """The model, batch, thread and round options of the training benchmarks."""
    ap.add_argument("--preset", default="small")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=rounds, help=rounds_help)


def shared_openblas_setup(ap, args):
    """Checks --steps and --rounds, sets OPENBLAS_NUM_THREADS, and returns the OPENBLAS_CORETYPE
    both frameworks use ("" = OpenBLAS's own choice)."""
    if args.steps < 4 or args.rounds < 1:
        ap.error("--steps must be at least 4 (3 warm-up steps are excluded) and --rounds at least 1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    # OpenBLAS 0.3.21 falls back to SSE3 kernels on AVX-512 CPUs it does not know; attnkit then
    # selects SkylakeX itself (attnkit bench roofline prints it), torch (same OpenBLAS) needs this.
    with open("/proc/cpuinfo") as f:
        if " avx512f" in f.read():
            os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")
    return os.environ.get("OPENBLAS_CORETYPE", "")


def main():
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    add_run_args(ap, rounds_help="alternating measurements of both")
    ap.add_argument("--cli", default=CLI, help="the attnkit binary (e.g. build-avx2/attnkit)")
    ap.add_argument("--variant", metavar="VAR=VALUE",
                    help="also time attnkit with VAR=VALUE in its environment in every round")
    ap.add_argument("--blas-attnkit", metavar="CORE",
                    help="OPENBLAS_CORETYPE for attnkit (default: the shared choice below)")
    ap.add_argument("--blas-torch", metavar="CORE",
                    help="OPENBLAS_CORETYPE for PyTorch (default: the shared choice below)")
    args = ap.parse_args()
    if args.variant and "=" not in args.variant:
        ap.error("--variant must be VAR=VALUE")
    shared = shared_openblas_setup(ap, args)
    args.blas_attnkit = args.blas_attnkit or shared
    args.blas_torch = args.blas_torch or shared
    os.environ.pop("OPENBLAS_CORETYPE", None)  # read when torch loads OpenBLAS; never empty
    if args.blas_torch:
        os.environ["OPENBLAS_CORETYPE"] = args.blas_torch
    ours, cfg = attnkit_tokens_per_s(args)
    torch_run = torch_trainer(args, cfg)
    rounds = [(ours, torch_run())]
    variants = []
    for r in range(args.rounds):
        # order: attnkit, PyTorch[, variant] in even rounds; PyTorch[, variant], attnkit in odd ones
        if r % 2:
            theirs = torch_run()
            if args.variant:
                variants.append(attnkit_tokens_per_s(args, variant=args.variant)[0])
            rounds.append((attnkit_tokens_per_s(args)[0], theirs))
        else:
            if r > 0:
                ours = attnkit_tokens_per_s(args)[0]
                rounds.append((ours, torch_run()))
            if args.variant:
                variants.append(attnkit_tokens_per_s(args, variant=args.variant)[0])
        if args.rounds > 1 or args.variant:
            extra = f", {args.variant} {variants[-1]:.0f} ({variants[-1] / rounds[-1][1]:.2f}x)" if args.variant else ""
            print(f"  round {r + 1}: attnkit {rounds[-1][0]:.0f}, PyTorch {rounds[-1][1]:.0f} tokens/s, "
                  f"{rounds[-1][0] / rounds[-1][1]:.2f}x{extra}", file=sys.stderr)
    ours = statistics.median(a for a, _ in rounds)
    theirs = statistics.median(t for _, t in rounds)
    ratios = sorted(a / t for a, t in rounds)
    ratio = statistics.median(ratios)
    print(f"GPT preset {args.preset}: {cfg['num_hidden_layers']} layers, d_model {cfg['hidden_size']}, "
          f"{cfg['num_attention_heads']} heads / {cfg['num_key_value_heads']} KV heads, context {args.seq}, "
          f"batch {args.batch}, {args.threads} threads")
    print(f"  attnkit   {ours:9.0f} tokens/s")
    if args.variant:
        pairs = sorted(v / a for v, (a, _) in zip(variants, rounds))
        print(f"  attnkit with {args.variant}: {statistics.median(variants):.0f} tokens/s, "
              f"{statistics.median(pairs):.2f}x the default run (rounds {pairs[0]:.2f}-{pairs[-1]:.2f}x)")
    print(f"  PyTorch   {theirs:9.0f} tokens/s  (torch {__import__('torch').__version__})")
    print(f"  OpenBLAS  kernels: attnkit {args.blas_attnkit or 'its own choice'}, "
          f"PyTorch {args.blas_torch or 'its own choice'} (OPENBLAS_CORETYPE)")
    if args.rounds == 1:
        print(f"  ratio     {ratio:9.2f}x")
    else:
        print(f"  ratio     {ratio:9.2f}x  (median of {args.rounds} alternating rounds; rounds "
              f"{ratios[0]:.2f}-{ratios[-1]:.2f}x; tokens/s above are medians)")


if __name__ == "__main__":
    sys.exit(main())
