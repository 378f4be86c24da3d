"""attnkit.KVCache and attnkit.decode_attention against PyTorch formulations: full history
(dense), exactly the sink + window tokens at cache positions with RoPE (sink policy), storage
dtypes against torch's own float16/bfloat16 rounding and an int8 quantiser written here."""
import math

import numpy as np
import pytest
import torch

import attnkit
import torch_attention as ta


def rope_torch(x, positions, theta):
    return ta.rope(x, positions, theta)


def torch_decode(q, k, v, dtype, **kw):
    out, lse = ta.attention(*(torch.tensor(x, dtype=dtype) for x in (q, k, v)), **kw)
    return out.double().numpy(), lse.double().numpy()


def test_dense_equals_attention_over_the_history():
    rng = np.random.default_rng(0)
    h, hkv, d, total, n = 8, 2, 32, 700, 3
    k = rng.standard_normal((total, hkv, d), dtype=np.float32)
    v = rng.standard_normal((total, hkv, d), dtype=np.float32)
    q = rng.standard_normal((n, h, d), dtype=np.float32)
    sinks = rng.standard_normal(h).astype(np.float32)
    cache = attnkit.KVCache(1, hkv, d, capacity=1024, dtype="f32")
    cache.append(k[:300], v[:300])
    cache.append(k[300:], v[300:])
    out, lse = attnkit.decode_attention(q, cache, sink_logits=sinks, return_lse=True)
    kw = dict(window=(-1, 0), sinks=torch.tensor(sinks, dtype=torch.float64))
    ref = torch_decode(q, k, v, torch.float64, **kw)
    kw["sinks"] = torch.tensor(sinks)
    pt = torch_decode(q, k, v, torch.float32, **kw)
    ta.assert_within_bar(out, ref[0], pt[0], 2, "out")
    ta.assert_within_bar(lse, ref[1], pt[1], 2, "lse")


def test_sink_policy_with_rope_through_wraparound():
    rng = np.random.default_rng(1)
    h, hkv, d, sink_tokens, window, theta = 4, 1, 16, 4, 50, 10000.0
    cache = attnkit.KVCache(1, hkv, d, dtype="f32", policy="sink", window=window, sink_tokens=sink_tokens)
    k = rng.standard_normal((400, hkv, d), dtype=np.float32)
    v = rng.standard_normal((400, hkv, d), dtype=np.float32)
    for t in range(400):
        cache.append(k[t:t + 1], v[t:t + 1])
        if t not in (30, 53, 54, 199, 399):
            continue
        keep = [p for p in range(t + 1) if p < sink_tokens or p > t - window]
        np.testing.assert_array_equal(cache.positions(), keep)
        q = rng.standard_normal((1, h, d), dtype=np.float32)
        out = attnkit.decode_attention(q, cache, rope_theta=theta)
        m = len(keep)
        kk = rope_torch(torch.tensor(k[keep], dtype=torch.float64), list(range(m)), theta)
        qq = rope_torch(torch.tensor(q, dtype=torch.float64), [m - 1], theta)
        ref, _ = ta.attention(qq, kk, torch.tensor(v[keep], dtype=torch.float64), window=(-1, 0))
        np.testing.assert_allclose(out, ref.numpy(), atol=2e-6, rtol=0)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "int8"])
def test_storage_dtypes_match_torch_rounding(dtype):
    rng = np.random.default_rng(2)
    h, hkv, d, total = 8, 4, 64, 300
    k = rng.standard_normal((total, hkv, d), dtype=np.float32)
    v = rng.standard_normal((total, hkv, d), dtype=np.float32)
    q = rng.standard_normal((2, h, d), dtype=np.float32)
    cache = attnkit.KVCache(1, hkv, d, capacity=total, dtype=dtype)
    cache.append(k, v)
    if dtype == "f16":
        stored = [torch.tensor(x).half().double() for x in (k, v)]
    elif dtype == "bf16":
        stored = [torch.tensor(x).bfloat16().double() for x in (k, v)]
    else:  # symmetric per-token-per-head int8: scale max|x|/127, round half to even
        def quant(x):
            scale = np.abs(x).max(-1, keepdims=True) / 127.0
            return torch.tensor(np.clip(np.rint(x / scale), -127, 127) * scale, dtype=torch.float64)
        stored = [quant(k.astype(np.float64)), quant(v.astype(np.float64))]
    got_k, got_v = cache.gather()
    if dtype != "int8":
        np.testing.assert_array_equal(got_k, stored[0].float().numpy())
    else:  # our scale is a float32 computed as amax/127.0f: allow its rounding
        np.testing.assert_allclose(got_k, stored[0].numpy(), rtol=1e-6, atol=1e-6)
    out = attnkit.decode_attention(q, cache)
    ref, _ = ta.attention(torch.tensor(q, dtype=torch.float64), *stored, window=(-1, 0))
    np.testing.assert_allclose(out, ref.numpy(), atol=5e-6 if dtype != "int8" else 2e-5, rtol=0)


def test_batched_paged_decode_equals_dense():
    rng = np.random.default_rng(3)
    hkv, d = 2, 16
    dense = attnkit.KVCache(1, hkv, d, capacity=200, dtype="bf16", max_sequences=3)
    paged = attnkit.KVCache(1, hkv, d, capacity=200, dtype="bf16", policy="paged", block_size=8,
                            max_sequences=3)
    for c in (dense, paged):
        for _ in range(3):
            c.add_sequence()
    for step in range(12):  # interleaved appends of different lengths
        for s in range(3):
            n = (s + 1) * 3
            k = rng.standard_normal((n, hkv, d), dtype=np.float32)
            v = rng.standard_normal((n, hkv, d), dtype=np.float32)  # its own values: a K/V swap shows
            dense.append(k, v, seq=s)
            paged.append(k, v, seq=s)
    q = rng.standard_normal((3, 2, 4, d), dtype=np.float32)
    np.testing.assert_allclose(attnkit.decode_attention(q, paged),
                               attnkit.decode_attention(q, dense), atol=1e-6)
    np.testing.assert_allclose(attnkit.decode_attention(q, paged),
                               attnkit.decode_attention(q, paged, reference=True), atol=2e-6)


def test_nbytes_equals_kv_plan():
    cache = attnkit.KVCache(4, 8, 128, capacity=1000, dtype="int8", max_sequences=2)
    plan = attnkit.kv_plan(layers=4, heads=32, kv_heads=8, head_dim=128, dtype="int8", context=1000, batch=2)
    assert cache.bytes_per_token == plan["bytes_per_token"]
    assert cache.nbytes == plan["bytes_batch"]


def test_bad_use_raises_and_keeps_other_sequences():
    cache = attnkit.KVCache(2, 2, 8, capacity=4, dtype="f32", max_sequences=2)
    a, b = cache.add_sequence(), cache.add_sequence()
    x = np.ones((3, 2, 8), np.float32)
    cache.append(x, x, seq=a)
    cache.append(x, x, seq=b)
    with pytest.raises(ValueError, match="capacity"):
        cache.append(x, x, seq=a)
    assert cache.length(a) == 3
    with pytest.raises(ValueError, match="must be \\[n, 2, 8\\]"):
        cache.append(np.ones((1, 3, 8), np.float32), np.ones((1, 3, 8), np.float32), seq=a)
    with pytest.raises(ValueError, match="layer"):
        cache.append(x[:1], x[:1], layer=5, seq=a)
    cache.free_sequence(a)
    with pytest.raises(ValueError, match="not active"):
        attnkit.decode_attention(np.ones((1, 4, 8), np.float32), cache, seqs=[a])
    with pytest.raises(ValueError, match="policy"):
        attnkit.KVCache(1, 1, 8, capacity=4, policy="lru")
    np.testing.assert_array_equal(cache.gather(seq=b)[0], x)


def expect_f16_decode_matches_torch(seed, h, hkv, d, total, n, window):
    """n random queries of h heads against `total` random tokens in an f16 cache: decode_attention
    against PyTorch over the stored (f16-rounded) history with a left window (-1: none), within
    the 2x bar of torch float32's error."""
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((total, hkv, d), dtype=np.float32)
    v = rng.standard_normal((total, hkv, d), dtype=np.float32)
    q = rng.standard_normal((n, h, d), dtype=np.float32)
    cache = attnkit.KVCache(1, hkv, d, capacity=total, dtype="f16")
    cache.append(k, v)
    out, lse = attnkit.decode_attention(q, cache, window=(window, 0), return_lse=True)
    k16, v16 = (torch.tensor(x).half().float().numpy() for x in (k, v))
    ref = torch_decode(q, k16, v16, torch.float64, window=(window, 0))
    pt = torch_decode(q, k16, v16, torch.float32, window=(window, 0))
    ta.assert_within_bar(out, ref[0], pt[0], 2, "out")
    ta.assert_within_bar(lse, ref[1], pt[1], 2, "lse")


@pytest.mark.parametrize("hkv,n,window", [(1, 1, -1), (1, 3, 200), (2, 2, -1)])
def test_wide_groups_match_torch(hkv, n, window):
    """MQA-like groups (n·G query rows per KV head fill whole vectors): the wide-group kernels,
    against PyTorch over the stored f16 history, within the 2x bar of torch float32's error."""
    expect_f16_decode_matches_torch(5, h=32, hkv=hkv, d=128, total=777, n=n, window=window)


@pytest.mark.parametrize("hkv", [1, 8])
def test_long_cache_in_several_items_and_a_tail_matches_torch(hkv):
    """A 2237-token cache is decoded in several work items (1024, 1024, 61) and a 128-token tail
    item, merged by logsumexp: against PyTorch over the stored f16 history (MQA: the wide-group
    kernels; G = 4: the row kernels), within the 2x bar of torch float32's error."""
    expect_f16_decode_matches_torch(7, h=32, hkv=hkv, d=64, total=2237, n=1, window=-1)


@pytest.mark.parametrize("page_order", [False, True])
def test_either_reading_order_matches_torch(page_order):
    """Both reading orders of decode (set_decode_page_order): G = 4 with 2 KiB tokens (two per 4 KiB
    page) over several work items, against PyTorch over the stored f16 history."""
    before = attnkit.decode_page_order()
    attnkit.set_decode_page_order(page_order)
    try:
        assert attnkit.decode_page_order() is page_order
        expect_f16_decode_matches_torch(9, h=32, hkv=8, d=128, total=1500, n=1, window=-1)
    finally:
        attnkit.set_decode_page_order(before)
