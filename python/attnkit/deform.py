"""attnkit.nn's MSDeformAttn module (Deformable DETR's multi-scale deformable attention).

Explicit forward and backward (llm.c style): ``ms_deform_attn_block`` returns ``(out, cache)``;
``ms_deform_attn_block_backward`` takes the cache back and returns ``(d_query, d_input_flatten,
d_reference_points, grads)``. params is a dict keyed by Deformable DETR's names
(``value_proj``, ``sampling_offsets``, ``attention_weights``, ``output_proj``, each
``_weight`` [out, in] and ``_bias`` [out]); ``ms_deform_attn_block_init`` gives its
initialisation. See include/attnkit/nn/ms_deform_attn_block.hpp for the formulas.
"""
from . import _attnkit as _C
from . import _checks

__all__ = ["ms_deform_attn_block", "ms_deform_attn_block_backward", "ms_deform_attn_block_init"]


def _opts(d_model, heads, levels, points):
    return {"d_model": int(d_model), "heads": int(heads), "levels": int(levels),
            "points": int(points)}


def ms_deform_attn_block_init(*, d_model, heads, levels, points, seed=0):
    """Deformable DETR's initial parameters (offset biases along 2πh/H, scaled by point index)."""
    return _C._ms_deform_attn_block_init(_opts(d_model, heads, levels, points), _checks.seed(seed))


def ms_deform_attn_block(query, reference_points, input_flatten, spatial_shapes,
                         level_start_index, params, *, heads, levels, points, padding_mask=None,
                         reference=False):
    """MSDeformAttn: query [B, Q, C], reference_points [B, Q, Lv, 2], input_flatten [B, S, C],
    spatial_shapes [Lv, 2], level_start_index [Lv], padding_mask [B, S] (True = padding)
    -> (out [B, Q, C], cache)."""
    d_model = query.shape[-1]
    return _C._ms_deform_attn_block_forward(query, reference_points, input_flatten,
                                            spatial_shapes, level_start_index, padding_mask,
                                            dict(params), _opts(d_model, heads, levels, points),
                                            bool(reference))


def ms_deform_attn_block_backward(d_out, query, reference_points, input_flatten, spatial_shapes,
                                  level_start_index, params, cache, *, heads, levels, points,
                                  padding_mask=None, reference=False):
    """Gradients of ms_deform_attn_block -> (d_query, d_input_flatten, d_reference_points,
    grads dict keyed like params)."""
    d_model = query.shape[-1]
    return _C._ms_deform_attn_block_backward(d_out, query, reference_points, input_flatten,
                                             spatial_shapes, level_start_index, padding_mask,
                                             dict(params), dict(cache),
                                             _opts(d_model, heads, levels, points),
                                             bool(reference))
