"""attnkit.flash_attention forward and backward against PyTorch autograd (FlashAttention's bar:
error vs a float64 reference at most 2x (forward) / 3x (gradients) PyTorch float32's own)."""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import attnkit
import torch_attention as ta

CLI = os.path.join(os.path.dirname(attnkit.__file__), "..", "..", "attnkit")


def check(q, k, v, dout, *, causal=False, window=(-1, -1), sinks=None, cu_q=None, cu_k=None,
          scale=None, softcap=0.0, dropout_p=0.0, seed=0):
    kw = dict(causal=causal, window=window, scale=scale, softcap=softcap, sink_logits=sinks,
              cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, dropout_p=dropout_p, seed=seed)
    out, lse = attnkit.flash_attention(q, k, v, return_lse=True, **kw)
    grads = attnkit.flash_attention_backward(dout, q, k, v, out, lse, **kw)
    keep = None
    if dropout_p > 0:
        h = q.shape[1]

        def keep(b, lq, lk):
            m = np.stack([attnkit.dropout_keep_mask(seed, dropout_p, b, hh, lq, lk)
                          for hh in range(h)])
            return torch.tensor(m / (1.0 - dropout_p))
    ta.assert_matches_torch(q, k, v, dout, out, lse, grads, causal=causal, window=window,
                            sinks=sinks, scale=scale, softcap=softcap, cu_q=cu_q, cu_k=cu_k,
                            keep=keep)
    return out, lse


@pytest.mark.parametrize("length", [1, 7, 17, 63, 65, 113, 512])
@pytest.mark.parametrize("hkv", [8, 4, 2, 1])
def test_gqa_grid(length, hkv):
    rng = np.random.default_rng(length * 7 + hkv)
    check(*ta.random_inputs(rng, length, length, 8, hkv, 32), causal=(length + hkv) % 2 == 1)


@pytest.mark.parametrize("lq,lk", [(7, 113), (113, 7), (65, 600), (600, 65)])
def test_lq_ne_lk(lq, lk):
    rng = np.random.default_rng(lq + 3 * lk)
    check(*ta.random_inputs(rng, lq, lk, 4, 2, 16), causal=True)


@pytest.mark.parametrize("d", [32, 64, 80, 128, 256, 20])
def test_head_dims(d):
    rng = np.random.default_rng(d)
    check(*ta.random_inputs(rng, 100, 100, 4, 2, d), causal=True)


# The packed forward kernels' boundaries: G = 3 stacks rows that are not
# a multiple of the row block; D = 48 and 96 are not multiples of the vector pair; lengths past a
# 512-key tile and windows whose first visible key is not on a 16/32-key panel.
@pytest.mark.parametrize("lq,lk,h,hkv,d,causal,window", [
    (100, 97, 6, 2, 96, True, (-1, -1)),
    (530, 530, 2, 1, 48, True, (-1, -1)),
    (700, 731, 4, 2, 128, False, (37, 5)),
    (600, 600, 3, 1, 64, False, (-1, -1)),
])
def test_packed_kernel_boundaries(lq, lk, h, hkv, d, causal, window):
    rng = np.random.default_rng(lq + lk + d)
    check(*ta.random_inputs(rng, lq, lk, h, hkv, d), causal=causal, window=window)


@pytest.mark.parametrize("window", [(16, 0), (5, 5), (-1, 3), (200, -1)])
def test_windows(window):
    rng = np.random.default_rng(abs(hash(window)) % 1000)
    check(*ta.random_inputs(rng, 300, 300, 4, 1, 16), window=window)


def test_sinks_softcap_scale():
    rng = np.random.default_rng(1)
    q, k, v, dout = ta.random_inputs(rng, 150, 150, 6, 2, 16)
    check(q * 2, k, v, dout, causal=True, sinks=rng.standard_normal(6).astype(np.float32),
          softcap=4.0, scale=0.3)
    check(q, k, v, dout, causal=True, sinks=np.zeros(6, np.float32))  # off-by-one softmax


def test_varlen_with_empty_sequences():
    rng = np.random.default_rng(2)
    cu_q = np.array([0, 0, 40, 45, 45, 130], np.int32)
    cu_k = np.array([0, 3, 43, 43, 43, 150], np.int32)
    q, k, v, dout = ta.random_inputs(rng, 130, 150, 4, 2, 16)
    out, lse = check(q, k, v, dout, causal=True, cu_q=cu_q, cu_k=cu_k)
    assert np.all(out[40:45] == 0) and np.all(np.isneginf(lse[:, 40:45]))


def test_many_short_sequences_in_grouped_items():
    """A ViT's batch: 48 sequences of 16 tokens, D 24; their tiny work items run in groups."""
    rng = np.random.default_rng(4)
    cu = np.arange(0, 48 * 16 + 1, 16, dtype=np.int32)
    check(*ta.random_inputs(rng, 48 * 16, 48 * 16, 4, 4, 24), cu_q=cu, cu_k=cu)


def test_dropout_against_torch_with_the_same_mask():
    rng = np.random.default_rng(3)
    check(*ta.random_inputs(rng, 70, 90, 4, 2, 16), causal=True, dropout_p=0.25, seed=11)


def test_dropout_rate_and_backward_match_reference():
    rng = np.random.default_rng(4)
    q, k, v, dout = ta.random_inputs(rng, 200, 200, 4, 2, 16)
    keep = np.stack([attnkit.dropout_keep_mask(5, 0.3, 0, h, 200, 200) for h in range(4)])
    assert abs(1 - keep.mean() - 0.3) < 0.01
    kw = dict(causal=True, dropout_p=0.3, seed=5)
    out, lse = attnkit.flash_attention(q, k, v, return_lse=True, **kw)
    ref_out = attnkit.attention_reference(q, k, v, **kw)
    grads = attnkit.flash_attention_backward(dout, q, k, v, out, lse, **kw)
    ref_grads = attnkit.attention_reference_backward(dout, q, k, v, **kw)
    np.testing.assert_allclose(out, ref_out, atol=2e-5 * np.abs(ref_out).max())
    for g, r in zip(grads[:3], ref_grads[:3]):
        np.testing.assert_allclose(g, r, atol=2e-5 * np.abs(r).max())


def test_batched_layout_and_strided_views():
    rng = np.random.default_rng(5)
    qkv = rng.standard_normal((2, 50, 4 + 2 + 2, 16), dtype=np.float32)
    q, k, v = qkv[:, :, :4], qkv[:, :, 4:6], qkv[:, :, 6:]
    out, lse = attnkit.flash_attention(q, k, v, causal=True, return_lse=True)
    assert out.shape == (2, 50, 4, 16) and lse.shape == (2, 4, 50)
    ref = attnkit.attention_reference(q, k, v, causal=True)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    dout = rng.standard_normal(out.shape, dtype=np.float32)
    dq, dk, dv, _ = attnkit.flash_attention_backward(dout, q, k, v, out, lse, causal=True)
    rdq, rdk, rdv, _ = attnkit.attention_reference_backward(dout, q, k, v, causal=True)
    for a, b in ((dq, rdq), (dk, rdk), (dv, rdv)):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_long_rows_32k_finite_and_correct_on_sampled_rows():
    rng = np.random.default_rng(6)
    n, d = 32768, 16
    q = rng.standard_normal((n, 1, d), dtype=np.float32)
    k = rng.standard_normal((n, 1, d), dtype=np.float32)
    v = rng.standard_normal((n, 1, d), dtype=np.float32)
    out, lse = attnkit.flash_attention(q, k, v, causal=True, return_lse=True)
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    for i in [0, 1, 511, 4097, 20000, n - 1]:
        s = (k[: i + 1, 0].astype(np.float64) @ q[i, 0].astype(np.float64)) / np.sqrt(d)
        m = s.max()
        p = np.exp(s - m)
        ref = (p / p.sum()) @ v[: i + 1, 0].astype(np.float64)
        assert np.abs(out[i, 0] - ref).max() < 1e-5, i
        assert abs(lse[0, i] - (m + np.log(p.sum()))) < 1e-4, i


@pytest.mark.parametrize("bad,match", [
    (dict(kv_heads=3), "multiple of KV heads"),
    (dict(cu=([0, 9, 4, 20], [0, 5, 10, 20])), "cu_seqlens_q"),
    (dict(cu=([0, 9, 20], [0, 5, 19])), "cu_seqlens_k"),
    (dict(dropout_p=1.0), "dropout_p"),
    (dict(dropout_p=-0.1), "dropout_p"),
    (dict(nan=True), "non-finite"),
])
def test_bad_arguments_raise_value_error_naming_the_argument(bad, match):
    rng = np.random.default_rng(7)
    q, k, v, _ = ta.random_inputs(rng, 20, 20, 8, bad.get("kv_heads", 2), 8)
    if bad.get("nan"):
        v[4, 1, 3] = np.inf
    cu = bad.get("cu", (None, None))
    with pytest.raises(ValueError, match=match):
        attnkit.flash_attention(q, k, v, dropout_p=bad.get("dropout_p", 0.0),
                                cu_seqlens_q=None if cu[0] is None else np.array(cu[0]),
                                cu_seqlens_k=None if cu[1] is None else np.array(cu[1]))


def test_forward_memory_is_linear_in_length():
    """Peak RSS growth of a forward at T=16384, H=8, D=64 within 1.2x of q, k, v, out and lse
    (the naive path would need 8 GiB of scores)."""
    res = subprocess.run([CLI, "bench", "attention", "--seq", "16384", "--heads", "8",
                          "--kv-heads", "8", "--head-dim", "64", "--causal", "--no-naive",
                          "--repeats", "1", "--json"], capture_output=True, text=True, check=True)
    r = json.loads(res.stdout)
    assert r["naive_scratch_bytes"] >= 8 << 30
    assert r["peak_rss_delta_bytes"] <= 1.2 * r["tensor_bytes"], r
