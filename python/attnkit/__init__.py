"""attnkit: exact attention (FlashAttention-style), KV caches and transformer models on the CPU.

numpy in, numpy out. Attention functions take float32 arrays either batched ``[B, L, H, D]`` or
packed ``[T, H, D]`` with ``cu_seqlens_q`` / ``cu_seqlens_k`` (int32, B+1 entries from 0).
Errors raise ``attnkit.Error``, a subclass of ``ValueError``.
"""
import re as _re

import numpy as _np

from . import _attnkit
from . import _checks
from ._attnkit import (Error, ImageModel, build_info, conv2d_engine, dropout_keep_mask, kv_plan, kv_presets, load_fashion_mnist, load_idx,
                       load_safetensors,
                       load_safetensors_metadata, num_threads, packed_gemm, save_safetensors,
                       set_sgemm_path, sgemm_path,
                       set_conv2d_engine, set_num_threads, set_packed_gemm, set_matmul_precision,
                       matmul_precision, bf16_available, decode_page_order, set_decode_page_order)

__all__ = [
    "Error", "ImageModel", "build_info", "num_threads", "set_num_threads", "conv2d_engine", "set_conv2d_engine",
    "packed_gemm", "set_packed_gemm", "sgemm_path", "set_sgemm_path", "matmul_precision", "set_matmul_precision", "bf16_available",
    "dropout_keep_mask", "kv_plan", "kv_presets",
    "load_safetensors", "load_safetensors_metadata", "save_safetensors", "load_idx",
    "load_fashion_mnist",
    "attention_reference", "attention_reference_backward",
    "flash_attention", "flash_attention_backward",
    "KVCache", "decode_attention", "decode_page_order", "set_decode_page_order", "Model", "load_model", "load", "model_type", "convert_gqa",
    "ms_deform_attn", "ms_deform_attn_backward", "BertModel", "load_bert",
]


def _window(causal, window):
    """(left, right) window after applying ``causal`` (which forces right = 0)."""
    left, right = _checks.window(window)
    if causal:
        right = 0
    return left, right


def _packed(q, k, v, cu_seqlens_q, cu_seqlens_k):
    """Packed [T, H, D] views of q, k, v and a function restoring q's layout on outputs."""
    q, k, v = (_checks.float_array(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    if q.ndim != k.ndim or q.ndim != v.ndim:
        raise Error(f"q, k, v: ranks differ ({q.ndim}, {k.ndim}, {v.ndim})")
    if q.ndim == 3:
        cu_q = _checks.cu_seqlens(cu_seqlens_q, "cu_seqlens_q")
        cu_k = _checks.cu_seqlens(cu_seqlens_k, "cu_seqlens_k")
        return q, k, v, cu_q, cu_k, (lambda x: x), (lambda x: x)
    if q.ndim != 4:
        raise Error(f"q: expected [B, L, H, D] or packed [T, H, D], got {q.ndim} dimensions")
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        raise Error("cu_seqlens_q/cu_seqlens_k: only with packed [T, H, D] inputs")
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        raise Error(f"k, v: batch {k.shape[0]}, {v.shape[0]} != q batch {q.shape[0]}")
    b, lq = q.shape[:2]
    lk = k.shape[1]
    # B = 0 runs as one empty sequence (the packed form needs B >= 1), so that the options and
    # shapes are checked as for B >= 1.
    cu_q = _np.arange(b + 1, dtype=_np.int32) * lq if b else None
    cu_k = _np.arange(b + 1, dtype=_np.int32) * lk if b else None
    flat = lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])
    unflat_q = lambda x: x.reshape((b, lq) + x.shape[1:])
    unflat_k = lambda x: x.reshape((b, lk) + x.shape[1:])
    return flat(q), flat(k), flat(v), cu_q, cu_k, unflat_q, unflat_k


_NON_FINITE = _re.compile(r"(\w+): non-finite value (\S+) at \[(\d+), (\d+), (\d+)\]")


def _in_batch_layout(call, lengths):
    """call(); the compiled code names a non-finite entry of a flattened [B·L, H, D] argument by
    its token row, so for the arguments in `lengths` (name → L of [B, L, H, D]) the error is
    raised again naming the entry in the caller's [B, L, H, D] layout."""
    try:
        return call()
    except Error as e:
        m = _NON_FINITE.fullmatch(str(e))
        if m is None or m.group(1) not in lengths or not lengths[m.group(1)]:
            raise
        row, length = int(m.group(3)), lengths[m.group(1)]
        raise Error(f"{m.group(1)}: non-finite value {m.group(2)} at [{row // length}, {row % length}, "
                    f"{m.group(4)}, {m.group(5)}]") from None


def _empty_batch_slopes(alibi_slopes, q):
    """alibi_slopes for the packed call: [B, H] slopes of an empty batch (run as one empty
    sequence) are checked here and dropped (they have no row to apply)."""
    if _np.ndim(q) != 4 or _np.shape(q)[0] != 0 or _np.ndim(alibi_slopes) != 2:
        return alibi_slopes
    h = _np.shape(q)[2]
    if _np.shape(alibi_slopes) != (0, h):
        raise Error(f"alibi_slopes: expected [B, H] = [0, {h}], got "
                         f"{list(_np.shape(alibi_slopes))}")
    return None


def _lse_layout(lse, unflat_q, batched):
    """lse [H, T] → [B, H, L] for batched inputs."""
    if not batched:
        return lse
    return _np.ascontiguousarray(unflat_q(lse.T).transpose(0, 2, 1))


def _call_forward(fn, q, k, v, causal, window, scale, softcap, sink_logits, alibi_slopes,
                  dropout_p, seed, cu_seqlens_q, cu_seqlens_k, return_lse):
    left, right = _window(causal, window)
    seed = _checks.seed(seed)
    qp, kp, vp, cu_q, cu_k, unflat_q, _ = _packed(q, k, v, cu_seqlens_q, cu_seqlens_k)
    batched = _np.ndim(q) == 4
    alibi_slopes = _empty_batch_slopes(alibi_slopes, q)
    lengths = {"q": _np.shape(q)[1], "k": _np.shape(k)[1], "v": _np.shape(v)[1]} if batched else {}
    out, lse = _in_batch_layout(
        lambda: fn(qp, kp, vp, cu_q, cu_k, sink_logits, alibi_slopes, left, right,
                   0.0 if scale is None else float(scale), float(softcap), float(dropout_p), seed),
        lengths)
    out = unflat_q(out)
    return (out, _lse_layout(lse, unflat_q, batched)) if return_lse else out


def attention_reference(q, k, v, *, causal=False, window=(-1, -1), scale=None, softcap=0.0,
                        sink_logits=None, alibi_slopes=None, dropout_p=0.0, seed=0,
                        cu_seqlens_q=None, cu_seqlens_k=None, return_lse=False):
    """Reference attention (double accumulation): softmax(scale·q·kᵀ + bias + mask)·v.

    q [B, L, H, D] or packed [T, H, D]; k, v [B, S, Hkv, D] or [Tk, Hkv, D] with H % Hkv == 0.
    alibi_slopes: float32 [H] or [B, H]; adds -slope·|i + Lk - Lq - j| after the softcap.
    Returns out like q, and lse ([B, H, L] or [H, T], natural log) if ``return_lse``.
    """
    return _call_forward(_attnkit._attention_reference, q, k, v, causal, window, scale, softcap,
                         sink_logits, alibi_slopes, dropout_p, seed, cu_seqlens_q, cu_seqlens_k,
                         return_lse)


def attention_reference_backward(dout, q, k, v, *, causal=False, window=(-1, -1), scale=None,
                                 softcap=0.0, sink_logits=None, alibi_slopes=None, dropout_p=0.0,
                                 seed=0, cu_seqlens_q=None, cu_seqlens_k=None):
    """Gradients of attention_reference: (dq, dk, dv, dsink), dsink None without sinks.

    ALiBi slopes are constants (no gradient is returned for them).
    """
    return _call_backward(None, dout, q, k, v, None, None, causal, window, scale, softcap,
                          sink_logits, alibi_slopes, dropout_p, seed, cu_seqlens_q, cu_seqlens_k)


def _call_backward(fn, dout, q, k, v, out, lse, causal, window, scale, softcap, sink_logits,
                   alibi_slopes, dropout_p, seed, cu_seqlens_q, cu_seqlens_k):
    left, right = _window(causal, window)
    seed = _checks.seed(seed)
    qp, kp, vp, cu_q, cu_k, unflat_q, unflat_k = _packed(q, k, v, cu_seqlens_q, cu_seqlens_k)
    batched = _np.ndim(q) == 4
    dout = _checks.float_array(dout, "dout")
    if dout.shape != _np.shape(q):
        raise Error(f"dout: shape {dout.shape} != q shape {_np.shape(q)}")
    opts = (sink_logits, _empty_batch_slopes(alibi_slopes, q), left, right,
            0.0 if scale is None else float(scale), float(softcap), float(dropout_p), seed)
    lengths = ({"q": _np.shape(q)[1], "k": _np.shape(k)[1], "v": _np.shape(v)[1], "d_out": _np.shape(q)[1]}
               if batched else {})
    if fn is None:
        dq, dk, dv, ds = _in_batch_layout(lambda: _attnkit._attention_reference_backward(
            dout.reshape(qp.shape), qp, kp, vp, cu_q, cu_k, *opts), lengths)
    else:
        out = _checks.float_array(out, "out")
        lse = _checks.float_array(lse, "lse")
        if out.shape != _np.shape(q):
            raise Error(f"out: shape {out.shape} != q shape {_np.shape(q)}")
        if batched:  # [B, H, L] → [H, B·L]
            if lse.ndim != 3:
                raise Error(f"lse: expected [B, H, L] for batched inputs, got {lse.shape}")
            lse = lse.transpose(1, 0, 2).reshape(lse.shape[1], -1)
        dq, dk, dv, ds = _in_batch_layout(lambda: fn(dout.reshape(qp.shape), qp, kp, vp, out.reshape(qp.shape),
                                                     lse, cu_q, cu_k, *opts), lengths)
    return unflat_q(dq), unflat_k(dk), unflat_k(dv), ds


def flash_attention(q, k, v, *, causal=False, window=(-1, -1), scale=None, softcap=0.0,
                    sink_logits=None, alibi_slopes=None, dropout_p=0.0, seed=0,
                    cu_seqlens_q=None, cu_seqlens_k=None, return_lse=False):
    """Exact attention, tiled with an online softmax (never materialises the score matrix).

    Same arguments and result as attention_reference, up to float32 rounding. q [B, L, H, D] or
    packed [T, H, D]; k, v [B, S, Hkv, D] or [Tk, Hkv, D]; causal is aligned bottom-right;
    window=(left, right) with -1 unbounded; sink_logits [H]; alibi_slopes float32 [H] or [B, H]
    (FlashAttention's ALiBi: -slope·|i + Lk - Lq - j| added to the softcapped score); dropout
    keyed by (seed, seq, head, i, j). Returns out, and lse ([B, H, L] or [H, T]) if
    ``return_lse`` (needed for backward).
    """
    return _call_forward(_attnkit._flash_attention, q, k, v, causal, window, scale, softcap,
                         sink_logits, alibi_slopes, dropout_p, seed, cu_seqlens_q, cu_seqlens_k,
                         return_lse)


def flash_attention_backward(dout, q, k, v, out, lse, *, causal=False, window=(-1, -1),
                             scale=None, softcap=0.0, sink_logits=None, alibi_slopes=None,
                             dropout_p=0.0, seed=0, cu_seqlens_q=None, cu_seqlens_k=None):
    """Gradients of flash_attention from its out and lse: (dq, dk, dv, dsink or None).

    Pass the same options as the forward (dropout regenerates the forward's mask from seed;
    alibi_slopes are constants, with no gradient).
    """
    return _call_backward(_attnkit._flash_attention_backward, dout, q, k, v, out, lse, causal,
                          window, scale, softcap, sink_logits, alibi_slopes, dropout_p, seed,
                          cu_seqlens_q, cu_seqlens_k)

def ms_deform_attn(value, spatial_shapes, level_start_index, sampling_locations,
                   attention_weights, *, reference=False):
    """Multi-scale deformable attention (Deformable DETR) -> out [B, Q, H·Dh] float32.

    value [B, S, H, Dh] (levels concatenated along S); spatial_shapes [Lv, 2] integer (H_l, W_l);
    level_start_index [Lv] integer; sampling_locations [B, Q, H, Lv, P, 2] as (x, y) in [0, 1];
    attention_weights [B, Q, H, Lv, P]. Bilinear sampling as grid_sample(mode='bilinear',
    padding_mode='zeros', align_corners=False) at 2·loc - 1. ``reference`` runs the float64 spec.
    """
    return _attnkit._ms_deform_attn(value, spatial_shapes, level_start_index, sampling_locations,
                                    attention_weights, bool(reference))


def ms_deform_attn_backward(d_out, value, spatial_shapes, level_start_index, sampling_locations,
                            attention_weights, *, reference=False):
    """Gradients of ms_deform_attn: (d_value, d_sampling_locations, d_attention_weights)."""
    return _attnkit._ms_deform_attn_backward(d_out, value, spatial_shapes, level_start_index,
                                             sampling_locations, attention_weights,
                                             bool(reference))


class Model:
    """A GPT (Llama-architecture) model: ``logits``, ``loss_and_grads``, ``save``, ``config``."""

    def __init__(self, impl):
        self._impl = impl

    @property
    def config(self):
        """The config.json contents as a dict (Hugging Face Llama keys + attnkit keys)."""
        import json
        return json.loads(self._impl.config_json())

    def logits(self, tokens, cu_seqlens=None):
        """logits [T, vocab] float32 for int token ids [T] (packed sequences: cu_seqlens)."""
        return self._impl.logits(_np.asarray(tokens), cu_seqlens)

    def loss_and_grads(self, tokens, targets, cu_seqlens=None):
        """(mean next-token loss, {parameter name: gradient}) for one batch; targets -1 = ignore."""
        return self._impl.loss_and_grads(_np.asarray(tokens), _np.asarray(targets), cu_seqlens)

    def adamw_losses(self, tokens, targets, cu_seqlens=None, steps=10, lr=1e-3, betas=(0.9, 0.999),
                     eps=1e-8, weight_decay=0.01):
        """Trains in place for ``steps`` AdamW steps on one batch; returns steps + 1 losses."""
        steps = _checks.integer(steps, "steps", 0)  # 0: the loss only, no update
        return self._impl.adamw_losses(_np.asarray(tokens), _np.asarray(targets), cu_seqlens, steps,
                                       lr, betas[0], betas[1], eps, weight_decay)

    def parameters(self):
        """{Hugging Face tensor name: float32 array} (copies)."""
        return self._impl.parameters()

    def save(self, directory):
        """Writes config.json and model.safetensors to ``directory`` atomically."""
        self._impl.save(str(directory))

    def sink_profile(self, tokens, query_pos, windows=1, recent=64, gate_bins=10):
        """Attention of query ``query_pos`` averaged over ``windows`` windows of ``tokens``:
        dict of float64 arrays mass [L, H, query_pos + 1], sink_share [L, H], gate_mean [L, H],
        gate_hist [L, H, gate_bins], and the mean L2 norms by position of the residual stream,
        hidden_norm [L + 1, query_pos + 1] (row l enters layer l; row L leaves the last layer), and
        of the keys, key_norm [L, Hkv, query_pos + 1] (see include/attnkit/tools/sink_profile.hpp)."""
        return _attnkit._sink_profile(self._impl, _np.asarray(tokens), query_pos, windows, recent,
                                      gate_bins)

    def stream_eval(self, tokens, policy="sink", window=0, sink_tokens=4, count=None):
        """Streams ``count`` tokens under a KV-cache policy (dense, window, sink, recompute; the
        sink policy pins the first ``sink_tokens`` tokens): dict with nll [count - 1] (nats,
        float64) and the cache's stream positions at the end."""
        count = len(tokens) if count is None else count
        return _attnkit._stream_eval(self._impl, _np.asarray(tokens), policy, window, sink_tokens, count)


def convert_gqa(in_dir, out_dir, kv_heads, method="mean", seed=0):
    """Writes ``out_dir`` (config.json + model.safetensors) with ``kv_heads`` KV heads: the K/V
    projection rows of each group of contiguous heads pooled by ``method`` ("mean", "first" or
    "random", seeded). Refuses kv_heads not dividing the current count, and never overwrites the input."""
    _attnkit.convert_gqa(str(in_dir), str(out_dir), _checks.integer(kv_heads, "kv_heads", 1), method,
                         _checks.seed(seed))


def model_type(directory):
    """(model_type, kind) of a model directory's config.json: kind is "GPT", "BERT" or "image"."""
    return _attnkit._model_type(str(directory))


def load(directory):
    """Loads any model directory, picking the class by config.json's model_type: a Model (GPT),
    a BertModel or an ImageModel."""
    kind = model_type(directory)[1]
    if kind == "GPT":
        return load_model(directory)
    if kind == "BERT":
        return load_bert(directory)
    return ImageModel.load(str(directory))


def load_model(directory):
    """Loads a GPT model directory (config.json + model.safetensors, Hugging Face Llama names);
    ValueError for a directory holding another kind of model."""
    _attnkit._require_model_kind(str(directory), "GPT", "attnkit.load_model")
    return Model(_attnkit._GptModel.load(str(directory)))


class BertModel:
    """A BERT encoder with Hugging Face names and heads (see include/attnkit/models/bert.hpp)."""

    def __init__(self, impl):
        self._impl = impl

    @property
    def config(self):
        """The config.json contents as a dict (Hugging Face BertConfig keys)."""
        import json
        return json.loads(self._impl.config_json())

    def run(self, tokens, **kw):
        """Encoder + heads on one packed batch. Keywords: token_type_ids, cu_seqlens (attention
        segments), sequences (segment index of each real sequence), mlm_labels [T] (-1 = none),
        nsp_labels [B], labels, start_positions, end_positions, backward, mlm_logits, training,
        seed. Returns a dict: loss, mlm_loss, nsp_loss, task_loss, sequence_output [T, C],
        pooled_output [B, C], task_logits, mlm_logits [T, V], grads {name: array}."""
        return self._impl.run(_np.asarray(tokens), **kw)

    def parameters(self):
        """{Hugging Face tensor name: float32 array} (copies)."""
        return self._impl.parameters()

    def save(self, directory):
        """Writes config.json and model.safetensors to ``directory`` atomically."""
        self._impl.save(str(directory))


def load_bert(directory):
    """Loads a BERT directory (config.json + model.safetensors, Hugging Face BERT names);
    ValueError for a directory holding another kind of model."""
    _attnkit._require_model_kind(str(directory), "BERT", "attnkit.load_bert")
    return BertModel(_attnkit._BertModel.load(str(directory)))


from . import nn  # noqa: E402  (layers with explicit forward/backward; see attnkit/nn.py)


class KVCache(_attnkit._KVCache):
    """KV cache: per layer K and V of up to ``max_sequences`` sequences, stored as [slot, Hkv, D].

    dtype: "f32", "f16", "bf16" or "int8" (a float32 scale per token per head).
    policy: "dense" (up to ``capacity`` tokens), "window" (the last ``window`` tokens),
    "sink" (the first ``sink_tokens`` tokens plus the last ``window``: StreamingLLM), or "paged"
    (blocks of ``block_size`` tokens from a pool of ``num_blocks``; 0 = enough for
    max_sequences × capacity). Sequences are claimed with ``add_sequence()``; a cache with
    ``max_sequences=1`` starts with sequence 0 claimed. ``nbytes`` equals what ``kv_plan``
    predicts for the same shape.
    """

    def __init__(self, layers, kv_heads, head_dim, capacity=0, dtype="f16", policy="dense",
                 window=0, sink_tokens=0, block_size=16, num_blocks=0, max_sequences=1):
        super().__init__(layers=layers, kv_heads=kv_heads, head_dim=head_dim, capacity=capacity,
                         dtype=dtype, policy=policy, window=window, sink_tokens=sink_tokens,
                         block_size=block_size, num_blocks=num_blocks,
                         max_sequences=max_sequences)
        if max_sequences == 1:
            self.add_sequence()

    def append(self, k, v, layer=0, seq=0):
        """Appends k, v [n, Hkv, D] (float32) to one layer of a sequence."""
        super().append(k, v, layer=layer, seq=seq)

    def length(self, seq=0, layer=0):
        """Tokens ever appended (the stream position)."""
        return super().length(seq=seq, layer=layer)

    def cached(self, seq=0, layer=0):
        """Tokens currently held."""
        return super().cached(seq=seq, layer=layer)

    def positions(self, seq=0, layer=0):
        """Stream position of every cached token, in cache order (int64 array)."""
        return super().positions(seq=seq, layer=layer)

    def gather(self, seq=0, layer=0):
        """Cached (k, v) converted to float32, [cached, Hkv, D] each, in cache order."""
        return super().gather(seq=seq, layer=layer)


def decode_attention(q, cache, layer=0, *, seqs=None, causal=True, window=(-1, -1), scale=None,
                     softcap=0.0, sink_logits=None, alibi_slopes=None, rope_theta=0.0,
                     return_lse=False, reference=False):
    """Attention of new queries against a KVCache (split-KV, K/V converted in registers).

    q: [n, H, D] for one sequence or [B, n, H, D] for ``seqs`` (default: 0..B-1); the n queries
    are the last n tokens already appended to the cache. Masks are aligned bottom-right on cache
    positions; ``rope_theta`` > 0 rotates q and the cached keys by their cache positions
    (StreamingLLM); alibi_slopes float32 [H] or [B, H] (one row per entry of ``seqs``) bias the
    scores by -slope·|distance| in cache positions. Returns out like q, and lse ([H, n] or
    [B, H, n]) if ``return_lse``.
    """
    q = _checks.float_array(q, "q")
    if q.ndim == 3:
        batched, qp = False, q
        seqs = [0] if seqs is None else list(seqs)
    elif q.ndim == 4:
        batched, qp = True, q.reshape((q.shape[0] * q.shape[1],) + q.shape[2:])
        seqs = list(range(q.shape[0])) if seqs is None else list(seqs)
        if len(seqs) != q.shape[0]:
            raise Error(f"seqs: {len(seqs)} sequences for a batch of {q.shape[0]}")
    else:
        raise Error(f"q: expected [n, H, D] or [B, n, H, D], got {q.ndim} dimensions")
    left, right = _window(causal, window)
    out, lse = _attnkit._decode_attention(
        qp, cache, int(layer), seqs, sink_logits, alibi_slopes, left, right,
        0.0 if scale is None else float(scale), float(softcap), float(rope_theta), bool(reference))
    if batched:
        b, n = q.shape[:2]
        out = out.reshape(q.shape)
        lse = _np.ascontiguousarray(lse.reshape(lse.shape[0], b, n).transpose(1, 0, 2))
    return (out, lse) if return_lse else out

from . import nn  # noqa: E402  (layers with explicit forward/backward; see attnkit/nn.py)
from . import train  # noqa: E402,F401  (AdamW, schedule, clipping; see attnkit/train.py)
