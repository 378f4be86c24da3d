#!/usr/bin/env python3
"""attnkit's flash attention speed in a process that imports torch first and in one that does not.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/import_order.py [--rounds 5] [--seq 2048]
       [--heads 32] [--kv-heads 8] [--head-dim 128]
Each round starts one fresh interpreter per import order (who goes first alternates) and times
`attnkit.flash_attention(q, k, v, causal=True)`, best of 5 calls after one warm-up. The table
gives medians over rounds and the ratio of the two; the two rows should agree within noise,
whatever torch did to OpenMP's default. GFLOP/s count 4·D per visible (query, key) pair per head.
"""
import argparse
import datetime
import json
import statistics
import subprocess
import sys

from bench_common import add_attention_shape_args, cpu_model

CHILD = r"""
import json, sys, time
order, L, H, Hkv, D = sys.argv[1], *map(int, sys.argv[2:6])
if order == "torch-first":
    import torch
    import attnkit
else:
    import attnkit
import numpy as np
rng = np.random.default_rng(0)
q = rng.standard_normal((L, H, D), dtype=np.float32)
k = rng.standard_normal((L, Hkv, D), dtype=np.float32)
v = rng.standard_normal((L, Hkv, D), dtype=np.float32)
attnkit.flash_attention(q, k, v, causal=True)
best = float("inf")
for _ in range(5):
    t = time.perf_counter()
    attnkit.flash_attention(q, k, v, causal=True)
    best = min(best, time.perf_counter() - t)
print(json.dumps({"ms": best * 1e3, "threads": attnkit.num_threads()}))
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_attention_shape_args(p, rounds=5)
    a = p.parse_args()
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    orders = ["attnkit-only", "torch-first"]
    times = {o: [] for o in orders}
    threads = {}
    for r in range(a.rounds):
        for o in (orders if r % 2 == 0 else orders[::-1]):
            out = subprocess.run([sys.executable, "-c", CHILD, o, str(a.seq), str(a.heads),
                                  str(a.kv_heads), str(a.head_dim)],
                                 capture_output=True, text=True, check=True)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            times[o].append(res["ms"])
            threads[o] = res["threads"]
    flops = 4.0 * a.head_dim * a.heads * a.seq * (a.seq + 1) / 2
    print(f"{cpu_model()}, {datetime.date.today()}, medians of {a.rounds} alternating rounds")
    print(f"causal L {a.seq}, H {a.heads}, Hkv {a.kv_heads}, D {a.head_dim}\n")
    print("| process | threads | ms | GFLOP/s |")
    print("|---|---|---|---|")
    for o in orders:
        ms = statistics.median(times[o])
        print(f"| {o} | {threads[o]} | {ms:.1f} | {flops / ms / 1e6:.0f} |")
    ratio = statistics.median(t / a for t, a in zip(times["torch-first"], times["attnkit-only"]))
    print(f"\ntorch-first / attnkit-only time: {ratio:.2f} (median of per-round ratios)")


if __name__ == "__main__":
    main()
