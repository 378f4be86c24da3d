"""attnkit.attention_reference (forward and backward) against an independent PyTorch formulation."""
import numpy as np
import pytest

import attnkit
import torch_attention as ta

LENGTHS = [1, 7, 17, 63, 65, 113]


def make(rng, tq, tk, h, hkv, d, sinks=False):
    q, k, v, dout = ta.random_inputs(rng, tq, tk, h, hkv, d)
    s = rng.standard_normal(h).astype(np.float32) if sinks else None
    return q, k, v, dout, s


def check(q, k, v, dout, sinks=None, causal=False, window=(-1, -1), cu_q=None, cu_k=None,
          scale=None, softcap=0.0):
    kw = dict(causal=causal, window=window, scale=scale, softcap=softcap, sink_logits=sinks,
              cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    out, lse = attnkit.attention_reference(q, k, v, return_lse=True, **kw)
    grads = attnkit.attention_reference_backward(dout, q, k, v, **kw)
    ta.assert_matches_torch(q, k, v, dout, out, lse, grads, causal=causal, window=window,
                            sinks=sinks, scale=scale, softcap=softcap, cu_q=cu_q, cu_k=cu_k)
    return out, lse


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("hkv", [8, 4, 2, 1])
def test_gqa_grid_causal_and_full(length, hkv):
    rng = np.random.default_rng(length * 10 + hkv)
    q, k, v, dout, _ = make(rng, length, length, 8, hkv, 16)
    check(q, k, v, dout, causal=bool(length % 2))


@pytest.mark.parametrize("lq,lk", [(7, 17), (17, 7), (1, 65), (65, 1), (63, 113)])
def test_lq_ne_lk_bottom_right_causal(lq, lk):
    rng = np.random.default_rng(lq * 1000 + lk)
    q, k, v, dout, _ = make(rng, lq, lk, 4, 2, 8)
    out, lse = check(q, k, v, dout, causal=True)
    if lq > lk:  # queries before the diagonal see nothing: zeros and lse = -inf
        assert np.all(out[: lq - lk] == 0) and np.all(np.isneginf(lse[:, : lq - lk]))


@pytest.mark.parametrize("window", [(3, 0), (2, 2), (0, 0), (-1, 5), (10, -1)])
def test_windows(window):
    rng = np.random.default_rng(sum(window) + 100)
    q, k, v, dout, _ = make(rng, 33, 29, 4, 1, 8)
    check(q, k, v, dout, window=window)


def test_softcap_scale_and_sinks():
    rng = np.random.default_rng(5)
    q, k, v, dout, s = make(rng, 40, 40, 6, 3, 12, sinks=True)
    check(q * 3, k, v, dout, sinks=s, causal=True, softcap=5.0, scale=0.4)


def test_off_by_one_softmax_is_zero_sinks():
    rng = np.random.default_rng(6)
    q, k, v, dout, _ = make(rng, 9, 9, 2, 1, 4)
    check(q, k, v, dout, sinks=np.zeros(2, np.float32), causal=True)


def test_varlen_with_empty_sequence_and_masked_rows():
    rng = np.random.default_rng(7)
    cu_q = np.array([0, 5, 5, 12, 13], np.int32)
    cu_k = np.array([0, 3, 9, 9, 20], np.int32)  # third sequence has 7 queries and no keys
    q, k, v, dout, s = make(rng, 13, 20, 4, 2, 8, sinks=False)
    out, lse = check(q, k, v, dout, causal=True, cu_q=cu_q, cu_k=cu_k)
    assert np.all(out[5:12] == 0) and np.all(np.isneginf(lse[:, 5:12]))
    check(q, k, v, dout, sinks=rng.standard_normal(4).astype(np.float32), cu_q=cu_q, cu_k=cu_k)


def test_batched_layout_equals_packed():
    rng = np.random.default_rng(8)
    q = rng.standard_normal((3, 10, 4, 8), dtype=np.float32)
    k = rng.standard_normal((3, 12, 2, 8), dtype=np.float32)
    v = rng.standard_normal((3, 12, 2, 8), dtype=np.float32)
    out, lse = attnkit.attention_reference(q, k, v, causal=True, return_lse=True)
    assert out.shape == (3, 10, 4, 8) and lse.shape == (3, 4, 10)
    for b in range(3):
        ob, lb = attnkit.attention_reference(q[b], k[b], v[b], causal=True, return_lse=True)
        np.testing.assert_array_equal(out[b], ob)
        np.testing.assert_array_equal(lse[b], lb)


def test_strided_views_of_fused_qkv():
    rng = np.random.default_rng(9)
    qkv = rng.standard_normal((20, 4 + 2 + 2, 8), dtype=np.float32)
    q, k, v = qkv[:, :4], qkv[:, 4:6], qkv[:, 6:]
    assert not q.flags.c_contiguous
    a = attnkit.attention_reference(q, k, v, causal=True)
    b = attnkit.attention_reference(*(np.ascontiguousarray(x) for x in (q, k, v)), causal=True)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad", [
    dict(k_heads=3, match="multiple of KV heads"),
    dict(cu_q=[0, 5, 3, 13], match="cu_seqlens_q"),
    dict(cu_q=[0, 5, 12], match="cu_seqlens_q"),
    dict(nan=True, match="non-finite"),
    dict(rank=2, match="ranks differ|dimensions"),
])
def test_bad_arguments_raise_value_error(bad):
    rng = np.random.default_rng(10)
    q, k, v, _, _ = make(rng, 13, 13, 8, bad.get("k_heads", 2), 8)
    if bad.get("nan"):
        q[3, 1, 2] = np.nan
    if bad.get("rank"):
        q = q[:, 0]
    cu = bad.get("cu_q")
    with pytest.raises(ValueError, match=bad["match"]):
        attnkit.attention_reference(q, k, v, cu_seqlens_q=None if cu is None else np.array(cu),
                                    cu_seqlens_k=None if cu is None else np.array([0, 4, 9, 13][:len(cu)]))
