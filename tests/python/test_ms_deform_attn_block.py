"""attnkit.nn.ms_deform_attn_block (MSDeformAttn) against the module written in PyTorch.

The torch side follows Deformable DETR's MSDeformAttn.forward: value_proj with masked_fill of the
padding, sampling_offsets viewed [B, Q, H, Lv, P, 2] and divided by (W_l, H_l), attention weights
softmaxed over Lv·P, sampling by grid_sample (torch_deform.py), output_proj; autograd gives every
gradient. Bar: FlashAttention's (2x / 3x torch float32's own error against float64).

Kinks: with 4 heads the offset biases of Deformable DETR's initialisation are integers, reference
points sit on half-integer pixel coordinates and the query's part of the offsets is small, so no
sampling coordinate is near an integer pixel coordinate, where float32 and float64 could take
different one-sided derivatives.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnkit
import torch_attention as ta
import torch_deform as td

H, LV, P, C = 4, 2, 3, 16
LEVELS = [(5, 6), (3, 3)]
NAMES = ["value_proj", "sampling_offsets", "attention_weights", "output_proj"]


def make(seed, b=2, q=5):
    rng = np.random.default_rng(seed)
    shapes = np.array(LEVELS, np.int64)
    starts = np.array([0, LEVELS[0][0] * LEVELS[0][1]], np.int64)
    s = int((shapes[:, 0] * shapes[:, 1]).sum())
    params = attnkit.nn.ms_deform_attn_block_init(d_model=C, heads=H, levels=LV, points=P,
                                                  seed=seed)
    params["sampling_offsets_weight"] = (0.01 * rng.standard_normal((H * LV * P * 2, C))).astype(np.float32)
    params["attention_weights_weight"] = (0.5 * rng.standard_normal((H * LV * P, C))).astype(np.float32)
    params["attention_weights_bias"] = (0.5 * rng.standard_normal(H * LV * P)).astype(np.float32)
    params["value_proj_bias"] = (0.1 * rng.standard_normal(C)).astype(np.float32)
    params["output_proj_bias"] = (0.1 * rng.standard_normal(C)).astype(np.float32)
    query = rng.standard_normal((b, q, C)).astype(np.float32)
    inp = rng.standard_normal((b, s, C)).astype(np.float32)
    ref = np.empty((b, q, LV, 2), np.float32)
    for lvl, (hl, wl) in enumerate(LEVELS):  # pixel coordinates k + 0.5
        ref[:, :, lvl, 0] = rng.integers(0, wl + 1, (b, q)) / wl
        ref[:, :, lvl, 1] = rng.integers(0, hl + 1, (b, q)) / hl
    mask = np.zeros((b, s), bool)
    mask[0, 3] = mask[1, -1] = mask[1, 7] = True
    d_out = rng.standard_normal((b, q, C)).astype(np.float32)
    return query, ref, inp, shapes, starts, mask, params, d_out


def torch_block(query, ref, inp, shapes, starts, mask, params):
    b, q, c = query.shape
    s = inp.shape[1]
    p = {k: params[k] for k in params}
    value = F.linear(inp, p["value_proj_weight"], p["value_proj_bias"])
    value = value.masked_fill(torch.as_tensor(mask)[..., None], 0.0).view(b, s, H, c // H)
    off = F.linear(query, p["sampling_offsets_weight"], p["sampling_offsets_bias"])
    off = off.view(b, q, H, LV, P, 2)
    aw = F.linear(query, p["attention_weights_weight"], p["attention_weights_bias"])
    aw = F.softmax(aw.view(b, q, H, LV * P), -1).view(b, q, H, LV, P)
    sh = torch.as_tensor(shapes, dtype=query.dtype)
    normalizer = torch.stack([sh[:, 1], sh[:, 0]], -1)
    loc = ref[:, :, None, :, None, :] + off / normalizer[None, None, None, :, None, :]
    out = td.ms_deform_attn(value, shapes, starts, loc, aw)
    return F.linear(out, p["output_proj_weight"], p["output_proj_bias"])


def torch_run(query, ref, inp, shapes, starts, mask, params, d_out, dtype):
    t = lambda a: torch.tensor(a, dtype=dtype, requires_grad=True)  # noqa: E731
    tq, tr, ti = t(query), t(ref), t(inp)
    tp = {k: t(v) for k, v in params.items()}
    out = torch_block(tq, tr, ti, shapes, starts, mask, tp)
    out.backward(torch.tensor(d_out, dtype=dtype))
    res = {"out": out, "d_query": tq.grad, "d_input_flatten": ti.grad,
           "d_reference_points": tr.grad}
    res.update({"grad_" + k: v.grad for k, v in tp.items()})
    return {k: v.detach().double().numpy() for k, v in res.items()}


@pytest.mark.parametrize("reference", [False, True])
def test_against_torch(reference):
    query, ref, inp, shapes, starts, mask, params, d_out = make(31)
    kw = dict(heads=H, levels=LV, points=P, padding_mask=mask, reference=reference)
    out, cache = attnkit.nn.ms_deform_attn_block(query, ref, inp, shapes, starts, params, **kw)
    d_q, d_x, d_r, grads = attnkit.nn.ms_deform_attn_block_backward(
        d_out, query, ref, inp, shapes, starts, params, cache, **kw)
    ours = {"out": out, "d_query": d_q, "d_input_flatten": d_x, "d_reference_points": d_r}
    ours.update({"grad_" + k: v for k, v in grads.items()})
    ref64 = torch_run(query, ref, inp, shapes, starts, mask, params, d_out, torch.float64)
    ref32 = torch_run(query, ref, inp, shapes, starts, mask, params, d_out, torch.float32)
    assert set(ours) == set(ref64)
    for name, val in ours.items():
        ta.assert_within_bar(val, ref64[name], ref32[name], 2 if name == "out" else 3, name)
    assert np.all(d_x[0, 3] == 0) and np.all(d_x[1, 7] == 0)  # padding gets no gradient
    assert np.abs(d_r).max() > 0 and np.abs(grads["sampling_offsets_bias"]).max() > 0


def test_initialisation_matches_deformable_detr():
    params = attnkit.nn.ms_deform_attn_block_init(d_model=32, heads=8, levels=3, points=4)
    thetas = torch.arange(8, dtype=torch.float64) * (2.0 * math.pi / 8)
    grid = torch.stack([thetas.cos(), thetas.sin()], -1)
    grid = grid / grid.abs().max(-1, keepdim=True)[0]
    grid = grid.view(8, 1, 1, 2).repeat(1, 3, 4, 1)
    for i in range(4):
        grid[:, :, i, :] *= i + 1
    want = grid.reshape(-1).numpy()
    assert np.abs(params["sampling_offsets_bias"] - want).max() <= 4 * ta.EPS32 * 4
    assert not params["sampling_offsets_weight"].any()
    assert not params["attention_weights_weight"].any() and not params["attention_weights_bias"].any()
    assert not params["value_proj_bias"].any() and not params["output_proj_bias"].any()
    bound = math.sqrt(6.0 / 64)
    assert 0.5 * bound < np.abs(params["value_proj_weight"]).max() <= bound


def test_bad_arguments_raise_value_error():
    query, ref, inp, shapes, starts, mask, params, d_out = make(32)
    kw = dict(heads=H, levels=LV, points=P)
    with pytest.raises(ValueError, match="reference_points"):
        attnkit.nn.ms_deform_attn_block(query, ref[:, :, :1], inp, shapes, starts, params, **kw)
    with pytest.raises(ValueError, match="sampling_offsets_weight"):
        bad = dict(params, sampling_offsets_weight=params["sampling_offsets_weight"][1:])
        attnkit.nn.ms_deform_attn_block(query, ref, inp, shapes, starts, bad, **kw)
    with pytest.raises(ValueError, match="padding_mask"):
        attnkit.nn.ms_deform_attn_block(query, ref, inp, shapes, starts, params,
                                        padding_mask=mask[:, 1:], **kw)
    with pytest.raises(ValueError, match="output_proj_bias"):
        attnkit.nn.ms_deform_attn_block(query, ref, inp, shapes, starts,
                                        {k: v for k, v in params.items() if k != "output_proj_bias"},
                                        **kw)
