"""attnkit.ms_deform_attn and its backward against PyTorch grid_sample + autograd.

The bar is FlashAttention's (torch_attention.assert_within_bar): our error against the float64
torch result is at most 2x (forward) / 3x (gradients) torch float32's own error, plus 4 float32
roundings at the result's scale. Sampling points include far-outside ones, exact borders (0, 1),
pixel centres, pixel coordinates exactly -1 and W, and single-pixel levels.

Kinks. At a pixel centre (an integer pixel coordinate) the location gradient is one-sided (toward
+x / +y, grid_sample's floor convention). Torch float32 forms the grid 2·loc - 1 in float32, which
can move such a point to the other side of the kink, so its d_sampling_locations differs from
float64 by O(1) there: a different one-sided derivative, not rounding. Those elements are left
out of torch's float32 error when the bar is set; ours is still checked on every element.
"""
import numpy as np
import pytest

import attnkit
import torch
import torch_attention as ta
import torch_deform as td


def special_coordinate(rng, n):
    """A normalised coordinate on an axis of n pixels, drawn from the awkward cases."""
    i = rng.integers(0, n)
    return rng.choice([0.0, 1.0, (i + 0.5) / n, -0.5 / n, (n + 0.5) / n, 1e3, -50.0, 1e6,
                       i / n, rng.uniform(-0.3, 1.3), rng.uniform(0, 1)])


def assert_within_bar_kinks(ours, ref64, ref32, factor, name):
    """assert_within_bar with torch-f32 elements that took the other side of a kink excluded
    from the bar (their error is above 1e-3 of the result's scale; rounding is ~1e-6)."""
    scale = ta.finite_max(ref64)
    err32 = np.abs(ref32 - ref64)
    rounding = err32 <= 1e-3 * scale
    err_pt = float(err32[rounding].max()) if rounding.any() else 0.0
    err_ours = ta.max_err(ours, ref64)
    bar = factor * err_pt + 4 * ta.EPS32 * scale
    assert err_ours <= bar, f"{name}: error {err_ours:.3e} > bar {bar:.3e} (torch f32 {err_pt:.3e})"


def problem(seed, b, q, h, dh, p, levels, special):
    rng = np.random.default_rng(seed)
    shapes = np.array(levels, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(shapes[:, 0] * shapes[:, 1])[:-1]]).astype(np.int64)
    s = int((shapes[:, 0] * shapes[:, 1]).sum())
    lv = len(levels)
    value = rng.standard_normal((b, s, h, dh)).astype(np.float32)
    weights = rng.uniform(0, 1, (b, q, h, lv, p)).astype(np.float32)
    loc = rng.uniform(-0.2, 1.2, (b, q, h, lv, p, 2))
    if special:
        for idx in np.ndindex(b, q, h, lv, p):
            hl, wl = levels[idx[3]]
            loc[idx] = (special_coordinate(rng, wl), special_coordinate(rng, hl))
    d_out = rng.standard_normal((b, q, h * dh)).astype(np.float32)
    return value, shapes, starts, loc.astype(np.float32), weights, d_out


CASES = [
    # seed, B, Q, H, Dh, P, levels, special points
    (1, 2, 9, 3, 16, 4, [(6, 7), (3, 4), (1, 1)], False),
    (2, 1, 17, 2, 33, 3, [(4, 4), (2, 2)], True),
    (3, 2, 5, 4, 8, 2, [(1, 1), (5, 3), (1, 6), (4, 1)], True),
    (4, 1, 11, 1, 1, 5, [(3, 5)], True),
]


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_against_grid_sample(reference, case):
    value, shapes, starts, loc, weights, d_out = problem(*case)
    out = attnkit.ms_deform_attn(value, shapes, starts, loc, weights, reference=reference)
    d_value, d_loc, d_w = attnkit.ms_deform_attn_backward(d_out, value, shapes, starts, loc,
                                                          weights, reference=reference)
    ours = {"out": out, "d_value": d_value, "d_sampling_locations": d_loc,
            "d_attention_weights": d_w}
    ref64 = td.run(value, shapes, starts, loc, weights, d_out, torch.float64)
    ref32 = td.run(value, shapes, starts, loc, weights, d_out, torch.float32)
    for name, val in ours.items():
        assert val.shape == ref64[name].shape, name
        assert val.dtype == np.float32, name
        assert_within_bar_kinks(val, ref64[name], ref32[name], 2 if name == "out" else 3, name)
    # The special cases must exercise gradients that are not all zero.
    assert np.abs(d_loc).max() > 0 and np.abs(d_w).max() > 0


def test_fast_equals_reference_within_float_rounding_on_strided_inputs():
    value, shapes, starts, loc, weights, d_out = problem(5, 1, 6, 2, 12, 2, [(3, 3), (2, 1)], False)
    wide = np.zeros(value.shape[:-1] + (20,), np.float32)
    wide[..., 3:15] = value  # a strided view whose last dimension is contiguous
    got = attnkit.ms_deform_attn(wide[..., 3:15], shapes, starts, loc, weights)
    want = attnkit.ms_deform_attn(value, shapes, starts, loc, weights, reference=True)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())


def test_bad_shapes_raise_value_error():
    value, shapes, starts, loc, weights, d_out = problem(6, 1, 3, 2, 4, 2, [(2, 3), (1, 2)], False)
    bad = [
        ((value[0], shapes, starts, loc, weights), "value"),
        ((value, shapes[:, :1], starts, loc, weights), "spatial_shapes"),
        ((value, shapes, starts[::-1].copy(), loc, weights), "level_start_index"),
        ((value, shapes, starts, loc[..., :1], weights), "sampling_locations"),
        ((value, shapes, starts, loc, weights[:, :2]), "attention_weights"),
        ((value[:, :5], shapes, starts, loc, weights), "S = 5"),
    ]
    for args, needle in bad:
        with pytest.raises(ValueError, match=needle):
            attnkit.ms_deform_attn(*args)
        with pytest.raises(ValueError, match=needle):
            attnkit.ms_deform_attn_backward(d_out, *args)
    float_shapes = (value, shapes.astype(np.float32), starts, loc, weights)  # a wrong dtype
    with pytest.raises(TypeError, match="spatial_shapes"):
        attnkit.ms_deform_attn(*float_shapes)
    with pytest.raises(TypeError, match="spatial_shapes"):
        attnkit.ms_deform_attn_backward(d_out, *float_shapes)
    with pytest.raises(ValueError, match="d_out"):
        attnkit.ms_deform_attn_backward(d_out[:, :2], value, shapes, starts, loc, weights)
