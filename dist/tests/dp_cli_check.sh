#!/usr/bin/env bash
# CLI check of data parallelism: `mpirun -np P attnkit train gpt --dp` (each rank takes batch/P
# windows, gradients averaged) logs the same losses and gradient norms as one process on the whole
# batch, up to float32 rounding of the regrouped sums (relative 1e-4 after 8 AdamW steps).
# Usage: dp_cli_check.sh ATTNKIT MPIEXEC P
set -euo pipefail
cli=$1 mpiexec=$2 p=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(train gpt --preset tiny --batch 4 --seq 32 --steps 8 --lr 3e-3 --warmup 2 --eval-every 4 --quiet --threads 1)
"$cli" "${args[@]}" --out "$dir/one" > /dev/null
"$mpiexec" -np "$p" --oversubscribe "$cli" "${args[@]}" --out "$dir/dp" --dp > "$dir/dp.out"
[ "$(grep -c 'train loss' "$dir/dp.out")" -eq 1 ] || { echo "FAIL: expected one summary line (rank 0)"; exit 1; }
paste -d, "$dir/one/log.csv" "$dir/dp/log.csv" | awk -F, '
  NR == 1 { next }
  function bad(a, b) { d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); return d > 1e-4 * (m > 1 ? m : 1) }
  { rows++; if (bad($2, $8) || bad($4, $10) || ($6 != "" && bad($6, $12))) { print "FAIL: step " $1 ": " $0; fail = 1 } }
  END { if (rows != 8) { print "FAIL: " rows " steps logged"; exit 1 } exit fail }'
# An error on rank 0 alone (it is the only writer: its --out cannot be created) ends every rank
# with a one-line error instead of leaving the others waiting in an all-reduce.
mkdir -p "$dir/ro" && touch "$dir/ro/file"
rc=0
timeout 60 "$mpiexec" -np "$p" --oversubscribe "$cli" "${args[@]}" --out "$dir/ro/file/sub" --dp > /dev/null 2> "$dir/err" || rc=$?
[ "$rc" -ne 0 ] || { echo "FAIL: a failing rank 0 did not fail the job"; exit 1; }
[ "$rc" -ne 124 ] || { echo "FAIL: the job hung after rank 0 failed"; exit 1; }
grep -q "attnkit: error: rank 0 of $p:" "$dir/err" || { echo "FAIL: no rank-prefixed error line"; cat "$dir/err"; exit 1; }
echo "dp cli check P=$p: losses and gradient norms equal one process's (8 steps); a rank-0 failure ends the job"
tail -n 2 "$dir/dp/log.csv"
