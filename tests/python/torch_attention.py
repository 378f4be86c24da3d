"""An independent PyTorch formulation of attnkit's attention contract (docs/architecture.md).

Written as explicit matmul + softmax (torch 1.13 has no public SDPA), K/V repeated to H heads on
the test side, masks built from index grids, and the fully-masked-row rule (zeros, lse = -inf)
implemented here because torch's softmax gives NaN there. Used in float64 as the reference and in
float32 to measure PyTorch's own rounding error, which sets the bar for ours (FlashAttention's
tests: ours vs float64 at most a small multiple of torch-float32 vs float64).
"""
import math

import numpy as np
import torch

EPS32 = 2.0 ** -23


def attention(q, k, v, *, window=(-1, -1), scale=None, softcap=0.0, sinks=None,
              cu_q=None, cu_k=None, keep=None, alibi=None):
    """q [T, H, D], k/v [Tk, Hkv, D] torch tensors → (out [T, H, D], lse [H, T]).

    keep: optional callable (b, Lq, Lk) -> float tensor [H, Lq, Lk] of dropout factors.
    alibi: optional slopes [H] or [B, H]; score(i, j) -= slope·|i + Lk - Lq - j| after the
    softcap (FlashAttention's documented ALiBi).
    """
    t, h, d = q.shape
    g = h // k.shape[1]
    scale = scale if scale else 1.0 / math.sqrt(d)
    cu_q = [0, t] if cu_q is None else [int(x) for x in cu_q]
    cu_k = [0, k.shape[0]] if cu_k is None else [int(x) for x in cu_k]
    outs, lses = [], []
    for b in range(len(cu_q) - 1):
        qs = q[cu_q[b]:cu_q[b + 1]]
        ks = k[cu_k[b]:cu_k[b + 1]].repeat_interleave(g, dim=1)
        vs = v[cu_k[b]:cu_k[b + 1]].repeat_interleave(g, dim=1)
        lq, lk = qs.shape[0], ks.shape[0]
        s = torch.einsum("ihd,jhd->hij", qs, ks) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(lq)[:, None]
        j = torch.arange(lk)[None, :]
        diag = i + lk - lq
        if alibi is not None:
            slope = alibi if alibi.dim() == 1 else alibi[b]
            s = s - slope[:, None, None].to(s.dtype) * (j - diag).abs().to(s.dtype)
        visible = torch.ones(lq, lk, dtype=torch.bool)
        if window[0] >= 0:
            visible &= j >= diag - window[0]
        if window[1] >= 0:
            visible &= j <= diag + window[1]
        s = s.masked_fill(~visible, -math.inf)
        if sinks is not None:
            s = torch.cat([s, sinks[:, None, None].expand(h, lq, 1).to(s.dtype)], dim=-1)
        m = s.max(dim=-1, keepdim=True).values if s.shape[-1] else torch.zeros(h, lq, 1, dtype=s.dtype)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
        e = torch.exp(s - m)
        denom = e.sum(dim=-1, keepdim=True)
        safe = torch.where(denom > 0, denom, torch.ones_like(denom))
        p = (e / safe)[..., :lk]
        lse = torch.where(denom > 0, torch.log(safe) + m, torch.full_like(m, -math.inf))
        if keep is not None:
            p = p * keep(b, lq, lk).to(p.dtype)
        outs.append(torch.einsum("hij,jhd->ihd", p, vs))
        lses.append(lse[..., 0])
    return torch.cat(outs, dim=0), torch.cat(lses, dim=1)


def random_inputs(rng, tq, tk, h, hkv, d):
    """float32 N(0, 1) draws from `rng`, in this order: q [Tq, H, D], k and v [Tk, Hkv, D], and
    dout [Tq, H, D]."""
    return (rng.standard_normal((tq, h, d), dtype=np.float32),
            rng.standard_normal((tk, hkv, d), dtype=np.float32),
            rng.standard_normal((tk, hkv, d), dtype=np.float32),
            rng.standard_normal((tq, h, d), dtype=np.float32))


def run(q, k, v, dout, dtype, **kw):
    """Forward and autograd backward in `dtype` from float32 numpy inputs.

    Returns dict of numpy float64 arrays: out, lse, dq, dk, dv and dsink (if sinks given).
    """
    tq, tk, tv = (torch.tensor(x, dtype=dtype, requires_grad=True) for x in (q, k, v))
    sinks = kw.pop("sinks", None)
    ts = None if sinks is None else torch.tensor(sinks, dtype=dtype, requires_grad=True)
    if kw.get("alibi") is not None:
        kw["alibi"] = torch.tensor(kw["alibi"], dtype=dtype)
    out, lse = attention(tq, tk, tv, sinks=ts, **kw)
    out.backward(torch.tensor(dout, dtype=dtype))
    res = {"out": out, "lse": lse, "dq": tq.grad, "dk": tk.grad, "dv": tv.grad}
    if ts is not None:
        res["dsink"] = ts.grad
    return {name: x.detach().double().numpy() for name, x in res.items()}


def max_err(a, b):
    """Max |a - b|, treating equal infinities as exact."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    same_inf = np.isinf(a) & (a == b)
    with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity
        diff = np.where(same_inf, 0.0, np.abs(a - b))
    return float(diff.max()) if diff.size else 0.0


def finite_max(x):
    """Max |x| over the finite entries (0 if none)."""
    x = np.asarray(x, np.float64)
    finite = np.isfinite(x)
    return float(np.abs(x[finite]).max()) if finite.any() else 0.0


def error_bar(ref64, ref32, factor, scale=None):
    """(err(torch f32), FlashAttention's bar factor·err(torch f32) + 4 float32 ulps at `scale`
    (default: the result's own magnitude))."""
    scale = finite_max(ref64) if scale is None else scale
    err_pt = max_err(ref32, ref64)
    return err_pt, factor * err_pt + 4 * EPS32 * scale


def assert_within_bar(ours, ref64, ref32, factor, name, scale=None):
    """FlashAttention's bar: err(ours) <= factor·err(torch f32) + float32 rounding at `scale`
    (default: the result's own magnitude)."""
    err_ours = max_err(ours, ref64)
    err_pt, bar = error_bar(ref64, ref32, factor, scale)
    assert err_ours <= bar, f"{name}: error {err_ours:.3e} > bar {bar:.3e} (torch f32 {err_pt:.3e})"


GRADIENTS = ("dq", "dk", "dv", "dsink")


def assert_all_within_bar(ours, ref64, ref32):
    """Forward outputs at 2x torch's float32 error, gradients at 3x. Gradients share one rounding
    scale (the largest gradient): FlashAttention-2 forms dS = P·(dP - dO·out) by a subtraction
    whose terms are of that size even where the true gradient is 0 (a single visible key)."""
    grad_scale = max(finite_max(ref64[n]) for n in GRADIENTS if n in ours)
    for name, val in ours.items():
        if name in GRADIENTS:
            assert_within_bar(val, ref64[name], ref32[name], 3, name, scale=grad_scale)
        else:
            assert_within_bar(val, ref64[name], ref32[name], 2, name)


def assert_matches_torch(q, k, v, dout, out, lse, grads, *, causal, window, sinks=None, **kw):
    """Runs `run` in float64 and float32 with the same options and asserts ours (out, lse and
    grads = (dq, dk, dv, dsink), dsink checked only with sinks) within `assert_all_within_bar`.
    `causal` turns `window` (left, right) into (left, 0); `kw` passes on to `attention`."""
    kw = dict(window=(window[0], 0) if causal else window, sinks=sinks, **kw)
    ref = run(q, k, v, dout, torch.float64, **kw)
    pt = run(q, k, v, dout, torch.float32, **kw)
    dq, dk, dv, ds = grads
    ours = {"out": out, "lse": lse, "dq": dq, "dk": dk, "dv": dv}
    if sinks is not None:
        ours["dsink"] = ds
    assert_all_within_bar(ours, ref, pt)


def rope(x, positions, theta):
    """Hugging Face Llama rotate_half RoPE on x [T, H, D] at integer positions [T]."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.as_tensor(positions, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :].to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :].to(x.dtype)
    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rot * sin
