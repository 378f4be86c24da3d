"""Shared pieces of attnkit.torch: argument checks that run before any work, torch ↔ numpy
conversion without copies for float32, the dropout seed and the ALiBi capability probe.

Float32 CPU tensors are handed to the kernels as numpy views of their own memory (strided views
whose last dimension is contiguous included); float16/bfloat16 are converted to float32 once.
Results come back as tensors over the kernels' numpy outputs (no copy) and are cast to the
inputs' dtype only when that dtype is not float32.
"""
import numpy as np
import torch

import attnkit

from . import _checks

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_tensor(x, name, ranks):
    """Checks x is a float32/float16/bfloat16 CPU tensor of one of `ranks` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cpu":
        raise attnkit.Error(f"{name}: attnkit.torch runs on the CPU, got a tensor on {x.device}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: expected float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise attnkit.Error(f"{name}: expected {want} dimensions, got shape {tuple(x.shape)}")


def check_finite(x, name):
    """attnkit.Error naming the first NaN or infinite entry of tensor x by its index in x."""
    with torch.no_grad():
        bad = ~torch.isfinite(x)
        if bool(bad.any()):
            index = [int(i) for i in bad.nonzero()[0]]
            raise attnkit.Error(f"{name}: non-finite value {float(x[tuple(index)])} at {index}")


def check_same_dtype(named):
    """All tensors in {name: tensor} share one dtype (FlashAttention's rule)."""
    items = list(named.items())
    first_name, first = items[0]
    for name, x in items[1:]:
        if x.dtype != first.dtype:
            raise TypeError(f"{name}: dtype {x.dtype} differs from {first_name} dtype {first.dtype}")


def check_heads(q_heads, k_heads, name="k"):
    """nheads must be a positive multiple of nheads_k (GQA/MQA)."""
    if k_heads < 1 or q_heads % k_heads != 0:
        raise attnkit.Error(f"{name}: nheads = {q_heads} is not a multiple of nheads_k = {k_heads}")


def check_index_tensor(x, name, shape=None):
    """An integer CPU tensor (int32 or int64) of the given shape (None entries = any)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected an integer torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cpu":
        raise attnkit.Error(f"{name}: attnkit.torch runs on the CPU, got a tensor on {x.device}")
    if x.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name}: expected int32 or int64, got {x.dtype}")
    if shape is not None and (x.dim() != len(shape) or any(
            s is not None and s != n for s, n in zip(shape, x.shape))):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise attnkit.Error(f"{name}: expected shape {want}, got {tuple(x.shape)}")


def check_cu_seqlens(cu, name, total):
    """cu_seqlens [B+1]: starts at 0, never decreases, ends at `total`; returns int32 numpy."""
    check_index_tensor(cu, name, (None,))
    c = cu.detach().numpy().astype(np.int64)
    if c.size < 2:
        raise attnkit.Error(f"{name}: needs at least 2 entries (batch + 1), got {c.size}")
    if c[0] != 0:
        raise attnkit.Error(f"{name}: must start at 0, got {int(c[0])}")
    if np.any(np.diff(c) < 0):
        raise attnkit.Error(f"{name}: must be non-decreasing, got {c.tolist()}")
    if c[-1] != total:
        raise attnkit.Error(f"{name}: must end at the token count {total}, ends at {int(c[-1])}")
    return c.astype(np.int32)


def check_max_seqlen(value, cu, name):
    """max_seqlen must be an int at least the longest sequence in cu (int32 numpy)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise attnkit.Error(f"{name}: expected an int or a one-element tensor, got shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    longest = int(np.diff(cu).max()) if cu.size > 1 else 0
    if value < longest:
        raise attnkit.Error(f"{name}: {value} is smaller than the longest sequence ({longest})")


def check_options(dropout_p, softmax_scale, window_size, softcap):
    """Returns (dropout_p, scale or None, (left, right), softcap) after checking each."""
    dropout_p = _checks.number(dropout_p, "dropout_p")
    if not 0.0 <= dropout_p < 1.0:
        raise attnkit.Error(f"dropout_p: must be in [0, 1), got {dropout_p}")
    if softmax_scale is not None:
        softmax_scale = _checks.number(softmax_scale, "softmax_scale")
        if not (np.isfinite(softmax_scale) and softmax_scale > 0):
            raise attnkit.Error(f"softmax_scale: must be finite and > 0, got {softmax_scale}")
    left, right = _checks.window(window_size, "window_size")
    softcap = _checks.number(softcap, "softcap")
    if not (np.isfinite(softcap) and softcap >= 0):
        raise attnkit.Error(f"softcap: must be finite and >= 0, got {softcap}")
    return dropout_p, softmax_scale, (left, right), softcap


def attn_probs(return_attn_probs, dropout_p):
    """Whether to return (out, softmax_lse, None) as FlashAttention does for return_attn_probs
    without dropout (its S_dmask exists only with dropout_p > 0, which attnkit, never forming the
    probability matrix, refuses)."""
    if return_attn_probs and _checks.number(dropout_p, "dropout_p") > 0:
        raise NotImplementedError(
            "return_attn_probs: with dropout_p > 0 FlashAttention returns the dropped-out "
            "probabilities, which attnkit does not materialise")
    return bool(return_attn_probs)


def check_sink(sink, nheads):
    """learnable_sink: a float tensor [nheads] (or None)."""
    if sink is None:
        return
    check_tensor(sink, "learnable_sink", (1,))
    if sink.shape[0] != nheads:
        raise attnkit.Error(f"learnable_sink: expected shape [{nheads}], got {tuple(sink.shape)}")


def check_alibi(alibi_slopes, batch, nheads):
    """alibi_slopes [nheads] or [batch, nheads] → float32 numpy (None → None)."""
    if alibi_slopes is None:
        return None
    if not isinstance(alibi_slopes, torch.Tensor) or not alibi_slopes.is_floating_point():
        raise TypeError("alibi_slopes: expected a float torch.Tensor")
    if alibi_slopes.device.type != "cpu":
        raise attnkit.Error(f"alibi_slopes: attnkit.torch runs on the CPU, got {alibi_slopes.device}")
    if tuple(alibi_slopes.shape) not in ((nheads,), (batch, nheads)):
        raise attnkit.Error(f"alibi_slopes: expected [{nheads}] or [{batch}, {nheads}], got "
                         f"{tuple(alibi_slopes.shape)}")
    return np.ascontiguousarray(alibi_slopes.detach().to(torch.float32).numpy())


def to_numpy32(x):
    """float32 numpy view of a CPU tensor's memory (float32 with a contiguous last dimension),
    else a float32 copy."""
    x = x.detach()
    if x.dtype != torch.float32 or (x.dim() and x.stride(-1) != 1 and x.shape[-1] > 1):
        x = x.to(torch.float32).contiguous()
    return x.numpy()


def to_tensor(a, dtype):
    """Tensor over numpy array a (no copy), cast to dtype when that is not float32."""
    t = torch.from_numpy(a)
    return t if dtype == torch.float32 else t.to(dtype)


def dropout_seed():
    """A 62-bit dropout seed drawn from torch's default generator (torch.manual_seed fixes it)."""
    return int(torch.randint(0, 2 ** 62, (1,), dtype=torch.int64).item())
