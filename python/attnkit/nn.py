"""attnkit.nn: transformer layers with explicit forward and backward functions (llm.c style).

There is no autograd graph: call the forwards in order, keep what they return (saved statistics
such as ``mean``/``rstd`` or ``lse`` are returned explicitly), then call the backwards in reverse.
Arrays are float32 numpy arrays; activations are ``[..., C]`` (leading dimensions are flattened
into tokens ``T``), weights use Hugging Face layouts (``linear`` weight ``[out, in]``).
Backward functions return fresh gradients (parameter gradients start from zero here; the C++ API
adds into existing buffers). Every function takes ``reference=True`` to run the double-precision
reference implementation instead of the fast path. Errors raise ``attnkit.Error`` (a ValueError).
"""
import numpy as _np

from . import _attnkit as _C
from . import _checks

__all__ = [
    "linear", "linear_backward", "embedding", "embedding_backward",
    "layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward",
    "gelu", "gelu_backward", "silu", "silu_backward", "swiglu", "swiglu_backward",
    "rope", "rope_backward", "dropout", "dropout_backward", "dropout_mask",
    "cross_entropy", "cross_entropy_backward", "linear_cross_entropy",
    "linear_cross_entropy_backward", "logits",
]


def _rows(x, name):
    """x as a 2-D [T, C] array (leading dimensions flattened) and x's leading shape."""
    x = _np.asarray(x)
    if x.ndim < 1:
        raise _C.Error(f"{name}: expected an array with a channel dimension, got a scalar")
    return x.reshape(-1, x.shape[-1]), x.shape[:-1]


def _ids(ids, name):
    ids = _np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array, got dtype {ids.dtype}")
    return ids.reshape(-1), ids.shape


def linear(x, w, b=None, *, reference=False):
    """y[..., out] = x[..., in] @ w.T + b, w [out, in] (Hugging Face layout), b [out] or None."""
    x2, lead = _rows(x, "x")
    return _C.nn_linear_forward(x2, w, b, reference).reshape(lead + (_np.shape(w)[0],))


def linear_backward(d_y, x, w, *, has_bias=True, reference=False):
    """Gradients of linear: (d_x [..., in], d_w [out, in], d_b [out] or None if not has_bias)."""
    d_y2, _ = _rows(d_y, "d_y")
    x2, lead = _rows(x, "x")
    d_x, d_w, d_b = _C.nn_linear_backward(d_y2, x2, w, has_bias, reference)
    return d_x.reshape(lead + (x2.shape[1],)), d_w, d_b


def embedding(ids, table, *, reference=False):
    """y[..., C] = table[ids]: table [V, C], ids an integer array of any shape with 0 <= id < V."""
    flat, shape = _ids(ids, "ids")
    return _C.nn_embedding_forward(flat, table, reference).reshape(shape + (_np.shape(table)[1],))


def embedding_backward(d_y, ids, vocab_size, *, reference=False):
    """d_table [vocab_size, C]: the rows of d_y [..., C] summed per id (repeated ids accumulate)."""
    flat, _ = _ids(ids, "ids")
    d_y2, _ = _rows(d_y, "d_y")
    return _C.nn_embedding_backward(d_y2, flat, int(vocab_size), reference)


def layer_norm(x, w=None, b=None, eps=1e-5, *, reference=False):
    """LayerNorm over the last dimension: (y like x, mean [...], rstd [...]); w, b [C] or None."""
    x2, lead = _rows(x, "x")
    y, mean, rstd = _C.nn_layer_norm_forward(x2, w, b, float(eps), reference)
    return y.reshape(_np.shape(x)), mean.reshape(lead), rstd.reshape(lead)


def _optional_rows(a, name):
    """_rows(a) as a 2-D array, or None for None."""
    return None if a is None else _rows(a, name)[0]


def layer_norm_backward(d_y, x, w, mean, rstd, *, has_bias=True, d_residual=None, reference=False):
    """Gradients of layer_norm from its mean and rstd: (d_x, d_w or None, d_b or None). With
    d_residual (like x), d_x is d_residual plus the norm's input gradient: the gradient of a
    pre-norm block's input, whose skip path carries d_residual."""
    d_y2, _ = _rows(d_y, "d_y")
    x2, _ = _rows(x, "x")
    d_x, d_w, d_b = _C.nn_layer_norm_backward(d_y2, x2, w, _np.ravel(mean), _np.ravel(rstd),
                                              has_bias, _optional_rows(d_residual, "d_residual"),
                                              reference)
    return d_x.reshape(_np.shape(x)), d_w, d_b


def rms_norm(x, w=None, eps=1e-6, *, reference=False):
    """RMSNorm (Llama: x * rsqrt(mean(x²) + eps) * w) over the last dimension: (y, rstd [...])."""
    x2, lead = _rows(x, "x")
    y, rstd = _C.nn_rms_norm_forward(x2, w, float(eps), reference)
    return y.reshape(_np.shape(x)), rstd.reshape(lead)


def rms_norm_backward(d_y, x, w, rstd, *, d_residual=None, reference=False):
    """Gradients of rms_norm from its rstd: (d_x like x, d_w [C] or None); with d_residual (like
    x), d_x is d_residual plus the norm's input gradient, as in layer_norm_backward."""
    d_y2, _ = _rows(d_y, "d_y")
    x2, _ = _rows(x, "x")
    d_x, d_w = _C.nn_rms_norm_backward(d_y2, x2, w, _np.ravel(rstd),
                                       _optional_rows(d_residual, "d_residual"), reference)
    return d_x.reshape(_np.shape(x)), d_w


def gelu(x, approximate="none", *, reference=False):
    """GELU of x: approximate='none' (exact, erf) or 'tanh' (GPT-2), as torch.nn.functional.gelu."""
    x2, _ = _rows(x, "x")
    return _C.nn_gelu_forward(x2, approximate, reference).reshape(_np.shape(x))


def gelu_backward(d_y, x, approximate="none", *, reference=False):
    """d_x = d_y · gelu'(x)."""
    d_y2, _ = _rows(d_y, "d_y")
    x2, _ = _rows(x, "x")
    return _C.nn_gelu_backward(d_y2, x2, approximate, reference).reshape(_np.shape(x))


def silu(x, *, reference=False):
    """SiLU (swish): x · sigmoid(x)."""
    x2, _ = _rows(x, "x")
    return _C.nn_silu_forward(x2, reference).reshape(_np.shape(x))


def silu_backward(d_y, x, *, reference=False):
    """d_x = d_y · silu'(x)."""
    d_y2, _ = _rows(d_y, "d_y")
    x2, _ = _rows(x, "x")
    return _C.nn_silu_backward(d_y2, x2, reference).reshape(_np.shape(x))


def swiglu(gate, up, *, reference=False):
    """silu(gate) · up (the Llama MLP's gating); gate and up have the same shape."""
    g2, _ = _rows(gate, "gate")
    u2, _ = _rows(up, "up")
    return _C.nn_swiglu_forward(g2, u2, reference).reshape(_np.shape(gate))


def swiglu_backward(d_y, gate, up, *, reference=False):
    """Gradients of swiglu: (d_gate, d_up)."""
    d_y2, _ = _rows(d_y, "d_y")
    g2, _ = _rows(gate, "gate")
    u2, _ = _rows(up, "up")
    d_g, d_u = _C.nn_swiglu_backward(d_y2, g2, u2, reference)
    return d_g.reshape(_np.shape(gate)), d_u.reshape(_np.shape(up))


def _heads(x, positions, name):
    x = _np.asarray(x)
    if x.ndim < 3:
        raise _C.Error(f"{name}: expected [..., T, H, D], got {x.ndim} dimensions")
    positions = _checks.integer_array(positions, "positions", _np.int64)
    if positions.shape != x.shape[:-2]:
        raise _C.Error(f"positions: shape {positions.shape} != {name}'s leading shape "
                         f"{x.shape[:-2]}")
    return x.reshape((-1,) + x.shape[-2:]), positions.reshape(-1)


def rope(x, positions, theta=10000.0, *, reference=False):
    """Rotary embedding, Hugging Face Llama convention (rotate_half), of x [..., T, H, D] at
    integer positions [..., T]; returns a rotated copy."""
    x3, pos = _heads(x, positions, "x")
    return _C.nn_rope_forward(x3, pos, float(theta), reference).reshape(_np.shape(x))


def rope_backward(d_y, positions, theta=10000.0, *, reference=False):
    """d_x of rope: d_y rotated by the negative angles."""
    d3, pos = _heads(d_y, positions, "d_y")
    return _C.nn_rope_backward(d3, pos, float(theta), reference).reshape(_np.shape(d_y))


def dropout(x, p, seed, stream=0, *, reference=False):
    """Inverted dropout: x · keep / (1 - p); the mask is a function of (seed, stream, flat index)."""
    x2, _ = _rows(x, "x")
    return _C.nn_dropout_forward(x2, float(p), _checks.seed(seed), _checks.seed(stream, "stream", 32),
                                 reference).reshape(_np.shape(x))


def dropout_backward(d_y, p, seed, stream=0, *, reference=False):
    """d_x of dropout: the forward's mask, regenerated from (seed, stream)."""
    d_y2, _ = _rows(d_y, "d_y")
    return _C.nn_dropout_backward(d_y2, float(p), _checks.seed(seed), _checks.seed(stream, "stream", 32),
                                  reference).reshape(_np.shape(d_y))


def dropout_mask(shape, p, seed, stream=0):
    """The boolean keep mask that dropout applies to an array of ``shape``."""
    shape = tuple(int(s) for s in shape)
    cols = shape[-1] if shape else 1
    rows = int(_np.prod(shape[:-1])) if shape else 1
    return _C.nn_dropout_mask(rows, cols, float(p), _checks.seed(seed),
                              _checks.seed(stream, "stream", 32)).reshape(shape)


def cross_entropy(logits, targets, *, reference=False):
    """Mean softmax cross-entropy of logits [..., V] against integer targets [...] (a negative
    target is ignored, like ignore_index=-100): (loss, losses [...], lse [...])."""
    z2, _ = _rows(logits, "logits")
    flat, shape = _ids(targets, "targets")
    loss, losses, lse = _C.nn_cross_entropy_forward(z2, flat, reference)
    return loss, losses.reshape(shape), lse.reshape(shape)


def cross_entropy_backward(logits, targets, lse, d_loss=1.0, *, reference=False):
    """d_logits = (softmax(logits) - onehot(targets)) · d_loss / n_valid (0 on ignored rows)."""
    z2, _ = _rows(logits, "logits")
    flat, _ = _ids(targets, "targets")
    return _C.nn_cross_entropy_backward(z2, flat, _np.ravel(lse), float(d_loss),
                                        reference).reshape(_np.shape(logits))


def linear_cross_entropy(h, w, targets, b=None, *, reference=False):
    """Fused LM head + loss: cross_entropy(h @ w.T + b, targets) without materialising the logits.
    h [..., C], w [V, C] (tied embedding or lm_head weight), b [V] or None. Returns
    (loss, losses [...], lse [...]); keep lse for the backward."""
    h2, _ = _rows(h, "h")
    flat, shape = _ids(targets, "targets")
    loss, losses, lse = _C.nn_linear_cross_entropy_forward(h2, w, flat, b, reference)
    return loss, losses.reshape(shape), lse.reshape(shape)


def linear_cross_entropy_backward(h, w, targets, lse, b=None, d_loss=1.0, *, reference=False):
    """Gradients of linear_cross_entropy from its lse: (d_h like h, d_w [V, C], d_b or None)."""
    h2, _ = _rows(h, "h")
    flat, _ = _ids(targets, "targets")
    d_h, d_w, d_b = _C.nn_linear_cross_entropy_backward(h2, w, flat, _np.ravel(lse), b,
                                                        float(d_loss), reference)
    return d_h.reshape(_np.shape(h)), d_w, d_b


def logits(h, w, b=None, *, reference=False):
    """Inference logits [..., V] = h [..., C] @ w.T + b."""
    h2, lead = _rows(h, "h")
    return _C.nn_logits_forward(h2, w, b, reference).reshape(lead + (_np.shape(w)[0],))

from .block import (attention_block, attention_block_backward, fuse_qkv,  # noqa: E402
                    positions_from_cu_seqlens)

__all__ += ["attention_block", "attention_block_backward", "fuse_qkv", "positions_from_cu_seqlens"]
from .deform import (ms_deform_attn_block, ms_deform_attn_block_backward,  # noqa: E402
                     ms_deform_attn_block_init)

__all__ += ["ms_deform_attn_block", "ms_deform_attn_block_backward", "ms_deform_attn_block_init"]


from .nn_vision import *  # noqa: E402,F401,F403  (NCHW image layers)
from .nn_vision import __all__ as _vision_all  # noqa: E402

__all__ += _vision_all
