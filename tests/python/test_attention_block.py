"""attnkit.nn.attention_block forward and backward against the same block written in PyTorch.

The torch block: explicit linear layers, Llama rotate_half RoPE, tests/python/torch_attention.py's
`attention` (matmul + masked softmax with the sink column and the zero rule for fully masked
rows), sigmoid gate and o projection; gradients by autograd. The bar is FlashAttention's: our
error against torch float64 is at most 2x (forward) / 3x (gradients) torch float32's own error,
plus 4 float32 roundings at the result's scale (ta.assert_within_bar).
"""
import numpy as np
import pytest
import torch

import attnkit
from attnkit import nn
import torch_attention as ta

PARAMS = ("qkv_proj_weight", "qkv_proj_bias", "o_proj_weight", "o_proj_bias", "sinks",
          "gate_proj_weight", "gate_proj_bias")


def rope(x, pos, theta):
    """Hugging Face Llama: x * cos + rotate_half(x) * sin, x [T, H, D]."""
    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.double()[:, None] * inv_freq[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], dim=-1).to(x.dtype)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], dim=-1).to(x.dtype)[:, None, :]
    rot = torch.cat([-x[..., d // 2:], x[..., :d // 2]], dim=-1)
    return x * cos + rot * sin


def torch_block(x, p, cfg, cu, pos):
    """The block in torch: (out [T, C], gate values [T, Hg] or None)."""
    h, hkv, d = cfg["heads"], cfg["kv_heads"] or cfg["heads"], cfg["head_dim"]
    t = x.shape[0]
    lin = lambda a, w, b: a @ w.T + (b if b is not None else 0)  # noqa: E731
    qkv = lin(x, p["qkv_proj_weight"], p.get("qkv_proj_bias"))
    q0 = qkv[:, :h * d].reshape(t, h, d)
    k = qkv[:, h * d:(h + hkv) * d].reshape(t, hkv, d)
    v = qkv[:, (h + hkv) * d:].reshape(t, hkv, d)
    q = q0
    if cfg["rope_theta"]:
        q, k = rope(q0, pos, cfg["rope_theta"]), rope(k, pos, cfg["rope_theta"])
    sinks = {"none": None, "learned": p.get("sinks"),
             "off_by_one": torch.zeros(h, dtype=x.dtype)}[cfg["sink_logits"]]
    window = (cfg["window"][0], 0 if cfg["causal"] else cfg["window"][1])
    attn, _ = ta.attention(q, k, v, window=window, sinks=sinks, cu_q=cu, cu_k=cu)
    s = None
    if cfg["gate"] != "none":
        wg, bg = p["gate_proj_weight"], p.get("gate_proj_bias")
        if cfg["gate_source"] == "input":
            g = lin(x, wg, bg)
        elif cfg["gate"] == "headwise":  # g[t, h] = q0[t, h]·w[h] + b[h]
            g = torch.einsum("thd,hd->th", q0, wg) + (bg if bg is not None else 0)
        else:  # g[t, h, e] = Σ_d W[h·D + e, d]·q0[t, h, d] + b
            g = torch.einsum("thd,hed->the", q0, wg.reshape(h, d, d)).reshape(t, h * d)
            g = g + (bg if bg is not None else 0)
        s = torch.sigmoid(g)
        attn = attn * (s[:, :, None] if cfg["gate"] == "headwise" else s.reshape(t, h, d))
    out = lin(attn.reshape(t, h * d), p["o_proj_weight"], p.get("o_proj_bias"))
    return out, s


def run_torch(x, params, d_out, cfg, cu, pos, dtype):
    tx = torch.tensor(x, dtype=dtype, requires_grad=True)
    tp = {n: torch.tensor(a, dtype=dtype, requires_grad=True) for n, a in params.items()}
    out, s = torch_block(tx, tp, cfg, cu, torch.tensor(pos))
    (out * torch.tensor(d_out, dtype=dtype)).sum().backward()
    res = {"out": out, "d_x": tx.grad} | {"d_" + n: t.grad for n, t in tp.items()}
    if s is not None:
        res["gate"] = s
    return {n: v.detach().double().numpy() for n, v in res.items()}


def make(rng, cfg, c, lengths, bias):
    h, hkv, d = cfg["heads"], cfg["kv_heads"] or cfg["heads"], cfg["head_dim"]
    hg = {"none": 0, "headwise": h, "elementwise": h * d}[cfg["gate"]]
    rn = lambda *s, sc=1.0: (rng.standard_normal(s) * sc).astype(np.float32)  # noqa: E731
    t = sum(lengths)
    # Separate Hugging Face q/k/v projections, fused the documented way (q, then k, then v rows).
    qw, kw, vw = rn(h * d, c, sc=c ** -0.5), rn(hkv * d, c, sc=c ** -0.5), rn(hkv * d, c, sc=c ** -0.5)
    p = {"qkv_proj_weight": nn.fuse_qkv(qw, kw, vw), "o_proj_weight": rn(c, h * d, sc=(h * d) ** -0.5)}
    if bias:
        p["qkv_proj_bias"] = nn.fuse_qkv(rn(h * d, sc=0.5), rn(hkv * d, sc=0.5), rn(hkv * d, sc=0.5))
        p["o_proj_bias"] = rn(c, sc=0.5)
    if cfg["sink_logits"] == "learned":
        p["sinks"] = rn(h)
    if hg:
        query = cfg["gate_source"] == "query"
        p["gate_proj_weight"] = rn(hg, d if query else c, sc=(d if query else c) ** -0.5)
        if bias:
            p["gate_proj_bias"] = rn(hg, sc=0.5)
    cu = np.cumsum([0] + list(lengths)).astype(np.int32)
    return rn(t, c), p, rn(t, c), cu, nn.positions_from_cu_seqlens(cu, t)


def config(heads=4, kv_heads=2, head_dim=16, rope_theta=10000.0, causal=True, window=(-1, -1),
           sink_logits="none", gate="none", gate_source="input"):
    return dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim, rope_theta=rope_theta,
                causal=causal, window=window, sink_logits=sink_logits, gate=gate, gate_source=gate_source)


CASES = {
    "gqa2_plain": (config(), 48, [23, 41], True),
    "gqa4_headwise_input_learned_window": (
        config(kv_heads=1, window=(16, -1), sink_logits="learned", gate="headwise"), 48, [37, 30], True),
    "elementwise_input_off_by_one_bert": (
        config(causal=False, sink_logits="off_by_one", gate="elementwise"), 32, [19, 1, 28], True),
    "headwise_query_learned": (
        config(gate="headwise", gate_source="query", sink_logits="learned"), 40, [33, 24], True),
    "elementwise_query_off_by_one_window_no_bias": (
        config(kv_heads=4, causal=False, window=(8, 4), sink_logits="off_by_one", gate="elementwise",
               gate_source="query", rope_theta=500000.0), 40, [29, 17], False),
    "elementwise_query_no_rope": (
        config(heads=2, kv_heads=1, gate="elementwise", gate_source="query", rope_theta=0.0),
        24, [21, 9], True),
}


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_block_matches_torch(name, reference):
    cfg, c, lengths, bias = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x, params, d_out, cu, pos = make(rng, cfg, c, lengths, bias)
    out, cache = nn.attention_block(x, params, cu_seqlens=cu, reference=reference, **cfg)
    d_x, grads = nn.attention_block_backward(d_out, x, params, cache, cu_seqlens=cu,
                                             reference=reference, **cfg)
    ours = {"out": out, "d_x": d_x} | {"d_" + n: grads[n] for n in params}
    if cfg["gate"] != "none":
        ours["gate"] = cache["gate"]
    assert set(n for n in PARAMS if grads[n] is not None) == set(params)
    ref64 = run_torch(x, params, d_out, cfg, cu, pos, torch.float64)
    ref32 = run_torch(x, params, d_out, cfg, cu, pos, torch.float32)
    for n, v in ours.items():
        factor = 3 if n.startswith("d_") else 2
        ta.assert_within_bar(v, ref64[n], ref32[n], factor, f"{name} {n}")


def test_cache_exposes_gate_statistics():
    cfg, c, lengths, bias = CASES["gqa4_headwise_input_learned_window"]
    x, params, _, cu, _ = make(np.random.default_rng(0), cfg, c, lengths, bias)
    _, cache = nn.attention_block(x, params, cu_seqlens=cu, **cfg)
    assert cache["gate"].shape == (sum(lengths), cfg["heads"])
    np.testing.assert_allclose(cache["gate"], 1 / (1 + np.exp(-cache["gate_pre"])), rtol=1e-6)
    assert cache["lse"].shape == (cfg["heads"], sum(lengths))
    assert cache["q_pre"] is None


def test_errors_name_the_argument():
    cfg, c, lengths, bias = CASES["headwise_query_learned"]
    x, params, _, cu, _ = make(np.random.default_rng(1), cfg, c, lengths, bias)
    with pytest.raises(attnkit.Error, match="gate"):
        nn.attention_block(x, params, cu_seqlens=cu, **(cfg | {"gate": "bogus"}))
    with pytest.raises(attnkit.Error, match="sinks"):
        nn.attention_block(x, {k: v for k, v in params.items() if k != "sinks"}, cu_seqlens=cu,
                           **cfg)
    with pytest.raises(attnkit.Error, match="kv_heads"):
        nn.attention_block(x, params, cu_seqlens=cu, **(cfg | {"kv_heads": 3}))
