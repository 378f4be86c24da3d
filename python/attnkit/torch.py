"""FlashAttention 2.7's Python API on the CPU: ``from attnkit.torch import flash_attn_func``.

Same names, signatures and semantics as ``flash_attn.flash_attn_interface`` (2.7) on CPU tensors,
as torch.autograd.Functions running attnkit's kernels:
  flash_attn_func, flash_attn_varlen_func, flash_attn_qkvpacked_func, flash_attn_kvpacked_func,
  flash_attn_varlen_qkvpacked_func, flash_attn_varlen_kvpacked_func (forward and backward),
  flash_attn_with_kvcache (forward, caches updated in place, dense or paged),
  ms_deform_attn / MSDeformAttnFunction (Deformable DETR's argument order; forward and backward).
Layouts: q [batch, seqlen_q, nheads, headdim], k/v [batch, seqlen_k, nheads_k, headdim], nheads a
multiple of nheads_k; varlen packs tokens as [total, nheads, headdim] with int cu_seqlens [B+1].
causal and window_size are aligned bottom-right (query i sees key j iff
i + Lk - Lq - left <= j <= i + Lk - Lq + right). float32 is computed as is; float16/bfloat16 are
computed in float32 and returned in their dtype. Extra keyword ``learnable_sink`` ([nheads],
FlashAttention 4's name, kept here to mirror its API) adds a per-head logit to each softmax
denominator, with its gradient: attnkit's own functions call it ``sink_logits`` (not the KV
cache's ``sink_tokens``).
return_attn_probs=True returns (out, softmax_lse, None) as FlashAttention does without dropout:
softmax_lse float32 [batch, nheads, seqlen_q] (varlen [nheads, total_q]), without gradient.
Not computed (NotImplementedError naming the argument): return_attn_probs=True with dropout_p > 0
(FlashAttention's dropped-out probabilities), cache_leftpad together with block_table.
``deterministic`` is accepted: attnkit's backward is always deterministic (bitwise identical for
any thread count). Importing this module imports torch; ``import attnkit`` does not.
"""
from . import _torch_attn as _a
from . import _torch_common as _c
from ._torch_deform import MSDeformAttnFunction, ms_deform_attn
from ._torch_kvcache import flash_attn_with_kvcache

__all__ = [
    "flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache", "ms_deform_attn",
    "MSDeformAttnFunction",
]


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                    softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False,
                    *, learnable_sink=None):
    """Attention of q [B, Lq, H, D] over k, v [B, Lk, Hkv, D] -> out [B, Lq, H, D].

    softmax_scale defaults to 1/sqrt(D); dropout_p draws its seed from torch's generator and the
    backward regenerates the same mask; learnable_sink [H] is differentiable.
    """
    h, _, _ = _a.check_qkv(q, k, v, 4)
    _c.check_sink(learnable_sink, h)
    alibi = _c.check_alibi(alibi_slopes, q.shape[0], h)
    probs = _c.attn_probs(return_attn_probs, dropout_p)  # before kernel_kw draws a seed
    kw = _a.kernel_kw(dropout_p, softmax_scale, causal, window_size, softcap, alibi)
    return _a.attend("separate", (q, k, v), learnable_sink, kw, probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, *, learnable_sink=None):
    """Packed sequences: q [total_q, H, D], k, v [total_k, Hkv, D], sequence b being tokens
    cu_seqlens[b]:cu_seqlens[b+1] (empty sequences allowed) -> out [total_q, H, D]. With
    block_table [B, max_blocks], k and v are pages [num_blocks, page_block_size, Hkv, D] and
    cu_seqlens_k gives each sequence's length; the pages are gathered (one copy, differentiable)."""
    if block_table is not None:
        k, v = _a.gather_pages(k, v, block_table, cu_seqlens_k)
    h, _, _ = _a.check_qkv(q, k, v, 3)
    cu_q, cu_k = _a.check_varlen(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _c.check_sink(learnable_sink, h)
    alibi = _c.check_alibi(alibi_slopes, cu_q.size - 1, h)
    probs = _c.attn_probs(return_attn_probs, dropout_p)  # before kernel_kw draws a seed
    kw = _a.kernel_kw(dropout_p, softmax_scale, causal, window_size, softcap, alibi, cu_q, cu_k)
    return _a.attend("separate", (q, k, v), learnable_sink, kw, probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False, *,
                              learnable_sink=None):
    """qkv [B, L, 3, H, D] (q, k, v stacked on dim 2) -> out [B, L, H, D]; the gradient comes
    back packed like qkv."""
    q, k, v = _a.unpacked(qkv, "qkv", 3, 5)
    h, _, _ = _a.check_qkv(q, k, v, 4)
    _c.check_sink(learnable_sink, h)
    alibi = _c.check_alibi(alibi_slopes, qkv.shape[0], h)
    probs = _c.attn_probs(return_attn_probs, dropout_p)  # before kernel_kw draws a seed
    kw = _a.kernel_kw(dropout_p, softmax_scale, causal, window_size, softcap, alibi)
    return _a.attend("qkv", (qkv,), learnable_sink, kw, probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """q [B, Lq, H, D], kv [B, Lk, 2, Hkv, D] (k, v stacked on dim 2) -> out [B, Lq, H, D]."""
    k, v = _a.unpacked(kv, "kv", 2, 5)
    h, _, _ = _a.check_qkv(q, k, v, 4)
    alibi = _c.check_alibi(alibi_slopes, q.shape[0], h)
    probs = _c.attn_probs(return_attn_probs, dropout_p)  # before kernel_kw draws a seed
    kw = _a.kernel_kw(dropout_p, softmax_scale, causal, window_size, softcap, alibi)
    return _a.attend("kv", (q, kv), None, kw, probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv [total, 3, H, D] with cu_seqlens [B+1] shared by q and k -> out [total, H, D]."""
    q, k, v = _a.unpacked(qkv, "qkv", 3, 4)
    h, _, _ = _a.check_qkv(q, k, v, 3)
    cu, _ = _a.check_varlen(q, k, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen)
    alibi = _c.check_alibi(alibi_slopes, cu.size - 1, h)
    probs = _c.attn_probs(return_attn_probs, dropout_p)  # before kernel_kw draws a seed
    kw = _a.kernel_kw(dropout_p, softmax_scale, causal, window_size, softcap, alibi, cu, cu)
    return _a.attend("qkv", (qkv,), None, kw, probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                    dropout_p=0.0, softmax_scale=None, causal=False,
                                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                    deterministic=False, return_attn_probs=False):
    """q [total_q, H, D], kv [total_k, 2, Hkv, D] -> out [total_q, H, D]."""
    k, v = _a.unpacked(kv, "kv", 2, 4)
    h, _, _ = _a.check_qkv(q, k, v, 3)
    cu_q, cu_k = _a.check_varlen(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    alibi = _c.check_alibi(alibi_slopes, cu_q.size - 1, h)
    probs = _c.attn_probs(return_attn_probs, dropout_p)  # before kernel_kw draws a seed
    kw = _a.kernel_kw(dropout_p, softmax_scale, causal, window_size, softcap, alibi, cu_q, cu_k)
    return _a.attend("kv", (q, kv), None, kw, probs)
