"""flash_attn_with_kvcache (FlashAttention 2.7) on caller-owned caches: the new k, v are written
into k_cache/v_cache in place at positions cache_seqlens[b].., optionally rotated first, then each
sequence's queries attend to its cache keys [cache_leftpad[b], cache_seqlens[b] + seqlen_new)
with attnkit.flash_attention (masks bottom-right, as in FlashAttention).

Dense caches [batch_cache, seqlen_cache, Hkv, D] in float32 are read as views (no copy); paged
caches [num_blocks, page_block_size, Hkv, D] with block_table [B, max_blocks] are gathered per
sequence (one copy of the blocks a sequence uses); float16/bfloat16 caches are converted to float32
per call. Forward only, as in FlashAttention.
"""
import numpy as np
import torch

import attnkit

from . import _torch_common as c


def _rotate(x, cos, sin, pos, interleaved):
    """Rotary embedding of x [B, n, heads, D] at integer positions pos [B, n]: the first
    rotary_dim = 2·cos.shape[1] features rotate, pairs (2i, 2i+1) if interleaved (GPT-J) else
    (i, i + rotary_dim/2) (GPT-NeoX). Computed in float32; returns float32."""
    rd = 2 * cos.shape[1]
    cs = cos.to(torch.float32)[pos].unsqueeze(2)  # [B, n, 1, rd/2]
    sn = sin.to(torch.float32)[pos].unsqueeze(2)
    xr = x[..., :rd].to(torch.float32)
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        rot = torch.stack((x1 * cs - x2 * sn, x1 * sn + x2 * cs), -1).flatten(-2)
    else:
        x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
        rot = torch.cat((x1 * cs - x2 * sn, x1 * sn + x2 * cs), -1)
    return torch.cat((rot, x[..., rd:].to(torch.float32)), -1)


def _seqlens(cache_seqlens, batch, default):
    """cache_seqlens (None, int or [B] int tensor) -> int64 numpy [B]."""
    if cache_seqlens is None:
        return np.full(batch, default, np.int64)
    if isinstance(cache_seqlens, (int, np.integer)) and not isinstance(cache_seqlens, bool):
        return np.full(batch, int(cache_seqlens), np.int64)
    c.check_index_tensor(cache_seqlens, "cache_seqlens", (batch,))
    return cache_seqlens.numpy().astype(np.int64)


def _index_vector(x, name, batch, default):
    """Optional [B] int tensor -> int64 numpy (default when None)."""
    if x is None:
        return default
    c.check_index_tensor(x, name, (batch,))
    return x.numpy().astype(np.int64)


def _check_new(k, v, k_cache, batch):
    """k, v [B, seqlen_new, Hkv, D] matching the cache, both or neither; returns seqlen_new."""
    if (k is None) != (v is None):
        raise attnkit.Error("k, v: pass both new k and v, or neither")
    if k is None:
        return 0
    for name, x in (("k", k), ("v", v)):
        c.check_tensor(x, name, (4,))
        if x.shape[0] != batch or x.shape[2:] != k_cache.shape[2:]:
            raise attnkit.Error(f"{name}: expected [{batch}, seqlen_new, {k_cache.shape[2]}, "
                             f"{k_cache.shape[3]}], got {tuple(x.shape)}")
    if v.shape != k.shape:
        raise attnkit.Error(f"v: shape {tuple(v.shape)} != k shape {tuple(k.shape)}")
    return k.shape[1]


def _check_rotary(rotary_cos, rotary_sin, has_new, head_dim, positions_needed):
    """rotary_cos/sin [seqlen_ro, rotary_dim/2], only with new k, v. Positions are cache
    positions (cache_seqlens[b] + i), left padding included, as in FlashAttention."""
    if rotary_cos is None and rotary_sin is None:
        return False
    if rotary_cos is None or rotary_sin is None:
        raise attnkit.Error("rotary_cos, rotary_sin: pass both or neither")
    if not has_new:
        raise attnkit.Error("rotary_cos: rotary embedding applies only when new k and v are passed")
    for name, x in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
        c.check_tensor(x, name, (2,))
    if rotary_sin.shape != rotary_cos.shape:
        raise attnkit.Error(f"rotary_sin: shape {tuple(rotary_sin.shape)} != rotary_cos shape "
                         f"{tuple(rotary_cos.shape)}")
    if 2 * rotary_cos.shape[1] > head_dim:
        raise attnkit.Error(f"rotary_cos: rotary_dim {2 * rotary_cos.shape[1]} > headdim {head_dim}")
    if rotary_cos.shape[0] < positions_needed:
        raise attnkit.Error(f"rotary_cos: {rotary_cos.shape[0]} positions, need {positions_needed}")
    return True


def _locate(block_table, k_cache, seqlens, n_new, batch, paged):
    """Checks capacities and block ids; returns capacity per sequence."""
    if not paged:
        capacity = k_cache.shape[1]
    else:  # block_table's type and shape were checked by _check_caches
        pbs = k_cache.shape[1]
        capacity = block_table.shape[1] * pbs
        table = block_table.numpy()
        for b in range(batch):
            used = table[b, :-(-(int(seqlens[b]) + n_new) // pbs)]
            if used.size and (used.min() < 0 or used.max() >= k_cache.shape[0]):
                raise attnkit.Error(f"block_table: row {b} names blocks outside [0, "
                                 f"{k_cache.shape[0]})")
    if np.any(seqlens < 0):
        raise attnkit.Error(f"cache_seqlens: entries must be >= 0, got {seqlens.tolist()}")
    if np.any(seqlens + n_new > capacity):
        raise attnkit.Error(f"cache_seqlens: cache_seqlens + seqlen_new must be in [0, {capacity}], "
                         f"got {(seqlens + n_new).tolist()}")
    return capacity


def _cache_rows(cache, b, row, start, end, block_table):
    """Tokens [start, end) of sequence b: a view of a dense cache row, or gathered pages."""
    if block_table is None:
        return cache[row, start:end]
    pbs = cache.shape[1]
    blocks = block_table[b, :-(-end // pbs)].long()
    return cache[blocks].reshape(-1, *cache.shape[2:])[start:end]


def _write(cache, new, b, row, start, block_table):
    """Writes new [n, Hkv, D] at positions start.. of sequence b, in place."""
    n = new.shape[0]
    if block_table is None:
        cache[row, start:start + n] = new
        return
    pos = torch.arange(start, start + n)
    pbs = cache.shape[1]
    cache[block_table[b].long()[pos // pbs], pos % pbs] = new


def _check_caches(q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, cache_leftpad,
                  block_table):
    """Checks q, the caches and their bookkeeping; returns int64 numpy (seqlens, rows, leftpad)
    [B] each and seqlen_new."""
    c.check_tensor(q, "q", (4,))
    c.check_tensor(k_cache, "k_cache", (4,))
    c.check_tensor(v_cache, "v_cache", (4,))
    c.check_same_dtype({"q": q, "k_cache": k_cache, "v_cache": v_cache})
    batch, _, h, d = q.shape
    if v_cache.shape != k_cache.shape:
        raise attnkit.Error(f"v_cache: shape {tuple(v_cache.shape)} != k_cache shape "
                         f"{tuple(k_cache.shape)}")
    if k_cache.shape[3] != d:
        raise attnkit.Error(f"k_cache: head dim {k_cache.shape[3]} != q head dim {d}")
    c.check_heads(h, k_cache.shape[2], "k_cache")
    paged = block_table is not None
    if paged:
        c.check_index_tensor(block_table, "block_table", (batch, None))
    if paged and cache_batch_idx is not None:
        raise attnkit.Error("cache_batch_idx: not allowed with block_table (the table maps sequences)")
    if paged and cache_leftpad is not None:
        raise NotImplementedError("cache_leftpad: not implemented with block_table")
    n_new = _check_new(k, v, k_cache, batch)
    if k is not None:
        c.check_same_dtype({"k_cache": k_cache, "k": k, "v": v})
    if n_new and cache_seqlens is None:
        raise attnkit.Error("cache_seqlens: needed to append new k and v (without it every cache row "
                            "counts as full)")
    if not paged and cache_batch_idx is None and batch > k_cache.shape[0]:
        raise attnkit.Error(f"k_cache: {k_cache.shape[0]} cache rows for a batch of {batch} (pass "
                            "cache_batch_idx to map sequences to rows)")
    if n_new:  # written in place: rows must not share memory (PyTorch refuses such writes too)
        for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
            if any(st == 0 and n > 1 for st, n in zip(x.stride(), x.shape)):
                raise attnkit.Error(f"{name}: an expanded tensor (stride 0, shape {tuple(x.shape)}) "
                                    "cannot take the new k and v in place")
    # Without cache_seqlens every slot counts: the dense row, or every page the table maps (as
    # FlashAttention does).
    full = block_table.shape[1] * k_cache.shape[1] if paged else k_cache.shape[1]
    seqlens = _seqlens(cache_seqlens, batch, full)
    rows = _index_vector(cache_batch_idx, "cache_batch_idx", batch, np.arange(batch))
    if not paged and rows.size and (rows.min() < 0 or rows.max() >= k_cache.shape[0]):
        raise attnkit.Error(f"cache_batch_idx: entries must be in [0, {k_cache.shape[0]})")
    leftpad = _index_vector(cache_leftpad, "cache_leftpad", batch, np.zeros(batch, np.int64))
    _locate(block_table, k_cache, seqlens, n_new, batch, paged)
    if np.any(leftpad < 0) or np.any(leftpad > seqlens):
        raise attnkit.Error("cache_leftpad: entries must be in [0, cache_seqlens]")
    return seqlens, rows, leftpad, n_new


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """q [B, n, H, D] against caches updated in place -> out [B, n, H, D] (and softmax_lse
    [B, H, n] float32 if return_softmax_lse). num_splits is FlashAttention's scheduling hint;
    attnkit's result does not depend on it."""
    seqlens, rows, leftpad, n_new = _check_caches(q, k_cache, v_cache, k, v, cache_seqlens,
                                                  cache_batch_idx, cache_leftpad, block_table)
    batch, n, h, d = q.shape
    rotary = _check_rotary(rotary_cos, rotary_sin, k is not None, d,
                           int((seqlens + max(n_new, n)).max(initial=0)))
    if isinstance(num_splits, bool) or not isinstance(num_splits, (int, np.integer)) or num_splits < 0:
        raise attnkit.Error(f"num_splits: expected an int >= 0, got {num_splits!r}")
    _, scale, window, softcap = c.check_options(0.0, softmax_scale, window_size, softcap)
    alibi = c.check_alibi(alibi_slopes, batch, h)

    # The inputs are checked before the caches are written; what the attention itself refuses
    # (a non-finite cached token, a rotation that overflows float16) is refused after the write,
    # and the overwritten slots are restored, so a failing call leaves the caches as they were.
    c.check_finite(q, "q")
    if n_new:
        c.check_finite(k, "k")
        c.check_finite(v, "v")
    if rotary:
        c.check_finite(rotary_cos, "rotary_cos")
        c.check_finite(rotary_sin, "rotary_sin")
    with torch.no_grad():
        q32 = q
        if rotary:
            pos = torch.from_numpy(seqlens)[:, None] + torch.arange(n_new)[None, :]
            k = _rotate(k, rotary_cos, rotary_sin, pos, rotary_interleaved)
            local = causal or window != (-1, -1)
            qpos = torch.from_numpy(seqlens)[:, None] + (torch.arange(n) if local else
                                                         torch.zeros(n, dtype=torch.int64))[None, :]
            q32 = _rotate(q, rotary_cos, rotary_sin, qpos, rotary_interleaved)
        overwritten = []  # (sequence, start, old k slots, old v slots), in write order
        for b in range(batch):
            if n_new:
                start = int(seqlens[b])
                overwritten.append((b, start,
                                    _cache_rows(k_cache, b, rows[b], start, start + n_new, block_table).clone(),
                                    _cache_rows(v_cache, b, rows[b], start, start + n_new, block_table).clone()))
                _write(k_cache, k[b], b, rows[b], start, block_table)
                _write(v_cache, v[b], b, rows[b], start, block_table)
        out = torch.empty(batch, n, h, d, dtype=torch.float32)
        lse = torch.empty(batch, h, n, dtype=torch.float32)
        try:
            for b in range(batch):
                end = int(seqlens[b]) + n_new
                kb = _cache_rows(k_cache, b, rows[b], int(leftpad[b]), end, block_table)
                vb = _cache_rows(v_cache, b, rows[b], int(leftpad[b]), end, block_table)
                kw = {} if alibi is None else {"alibi_slopes": alibi if alibi.ndim == 1 else alibi[b]}
                o, l = attnkit.flash_attention(c.to_numpy32(q32[b]), c.to_numpy32(kb),
                                               c.to_numpy32(vb), causal=bool(causal), window=window,
                                               scale=scale, softcap=softcap, return_lse=True, **kw)
                out[b] = torch.from_numpy(o)
                lse[b] = torch.from_numpy(l)
        except attnkit.Error as e:
            failed = b  # k, v in the message: the sequence's cached tokens from cache_leftpad on
            for seq, start, old_k, old_v in reversed(overwritten):  # reversed: repeated rows end as they began
                _write(k_cache, old_k, seq, rows[seq], start, block_table)
                _write(v_cache, old_v, seq, rows[seq], start, block_table)
            raise attnkit.Error(f"sequence {failed}: {e}") from None
    out = out if q.dtype == torch.float32 else out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
