#!/usr/bin/env python3
"""How far attnkit's flash forward sits below its accuracy bar, over many random inputs.

The tests (tests/python/test_flash_attention.py) check one seed per shape against FlashAttention's
bar: max error vs float64 at most 2x PyTorch float32's own max error + 4 ulp at the output's
scale. A single seed says pass or fail; this script says how much margin there is. For every
(seed, shape) it prints nothing unless the bar is exceeded, then one summary line per shape: the
ratio max-error(attnkit) / max-error(torch float32) (median, 90th percentile, max), the same ratio
of mean errors, and how many inputs exceeded the bar. Run it after any change to the forward's
arithmetic (tile products, exponentials, normalisation), on both presets.

The ratio depends on PyTorch's own rounding, hence on the OpenBLAS kernels the environment picks
(OPENBLAS_CORETYPE): compare runs made with the same environment.

Usage: OPENBLAS_NUM_THREADS=1 PYTHONPATH=build/python /usr/bin/python3 \
           scripts/experiments/flash_error_margin.py [--seeds 30]
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))
import attnkit  # noqa: E402
import torch_attention as ta  # noqa: E402

# (Lq, Lk, H, Hkv, D), all causal: the shapes of the test file's lq_ne_lk, gqa and head-dim grids.
SHAPES = [(65, 600, 4, 2, 16), (600, 65, 4, 2, 16), (113, 113, 8, 2, 32), (100, 100, 4, 2, 64),
          (200, 200, 4, 1, 128)]


def margin(seeds, shape):
    """(max-error ratios, mean-error ratios, inputs over the bar) of `seeds` random inputs."""
    lq, lk, h, hkv, d = shape
    ratios, means, over = [], [], 0
    for s in range(seeds):
        rng = np.random.default_rng(1000 + 7 * s + lq + lk + d)
        q, k, v, dout = ta.random_inputs(rng, lq, lk, h, hkv, d)
        out = np.asarray(attnkit.flash_attention(q, k, v, causal=True), np.float64)
        ref = np.asarray(ta.run(q, k, v, dout, torch.float64, window=(-1, 0))["out"])
        pt = np.asarray(ta.run(q, k, v, dout, torch.float32, window=(-1, 0))["out"], np.float64)
        err = ta.max_err(out, ref)
        err_pt, bar = ta.error_bar(ref, pt, 2)  # the forward's bar in the tests
        if err > bar:
            over += 1
            print(f"  over the bar: seed {s} shape {shape}: {err:.3e} > {bar:.3e}")
        ratios.append(err / err_pt)
        means.append(np.abs(out - ref).mean() / np.abs(pt - ref).mean())
    return np.array(ratios), np.array(means), over


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=30, help="random inputs per shape (default 30)")
    args = ap.parse_args()
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"{args.seeds} seeds per shape; ratios are attnkit / torch float32")
    print(f"{'Lq,Lk,H,Hkv,D':>22} | max-err ratio median  p90   max | mean-err ratio | over bar")
    for shape in SHAPES:
        r, m, over = margin(args.seeds, shape)
        print(f"{str(shape):>22} | {np.median(r):20.2f} {np.quantile(r, 0.9):5.2f} {r.max():5.2f}"
              f" | {np.median(m):14.2f} | {over}")


if __name__ == "__main__":
    main()
