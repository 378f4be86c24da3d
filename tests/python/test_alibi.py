"""ALiBi (alibi_slopes) in attnkit's attention against PyTorch autograd in float64: flash and
reference forward and backward, decode, and the errors. Bar (FlashAttention's): error vs float64
at most 2x (outputs) / 3x (gradients) PyTorch float32's own. The bias is FlashAttention's
-slope·|i + Lk - Lq - j|, added after the softcap."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import attnkit
import torch_attention as ta


def paper_slopes(h, rows=None):
    """The ALiBi paper's geometric slopes 2^(-8(i+1)/H); [rows, H] scaled per row if rows."""
    s = 2.0 ** (-8.0 * np.arange(1, h + 1) / h)
    if rows is None:
        return s.astype(np.float32)
    return (s[None, :] * (1.0 + 0.75 * np.arange(rows))[:, None]).astype(np.float32)


def check(q, k, v, dout, slopes, *, causal=False, window=(-1, -1), sinks=None, cu_q=None,
          cu_k=None, scale=None, softcap=0.0, reference=False):
    kw = dict(causal=causal, window=window, scale=scale, softcap=softcap, sink_logits=sinks,
              alibi_slopes=slopes, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    if reference:
        out, lse = attnkit.attention_reference(q, k, v, return_lse=True, **kw)
        grads = attnkit.attention_reference_backward(dout, q, k, v, **kw)
    else:
        out, lse = attnkit.flash_attention(q, k, v, return_lse=True, **kw)
        grads = attnkit.flash_attention_backward(dout, q, k, v, out, lse, **kw)
    ta.assert_matches_torch(q, k, v, dout, out, lse, grads, causal=causal, window=window,
                            sinks=sinks, scale=scale, softcap=softcap, cu_q=cu_q, cu_k=cu_k,
                            alibi=slopes)
    return out


@pytest.mark.parametrize("length", [1, 7, 17, 65, 113])
@pytest.mark.parametrize("hkv", [4, 2, 1])
def test_mha_gqa_mqa_grid(length, hkv):
    rng = np.random.default_rng(length * 5 + hkv)
    check(*ta.random_inputs(rng, length, length, 4, hkv, 32), paper_slopes(4),
          causal=(length + hkv) % 2 == 0)


@pytest.mark.parametrize("lq,lk", [(7, 113), (113, 7), (65, 600), (600, 65)])
@pytest.mark.parametrize("causal", [True, False])
def test_lq_ne_lk(lq, lk, causal):
    rng = np.random.default_rng(lq + 3 * lk + causal)
    check(*ta.random_inputs(rng, lq, lk, 4, 2, 16), paper_slopes(4), causal=causal)


@pytest.mark.parametrize("window", [(16, 0), (5, 5), (-1, 3), (200, -1)])
def test_windows(window):
    rng = np.random.default_rng(sum(window) + 400)
    check(*ta.random_inputs(rng, 300, 300, 4, 1, 16), paper_slopes(4), window=window)


def test_softcap_sinks_scale():
    rng = np.random.default_rng(1)
    q, k, v, dout = ta.random_inputs(rng, 150, 170, 6, 2, 16)
    check(q * 2, k, v, dout, paper_slopes(6), causal=True, softcap=4.0, scale=0.3,
          sinks=rng.standard_normal(6).astype(np.float32))
    check(q, k, v, dout, paper_slopes(6), softcap=2.0, sinks=np.zeros(6, np.float32))


def test_varlen_per_sequence_slopes_with_an_empty_sequence():
    rng = np.random.default_rng(2)
    lq, lk = [0, 37, 5, 80], [3, 37, 0, 100]
    cu_q = np.cumsum([0] + lq).astype(np.int32)
    cu_k = np.cumsum([0] + lk).astype(np.int32)
    q, k, v, dout = ta.random_inputs(rng, cu_q[-1], cu_k[-1], 4, 2, 16)
    sinks = rng.standard_normal(4).astype(np.float32)
    for causal in (True, False):
        check(q, k, v, dout, paper_slopes(4, rows=4), causal=causal, sinks=sinks, cu_q=cu_q,
              cu_k=cu_k)


@pytest.mark.parametrize("causal", [True, False])
def test_reference_functions(causal):
    rng = np.random.default_rng(3)
    check(*ta.random_inputs(rng, 40, 57, 4, 2, 16), paper_slopes(4), causal=causal, softcap=3.0,
          reference=True)


def test_batched_layout_with_per_sequence_slopes_equals_packed():
    rng = np.random.default_rng(4)
    b, lq, lk, h, hkv, d = 3, 20, 31, 4, 2, 16
    q = rng.standard_normal((b, lq, h, d), dtype=np.float32)
    k = rng.standard_normal((b, lk, hkv, d), dtype=np.float32)
    v = rng.standard_normal((b, lk, hkv, d), dtype=np.float32)
    slopes = paper_slopes(h, rows=b)
    out = attnkit.flash_attention(q, k, v, causal=True, alibi_slopes=slopes)
    for i in range(b):
        one = attnkit.flash_attention(q[i], k[i], v[i], causal=True, alibi_slopes=slopes[i])
        np.testing.assert_array_equal(out[i], one)
    # [B, H] slopes are not all equal, so the sequences really use their own row.
    shared = attnkit.flash_attention(q, k, v, causal=True, alibi_slopes=slopes[0])
    assert np.abs(shared[1:] - out[1:]).max() > 1e-3


@pytest.mark.parametrize("dtype", ["f32", "f16", "int8"])
@pytest.mark.parametrize("rows", [None, 2])
def test_decode_matches_attention_over_the_cache(dtype, rows):
    rng = np.random.default_rng(5)
    h, hkv, d, n = 8, 2, 32, 3
    lens = [600, 45]
    cache = attnkit.KVCache(1, hkv, d, capacity=1024, dtype=dtype, max_sequences=2)
    kvs = []
    for length in lens:
        s = cache.add_sequence()
        k = rng.standard_normal((length, hkv, d), dtype=np.float32)
        v = rng.standard_normal((length, hkv, d), dtype=np.float32)
        cache.append(k, v, seq=s)
        kvs.append(cache.gather(seq=s))  # the stored (rounded) values, as float32
    q = rng.standard_normal((2, n, h, d), dtype=np.float32)
    slopes = paper_slopes(h, rows=rows)
    out, lse = attnkit.decode_attention(q, cache, alibi_slopes=slopes, return_lse=True)
    ref_out, ref_lse = attnkit.decode_attention(q, cache, alibi_slopes=slopes, return_lse=True,
                                                reference=True)
    np.testing.assert_allclose(out, ref_out, atol=2e-6, rtol=0)
    for s in range(2):
        sl = slopes if rows is None else slopes[s]
        kk, vv = kvs[s]
        kw = dict(window=(-1, 0), alibi=torch.tensor(sl, dtype=torch.float64))
        r64 = ta.attention(*(torch.tensor(x, dtype=torch.float64) for x in (q[s], kk, vv)), **kw)
        kw["alibi"] = torch.tensor(sl)
        r32 = ta.attention(*(torch.tensor(x) for x in (q[s], kk, vv)), **kw)
        ta.assert_within_bar(out[s], r64[0].numpy(), r32[0].numpy(), 2, "out")
        ta.assert_within_bar(lse[s], r64[1].numpy(), r32[1].numpy(), 2, "lse")


def _flash(q, k, v, slopes, **kw):
    return attnkit.flash_attention(q, k, v, alibi_slopes=slopes, **kw)


def _flash_backward(q, k, v, slopes, **kw):
    out, lse = attnkit.flash_attention(q, k, v, return_lse=True, **kw)
    return attnkit.flash_attention_backward(q, q, k, v, out, lse, alibi_slopes=slopes, **kw)


def _reference(q, k, v, slopes, **kw):
    return attnkit.attention_reference(q, k, v, alibi_slopes=slopes, **kw)


def _reference_backward(q, k, v, slopes, **kw):
    return attnkit.attention_reference_backward(q, q, k, v, alibi_slopes=slopes, **kw)


@pytest.mark.parametrize("fn", [_flash, _flash_backward, _reference, _reference_backward])
@pytest.mark.parametrize("bad", [np.ones(3, np.float32), np.ones((2, 4), np.float32),
                                 np.ones((4, 1), np.float32), np.ones((1, 4, 1), np.float32),
                                 np.array([0.5, np.nan, 0.25, 0.1], np.float32),
                                 np.array([0.5, 0.5, np.inf, 0.1], np.float32)])
def test_bad_slopes_raise_value_error(fn, bad):
    rng = np.random.default_rng(6)
    q, k, v, _ = ta.random_inputs(rng, 5, 5, 4, 2, 8)
    with pytest.raises(ValueError, match="alibi_slopes"):
        fn(q, k, v, bad, causal=True)


def test_decode_bad_slopes_raise_value_error():
    cache = attnkit.KVCache(1, 2, 8, capacity=16, dtype="f32")
    kv = np.ones((4, 2, 8), np.float32)
    cache.append(kv, kv)
    q = np.ones((1, 4, 8), np.float32)
    for bad in (np.ones(3, np.float32), np.ones((2, 4), np.float32),
                np.array([0.5, np.nan, 0.25, 0.1], np.float32)):
        for reference in (False, True):
            with pytest.raises(ValueError, match="alibi_slopes"):
                attnkit.decode_attention(q, cache, alibi_slopes=bad, reference=reference)


def test_bench_attention_alibi_flag():
    cli = os.path.join(os.path.dirname(attnkit.__file__), "..", "..", "attnkit")
    res = subprocess.run([cli, "bench", "attention", "--seq", "64", "--heads", "4", "--kv-heads",
                          "2", "--head-dim", "32", "--causal", "--alibi", "--backward",
                          "--repeats", "1", "--json"], capture_output=True, text=True, check=True)
    r = json.loads(res.stdout)
    assert r["alibi"] is True and r["causal"] is True
    assert {"gflops", "fraction_of_sgemm", "backward_gflops", "naive_ms"} <= set(r)
