"""An independent PyTorch formulation of multi-scale deformable attention on grid_sample.

Each level's value map [B·H, Dh, H_l, W_l] is sampled with torch.nn.functional.grid_sample
(mode='bilinear', padding_mode='zeros', align_corners=False) at grid = 2·loc - 1, weighted by the
attention weights and summed over levels and points; autograd gives the three gradients.
"""
import numpy as np
import torch
import torch.nn.functional as F


def ms_deform_attn(value, spatial_shapes, level_start_index, loc, weights):
    """value [B, S, H, Dh], loc [B, Q, H, Lv, P, 2], weights [B, Q, H, Lv, P] -> [B, Q, H·Dh]."""
    b, _, h, dh = value.shape
    q, p = loc.shape[1], loc.shape[4]
    out = torch.zeros(b * h, dh, q, dtype=value.dtype)
    for lvl, (hl, wl) in enumerate(np.asarray(spatial_shapes).tolist()):
        start = int(level_start_index[lvl])
        v = value[:, start:start + hl * wl].permute(0, 2, 3, 1).reshape(b * h, dh, hl, wl)
        grid = (2 * loc[:, :, :, lvl] - 1).permute(0, 2, 1, 3, 4).reshape(b * h, q, p, 2)
        sampled = F.grid_sample(v, grid, mode="bilinear", padding_mode="zeros",
                                align_corners=False)  # [B·H, Dh, Q, P]
        w = weights[:, :, :, lvl].permute(0, 2, 1, 3).reshape(b * h, 1, q, p)
        out = out + (sampled * w).sum(-1)
    return out.reshape(b, h, dh, q).permute(0, 3, 1, 2).reshape(b, q, h * dh)


def run(value, spatial_shapes, level_start_index, loc, weights, d_out, dtype):
    """Forward and autograd backward in `dtype`; float64 numpy arrays out, our names."""
    tv, tl, tw = (torch.tensor(x, dtype=dtype, requires_grad=True) for x in (value, loc, weights))
    out = ms_deform_attn(tv, spatial_shapes, level_start_index, tl, tw)
    out.backward(torch.tensor(d_out, dtype=dtype))
    res = {"out": out, "d_value": tv.grad, "d_sampling_locations": tl.grad,
           "d_attention_weights": tw.grad}
    return {name: x.detach().double().numpy() for name, x in res.items()}
