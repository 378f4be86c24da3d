"""attnkit.nn forward and backward against PyTorch autograd, fast path and reference alike.

The bar is FlashAttention's (tests/python/torch_attention.py): our error against a float64 torch
computation is at most 2x (forward) / 3x (gradients) torch float32's own error against it, plus
4 float32 roundings at the result's scale. RMSNorm and RoPE are explicit torch formulas (Llama's
rotate_half); dropout uses attnkit's mask, so torch checks the scaling and the gradient.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnkit
from attnkit import nn
import torch_attention as ta

REFERENCE = [False, True]  # fast path, double-precision reference


def randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def autograd(fn, inputs, d_outs, dtype, const=()):
    """Runs fn(**tensors) in `dtype` and backpropagates Σ out·d_out.

    inputs: name -> numpy array (floating arrays not in `const` get gradients). Returns float64
    numpy arrays: "out0", "out1", ... and "d_<name>" for every differentiable input.
    """
    tensors = {}
    for name, a in inputs.items():
        if a.dtype.kind == "f":
            tensors[name] = torch.tensor(a, dtype=dtype, requires_grad=name not in const)
        else:
            tensors[name] = torch.tensor(a)
    outs = fn(**tensors)
    outs = outs if isinstance(outs, tuple) else (outs,)
    total = sum((o * torch.tensor(g, dtype=dtype)).sum() for o, g in zip(outs, d_outs) if g is not None)
    total.backward()
    res = {f"out{i}": o.detach().double().numpy() for i, o in enumerate(outs)}
    for name, t in tensors.items():
        if t.requires_grad:
            res["d_" + name] = t.grad.double().numpy()
    return res


def check(ours, fn, inputs, d_outs, const=()):
    """ours: name -> our array, names as autograd() returns them."""
    ref = autograd(fn, inputs, d_outs, torch.float64, const)
    pt = autograd(fn, inputs, d_outs, torch.float32, const)
    for name, val in ours.items():
        factor = 3 if name.startswith("d_") else 2
        ta.assert_within_bar(np.asarray(val), ref[name], pt[name], factor, name)
    return ref


@pytest.mark.parametrize("reference", REFERENCE)
@pytest.mark.parametrize("t,n_in,n_out", [(1, 17, 7), (65, 64, 130), (200, 96, 513)])
@pytest.mark.parametrize("bias", [False, True])
def test_linear(reference, t, n_in, n_out, bias):
    rng = np.random.default_rng(t + n_in + n_out)
    x, w, d_y = randn(rng, t, n_in), randn(rng, n_out, n_in), randn(rng, t, n_out)
    b = randn(rng, n_out) if bias else None
    y = nn.linear(x, w, b, reference=reference)
    d_x, d_w, d_b = nn.linear_backward(d_y, x, w, has_bias=bias, reference=reference)
    inputs = {"x": x, "w": w} | ({"b": b} if bias else {})
    ours = {"out0": y, "d_x": d_x, "d_w": d_w} | ({"d_b": d_b} if bias else {})
    check(ours, lambda x, w, b=None: F.linear(x, w, b), inputs, [d_y])
    assert (d_b is None) == (not bias)


@pytest.mark.parametrize("packed", [True, False])
def test_linear_on_either_gemm_path(packed):
    """300 tokens: y and d_x on the packed-weight GEMM (oneDNN builds) or on OpenBLAS."""
    rng = np.random.default_rng(11)
    x, w, d_y, b = randn(rng, 300, 64), randn(rng, 96, 64), randn(rng, 300, 96), randn(rng, 96)
    saved = attnkit.packed_gemm()
    attnkit.set_packed_gemm(packed)
    try:
        assert attnkit.packed_gemm() == packed
        y = nn.linear(x, w, b)
        d_x, d_w, d_b = nn.linear_backward(d_y, x, w)
    finally:
        attnkit.set_packed_gemm(saved)
    check({"out0": y, "d_x": d_x, "d_w": d_w, "d_b": d_b}, lambda x, w, b: F.linear(x, w, b),
          {"x": x, "w": w, "b": b}, [d_y])


@pytest.mark.parametrize("path", ["auto", "openblas", "onednn"])
def test_linear_on_every_sgemm_path(path):
    """1100 tokens: d_W's chunks are weight gradients over long k, which the kernels' one-thread
    sgemm calls run on oneDNN's matmul under 'auto' and 'onednn' (oneDNN builds), on OpenBLAS under
    'openblas'; 'onednn' also takes the products 'auto' leaves to OpenBLAS."""
    rng = np.random.default_rng(13)
    x, w, d_y, b = randn(rng, 1100, 64), randn(rng, 48, 64), randn(rng, 1100, 48), randn(rng, 48)
    saved = attnkit.sgemm_path()
    attnkit.set_sgemm_path(path)
    try:
        assert attnkit.sgemm_path() == path
        y = nn.linear(x, w, b)
        d_x, d_w, d_b = nn.linear_backward(d_y, x, w)
    finally:
        attnkit.set_sgemm_path(saved)
    check({"out0": y, "d_x": d_x, "d_w": d_w, "d_b": d_b}, lambda x, w, b: F.linear(x, w, b),
          {"x": x, "w": w, "b": b}, [d_y])


def test_sgemm_path_names():
    saved = attnkit.sgemm_path()
    try:
        for path in ["openblas", "onednn", "auto"]:
            attnkit.set_sgemm_path(path)
            assert attnkit.sgemm_path() == path
        with pytest.raises(ValueError, match="expected 'openblas', 'auto' or 'onednn', got 'mkl'"):
            attnkit.set_sgemm_path("mkl")
        assert attnkit.sgemm_path() == "auto"
    finally:
        attnkit.set_sgemm_path(saved)


@pytest.mark.parametrize("reference", REFERENCE)
def test_linear_batched_leading_dims(reference):
    rng = np.random.default_rng(3)
    x, w = randn(rng, 2, 5, 8), randn(rng, 4, 8)
    np.testing.assert_allclose(nn.linear(x, w, reference=reference), x @ w.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reference", REFERENCE)
def test_embedding(reference):
    rng = np.random.default_rng(5)
    table, d_y = randn(rng, 50, 33), randn(rng, 7, 9, 33)
    ids = rng.integers(0, 20, size=(7, 9))  # 63 tokens over 20 rows: many repeats
    y = nn.embedding(ids, table, reference=reference)
    d_table = nn.embedding_backward(d_y, ids, 50, reference=reference)
    check({"out0": y, "d_table": d_table}, lambda ids, table: F.embedding(ids, table),
          {"ids": ids, "table": table}, [d_y])
    assert not d_table[20:].any()


def test_embedding_out_of_range_names_the_index():
    table = np.zeros((10, 4), np.float32)
    with pytest.raises(ValueError, match=r"ids\[2\] = 10 is out of range \[0, 10\)"):
        nn.embedding(np.array([1, 2, 10]), table)
    with pytest.raises(attnkit.Error, match=r"ids\[0\] = -1"):
        nn.embedding_backward(np.zeros((1, 4), np.float32), np.array([-1]), 10)


@pytest.mark.parametrize("reference", REFERENCE)
@pytest.mark.parametrize("t,c", [(1, 17), (65, 64), (130, 768)])
def test_layer_norm(reference, t, c):
    rng = np.random.default_rng(t + c)
    x, d_y = randn(rng, t, c) + 0.5, randn(rng, t, c)
    w, b = 1 + randn(rng, c, scale=0.3), randn(rng, c)
    y, mean, rstd = nn.layer_norm(x, w, b, eps=1e-5, reference=reference)
    d_x, d_w, d_b = nn.layer_norm_backward(d_y, x, w, mean, rstd, reference=reference)

    def torch_ln(x, w, b):
        out, mu, rs = torch.native_layer_norm(x, (c,), w, b, 1e-5)
        return out, mu[:, 0], rs[:, 0]

    check({"out0": y, "out1": mean, "out2": rstd, "d_x": d_x, "d_w": d_w, "d_b": d_b}, torch_ln,
          {"x": x, "w": w, "b": b}, [d_y, None, None])


@pytest.mark.parametrize("reference", REFERENCE)
def test_layer_norm_without_affine(reference):
    rng = np.random.default_rng(8)
    x, d_y = randn(rng, 9, 40), randn(rng, 9, 40)
    y, mean, rstd = nn.layer_norm(x, reference=reference)
    d_x, d_w, d_b = nn.layer_norm_backward(d_y, x, None, mean, rstd, has_bias=False,
                                           reference=reference)
    assert d_w is None and d_b is None
    check({"out0": y, "d_x": d_x}, lambda x: F.layer_norm(x, (40,), eps=1e-5), {"x": x}, [d_y])


def torch_rms_norm(x, w, eps=1e-6):
    """Hugging Face LlamaRMSNorm: x * rsqrt(mean(x²) + eps) * w (also returns rstd)."""
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * rstd * w, rstd[:, 0]


@pytest.mark.parametrize("reference", REFERENCE)
@pytest.mark.parametrize("t,c", [(1, 17), (65, 64), (130, 1024)])
def test_rms_norm(reference, t, c):
    rng = np.random.default_rng(t * c)
    x, d_y, w = randn(rng, t, c) + 0.3, randn(rng, t, c), 1 + randn(rng, c, scale=0.3)
    y, rstd = nn.rms_norm(x, w, eps=1e-6, reference=reference)
    d_x, d_w = nn.rms_norm_backward(d_y, x, w, rstd, reference=reference)
    check({"out0": y, "out1": rstd, "d_x": d_x, "d_w": d_w}, torch_rms_norm, {"x": x, "w": w},
          [d_y, None])


@pytest.mark.parametrize("reference", REFERENCE)
@pytest.mark.parametrize("rms", [False, True])
def test_norm_backward_adds_the_residual_gradient(reference, rms):
    """d_residual: x feeds both the norm and a skip path (a pre-norm block), so d_x is the norm's
    input gradient plus the skip path's; torch gets the same graph as outputs (norm(x), x)."""
    rng = np.random.default_rng(21 + rms)
    t, c = 65, 96
    x, d_y, d_res = randn(rng, t, c) + 0.5, randn(rng, t, c), randn(rng, t, c)
    w, b = 1 + randn(rng, c, scale=0.3), randn(rng, c)
    if rms:
        _, rstd = nn.rms_norm(x, w, eps=1e-6, reference=reference)
        d_x, d_w = nn.rms_norm_backward(d_y, x, w, rstd, d_residual=d_res, reference=reference)
        check({"d_x": d_x, "d_w": d_w}, lambda x, w: (torch_rms_norm(x, w)[0], x), {"x": x, "w": w},
              [d_y, d_res])
    else:
        _, mean, rstd = nn.layer_norm(x, w, b, eps=1e-5, reference=reference)
        d_x, d_w, d_b = nn.layer_norm_backward(d_y, x, w, mean, rstd, d_residual=d_res,
                                               reference=reference)
        check({"d_x": d_x, "d_w": d_w, "d_b": d_b}, lambda x, w, b: (F.layer_norm(x, (c,), w, b, 1e-5), x),
              {"x": x, "w": w, "b": b}, [d_y, d_res])
    backward = nn.rms_norm_backward if rms else nn.layer_norm_backward
    args = (d_y, x, w, rstd) if rms else (d_y, x, w, mean, rstd)
    with pytest.raises(ValueError, match="d_residual"):
        backward(*args, d_residual=d_res[:-1], reference=reference)


@pytest.mark.parametrize("reference", REFERENCE)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(reference, approximate):
    rng = np.random.default_rng(11)
    x, d_y = randn(rng, 65, 97, scale=3.0), randn(rng, 65, 97)
    y = nn.gelu(x, approximate, reference=reference)
    d_x = nn.gelu_backward(d_y, x, approximate, reference=reference)
    check({"out0": y, "d_x": d_x}, lambda x: F.gelu(x, approximate=approximate), {"x": x}, [d_y])


@pytest.mark.parametrize("reference", REFERENCE)
def test_silu_and_swiglu(reference):
    rng = np.random.default_rng(12)
    x, up, d_y = randn(rng, 65, 97, scale=3.0), randn(rng, 65, 97), randn(rng, 65, 97)
    check({"out0": nn.silu(x, reference=reference),
           "d_x": nn.silu_backward(d_y, x, reference=reference)}, lambda x: F.silu(x), {"x": x}, [d_y])
    d_gate, d_up = nn.swiglu_backward(d_y, x, up, reference=reference)
    check({"out0": nn.swiglu(x, up, reference=reference), "d_gate": d_gate, "d_up": d_up},
          lambda gate, up: F.silu(gate) * up, {"gate": x, "up": up}, [d_y])


def test_swiglu_on_halves_of_a_fused_projection():
    rng = np.random.default_rng(13)
    fused = randn(rng, 10, 2 * 24)
    gate, up = fused[:, :24], fused[:, 24:]  # strided views, passed without copies
    expected = F.silu(torch.tensor(gate, dtype=torch.float64)) * torch.tensor(up, dtype=torch.float64)
    np.testing.assert_allclose(nn.swiglu(gate, up), expected.numpy(), rtol=1e-5, atol=1e-6)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def torch_rope(x, positions, theta):
    """Hugging Face Llama rotary embedding on x [T, H, D] in x's dtype (float32 angles in the
    float32 run, as Hugging Face computes them)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=x.dtype) / d))
    freqs = positions.to(x.dtype)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return x * emb.cos()[:, None, :] + rotate_half(x) * emb.sin()[:, None, :]


@pytest.mark.parametrize("reference", REFERENCE)
@pytest.mark.parametrize("max_position", [4096, 1_000_000])
def test_rope(reference, max_position):
    rng = np.random.default_rng(max_position)
    t, h, d, theta = 65, 4, 64, 500000.0
    x, d_y = randn(rng, t, h, d), randn(rng, t, h, d)
    positions = rng.integers(0, max_position, size=t)
    positions[0] = max_position
    y = nn.rope(x, positions, theta, reference=reference)
    d_x = nn.rope_backward(d_y, positions, theta, reference=reference)
    ref = check({"out0": y, "d_x": d_x}, lambda x, positions: torch_rope(x, positions, theta),
                {"x": x, "positions": positions}, [d_y])
    # Our angles are exact in double, so the error stays at float rounding even where torch's
    # float32 angles (error ~position·2^-24 rad) are far off: |x'| <= |x_i| + |x_pair|.
    bar = 4 * ta.EPS32 * 2 * np.abs(x).max()
    assert ta.max_err(y, ref["out0"]) <= bar
    assert ta.max_err(d_x, ref["d_x"]) <= 4 * ta.EPS32 * 2 * np.abs(d_y).max()


def test_rope_on_the_q_slice_of_a_fused_qkv_buffer():
    rng = np.random.default_rng(14)
    qkv = randn(rng, 9, (4 + 2 * 2) * 16)
    q = qkv[:, : 4 * 16].reshape(9, 4, 16)  # a strided view into the fused projection
    positions = np.arange(9) + 100
    expected = torch_rope(torch.tensor(q, dtype=torch.float64), torch.tensor(positions), 10000.0)
    np.testing.assert_allclose(nn.rope(q, positions), expected.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reference", REFERENCE)
def test_dropout_against_torch_with_our_mask(reference):
    rng = np.random.default_rng(15)
    x, d_y = randn(rng, 65, 64), randn(rng, 65, 64)
    p, seed, stream = 0.2, 1234, 3
    mask = nn.dropout_mask(x.shape, p, seed, stream)
    y = nn.dropout(x, p, seed, stream, reference=reference)
    d_x = nn.dropout_backward(d_y, p, seed, stream, reference=reference)
    check({"out0": y, "d_x": d_x}, lambda x: x * torch.tensor(mask).to(x.dtype) / (1 - p),
          {"x": x}, [d_y])
    assert abs(mask.mean() - (1 - p)) < 0.03  # 4160 draws: standard deviation 0.006
    assert not (nn.dropout_mask(x.shape, p, seed, stream + 1) == mask).all()


@pytest.mark.parametrize("reference", REFERENCE)
@pytest.mark.parametrize("t,v", [(1, 17), (65, 3000)])
def test_cross_entropy(reference, t, v):
    rng = np.random.default_rng(t + v)
    z = randn(rng, t, v, scale=3.0)
    targets = rng.integers(0, v, size=t)
    targets[1::4] = -100
    loss, losses, lse = nn.cross_entropy(z, targets, reference=reference)
    d_z = nn.cross_entropy_backward(z, targets, lse, d_loss=0.5, reference=reference)
    valid = torch.tensor(targets >= 0)

    def torch_ce(z):
        per_token = F.cross_entropy(z, torch.tensor(targets), ignore_index=-100, reduction="none")
        return (F.cross_entropy(z, torch.tensor(targets), ignore_index=-100), per_token,
                torch.where(valid, torch.logsumexp(z, -1), torch.zeros_like(per_token)))

    check({"out0": loss, "out1": losses, "out2": lse, "d_z": d_z}, torch_ce, {"z": z},
          [np.float32(0.5), None, None])


@pytest.mark.parametrize("reference", REFERENCE)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("ignore", [False, True])
def test_linear_cross_entropy_against_materialised_logits(reference, bias, ignore):
    rng = np.random.default_rng(2 * bias + ignore)
    t, c, v = 70, 64, 5000  # V = 2·2048 + 904: two full chunks and a tail
    h, w = randn(rng, t, c), randn(rng, v, c, scale=0.2)
    b = randn(rng, v) if bias else None
    targets = rng.integers(0, v, size=t)
    targets[-1] = v - 1
    if ignore:
        targets[::3] = -100
    loss, losses, lse = nn.linear_cross_entropy(h, w, targets, b, reference=reference)
    d_h, d_w, d_b = nn.linear_cross_entropy_backward(h, w, targets, lse, b, reference=reference)

    def torch_fused(h, w, b=None):
        z = h @ w.T + (b if b is not None else 0)
        return (F.cross_entropy(z, torch.tensor(targets), ignore_index=-100),
                F.cross_entropy(z, torch.tensor(targets), ignore_index=-100, reduction="none"))

    inputs = {"h": h, "w": w} | ({"b": b} if bias else {})
    ours = {"out0": loss, "out1": losses, "d_h": d_h, "d_w": d_w} | ({"d_b": d_b} if bias else {})
    check(ours, torch_fused, inputs, [np.float32(1.0), None])
    assert (d_b is None) == (not bias)
    if ignore:
        assert not d_h[::3].any() and (lse[::3] == 0).all()


def test_linear_cross_entropy_matches_plain_cross_entropy_on_logits():
    rng = np.random.default_rng(21)
    h, w, b = randn(rng, 20, 32), randn(rng, 2100, 32, scale=0.3), randn(rng, 2100)
    targets = rng.integers(0, 2100, size=20)
    z = nn.logits(h, w, b)
    np.testing.assert_allclose(z, h.astype(np.float64) @ w.T + b, rtol=1e-4, atol=1e-4)
    fused = nn.linear_cross_entropy(h, w, targets, b)
    plain = nn.cross_entropy(z, targets)
    np.testing.assert_allclose(fused[0], plain[0], rtol=1e-5)
    np.testing.assert_allclose(fused[1], plain[1], rtol=1e-5)  # the per-token losses
    np.testing.assert_allclose(fused[2], plain[2], rtol=1e-5)


@pytest.mark.parametrize("call,match", [
    (lambda: nn.linear(np.zeros((3, 4), np.float32), np.zeros((5, 6), np.float32)),
     r"linear_forward: w: expected shape \[out, in\] = \[5, 4\], got \[5, 6\]"),
    (lambda: nn.layer_norm(np.zeros((3, 4), np.float32), np.ones(5, np.float32)),
     r"layer_norm_forward: w: expected 0 or \[C\] = 4 elements, got 5"),
    (lambda: nn.rope(np.zeros((2, 1, 5), np.float32), [0, 1]), r"D must be even"),
    (lambda: nn.dropout(np.zeros((2, 3), np.float32), 1.0, 0), r"p: expected a value in \[0, 1\)"),
    (lambda: nn.linear_cross_entropy(np.zeros((2, 4), np.float32), np.zeros((9, 4), np.float32),
                                     np.array([0, 9])), r"targets\[1\] = 9 is out of range"),
    (lambda: nn.gelu(np.zeros((2, 3), np.float32), "fast"), r"approximate: expected 'none' or 'tanh'"),
])
def test_bad_arguments_raise_value_error_naming_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_reversed_broadcast_and_strided_inputs():
    rng = np.random.default_rng(22)
    x, w = randn(rng, 6, 8), randn(rng, 5, 8)
    expected = x[::-1].astype(np.float64) @ w.T
    np.testing.assert_allclose(nn.linear(x[::-1], w), expected, rtol=1e-5, atol=1e-5)
    row = np.broadcast_to(x[0], (4, 8))  # row stride 0
    np.testing.assert_allclose(nn.linear(row, w), np.broadcast_to(x[0] @ w.T, (4, 5)), rtol=1e-5,
                               atol=1e-5)
    wide = randn(rng, 6, 20)[:, 3:11]  # row stride 20 > 8: viewed in place
    np.testing.assert_allclose(nn.linear(wide, w), wide.astype(np.float64) @ w.T, rtol=1e-5,
                               atol=1e-5)
