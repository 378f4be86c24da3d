"""Multi-scale deformable attention with Deformable DETR's MSDeformAttnFunction interface, on
attnkit.ms_deform_attn / ms_deform_attn_backward.

out[n, q, m·D + c] = Σ_l Σ_p w[n, q, m, l, p] · bilinear(value_l[n, :, m, c], loc[n, q, m, l, p])
with value [N, S, M, D] (levels concatenated along S), locations (x, y) in [0, 1] sampled like
grid_sample(mode='bilinear', padding_mode='zeros', align_corners=False) at 2·loc - 1.
"""
import torch
from torch.autograd.function import once_differentiable

import attnkit

from . import _checks
from . import _torch_common as c


def _check(value, value_spatial_shapes, value_level_start_index, sampling_locations,
           attention_weights, im2col_step):
    c.check_tensor(value, "value", (4,))
    c.check_tensor(sampling_locations, "sampling_locations", (6,))
    c.check_tensor(attention_weights, "attention_weights", (5,))
    c.check_same_dtype({"value": value, "sampling_locations": sampling_locations,
                        "attention_weights": attention_weights})
    c.check_index_tensor(value_spatial_shapes, "value_spatial_shapes", (None, 2))
    c.check_index_tensor(value_level_start_index, "value_level_start_index",
                         (value_spatial_shapes.shape[0],))
    n, _, m, _ = value.shape
    lv = value_spatial_shapes.shape[0]
    loc = sampling_locations.shape
    if loc[0] != n or loc[2] != m or loc[3] != lv or loc[5] != 2:
        raise attnkit.Error(f"sampling_locations: expected [{n}, Lq, {m}, {lv}, P, 2], got {tuple(loc)}")
    if tuple(attention_weights.shape) != tuple(loc[:5]):
        raise attnkit.Error(f"attention_weights: expected {tuple(loc[:5])}, got "
                         f"{tuple(attention_weights.shape)}")
    im2col_step = _checks.integer(im2col_step, "im2col_step", 1)
    step = min(n, im2col_step)
    if n and n % step != 0:  # Deformable DETR's own rule, kept so code that runs here runs there
        raise attnkit.Error(f"im2col_step: batch {n} must be divisible by im2col_step {step}")


class MSDeformAttnFunction(torch.autograd.Function):
    """Deformable DETR's MSDeformAttnFunction: apply(value, value_spatial_shapes,
    value_level_start_index, sampling_locations, attention_weights, im2col_step) -> [N, Lq, M·D].
    im2col_step only bounds the CUDA kernel's batch chunk; attnkit's result does not depend on it."""

    @staticmethod
    def forward(ctx, value, value_spatial_shapes, value_level_start_index, sampling_locations,
                attention_weights, im2col_step):
        _check(value, value_spatial_shapes, value_level_start_index, sampling_locations,
               attention_weights, im2col_step)
        out = attnkit.ms_deform_attn(c.to_numpy32(value), value_spatial_shapes.numpy(),
                                     value_level_start_index.numpy(),
                                     c.to_numpy32(sampling_locations),
                                     c.to_numpy32(attention_weights))
        ctx.save_for_backward(value, value_spatial_shapes, value_level_start_index,
                              sampling_locations, attention_weights)
        return c.to_tensor(out, value.dtype)

    @staticmethod
    @once_differentiable  # first-order gradients, also under create_graph=True; no double backward
    def backward(ctx, d_out):
        value, shapes, starts, loc, weights = ctx.saved_tensors
        d_value, d_loc, d_w = attnkit.ms_deform_attn_backward(
            c.to_numpy32(d_out), c.to_numpy32(value), shapes.numpy(), starts.numpy(),
            c.to_numpy32(loc), c.to_numpy32(weights))
        return (c.to_tensor(d_value, value.dtype), None, None, c.to_tensor(d_loc, loc.dtype),
                c.to_tensor(d_w, weights.dtype), None)


def ms_deform_attn(value, value_spatial_shapes, value_level_start_index, sampling_locations,
                   attention_weights, im2col_step=64):
    """MSDeformAttnFunction.apply with Deformable DETR's argument order -> out [N, Lq, M·D]."""
    return MSDeformAttnFunction.apply(value, value_spatial_shapes, value_level_start_index,
                                      sampling_locations, attention_weights, im2col_step)
