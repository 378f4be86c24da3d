"""FlashAttention 2.7's training functions (flash_attn_func, varlen, qkv/kv packed) as one
torch.autograd.Function over attnkit.flash_attention / flash_attention_backward.

out = softmax(scale·q·kᵀ + mask [+ sink column])·v per head, K/V head h·Hkv/H (GQA), masks aligned
bottom-right: query i of Lq sees key j of Lk iff i + Lk - Lq - left <= j <= i + Lk - Lq + right.
PyTorch: torch.softmax(scale * q @ k.transpose(-1, -2) + mask, -1) @ v (see the tests).
The backward reuses the forward's out, lse [B, H, L] or [H, T] and dropout seed.
"""
import torch
from torch.autograd.function import once_differentiable

import attnkit

from . import _torch_common as c

# (q, k, v) from the three tensor slots of _FlashAttn, per packing.
_UNPACK = {
    "separate": lambda a, b, d: (a, b, d),
    "qkv": lambda a, b, d: (a.select(-3, 0), a.select(-3, 1), a.select(-3, 2)),
    "kv": lambda a, b, d: (a, b.select(-3, 0), b.select(-3, 1)),
}
# Gradients of the three tensor slots from (dq, dk, dv), per packing.
_PACK_GRADS = {
    "separate": lambda dq, dk, dv: (dq, dk, dv),
    "qkv": lambda dq, dk, dv: (torch.stack((dq, dk, dv), dim=-3), None, None),
    "kv": lambda dq, dk, dv: (dq, torch.stack((dk, dv), dim=-3), None),
}


class _FlashAttn(torch.autograd.Function):
    """Attention forward/backward; `kw` holds attnkit.flash_attention's keywords (no tensors)."""

    @staticmethod
    def forward(ctx, packing, kw, a, b, d, sink):
        q, k, v = _UNPACK[packing](a, b, d)
        sink_np = None if sink is None else c.to_numpy32(sink)
        out, lse = attnkit.flash_attention(c.to_numpy32(q), c.to_numpy32(k), c.to_numpy32(v),
                                           sink_logits=sink_np, return_lse=True, **kw)
        out32, lse = torch.from_numpy(out), torch.from_numpy(lse)
        ctx.packing, ctx.kw = packing, kw
        ctx.save_for_backward(a, b, d, sink, out32, lse)
        ctx.mark_non_differentiable(lse)
        return (out32 if q.dtype == torch.float32 else out32.to(q.dtype)), lse

    @staticmethod
    @once_differentiable  # first-order gradients, also under create_graph=True; no double backward
    def backward(ctx, dout, _dlse):
        a, b, d, sink, out32, lse = ctx.saved_tensors
        q, k, v = _UNPACK[ctx.packing](a, b, d)
        sink_np = None if sink is None else c.to_numpy32(sink)
        dq, dk, dv, ds = attnkit.flash_attention_backward(
            c.to_numpy32(dout), c.to_numpy32(q), c.to_numpy32(k), c.to_numpy32(v), out32.detach().numpy(),
            lse.detach().numpy(), sink_logits=sink_np, **ctx.kw)
        grads = _PACK_GRADS[ctx.packing](c.to_tensor(dq, q.dtype), c.to_tensor(dk, k.dtype),
                                         c.to_tensor(dv, v.dtype))
        d_sink = None if sink is None else c.to_tensor(ds, sink.dtype)
        return (None, None) + grads + (d_sink,)


def kernel_kw(dropout_p, softmax_scale, causal, window_size, softcap, alibi, cu_q=None, cu_k=None):
    """Keywords for attnkit.flash_attention after checking the options (draws the dropout seed)."""
    dropout_p, scale, window, softcap = c.check_options(dropout_p, softmax_scale, window_size,
                                                        softcap)
    kw = dict(causal=bool(causal), window=window, scale=scale, softcap=softcap,
              dropout_p=dropout_p, seed=c.dropout_seed() if dropout_p > 0 else 0,
              cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    if alibi is not None:
        kw["alibi_slopes"] = alibi
    return kw


def check_qkv(q, k, v, rank):
    """q [.., H, D], k and v [.., Hkv, D] of rank `rank`, same dtype; returns (H, Hkv, D)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        c.check_tensor(x, name, (rank,))
    c.check_same_dtype({"q": q, "k": k, "v": v})
    h, d = q.shape[-2:]
    if k.shape[-1] != d:
        raise attnkit.Error(f"k: head dim {k.shape[-1]} != q head dim {d}")
    if v.shape != k.shape:
        raise attnkit.Error(f"v: shape {tuple(v.shape)} != k shape {tuple(k.shape)}")
    if rank == 4 and k.shape[0] != q.shape[0]:
        raise attnkit.Error(f"k: batch {k.shape[0]} != q batch {q.shape[0]}")
    c.check_heads(h, k.shape[-2])
    return h, k.shape[-2], d


def check_varlen(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """Checks the varlen bookkeeping; returns int32 numpy (cu_q, cu_k)."""
    cu_q = c.check_cu_seqlens(cu_seqlens_q, "cu_seqlens_q", q.shape[0])
    cu_k = c.check_cu_seqlens(cu_seqlens_k, "cu_seqlens_k", k.shape[0])
    if cu_q.size != cu_k.size:
        raise attnkit.Error(f"cu_seqlens_k: {cu_k.size} entries != cu_seqlens_q's {cu_q.size}")
    c.check_max_seqlen(max_seqlen_q, cu_q, "max_seqlen_q")
    c.check_max_seqlen(max_seqlen_k, cu_k, "max_seqlen_k")
    return cu_q, cu_k


def unpacked(x, name, parts, rank):
    """Views of x [..., parts, heads, D] along dim -3 after checking its rank and that dim."""
    c.check_tensor(x, name, (rank,))
    if x.shape[-3] != parts:
        raise attnkit.Error(f"{name}: expected {parts} at dimension {rank - 3} (packed "
                         f"{'q, k, v' if parts == 3 else 'k, v'}), got shape {tuple(x.shape)}")
    return tuple(x.select(-3, i) for i in range(parts))


def attend(packing, tensors, sink, kw, with_lse=False):
    """Runs _FlashAttn on (a, b, d) tensor slots: out, or with with_lse FlashAttention's
    (out, softmax_lse, None) of return_attn_probs (c.attn_probs); softmax_lse is float32
    [B, H, Lq] (varlen [H, total_q]) and carries no gradient."""
    a, b, d = (tuple(tensors) + (None, None))[:3]
    out, lse = _FlashAttn.apply(packing, kw, a, b, d, sink)
    return (out, lse, None) if with_lse else out


def gather_pages(k, v, block_table, cu_seqlens_k):
    """Paged k, v [num_blocks, page_block_size, Hkv, D] with block_table [B, max_blocks] ->
    packed [total_k, Hkv, D] in sequence order (differentiable: gradients flow back to the pages).
    Sequence b's tokens are pages block_table[b, 0], block_table[b, 1], ... up to its length."""
    for name, x in (("k", k), ("v", v)):
        c.check_tensor(x, name, (4,))
    if v.shape != k.shape:
        raise attnkit.Error(f"v: shape {tuple(v.shape)} != k shape {tuple(k.shape)}")
    c.check_index_tensor(cu_seqlens_k, "cu_seqlens_k", (None,))
    lengths = cu_seqlens_k.detach().numpy().astype("int64")
    lengths = lengths[1:] - lengths[:-1]
    c.check_index_tensor(block_table, "block_table", (lengths.size, None))
    blocks, pbs = k.shape[:2]
    table = block_table.detach().long()
    if lengths.size and (lengths < 0).any():
        raise attnkit.Error("cu_seqlens_k: must be non-decreasing")
    rows = []
    for b, n in enumerate(lengths.tolist()):
        used = table[b, :-(-n // pbs)]
        if used.numel() * pbs < n:
            raise attnkit.Error(f"block_table: row {b} holds {used.numel() * pbs} tokens, sequence "
                             f"needs {n}")
        if used.numel() and (used.min() < 0 or used.max() >= blocks):
            raise attnkit.Error(f"block_table: row {b} names blocks outside [0, {blocks})")
        rows.append(used)
    return tuple(torch.cat([x[r].reshape(-1, *x.shape[2:])[:n] for r, n in
                            zip(rows, lengths.tolist())]) if rows else x.reshape(0, *x.shape[2:])
                 for x in (k, v))
