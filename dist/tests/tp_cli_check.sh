#!/usr/bin/env bash
# CLI check of tensor parallelism: `mpirun -np P attnkit generate --tp P` prints the same greedy
# text as one process, and every rank's KV bytes equal kv-plan's per-shard figure.
# Usage: tp_cli_check.sh ATTNKIT ATTNKIT_TP_CHECK MPIEXEC P HKV
set -euo pipefail
cli=$1 check=$2 mpiexec=$3 p=$4 hkv=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$check" --save "$dir/model" "$hkv"
args=(generate --model "$dir/model" --prompt "ab" --max-tokens 30 --temperature 0 --no-stop --threads 1)
"$cli" "${args[@]}" > "$dir/one.txt" 2>/dev/null
"$mpiexec" -np "$p" --oversubscribe "$cli" "${args[@]}" --tp "$p" > "$dir/tp.txt" 2> "$dir/tp.err"
cat "$dir/tp.err"
cmp "$dir/one.txt" "$dir/tp.txt" || { echo "FAIL: TP text differs from one process"; exit 1; }
plan=$(sed -n 's/^\[kv-plan --tp [0-9]*: \([0-9]*\) bytes per shard.*/\1/p' "$dir/tp.err")
ranks=$(grep -c '^\[rank' "$dir/tp.err")
[ "$ranks" -eq "$p" ] || { echo "FAIL: expected $p rank lines, got $ranks"; exit 1; }
while read -r bytes; do
  [ "$bytes" = "$plan" ] || { echo "FAIL: rank KV bytes $bytes != kv-plan $plan"; exit 1; }
done < <(sed -n 's/^\[rank [0-9]*: .*KV cache \([0-9]*\) bytes.*/\1/p' "$dir/tp.err")
echo "tp cli check P=$p Hkv=$hkv: same text, KV bytes per rank $plan = kv-plan"
