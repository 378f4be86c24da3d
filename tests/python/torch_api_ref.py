"""Naive PyTorch references for tests of attnkit.torch, and FlashAttention's error bar applied to
whole autograd runs.

A test gives a function of named float tensors returning one tensor; `check_against_torch` runs
it on attnkit.torch (float32 inputs) and on the naive reference in float64 and in float32, with
the same upstream gradient, and asserts ours is within 2x torch-float32's error (outputs) and
3x (gradients, sharing the largest gradient as rounding scale) of the float64 result.
"""
import math

import numpy as np
import torch

import attnkit
import torch_attention as ta


def reference(q, k, v, causal=False, window=(-1, -1), scale=None, softcap=0.0, sink=None,
              keep=None, cu_q=None, cu_k=None):
    """FlashAttention semantics on the naive formulation of torch_attention.attention:
    q [B, Lq, H, D] / k, v [B, Lk, Hkv, D], or packed [T, ., D] with cu_seqlens lists."""
    window = (window[0], 0) if causal else tuple(window)
    if q.dim() == 4:
        b, lq, h, d = q.shape
        lk = k.shape[1]
        out, _ = ta.attention(q.reshape(b * lq, h, d), k.reshape(b * lk, *k.shape[2:]),
                              v.reshape(b * lk, *v.shape[2:]), window=window, scale=scale,
                              softcap=softcap, sinks=sink, keep=keep,
                              cu_q=[i * lq for i in range(b + 1)],
                              cu_k=[i * lk for i in range(b + 1)])
        return out.reshape(b, lq, h, d)
    out, _ = ta.attention(q, k, v, window=window, scale=scale, softcap=softcap, sinks=sink,
                          keep=keep, cu_q=cu_q, cu_k=cu_k)
    return out


def alibi_reference(q, k, v, slopes, causal=False):
    """softmax(scale·q·kᵀ - slope·|i + Lk - Lq - j| + causal mask)·v, q [B, Lq, H, D],
    k, v [B, Lk, H, D], slopes [H] or [B, H]."""
    b, lq, h, d = q.shape
    lk = k.shape[1]
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(d)
    rel = (torch.arange(lq)[:, None] + lk - lq - torch.arange(lk)[None, :]).to(q.dtype)
    sl = slopes.to(q.dtype).expand(b, h)[:, :, None, None]
    s = s - sl * rel.abs()
    if causal:
        s = s.masked_fill(rel < 0, -math.inf)
    return torch.einsum("bhij,bjhd->bihd", torch.softmax(s, -1), v)


def dropout_keep(seed, p, heads):
    """keep(b, lq, lk) -> [H, lq, lk] dropout factors regenerated from attnkit's mask."""
    def keep(b, lq, lk):
        m = np.stack([attnkit.dropout_keep_mask(seed, p, b, hh, lq, lk) for hh in range(heads)])
        return torch.tensor(m / (1.0 - p))
    return keep


def _run(fn, inputs, dout, dtype):
    """fn on copies of inputs in dtype (grads on), backward with dout -> {name: float64 numpy}."""
    leaves = {n: x.detach().to(dtype).requires_grad_(x.is_floating_point())
              for n, x in inputs.items()}
    out = fn(**leaves)
    out.backward(dout.to(dtype))
    res = {"out": out.detach().double().numpy()}
    for n, x in leaves.items():
        if x.requires_grad:
            res["d" + n] = x.grad.double().numpy()
    return res


def check_against_torch(ours_fn, ref_fn, inputs, seed=0):
    """Asserts FlashAttention's bar for ours_fn vs ref_fn on float32 `inputs` ({name: tensor});
    returns our results."""
    gen = torch.Generator().manual_seed(seed)
    probe = ref_fn(**{n: x.detach().double() for n, x in inputs.items()})
    dout = torch.randn(probe.shape, generator=gen, dtype=torch.float64).float()
    ours = _run(ours_fn, inputs, dout, torch.float32)
    ref64 = _run(ref_fn, inputs, dout, torch.float64)
    ref32 = _run(ref_fn, inputs, dout, torch.float32)
    grads = [n for n in ours if n != "out"]
    scale = max([ta.finite_max(ref64[n]) for n in grads], default=0.0)
    ta.assert_within_bar(ours["out"], ref64["out"], ref32["out"], 2, "out")
    for n in grads:
        ta.assert_within_bar(ours[n], ref64[n], ref32[n], 3, n, scale=scale)
    return ours


def assert_low_precision(ours, ref64, factor, name):
    """ours (float16/bfloat16) vs ref64: at most `factor` x the error of rounding ref64 itself to
    ours' dtype (our float32 arithmetic must be invisible behind the final rounding)."""
    rounding = (ref64.to(ours.dtype).double() - ref64).abs().max().item()
    err = (ours.double() - ref64).abs().max().item()
    assert err <= factor * rounding, f"{name}: error {err:.3e} > {factor} x rounding {rounding:.3e}"
