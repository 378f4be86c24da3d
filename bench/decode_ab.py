#!/usr/bin/env python3
"""Compares `attnkit bench decode` between two or more attnkit binaries in alternating rounds.

Each round runs every binary once (`bench decode --json` plus the arguments given after `--`), in
forward order on even rounds and reverse order on odd ones, so slow minutes on a shared machine hit
all binaries alike. Prints, per binary and per KV-head count, the median and best ms per token and
the median fraction of the FMA peak and of the read bandwidth (each run measures its own peaks).

    bench/decode_ab.py old/attnkit new/attnkit --rounds 8 -- --kv-heads 32,8,1 --context 16384
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys

from bench_common import parse_ab


KEYS = ("kv_heads", "ms_per_token", "fraction_of_fma_peak", "fraction_of_bandwidth")


def run_once(binary, args):
    """One `bench decode --json` run of `binary`; returns its rows (dicts), one per KV-head count.
    Raises ValueError naming the command when it cannot run, fails or prints something else."""
    cmd = [binary, "bench", "decode", "--json", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise ValueError(f"cannot run {binary}: {e}") from e
    if done.returncode != 0:
        raise ValueError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    try:
        rows = json.loads(done.stdout)
    except json.JSONDecodeError as e:
        raise ValueError(f"{' '.join(cmd)} did not print JSON: {e}") from e
    rows = rows if isinstance(rows, list) else [rows]
    for row in rows:
        missing = [k for k in KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            raise ValueError(f"{' '.join(cmd)}: its JSON lacks {', '.join(missing)}")
    return rows


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Arguments after -- go to `attnkit bench decode`.")
    opts, rest = parse_ab(ap, argv)
    rest = rest or []
    for b in opts.binaries:
        if shutil.which(b) is None:
            ap.error(f"not an executable: {b}")
    runs = {b: [] for b in opts.binaries}
    try:
        for r in range(opts.rounds):
            for b in opts.binaries if r % 2 == 0 else opts.binaries[::-1]:
                rows = run_once(b, rest)
                first = next(iter(runs.values()))
                if first and len(rows) != len(first[0]):
                    raise ValueError(f"{b} printed {len(rows)} rows, the first run {len(first[0])}")
                runs[b].append(rows)
    except ValueError as e:
        print(f"decode_ab: {e}", file=sys.stderr)
        return 1
    print(f"{opts.rounds} alternating rounds of `bench decode {' '.join(rest)}`; medians over rounds")
    print(f"{'binary':<32} {'Hkv':>4} {'ms/token':>9} {'best':>9} {'of FMA':>7} {'of bw':>7}")
    for b, rounds in runs.items():
        for i, row in enumerate(rounds[0]):
            ms = [rr[i]["ms_per_token"] for rr in rounds]
            fma = statistics.median(rr[i]["fraction_of_fma_peak"] for rr in rounds)
            bw = statistics.median(rr[i]["fraction_of_bandwidth"] for rr in rounds)
            print(f"{b:<32} {row['kv_heads']:>4} {statistics.median(ms):>9.4f} {min(ms):>9.4f} "
                  f"{100 * fma:>6.1f}% {100 * bw:>6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
