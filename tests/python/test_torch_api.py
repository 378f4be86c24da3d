"""attnkit.torch (FlashAttention 2.7's API on the CPU) against naive PyTorch autograd: our error
vs float64 at most 2x (outputs) / 3x (gradients) PyTorch float32's own."""
import re
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

import attnkit
import attnkit.torch as fa
import torch_api_ref as ref
import torch_deform as td
from attnkit import _torch_common

GEN = torch.Generator()


def randn(*shape, seed=0):
    GEN.manual_seed(seed)
    return torch.randn(*shape, generator=GEN)


def qkv(b, lq, lk, h, hkv, d, seed=0):
    return {"q": randn(b, lq, h, d, seed=seed), "k": randn(b, lk, hkv, d, seed=seed + 1),
            "v": randn(b, lk, hkv, d, seed=seed + 2)}


@pytest.mark.parametrize("h,hkv", [(4, 4), (4, 2), (6, 1)])
@pytest.mark.parametrize("lq,lk", [(17, 17), (7, 40), (40, 7), (65, 65)])
@pytest.mark.parametrize("causal", [False, True])
def test_func_gqa_causal(h, hkv, lq, lk, causal):
    ref.check_against_torch(lambda q, k, v: fa.flash_attn_func(q, k, v, causal=causal),
                            lambda q, k, v: ref.reference(q, k, v, causal=causal),
                            qkv(2, lq, lk, h, hkv, 16, seed=lq + lk + h + hkv))


@pytest.mark.parametrize("window,causal", [((8, 0), False), ((3, 3), False), ((-1, 2), False),
                                           ((10, -1), False), ((5, 5), True)])
def test_func_windows(window, causal):
    ref.check_against_torch(
        lambda q, k, v: fa.flash_attn_func(q, k, v, causal=causal, window_size=window),
        lambda q, k, v: ref.reference(q, k, v, causal=causal, window=window),
        qkv(2, 50, 60, 4, 2, 32, seed=7))


def test_func_sink_softcap_scale():
    inputs = qkv(2, 33, 41, 4, 2, 16, seed=3)
    inputs["q"] = inputs["q"] * 3
    inputs["s"] = randn(4, seed=9)
    ref.check_against_torch(
        lambda q, k, v, s: fa.flash_attn_func(q, k, v, softmax_scale=0.4, softcap=5.0,
                                              causal=True, learnable_sink=s),
        lambda q, k, v, s: ref.reference(q, k, v, scale=0.4, softcap=5.0, causal=True, sink=s),
        inputs)


# Sequence lengths (q, k): (5, 9), (0, 0), (12, 0) queries without keys, (13, 16), (0, 6).
CU_Q = [0, 5, 5, 17, 30, 30]
CU_K = [0, 9, 9, 9, 25, 31]


def _lse_bar(ours, inputs, **kw):
    """softmax_lse [H, T] against the float64 and float32 naive references (equal infinities, as
    for queries without keys, count as exact)."""
    lse64 = ref.ta.attention(*(inputs[n].double() for n in "qkv"), **kw)[1].numpy()
    lse32 = ref.ta.attention(*(inputs[n] for n in "qkv"), **kw)[1].numpy()
    ref.ta.assert_within_bar(ours.numpy(), lse64, lse32, 2, "softmax_lse")


@pytest.mark.parametrize("sink", [False, True])
def test_return_attn_probs_gives_lse(sink):
    """FlashAttention returns (out, softmax_lse, S_dmask) for return_attn_probs; without dropout
    S_dmask is None and softmax_lse is float32 [B, H, Lq] (varlen [H, total_q])."""
    b, lq, lk, h = 2, 7, 12, 4
    x = qkv(b, lq, lk, h, 2, 16, seed=21)
    s = randn(h, seed=22) if sink else None
    out, lse, probs = fa.flash_attn_func(x["q"], x["k"], x["v"], causal=True, learnable_sink=s,
                                         return_attn_probs=True)
    assert probs is None and lse.dtype == torch.float32 and lse.shape == (b, h, lq)
    assert torch.equal(out, fa.flash_attn_func(x["q"], x["k"], x["v"], causal=True,
                                               learnable_sink=s))
    flat = {"q": x["q"].reshape(b * lq, h, 16), "k": x["k"].reshape(b * lk, 2, 16),
            "v": x["v"].reshape(b * lk, 2, 16)}
    cu = {"cu_q": [i * lq for i in range(b + 1)], "cu_k": [i * lk for i in range(b + 1)]}
    _lse_bar(lse.permute(1, 0, 2).reshape(h, b * lq), flat, window=(-1, 0), sinks=s, **cu)
    # The gradient through out is the one without return_attn_probs; lse carries none.
    q = x["q"].clone().requires_grad_()
    o, lse, _ = fa.flash_attn_func(q, x["k"], x["v"], causal=True, return_attn_probs=True)
    assert not lse.requires_grad
    o.square().sum().backward()
    q2 = x["q"].clone().requires_grad_()
    fa.flash_attn_func(q2, x["k"], x["v"], causal=True).square().sum().backward()
    assert torch.equal(q.grad, q2.grad)


def test_return_attn_probs_varlen_and_packed():
    inputs = {"q": randn(30, 4, 16, seed=1), "k": randn(31, 2, 16, seed=2),
              "v": randn(31, 2, 16, seed=3)}
    cu_q, cu_k = torch.tensor(CU_Q, dtype=torch.int32), torch.tensor(CU_K, dtype=torch.int32)
    out, lse, probs = fa.flash_attn_varlen_func(inputs["q"], inputs["k"], inputs["v"], cu_q, cu_k,
                                                13, 16, causal=True, return_attn_probs=True)
    assert probs is None and lse.shape == (4, 30)
    assert torch.isinf(lse[:, 5:17]).all() and (lse[:, 5:17] < 0).all()  # queries without keys
    _lse_bar(lse, inputs, window=(-1, 0), cu_q=CU_Q, cu_k=CU_K)
    x = randn(2, 9, 3, 4, 16, seed=4)
    out, lse, _ = fa.flash_attn_qkvpacked_func(x, return_attn_probs=True)
    assert torch.equal(out, fa.flash_attn_qkvpacked_func(x)) and lse.shape == (2, 4, 9)
    half = fa.flash_attn_func(x[:, :, 0].half(), x[:, :, 1].half(), x[:, :, 2].half(),
                              return_attn_probs=True)
    assert half[0].dtype == torch.float16 and half[1].dtype == torch.float32
    torch.manual_seed(5)  # the refusal comes before the dropout seed is drawn
    with pytest.raises(NotImplementedError, match="^return_attn_probs: with dropout_p > 0"):
        fa.flash_attn_qkvpacked_func(x, dropout_p=0.1, return_attn_probs=True)
    after = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(3))


@pytest.mark.parametrize("causal,with_sink", [(False, False), (True, True), (True, False)])
def test_varlen_empty_sequences(causal, with_sink):
    inputs = {"q": randn(30, 4, 16, seed=1), "k": randn(31, 2, 16, seed=2),
              "v": randn(31, 2, 16, seed=3)}
    if with_sink:
        inputs["s"] = randn(4, seed=4)
    cu_q, cu_k = torch.tensor(CU_Q, dtype=torch.int32), torch.tensor(CU_K, dtype=torch.int32)

    def ours(q, k, v, s=None):
        return fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 13, 16, causal=causal,
                                         learnable_sink=s)

    def naive(q, k, v, s=None):
        return ref.reference(q, k, v, causal=causal, sink=s, cu_q=CU_Q, cu_k=CU_K)
    ref.check_against_torch(ours, naive, inputs)


def test_varlen_paged_kv_gradients_reach_pages():
    pbs, cu_q, cu_k = 4, [0, 6, 6, 15], [0, 10, 13, 13]
    table = torch.tensor([[5, 0, 3], [2, 4, 1], [7, 6, 7]], dtype=torch.int32)

    def dense(x):  # pages -> packed [13, Hkv, D] through the table, independently of attnkit
        seqs = [x[table[b].long()].reshape(-1, *x.shape[2:]) for b in range(3)]
        return torch.cat([s[:n] for s, n in zip(seqs, [10, 3, 0])])
    ref.check_against_torch(
        lambda q, k, v: fa.flash_attn_varlen_func(q, k, v, torch.tensor(cu_q), torch.tensor(cu_k),
                                                  9, 10, causal=True, block_table=table),
        lambda q, k, v: ref.reference(q, dense(k), dense(v), causal=True, cu_q=cu_q, cu_k=cu_k),
        {"q": randn(15, 4, 16, seed=1), "k": randn(8, pbs, 2, 16, seed=2),
         "v": randn(8, pbs, 2, 16, seed=3)})


def test_qkvpacked_and_varlen_qkvpacked():
    packed = randn(2, 37, 3, 4, 16, seed=5)
    s = randn(4, seed=6)
    res = ref.check_against_torch(
        lambda qkv, s: fa.flash_attn_qkvpacked_func(qkv, causal=True, learnable_sink=s),
        lambda qkv, s: ref.reference(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True, sink=s),
        {"qkv": packed, "s": s})
    assert res["dqkv"].shape == packed.shape
    cu = [0, 10, 10, 37]
    cu_t = torch.tensor(cu, dtype=torch.int32)
    ref.check_against_torch(
        lambda qkv: fa.flash_attn_varlen_qkvpacked_func(qkv, cu_t, 27, window_size=(4, 4)),
        lambda qkv: ref.reference(qkv[:, 0], qkv[:, 1], qkv[:, 2], window=(4, 4), cu_q=cu, cu_k=cu),
        {"qkv": packed[0]})


def test_kvpacked_and_varlen_kvpacked():
    q, kv = randn(2, 19, 6, 16, seed=1), randn(2, 29, 2, 2, 16, seed=2)
    ref.check_against_torch(
        lambda q, kv: fa.flash_attn_kvpacked_func(q, kv, causal=True),
        lambda q, kv: ref.reference(q, kv[:, :, 0], kv[:, :, 1], causal=True), {"q": q, "kv": kv})
    cu_q, cu_k = [0, 0, 19], [0, 12, 29]
    ref.check_against_torch(
        lambda q, kv: fa.flash_attn_varlen_kvpacked_func(
            q, kv, torch.tensor(cu_q), torch.tensor(cu_k), 19, 17, causal=True),
        lambda q, kv: ref.reference(q, kv[:, 0], kv[:, 1], causal=True, cu_q=cu_q, cu_k=cu_k),
        {"q": q[0], "kv": kv[0]})


def test_dropout_mask_from_seed():
    p, h = 0.3, 4
    inputs = qkv(2, 23, 31, h, 2, 16, seed=11)
    torch.manual_seed(1234)
    seed = _torch_common.dropout_seed()
    keep = ref.dropout_keep(seed, p, h)

    def ours(q, k, v):
        torch.manual_seed(1234)
        out = fa.flash_attn_func(q, k, v, dropout_p=p, causal=True)
        torch.randn(100)  # moves torch's generator: the backward must not depend on it
        return out
    ref.check_against_torch(ours, lambda q, k, v: ref.reference(q, k, v, causal=True, keep=keep),
                            inputs)
    torch.manual_seed(1234)
    a = fa.flash_attn_func(*inputs.values(), dropout_p=p)
    b = fa.flash_attn_func(*inputs.values(), dropout_p=p)
    torch.manual_seed(1234)
    assert torch.equal(a, fa.flash_attn_func(*inputs.values(), dropout_p=p))
    assert not torch.equal(a, b)


def test_dropout_varlen_sequence_index():
    p, h = 0.2, 2
    cu_q, cu_k = [0, 7, 7, 20], [0, 9, 15, 30]
    torch.manual_seed(77)
    keep = ref.dropout_keep(_torch_common.dropout_seed(), p, h)

    def ours(q, k, v):
        torch.manual_seed(77)
        return fa.flash_attn_varlen_func(q, k, v, torch.tensor(cu_q), torch.tensor(cu_k), 13, 15,
                                         dropout_p=p)
    ref.check_against_torch(
        ours, lambda q, k, v: ref.reference(q, k, v, keep=keep, cu_q=cu_q, cu_k=cu_k),
        {"q": randn(20, h, 16, seed=1), "k": randn(30, 1, 16, seed=2), "v": randn(30, 1, 16, seed=3)})


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_round_trip(dtype):
    inputs = {n: x.to(dtype) for n, x in qkv(2, 31, 45, 4, 2, 32, seed=21).items()}
    leaves = {n: x.clone().requires_grad_() for n, x in inputs.items()}
    out = fa.flash_attn_func(**leaves, causal=True)
    dout = randn(*out.shape, seed=3).to(dtype)
    out.backward(dout)
    assert out.dtype == dtype and all(x.grad.dtype == dtype for x in leaves.values())
    ref_leaves = {n: x.double().requires_grad_() for n, x in inputs.items()}
    r = ref.reference(**ref_leaves, causal=True)
    r.backward(dout.double())
    ref.assert_low_precision(out.detach(), r.detach(), 2, "out")
    for n in leaves:
        ref.assert_low_precision(leaves[n].grad, ref_leaves[n].grad, 3, "d" + n)


def test_strided_views_not_copied_and_grad_layout():
    packed = randn(2, 9, 3, 4, 16, seed=2)
    view = packed[:, :, 0]
    arr = _torch_common.to_numpy32(view)
    assert np.shares_memory(arr, packed.numpy()) and arr.strides[1] == 3 * 4 * 16 * 4
    q = randn(2, 9, 8, 16, seed=3)[:, :, :4].requires_grad_()  # leaf made from a view
    out = fa.flash_attn_func(q, view, packed[:, :, 1])
    out.sum().backward()
    assert q.grad.shape == q.shape


def test_backward_deterministic():
    inputs = qkv(1, 70, 70, 4, 1, 32, seed=31)
    grads = []
    for _ in range(2):
        leaves = {n: x.clone().requires_grad_() for n, x in inputs.items()}
        fa.flash_attn_func(**leaves, causal=True, deterministic=True).square().sum().backward()
        grads.append([x.grad for x in leaves.values()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def _cache_case(paged, seed=0):
    """Batch 3, Hkv 2, H 4, D 16, cache of 48 tokens per sequence, 5 new tokens."""
    b, hkv, d, cap = 3, 2, 16, 48
    kc, vc = randn(b, cap, hkv, d, seed=seed), randn(b, cap, hkv, d, seed=seed + 1)
    if not paged:
        return kc, vc, None
    pbs = 16
    perm = torch.randperm(b * cap // pbs, generator=GEN.manual_seed(seed))
    table = perm.reshape(b, cap // pbs).to(torch.int32)
    kp = torch.empty(b * cap // pbs, pbs, hkv, d)
    vp = torch.empty_like(kp)
    kp[table.long()] = kc.reshape(b, cap // pbs, pbs, hkv, d)
    vp[table.long()] = vc.reshape(b, cap // pbs, pbs, hkv, d)
    return kp, vp, table


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_kvcache_append_in_place(paged, causal):
    k_cache, v_cache, table = _cache_case(paged)
    dense_k, dense_v, _ = _cache_case(False)
    seqlens = torch.tensor([0, 17, 40], dtype=torch.int32)
    q, k, v = randn(3, 5, 4, 16, seed=5), randn(3, 5, 2, 16, seed=6), randn(3, 5, 2, 16, seed=7)
    ptr = k_cache.data_ptr()
    out, lse = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens,
                                          block_table=table, causal=causal,
                                          return_softmax_lse=True)
    assert k_cache.data_ptr() == ptr
    if paged:  # back to the dense layout through the table
        k_cache = k_cache[table.long()].reshape(dense_k.shape)
        v_cache = v_cache[table.long()].reshape(dense_v.shape)
    for i, s in enumerate(seqlens.tolist()):
        assert torch.equal(k_cache[i, s:s + 5], k[i]) and torch.equal(v_cache[i, s:s + 5], v[i])
        assert torch.equal(k_cache[i, :s], dense_k[i, :s])
        assert torch.equal(k_cache[i, s + 5:], dense_k[i, s + 5:])
        assert torch.equal(v_cache[i, :s], dense_v[i, :s])
        assert torch.equal(v_cache[i, s + 5:], dense_v[i, s + 5:])
        end = s + 5
        r64 = ref.reference(q[i:i + 1].double(), k_cache[i:i + 1, :end].double(),
                            v_cache[i:i + 1, :end].double(), causal=causal)
        r32 = ref.reference(q[i:i + 1], k_cache[i:i + 1, :end], v_cache[i:i + 1, :end],
                            causal=causal)
        ref.ta.assert_within_bar(out[i:i + 1].numpy(), r64.numpy(), r32.numpy(), 2, f"out[{i}]")
        lses = []
        for dt in (torch.float64, torch.float32):
            kk = k_cache[i, :end].to(dt).repeat_interleave(2, dim=1)
            sc = torch.einsum("nhd,shd->hns", q[i].to(dt), kk) / 4.0
            if causal:
                hidden = torch.arange(end)[None, :] > (torch.arange(5) + end - 5)[:, None]
                sc = sc.masked_fill(hidden[None], -math.inf)
            lses.append(torch.logsumexp(sc, -1).numpy())
        ref.ta.assert_within_bar(lse[i].numpy(), lses[0], lses[1], 2, f"lse[{i}]")


def test_kvcache_without_seqlens_reads_every_slot():
    """Without cache_seqlens a dense cache row counts as full, and a paged sequence as every slot
    of the pages its block_table row maps (FlashAttention's rule)."""
    kp, vp, table = _cache_case(True)
    kc, vc, _ = _cache_case(False)
    q = randn(3, 2, 4, 16, seed=9)
    paged = fa.flash_attn_with_kvcache(q, kp, vp, block_table=table, causal=True)
    dense = fa.flash_attn_with_kvcache(q, kc, vc, causal=True)
    assert torch.equal(paged, dense)
    r64 = ref.reference(q.double(), kc.double(), vc.double(), causal=True)
    ref.ta.assert_within_bar(dense.numpy(), r64.numpy(),
                             ref.reference(q, kc, vc, causal=True).numpy(), 2, "out")


def test_kvcache_batch_idx_leftpad_window_no_new():
    k_cache, v_cache, _ = _cache_case(False, seed=3)
    q = randn(2, 1, 4, 16, seed=4)
    idx, lp, seqlens = [2, 0], [3, 0], [30, 12]
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor(seqlens),
                                     cache_batch_idx=torch.tensor(idx, dtype=torch.int32),
                                     cache_leftpad=torch.tensor(lp, dtype=torch.int32),
                                     window_size=(6, 0), softcap=3.0)
    for i in range(2):
        kk, vv = (c[idx[i]:idx[i] + 1, lp[i]:seqlens[i]] for c in (k_cache, v_cache))
        r64 = ref.reference(q[i:i + 1].double(), kk.double(), vv.double(), window=(6, 0), softcap=3.0)
        r32 = ref.reference(q[i:i + 1], kk, vv, window=(6, 0), softcap=3.0)
        ref.ta.assert_within_bar(out[i:i + 1].numpy(), r64.numpy(), r32.numpy(), 2, f"out[{i}]")


def _rotary_reference(x, cos, sin, pos, interleaved):
    """Independent rotary in float64: complex multiplication (interleaved) or rotate-half."""
    rd = 2 * cos.shape[1]
    ang = torch.atan2(sin.double(), cos.double())[pos][:, :, None, :]  # [B, n, 1, rd/2]
    x = x.double()
    if interleaved:
        z = torch.view_as_complex(x[..., :rd].reshape(*x.shape[:-1], rd // 2, 2).contiguous())
        rot = torch.view_as_real(z * torch.polar(torch.ones_like(ang), ang)).flatten(-2)
    else:
        c, s = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        half = torch.cat([-x[..., rd // 2:rd], x[..., :rd // 2]], -1)
        rot = x[..., :rd] * c + half * s
    return torch.cat([rot, x[..., rd:]], -1)


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("leftpad", [False, True])
def test_kvcache_rotary(interleaved, leftpad):
    """The new k and the queries rotate at their cache positions cache_seqlens[b] + i, with or
    without cache_leftpad (FlashAttention's rule: positions count the left padding), and attend to
    cache tokens [cache_leftpad[b], cache_seqlens[b] + seqlen_new)."""
    k_cache, v_cache, _ = _cache_case(False, seed=8)
    before = k_cache.clone()
    q, k, v = randn(3, 2, 4, 16, seed=1), randn(3, 2, 2, 16, seed=2), randn(3, 2, 2, 16, seed=3)
    ang = torch.arange(64)[:, None] * 10000.0 ** (-torch.arange(6) / 6.0)
    cos, sin = ang.cos(), ang.sin()
    seqlens = torch.tensor([4, 20, 46])
    pad = torch.tensor([3, 0, 17]) if leftpad else torch.zeros(3, dtype=torch.int64)
    out = fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cos, sin, cache_seqlens=seqlens,
                                     cache_leftpad=pad if leftpad else None, causal=True,
                                     rotary_interleaved=interleaved)
    pos = seqlens[:, None] + torch.arange(2)[None, :]
    k_rot = _rotary_reference(k, cos, sin, pos, interleaved)
    q_rot = _rotary_reference(q, cos, sin, pos, interleaved)
    for i, (s, p) in enumerate(zip(seqlens.tolist(), pad.tolist())):
        assert torch.allclose(k_cache[i, s:s + 2].double(), k_rot[i], atol=1e-6)
        assert torch.equal(k_cache[i, :s], before[i, :s])
        kk = k_cache[i:i + 1, :s + 2].double()
        kk[0, s:] = k_rot[i]
        kk, vv = kk[:, p:], v_cache[i:i + 1, p:s + 2]
        r64 = ref.reference(q_rot[i:i + 1], kk, vv.double(), causal=True)
        r32 = ref.reference(q_rot[i:i + 1].float(), kk.float(), vv, causal=True)
        ref.ta.assert_within_bar(out[i:i + 1].numpy(), r64.numpy(), r32.numpy(), 2, f"out[{i}]")


def test_kvcache_half_cache_round_trip():
    k_cache, v_cache, _ = _cache_case(False, seed=12)
    kc, vc = k_cache.half(), v_cache.half()
    q = randn(3, 1, 4, 16, seed=1).half()
    k, v = randn(3, 1, 2, 16, seed=2).half(), randn(3, 1, 2, 16, seed=3).half()
    out = fa.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=10, causal=True)
    assert out.dtype == torch.float16 and torch.equal(kc[:, 10:11], k)
    r = ref.reference(q.double(), kc[:, :11].double(), vc[:, :11].double(), causal=True)
    ref.assert_low_precision(out, r, 2, "out")


def _deform_case(seed=0):
    shapes = torch.tensor([[6, 5], [3, 4]])
    starts = torch.tensor([0, 30])
    n, m, dh, lq, lv, p = 2, 2, 8, 7, 2, 3
    gen = torch.Generator().manual_seed(seed)
    return {"value": torch.randn(n, 42, m, dh, generator=gen),
            "loc": torch.rand(n, lq, m, lv, p, 2, generator=gen) * 1.2 - 0.1,
            "w": torch.rand(n, lq, m, lv, p, generator=gen)}, shapes, starts


def test_ms_deform_attn_against_grid_sample():
    inputs, shapes, starts = _deform_case()
    ref.check_against_torch(
        lambda value, loc, w: fa.ms_deform_attn(value, shapes, starts, loc, w, 64),
        lambda value, loc, w: td.ms_deform_attn(value, shapes.numpy(), starts.numpy(), loc, w),
        inputs)
    out = fa.MSDeformAttnFunction.apply(inputs["value"], shapes, starts, inputs["loc"],
                                        inputs["w"], 2)
    assert torch.equal(out, fa.ms_deform_attn(inputs["value"], shapes, starts, inputs["loc"],
                                              inputs["w"]))


def test_training_step_matches_float64_module():
    class Block(torch.nn.Module):
        def __init__(self, attn):
            super().__init__()
            self.attn, self.h, self.hkv = attn, 4, 2
            self.wq = torch.nn.Linear(32, 32)
            self.wkv = torch.nn.Linear(32, 32)
            self.wo = torch.nn.Linear(32, 32)

        def forward(self, x):
            b, t, _ = x.shape
            q = self.wq(x).view(b, t, self.h, 8)
            kv = self.wkv(x).view(b, t, 2, self.hkv, 8)
            o = self.attn(q, kv[:, :, 0], kv[:, :, 1])
            return self.wo(o.reshape(b, t, 32))

    def losses_and_params(attn, dtype):
        torch.manual_seed(0)
        m = Block(attn).to(dtype)
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        x = randn(2, 24, 32, seed=1).to(dtype)
        target = randn(2, 24, 32, seed=2).to(dtype)
        loss = (m(x) - target).square().mean()
        loss.backward()
        grads = {n: p.grad.double().numpy().copy() for n, p in m.named_parameters()}
        opt.step()
        return loss.item(), grads, {n: p.detach().double().numpy() for n, p in m.named_parameters()}

    ours = losses_and_params(lambda q, k, v: fa.flash_attn_func(q, k, v, causal=True), torch.float32)
    naive = lambda q, k, v: ref.reference(q, k, v, causal=True)
    r64 = losses_and_params(naive, torch.float64)
    r32 = losses_and_params(naive, torch.float32)
    ref.ta.assert_within_bar(ours[0], r64[0], r32[0], 2, "loss")
    for n in ours[1]:
        ref.ta.assert_within_bar(ours[1][n], r64[1][n], r32[1][n], 3, "grad " + n)
        ref.ta.assert_within_bar(ours[2][n], r64[2][n], r32[2][n], 3, "param " + n)


def _alibi_inputs():
    return qkv(2, 21, 29, 4, 4, 16, seed=40)


@pytest.mark.parametrize("per_batch", [False, True])
def test_alibi_against_torch(per_batch):
    slopes = torch.rand((2, 4) if per_batch else (4,), generator=GEN.manual_seed(3)) * 0.5
    ref.check_against_torch(
        lambda q, k, v: fa.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes),
        lambda q, k, v: ref.alibi_reference(q, k, v, slopes, causal=True), _alibi_inputs())


def test_alibi_varlen_and_kvcache():
    slopes = torch.rand(2, 4, generator=GEN.manual_seed(4)) * 0.5
    cu = torch.tensor([0, 21, 42])
    cu_k = torch.tensor([0, 29, 58])
    ref.check_against_torch(
        lambda q, k, v: fa.flash_attn_varlen_func(
            q.reshape(42, 4, 16), k.reshape(58, 4, 16), v.reshape(58, 4, 16), cu, cu_k, 21, 29,
            alibi_slopes=slopes).reshape(2, 21, 4, 16),
        lambda q, k, v: ref.alibi_reference(q, k, v, slopes), _alibi_inputs())
    x = _alibi_inputs()
    out = fa.flash_attn_with_kvcache(x["q"][:, -1:], x["k"], x["v"], causal=True,
                                     alibi_slopes=slopes[0])
    r64, r32 = (ref.alibi_reference(x["q"][:, -1:].to(dt), x["k"].to(dt), x["v"].to(dt),
                                    slopes[0], causal=True) for dt in (torch.float64, torch.float32))
    ref.ta.assert_within_bar(out.numpy(), r64.numpy(), r32.numpy(), 2, "out")


Q, K, V = randn(1, 8, 4, 16, seed=1), randn(1, 8, 2, 16, seed=2), randn(1, 8, 2, 16, seed=3)
CU = torch.tensor([0, 8], dtype=torch.int32)
BAD = [
    (TypeError, "q", lambda: fa.flash_attn_func(Q.long(), K, V)),
    (TypeError, "q", lambda: fa.flash_attn_func(Q.double(), K.double(), V.double())),
    (TypeError, "q", lambda: fa.flash_attn_func(Q.numpy(), K, V)),
    (TypeError, "k", lambda: fa.flash_attn_func(Q, K.half(), V)),
    (ValueError, "q", lambda: fa.flash_attn_func(Q[0], K, V)),
    (ValueError, "k", lambda: fa.flash_attn_func(Q, K[..., :8], V)),
    (ValueError, "v", lambda: fa.flash_attn_func(Q, K, V[:, :4])),
    (ValueError, "k: nheads", lambda: fa.flash_attn_func(Q[:, :, :3], K, V)),
    (ValueError, "q", lambda: fa.flash_attn_func(Q.to("meta"), K, V)),
    (ValueError, "dropout_p", lambda: fa.flash_attn_func(Q, K, V, dropout_p=1.0)),
    (ValueError, "softmax_scale", lambda: fa.flash_attn_func(Q, K, V, softmax_scale=0.0)),
    (ValueError, "window_size", lambda: fa.flash_attn_func(Q, K, V, window_size=(-2, 0))),
    (ValueError, "softcap", lambda: fa.flash_attn_func(Q, K, V, softcap=-1.0)),
    (ValueError, "learnable_sink", lambda: fa.flash_attn_func(Q, K, V, learnable_sink=torch.zeros(3))),
    (TypeError, "learnable_sink", lambda: fa.flash_attn_func(Q, K, V, learnable_sink=torch.zeros(4, dtype=torch.int64))),
    (NotImplementedError, "return_attn_probs", lambda: fa.flash_attn_func(Q, K, V, dropout_p=0.5, return_attn_probs=True)),
    (ValueError, "cu_seqlens_q", lambda: fa.flash_attn_varlen_func(Q[0], K[0], V[0], torch.tensor([0, 5, 3, 8]), torch.tensor([0, 2, 4, 8]), 8, 8)),
    (ValueError, "cu_seqlens_k", lambda: fa.flash_attn_varlen_func(Q[0], K[0], V[0], CU, torch.tensor([0, 7]), 8, 8)),
    (TypeError, "cu_seqlens_q", lambda: fa.flash_attn_varlen_func(Q[0], K[0], V[0], CU.float(), CU, 8, 8)),
    (ValueError, "max_seqlen_q", lambda: fa.flash_attn_varlen_func(Q[0], K[0], V[0], CU, CU, 4, 8)),
    (ValueError, "block_table", lambda: fa.flash_attn_varlen_func(Q[0], K, V, CU, CU, 8, 8, block_table=torch.tensor([[3]]))),
    (ValueError, "qkv", lambda: fa.flash_attn_qkvpacked_func(torch.zeros(1, 8, 2, 4, 16))),
    (ValueError, "kv", lambda: fa.flash_attn_kvpacked_func(Q, torch.zeros(1, 8, 3, 2, 16))),
    (ValueError, "cache_seqlens", lambda: fa.flash_attn_with_kvcache(Q, K, V, K[:, :1], V[:, :1], cache_seqlens=8)),
    (ValueError, "k, v", lambda: fa.flash_attn_with_kvcache(Q, K, V, K[:, :1], None, cache_seqlens=2)),
    (ValueError, "cache_batch_idx", lambda: fa.flash_attn_with_kvcache(Q, K, V, cache_seqlens=2, cache_batch_idx=torch.tensor([1]))),
    (ValueError, "block_table", lambda: fa.flash_attn_with_kvcache(Q, K, V, cache_seqlens=9, block_table=torch.tensor([[0, 5]]))),
    (ValueError, "rotary_cos", lambda: fa.flash_attn_with_kvcache(Q, K, V, rotary_cos=torch.ones(8, 4), rotary_sin=torch.ones(8, 4), cache_seqlens=2)),
    (ValueError, "num_splits", lambda: fa.flash_attn_with_kvcache(Q, K, V, cache_seqlens=2, num_splits=-1)),
    (ValueError, "im2col_step", lambda: fa.ms_deform_attn(*_bad_deform(), 0)),
    (TypeError, "value_spatial_shapes", lambda: fa.ms_deform_attn(_bad_deform()[0], torch.ones(2, 2), *_bad_deform()[2:])),
    (ValueError, "sampling_locations", lambda: fa.ms_deform_attn(*_bad_deform()[:3], torch.zeros(2, 7, 2, 2, 3, 3), _bad_deform()[4])),
]


def _bad_deform():
    inputs, shapes, starts = _deform_case()
    return inputs["value"], shapes, starts, inputs["loc"], inputs["w"]


@pytest.mark.parametrize("error,name,call", BAD, ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD)])
def test_bad_input(error, name, call):
    with pytest.raises(error, match=rf"^{re.escape(name)}\b"):  # the message starts with the name
        call()


def test_bad_kvcache_input_leaves_cache_untouched():
    k_cache, v_cache, _ = _cache_case(False)
    before = k_cache.clone()
    with pytest.raises(ValueError, match="cache_seqlens"):
        fa.flash_attn_with_kvcache(randn(3, 1, 4, 16), k_cache, v_cache, randn(3, 5, 2, 16),
                                   randn(3, 5, 2, 16), cache_seqlens=torch.tensor([0, 10, 44]))
    assert torch.equal(k_cache, before)


def test_kvcache_refusals_name_the_cause_and_leave_the_cache():
    """Non-finite q, new k/v or cached values fail before the cache is written (the new k/v were
    written, then q's NaN refused); each misuse names its own cause."""
    k_cache, v_cache, _ = _cache_case(False)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    seqlens = torch.tensor([3, 10, 20], dtype=torch.int32)
    q, k, v = randn(3, 1, 4, 16), randn(3, 5, 2, 16), randn(3, 5, 2, 16)
    bad_q, bad_k = q.clone(), k.clone()
    bad_q[1, 0, 2, 3] = float("nan")
    bad_k[2, 4, 1, 7] = float("inf")
    cases = [
        (dict(q=bad_q, k=k, v=v, cache_seqlens=seqlens), r"q: non-finite value nan at \[1, 0, 2, 3\]"),
        (dict(q=q, k=bad_k, v=v, cache_seqlens=seqlens), r"k: non-finite value inf at \[2, 4, 1, 7\]"),
        (dict(q=q, k=k, v=v), "cache_seqlens: needed to append new k and v"),
        (dict(q=q, k=k, v=v, cache_seqlens=torch.tensor([-1, 2, 3], dtype=torch.int32)),
         r"cache_seqlens: entries must be >= 0, got \[-1, 2, 3\]"),
        (dict(q=randn(4, 1, 4, 16), k=None, v=None), "k_cache: 3 cache rows for a batch of 4"),
    ]
    for kw, match in cases:
        with pytest.raises(attnkit.Error, match=match):
            fa.flash_attn_with_kvcache(kw.pop("q"), k_cache, v_cache, **kw)
        assert torch.equal(k_cache, before_k) and torch.equal(v_cache, before_v), match
    k_cache[1, 4, 0, 0] = float("nan")  # inside sequence 1's cached tokens: refused by the attention
    before_k = k_cache.clone()           # after the new tokens were written, which are restored
    with pytest.raises(attnkit.Error, match=r"sequence 1: k: non-finite value nan at \[4, 0, 0\]"):
        fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens)
    assert torch.equal(k_cache.nan_to_num(7.0), before_k.nan_to_num(7.0)) and torch.equal(v_cache, before_v)
    # A rotation table with a NaN is refused before anything is written.
    cos, sin = torch.ones(64, 4), torch.zeros(64, 4)
    cos[5, 1] = float("nan")
    with pytest.raises(attnkit.Error, match=r"rotary_cos: non-finite value nan at \[5, 1\]"):
        fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=cos, rotary_sin=sin,
                                   cache_seqlens=seqlens)
    assert torch.equal(k_cache.nan_to_num(7.0), before_k.nan_to_num(7.0)) and torch.equal(v_cache, before_v)
    # An expanded cache would take every sequence's new tokens in the same memory.
    shared = randn(1, 48, 2, 16).expand(3, 48, 2, 16)
    with pytest.raises(attnkit.Error, match="k_cache: an expanded tensor"):
        fa.flash_attn_with_kvcache(q, shared, shared.clone(), k, v, cache_seqlens=seqlens)


def test_kvcache_with_an_empty_batch_and_no_cache_rows():
    out, lse = fa.flash_attn_with_kvcache(randn(0, 1, 4, 16), torch.zeros(0, 8, 2, 16), torch.zeros(0, 8, 2, 16),
                                          return_softmax_lse=True)
    assert out.shape == (0, 1, 4, 16) and lse.shape == (0, 4, 1)


def test_non_finite_inputs_are_named_in_the_callers_layout():
    q, k, v = randn(2, 5, 4, 8), randn(2, 7, 2, 8), randn(2, 7, 2, 8)
    k[1, 2, 1, 5] = float("nan")
    with pytest.raises(attnkit.Error, match=r"k: non-finite value nan at \[1, 2, 1, 5\]"):
        fa.flash_attn_func(q, k, v)
    qkv = randn(2, 5, 3, 4, 8)
    qkv[1, 3, 2, 0, 4] = float("inf")
    with pytest.raises(attnkit.Error, match=r"v: non-finite value inf at \[1, 3, 0, 4\]"):
        fa.flash_attn_qkvpacked_func(qkv)
    cu = torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(attnkit.Error, match="max_seqlen_q: expected an int or a one-element tensor"):
        fa.flash_attn_varlen_func(q[0], k[0], v[0], cu, torch.tensor([0, 7], dtype=torch.int32),
                                  torch.tensor([5, 5]), 7)


def test_import_attnkit_does_not_import_torch():
    code = "import sys, attnkit; assert 'torch' not in sys.modules; import attnkit.torch; " \
           "assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
