"""attnkit.nn's attention block: fused QKV projection, RoPE, flash attention (causal or not,
sliding window, learned or off-by-one sink logits, GQA), optional sigmoid output gate, o projection.

Forward and backward are explicit (llm.c style): ``attention_block`` returns ``(out, cache)``,
``attention_block_backward`` takes that cache back and returns ``(d_x, grads)``. See
include/attnkit/nn/attention_block.hpp for the formulas.

params is a dict keyed like the C++ ``AttentionBlockParams`` (Hugging Face Llama names, q/k/v
fused): ``qkv_proj_weight`` [(H + 2·Hkv)·D, C] (``fuse_qkv(q_proj, k_proj, v_proj)``),
``qkv_proj_bias``, ``o_proj_weight`` [C, H·D], ``o_proj_bias``, ``sinks`` [H] (sink_logits="learned"; gpt-oss's tensor name),
``gate_proj_weight`` ([Hg, C] from the input; [H, D] or [H·D, D] from the query) and
``gate_proj_bias`` [Hg]. A bias is used iff it is present and not None.
The cache dict holds ``qkv`` (after RoPE), ``attn``, ``lse``, and with a gate ``gate_pre``,
``gate`` (sigmoid values, for statistics), ``gated``, ``q_pre``; gradients come back as a dict
with the parameters' keys (fresh arrays: the gradients themselves).
"""
import numpy as _np

from . import _attnkit as _C
from . import _checks

__all__ = ["attention_block", "attention_block_backward", "fuse_qkv", "positions_from_cu_seqlens"]


def fuse_qkv(q, k, v):
    """Hugging Face q_proj, k_proj, v_proj weights [out, C] (or biases [out]) → fused rows."""
    return _np.ascontiguousarray(_np.concatenate([q, k, v], axis=0), dtype=_np.float32)


def positions_from_cu_seqlens(cu_seqlens, total):
    """Position of each packed token in its sequence (int64 [T])."""
    if cu_seqlens is None:
        return _np.arange(total, dtype=_np.int64)
    cu = _checks.integer_array(cu_seqlens, "cu_seqlens", _np.int64)
    return _np.concatenate([_np.arange(cu[b + 1] - cu[b], dtype=_np.int64)
                            for b in range(len(cu) - 1)] or [_np.zeros(0, _np.int64)])


def _options(params, heads, head_dim, kv_heads, rope_theta, causal, window, scale, sink_logits,
             gate, gate_source):
    has = lambda name: params.get(name) is not None  # noqa: E731
    left, right = _checks.window(window)
    return {"heads": int(heads), "kv_heads": int(kv_heads), "head_dim": int(head_dim),
            "rope_theta": float(rope_theta), "causal": bool(causal), "window_left": left,
            "window_right": 0 if causal and right == -1 else right,
            "scale": 0.0 if scale is None else float(scale), "sink_logits": sink_logits, "gate": gate,
            "gate_source": gate_source, "gate_bias": has("gate_proj_bias"),
            "qkv_bias": has("qkv_proj_bias"), "o_bias": has("o_proj_bias")}


def _batch(x, cu_seqlens, positions):
    t = _np.shape(x)[0]
    cu = _checks.cu_seqlens(cu_seqlens, "cu_seqlens")
    pos = (positions_from_cu_seqlens(cu, t) if positions is None
           else _checks.integer_array(positions, "positions", _np.int64))
    return cu, pos


def attention_block(x, params, *, heads, head_dim, kv_heads=0, rope_theta=10000.0, causal=True,
                    window=(-1, -1), scale=None, sink_logits="none", gate="none", gate_source="input",
                    cu_seqlens=None, positions=None, reference=False):
    """Attention block on x [T, C] (packed tokens of the sequences in cu_seqlens) → (out, cache).

    sink_logits (a logit added to each softmax denominator): "none", "learned" (params["sinks"])
    or "off_by_one" (fixed at 0); gate: "none", "headwise" or
    "elementwise"; gate_source: "input" or "query" (the pre-RoPE query of each head).
    positions default to 0..L-1 within each sequence; rope_theta=0 disables RoPE.
    """
    opts = _options(params, heads, head_dim, kv_heads, rope_theta, causal, window, scale, sink_logits,
                    gate, gate_source)
    cu, pos = _batch(x, cu_seqlens, positions)
    return _C._attention_block_forward(x, dict(params), cu, pos, opts, bool(reference))


def attention_block_backward(d_out, x, params, cache, *, heads, head_dim, kv_heads=0,
                             rope_theta=10000.0, causal=True, window=(-1, -1), scale=None,
                             sink_logits="none", gate="none", gate_source="input", cu_seqlens=None,
                             positions=None, reference=False):
    """Gradients of attention_block from its cache → (d_x [T, C], grads dict like params)."""
    opts = _options(params, heads, head_dim, kv_heads, rope_theta, causal, window, scale, sink_logits,
                    gate, gate_source)
    cu, pos = _batch(x, cu_seqlens, positions)
    return _C._attention_block_backward(d_out, x, dict(params), dict(cache), cu, pos, opts,
                                        bool(reference))
