#!/usr/bin/env python3
"""What swapping a PyTorch model's attention for attnkit.torch.flash_attn_func buys on the CPU.

One small GPT (pre-norm, GQA attention with rotate-half RoPE, GELU MLP, tied LM head, AdamW),
run twice from the same weights: attention as PyTorch's naive causal path (K/V repeated to H
heads, scores, masked_fill, softmax, @ V; torch 1.13 has no scaled_dot_product_attention) or as
attnkit.torch.flash_attn_func(causal=True). Everything else is the same torch code. Reports:
  1. the first --loss-steps training losses of both at --loss-context, and their max difference;
  2. whole training step time (median over rounds; sides alternate, who goes first alternates)
     at each context, with the batch set so every step holds --tokens tokens;
  3. peak memory: each (side, context) trains 2 steps in a fresh process (after one 16-token
     step that loads libraries) and reports its peak RSS during those steps minus its RSS just
     before them (Linux VmHWM after resetting it): the steps' transient memory (activations,
     gradients, attention scratch); weights and AdamW state exist before;
  4. attention alone, forward + backward, at L 2048, H 32, Hkv 8, D 128, causal.
Prints a markdown table with the CPU model, date and command.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/torch_gpt_swap.py [--threads 2]
       [--rounds 3] [--contexts 512,1024,2048,4096] [--tokens 4096] [--attn-rounds 3]
"""
import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import attnkit
from attnkit.torch import flash_attn_func
from bench_common import cpu_model


def naive_attention(q, k, v):
    """Causal softmax attention, q [B, L, H, D], k/v [B, L, Hkv, D] -> [B, L, H, D]."""
    g = q.shape[2] // k.shape[2]
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    length = q.shape[2]
    mask = torch.ones(length, length, dtype=torch.bool).triu(1)
    p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
    return (p @ v).transpose(1, 2)


def attnkit_attention(q, k, v):
    return flash_attn_func(q, k, v, causal=True)


ATTENTION = {"torch": naive_attention, "attnkit": attnkit_attention}


class GPT(torch.nn.Module):
    """Pre-norm GPT: C channels, H query heads, Hkv KV heads, RoPE, GELU MLP, tied head."""

    def __init__(self, vocab=512, c=512, h=8, hkv=2, layers=2):
        super().__init__()
        self.h, self.hkv, self.d = h, hkv, c // h
        self.emb = torch.nn.Embedding(vocab, c)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(torch.nn.ModuleDict({
                "ln1": torch.nn.LayerNorm(c), "wqkv": torch.nn.Linear(c, (h + 2 * hkv) * self.d),
                "wo": torch.nn.Linear(c, c), "ln2": torch.nn.LayerNorm(c),
                "up": torch.nn.Linear(c, 4 * c), "down": torch.nn.Linear(4 * c, c)}))
        self.ln = torch.nn.LayerNorm(c)
        torch.nn.init.normal_(self.emb.weight, std=0.02)
        self.attention = naive_attention

    def rope(self, x):  # [B, L, heads, D], rotate-half
        length, d = x.shape[1], x.shape[-1]
        inv = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
        ang = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = (torch.cat([f(ang)] * 2, -1)[None, :, None, :] for f in (torch.cos, torch.sin))
        return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin

    def forward(self, tokens):
        x = self.emb(tokens)
        b, length, c = x.shape
        for blk in self.blocks:
            qkv = blk["wqkv"](blk["ln1"](x)).view(b, length, self.h + 2 * self.hkv, self.d)
            q, k, v = qkv.split([self.h, self.hkv, self.hkv], dim=2)
            a = self.attention(self.rope(q), self.rope(k), v)
            x = x + blk["wo"](a.reshape(b, length, c))
            x = x + blk["down"](F.gelu(blk["up"](blk["ln2"](x))))
        return self.ln(x) @ self.emb.weight.t()


def make(side, seed=0):
    torch.manual_seed(seed)
    model = GPT()
    model.attention = ATTENTION[side]
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def batch_of(step, batch, length, vocab=512):
    g = torch.Generator().manual_seed(1000 + step)
    t = torch.randint(0, vocab, (batch, length + 1), generator=g)
    return t[:, :-1], t[:, 1:]


def train_step(model, opt, tokens, targets):
    loss = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def losses(args):
    """First --loss-steps losses of both sides from the same weights and data."""
    out = {}
    for side in ("torch", "attnkit"):
        model, opt = make(side)
        out[side] = [train_step(model, opt, *batch_of(s, 2, args.loss_context))
                     for s in range(args.loss_steps)]
    return out


def step_times(args):
    """{context: {side: [seconds per step, one per round]}}; sides alternate within a context."""
    res = {}
    for length in args.contexts:
        batch = max(1, args.tokens // length)
        sides = {s: make(s) for s in ("torch", "attnkit")}
        data = batch_of(0, batch, length)
        for s in sides.values():
            train_step(*s, *data)  # warm-up
        res[length] = {s: [] for s in sides}
        for r in range(args.rounds):
            order = ("torch", "attnkit") if r % 2 == 0 else ("attnkit", "torch")
            for side in order:
                t0 = time.perf_counter()
                train_step(*sides[side], *data)
                res[length][side].append(time.perf_counter() - t0)
        print(f"  context {length}: " + ", ".join(
            f"{s} {statistics.median(v):.3f} s" for s, v in res[length].items()), flush=True)
    return res


def _status_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_child(side, length, tokens, threads):
    """Runs in a fresh process: prints the peak RSS growth (MiB) over 2 training steps. A 16-token
    step first loads libraries and BLAS buffers; then the kernel's peak-RSS counter is reset
    (/proc/self/clear_refs 5) and VmHWM - VmRSS is read after the 2 steps."""
    torch.set_num_threads(threads)
    attnkit.set_num_threads(threads)
    model, opt = make(side)
    train_step(model, opt, *batch_of(0, 1, 16))
    data = batch_of(0, max(1, tokens // length), length)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss0 = _status_mib("VmRSS")
    for _ in range(2):
        train_step(model, opt, *data)
    print(json.dumps({"delta_mib": _status_mib("VmHWM") - rss0}))


def peaks(args):
    res = {}
    for length in args.contexts:
        for side in ("torch", "attnkit"):
            out = subprocess.run([sys.executable, __file__, "--peak-child", side, str(length),
                                  "--tokens", str(args.tokens), "--threads", str(args.threads)],
                                 check=True, capture_output=True, text=True).stdout
            res[(length, side)] = json.loads(out.strip().splitlines()[-1])["delta_mib"]
    return res


def attention_alone(args):
    """Seconds per forward+backward of each side at L 2048, H 32, Hkv 8, D 128 (batch 1)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2048, 32, 128, generator=g, requires_grad=True)
    k = torch.randn(1, 2048, 8, 128, generator=g, requires_grad=True)
    v = torch.randn(1, 2048, 8, 128, generator=g, requires_grad=True)
    dout = torch.randn(1, 2048, 32, 128, generator=g)
    times = {s: [] for s in ATTENTION}
    for r in range(args.attn_rounds + 1):
        for side in (("torch", "attnkit") if r % 2 == 0 else ("attnkit", "torch")):
            t0 = time.perf_counter()
            ATTENTION[side](q, k, v).backward(dout)
            if r:  # round 0 is a warm-up
                times[side].append(time.perf_counter() - t0)
            q.grad = k.grad = v.grad = None
    return {s: statistics.median(t) for s, t in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--contexts", default="512,1024,2048,4096")
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per training step")
    ap.add_argument("--loss-steps", type=int, default=20)
    ap.add_argument("--loss-context", type=int, default=256)
    ap.add_argument("--attn-rounds", type=int, default=3)
    ap.add_argument("--peak-child", nargs=2, metavar=("SIDE", "CONTEXT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peak_child:
        return peak_child(args.peak_child[0], int(args.peak_child[1]), args.tokens, args.threads)
    args.contexts = [int(x) for x in args.contexts.split(",")]
    torch.set_num_threads(args.threads)
    attnkit.set_num_threads(args.threads)

    print("losses ...", flush=True)
    ls = losses(args)
    max_diff = max(abs(a - b) for a, b in zip(ls["torch"], ls["attnkit"]))
    print(f"  first {args.loss_steps} losses, torch:   " + " ".join(f"{x:.5f}" for x in ls["torch"]))
    print(f"  first {args.loss_steps} losses, attnkit: " + " ".join(f"{x:.5f}" for x in ls["attnkit"]))
    print(f"  max |loss difference| = {max_diff:.2e}")
    print("step times ...", flush=True)
    st = step_times(args)
    print("peak memory ...", flush=True)
    pk = peaks(args)
    print("attention alone ...", flush=True)
    aa = attention_alone(args)

    print()
    print(f"CPU: {cpu_model()}, {args.threads} threads; date {datetime.date.today()}; torch "
          f"{torch.__version__}")
    print("command: PYTHONPATH=build/python /usr/bin/python3 bench/torch_gpt_swap.py "
          + " ".join(sys.argv[1:]))
    print(f"model: GPT C 512, H 8, Hkv 2, D 64, 2 layers, vocab 512, AdamW; {args.tokens} tokens "
          f"per step; median of {args.rounds} alternating rounds")
    print(f"losses: first {args.loss_steps} steps at context {args.loss_context}, max |difference| "
          f"{max_diff:.2e}")
    print()
    print("| context | batch | torch step (s) | attnkit step (s) | speed-up | torch peak +MiB "
          "| attnkit peak +MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for length in args.contexts:
        t, a = (statistics.median(st[length][s]) for s in ("torch", "attnkit"))
        print(f"| {length} | {max(1, args.tokens // length)} | {t:.3f} | {a:.3f} | {t / a:.2f}x "
              f"| {pk[(length, 'torch')]:.0f} | {pk[(length, 'attnkit')]:.0f} |")
    print()
    print(f"attention alone, forward + backward, L 2048, H 32, Hkv 8, D 128, causal: torch "
          f"{aa['torch']:.3f} s, attnkit {aa['attnkit']:.3f} s, {aa['torch'] / aa['attnkit']:.2f}x "
          f"(median of {args.attn_rounds})")


if __name__ == "__main__":
    main()
