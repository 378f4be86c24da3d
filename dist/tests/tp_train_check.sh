#!/usr/bin/env bash
# CLI check of tensor-parallel training: `mpirun -np P attnkit train gpt --tp P` logs the same
# losses, gradient norms and validation losses as one process and saves an ordinary one-process
# checkpoint (weights and AdamW moments of the whole model) equal to the one-process run's, which
# `attnkit eval` loads without --tp. A one-process checkpoint resumed with --tp continues as a
# one-process resume does. HKV >= P: every KV head on one rank; HKV < P: KV heads replicated
# (their k/v gradients summed over replicas); HKV = 1 also turns on gates, sinks and q/k/v biases.
# Tolerances (float32: the shards regroup the residual stream's sums):
#  - losses, gradient norms: relative 1e-4, as the --dp check;
#  - weights: |Δ| <= 5e-3 · steps · lr. AdamW normalises each element's step (≈ lr at most), so an
#    element whose gradient is a near-cancellation turns rounding into a visible change of its
#    step; the bound is a fraction of the largest possible movement (measured: at most 1e-3 of it);
#  - moments: |Δ| <= 1e-3 · the tensor's largest moment.
# Usage: tp_train_check.sh ATTNKIT MPIEXEC P HKV
set -euo pipefail
cli=$1 mpiexec=$2 p=$3 hkv=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
gate=none sink=none bias=false
if [ "$hkv" = 1 ]; then gate=headwise sink=learned bias=true; fi
cat > "$dir/config.json" <<JSON
{"vocab_size": 261, "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": $hkv, "head_dim": 16, "max_position_embeddings": 64,
 "tie_word_embeddings": true, "attention_bias": $bias, "attnkit_gate": "$gate", "attnkit_sink": "$sink"}
JSON
steps=8 lr=3e-3
args=(train gpt --config "$dir/config.json" --batch 4 --seq 32 --lr $lr --warmup 2 --eval-every 4 --quiet --threads 1)
"$cli" "${args[@]}" --steps $steps --out "$dir/one" > /dev/null
"$mpiexec" -np "$p" --oversubscribe "$cli" "${args[@]}" --steps $steps --out "$dir/tp" --tp "$p" > "$dir/tp.out"
[ "$(grep -c 'train loss' "$dir/tp.out")" -eq 1 ] || { echo "FAIL: expected one summary line (rank 0)"; exit 1; }

compare_logs() {  # one.csv tp.csv rows
  paste -d, "$1" "$2" | awk -F, -v want="$3" '
    NR == 1 { next }
    function bad(a, b) { d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); return d > 1e-4 * (m > 1 ? m : 1) }
    { rows++; if (bad($2, $8) || bad($4, $10) || ($6 != "" && bad($6, $12))) { print "FAIL: step " $1 ": " $0; fail = 1 } }
    END { if (rows != want) { print "FAIL: " rows " steps logged, expected " want; exit 1 } exit fail }'
}
compare_logs "$dir/one/log.csv" "$dir/tp/log.csv" $steps

# Every tensor of both safetensors files (Debian's python3, standard library only).
/usr/bin/python3 - "$dir/one" "$dir/tp" "$(awk "BEGIN { print 5e-3 * $steps * $lr }")" <<'PY'
import json, struct, sys
from array import array
def load(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k != '__metadata__':
            s, e = v['data_offsets']; a = array('f'); a.frombytes(b[8 + n + s:8 + n + e]); out[k] = a
    return out
one, tp, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
fail = False
def path(run, name):  # the optimizer state lives in the committed checkpoint (DIR/latest)
    if name == 'optimizer.safetensors':
        return run + '/' + open(run + '/latest').read().strip() + '/' + name
    return run + '/' + name
for name, tol in (('model.safetensors', None), ('optimizer.safetensors', 1e-3)):
    a, b = load(path(one, name)), load(path(tp, name))
    if sorted(a) != sorted(b):
        print('FAIL:', name, 'has different tensors'); sys.exit(1)
    worst = 0.0
    for k in a:
        if len(a[k]) != len(b[k]): print('FAIL:', k, 'sizes differ'); sys.exit(1)
        d = max(abs(x - y) for x, y in zip(a[k], b[k]))
        limit = bound if tol is None else tol * max(max(abs(x) for x in a[k]), 1e-30)
        if not d <= limit: print('FAIL: %s %s: max |diff| %.3g > %.3g' % (name, k, d, limit)); fail = True
        worst = max(worst, d if tol is None else d / limit * tol)
    print('%s: max |diff| %s %.3g' % (name, 'absolute' if tol is None else 'relative', worst))
sys.exit(1 if fail else 0)
PY

# The saved directory is an ordinary model: eval without --tp gives one process's figure.
e1=$("$cli" eval --model "$dir/one" --windows 4 | awk '{print $2}')
e2=$("$cli" eval --model "$dir/tp" --windows 4 | awk '{print $2}')
awk -v a="$e1" -v b="$e2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-3) }' ||
  { echo "FAIL: eval of the TP model $e2 vs one process $e1"; exit 1; }

# Resume: a 4-step one-process checkpoint continued to step 8 with --tp logs what continuing it
# with one process logs (the TP ranks split its weights and AdamW moments, and start at its step).
"$cli" "${args[@]}" --steps 4 --out "$dir/half" > /dev/null
cp -r "$dir/half" "$dir/r1" && cp -r "$dir/half" "$dir/r2"
"$cli" "${args[@]}" --steps $steps --out "$dir/r1" --resume > /dev/null
"$mpiexec" -np "$p" --oversubscribe "$cli" "${args[@]}" --steps $steps --out "$dir/r2" --resume --tp "$p" > /dev/null
compare_logs "$dir/r1/log.csv" "$dir/r2/log.csv" $steps

# Refusals: --tp with --dp; --tp that differs from the MPI world size.
if "$cli" "${args[@]}" --steps 1 --out "$dir/x" --tp 2 --dp 2> "$dir/err"; then echo "FAIL: --tp --dp accepted"; exit 1; fi
grep -q -- "--tp and --dp together are not supported" "$dir/err" || { cat "$dir/err"; exit 1; }
rc=0
timeout 60 "$mpiexec" -np "$p" --oversubscribe "$cli" "${args[@]}" --steps 1 --out "$dir/y" --tp $((2 * p)) \
  > /dev/null 2> "$dir/err" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: a --tp / world-size mismatch did not fail cleanly (rc $rc)"; exit 1; }
grep -q "processes requested but MPI started $p" "$dir/err" || { echo "FAIL: no clear mismatch error"; cat "$dir/err"; exit 1; }
echo "tp train check P=$p Hkv=$hkv: losses, gradient norms, weights and moments equal one process's ($steps steps); resume; refusals"
tail -n 2 "$dir/tp/log.csv"
