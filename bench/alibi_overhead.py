#!/usr/bin/env python3
"""Cost of ALiBi in attnkit's flash attention: forward and backward with and without
alibi_slopes (the ALiBi paper's slopes 2^(-8(h+1)/H)), causal, alternating, best of N.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/alibi_overhead.py [--seq 2048]
       [--heads 32] [--kv-heads 8] [--head-dim 128] [--rounds 4]
Runs on one thread and reports CPU time (time.process_time) besides wall time: on a shared
machine the process is descheduled for varying stretches, which wall time counts and CPU time
does not. GFLOP/s count 4·D (forward) and 10·D (backward) per visible (query, key) pair per head,
as `attnkit bench attention` does.
"""
import argparse
import time

import numpy as np

import attnkit
from bench_common import add_attention_shape_args


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_attention_shape_args(ap, rounds=4)
    a = ap.parse_args()
    attnkit.set_num_threads(1)
    rng = np.random.default_rng(0)
    n, h, hkv, d = a.seq, a.heads, a.kv_heads, a.head_dim
    q = rng.standard_normal((n, h, d), dtype=np.float32)
    k = rng.standard_normal((n, hkv, d), dtype=np.float32)
    v = rng.standard_normal((n, hkv, d), dtype=np.float32)
    dout = rng.standard_normal((n, h, d), dtype=np.float32)
    slopes = (2.0 ** (-8.0 * np.arange(1, h + 1) / h)).astype(np.float32)
    best = {}  # (variant, pass, clock) -> seconds
    for _ in range(a.rounds):
        for name, s in (("plain", None), ("alibi", slopes)):
            c0, w0 = time.process_time(), time.perf_counter()
            out, lse = attnkit.flash_attention(q, k, v, causal=True, alibi_slopes=s,
                                               return_lse=True)
            c1, w1 = time.process_time(), time.perf_counter()
            attnkit.flash_attention_backward(dout, q, k, v, out, lse, causal=True,
                                             alibi_slopes=s)
            c2, w2 = time.process_time(), time.perf_counter()
            for key, t in (((name, "forward", "cpu"), c1 - c0), ((name, "forward", "wall"), w1 - w0),
                           ((name, "backward", "cpu"), c2 - c1), ((name, "backward", "wall"), w2 - w1)):
                best[key] = min(best.get(key, float("inf")), t)
    pairs = h * sum(min(i + 1, n) for i in range(n))
    flops = {"forward": 4 * d * pairs, "backward": 10 * d * pairs}
    print(f"causal L={n} H={h} Hkv={hkv} D={d}, one thread, best of {a.rounds}")
    for p in ("forward", "backward"):
        for name in ("plain", "alibi"):
            cpu, wall = best[(name, p, "cpu")], best[(name, p, "wall")]
            print(f"  {p:8s} {name:5s}  CPU {cpu * 1e3:8.1f} ms ({flops[p] / cpu / 1e9:6.1f} GFLOP/s)"
                  f"  wall {wall * 1e3:8.1f} ms")
        print(f"  {p:8s} alibi/plain  CPU {best[('alibi', p, 'cpu')] / best[('plain', p, 'cpu')]:.3f}"
              f"  wall {best[('alibi', p, 'wall')] / best[('plain', p, 'wall')]:.3f}")


if __name__ == "__main__":
    main()
