"""attnkit.ImageModel with "model_type": "deformable" against the same network written in PyTorch.

The torch side: conv2d / batch_norm / relu backbone (stride 1, then stride 2 per level), each
level's pixels flattened row-major and projected by a linear layer, Deformable DETR's
PositionEmbeddingSine(C/2, normalize=True) (its mask cumsum gives y = i + 1; we use its
(y - 0.5)/H·2π without the 1e-6 eps) plus a learned level embedding on the query, reference
points at pixel centres, post-LN encoder layers with MSDeformAttn on grid_sample (torch_deform.py)
and an exact-GELU FFN, mean over tokens, linear classifier. Autograd gives every parameter
gradient. Bar: FlashAttention's (2x / 3x torch float32's own error against float64).

Kinks: at initialisation every sampling point sits on an integer pixel coordinate (reference at
the pixel centre, integer offsets), where float32 and float64 may take different one-sided
derivatives. Shifting the offset biases by 1/16 pixel moves them off: with 16×16 images (levels
8, 4, 2) every coordinate is then at least 1/16 from an integer (see the C++ test's comment);
the 28×28 case has irrational level ratios and is checked at its drawn sampling points. The
batch-norm biases keep their natural 0 here, so about half of the ReLU units are inactive.
"""
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnkit
import torch_attention as ta
import torch_deform as td

TINY = dict(model_type="deformable", image_size=16, num_labels=3, widths=[3, 4, 4, 6], d_model=8,
            heads=4, points=2, layers=2, ffn_dim=12)


def map_sizes(cfg):
    s = [cfg["image_size"]]
    for _ in cfg["widths"][1:]:
        s.append((s[-1] + 1) // 2)
    return s


def sine_embedding(s, c, dtype):
    """Deformable DETR's PositionEmbeddingSine(c/2, temperature=10000, normalize=True) of an s×s
    map, [s·s, c] (y half first, sin/cos interleaved)."""
    npf = c // 2
    ones = torch.ones(1, s, s, dtype=dtype)
    y = ones.cumsum(1)
    x = ones.cumsum(2)
    y = (y - 0.5) / y[:, -1:, :] * 2 * math.pi
    x = (x - 0.5) / x[:, :, -1:] * 2 * math.pi
    dim_t = torch.arange(npf, dtype=dtype)
    dim_t = 10000 ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / npf)
    px, py = x[:, :, :, None] / dim_t, y[:, :, :, None] / dim_t
    px = torch.stack((px[:, :, :, 0::2].sin(), px[:, :, :, 1::2].cos()), dim=4).flatten(3)
    py = torch.stack((py[:, :, :, 0::2].sin(), py[:, :, :, 1::2].cos()), dim=4).flatten(3)
    return torch.cat((py, px), dim=3).reshape(s * s, c)


def msdeform(query, ref, value_in, shapes, starts, p, pre, heads, levels, points):
    b, q, c = query.shape
    lin = lambda x, n: F.linear(x, p[pre + n + ".weight"], p[pre + n + ".bias"])  # noqa: E731
    value = lin(value_in, "value_proj").view(b, value_in.shape[1], heads, c // heads)
    off = lin(query, "sampling_offsets").view(b, q, heads, levels, points, 2)
    aw = F.softmax(lin(query, "attention_weights").view(b, q, heads, levels * points), -1)
    aw = aw.view(b, q, heads, levels, points)
    sh = torch.as_tensor(shapes, dtype=query.dtype)
    normalizer = torch.stack([sh[:, 1], sh[:, 0]], -1)
    loc = ref[:, :, None, :, None, :] + off / normalizer[None, None, None, :, None, :]
    return lin(td.ms_deform_attn(value, shapes, starts, loc, aw), "output_proj")


def torch_forward(cfg, p, bufs, x, training):
    """logits [N, K] and the updated batch-norm buffers."""
    c, lv = cfg["d_model"], len(cfg["widths"]) - 1
    h, feats, new_bufs = x, [], {}
    for i in range(len(cfg["widths"])):
        pre = f"backbone.{i}."
        h = F.conv2d(h, p[pre + "conv.weight"], stride=1 if i == 0 else 2, padding=1)
        rm, rv = bufs[pre + "bn.running_mean"].clone(), bufs[pre + "bn.running_var"].clone()
        h = F.relu(F.batch_norm(h, rm, rv, p[pre + "bn.weight"], p[pre + "bn.bias"], training,
                                0.1, 1e-5))
        new_bufs[pre + "bn.running_mean"], new_bufs[pre + "bn.running_var"] = rm, rv
        feats.append(h)
    srcs, pos, shapes, starts, refs = [], [], [], [], []
    start = 0
    for lvl in range(lv):
        f = feats[lvl + 1]
        s = f.shape[-1]
        srcs.append(F.linear(f.flatten(2).transpose(1, 2), p[f"input_proj.{lvl}.weight"],
                             p[f"input_proj.{lvl}.bias"]))
        pos.append(sine_embedding(s, c, x.dtype) + p["level_embed"][lvl])
        ry, rx = torch.meshgrid(torch.arange(s, dtype=x.dtype), torch.arange(s, dtype=x.dtype),
                                indexing="ij")
        refs.append(torch.stack([(rx.reshape(-1) + 0.5) / s, (ry.reshape(-1) + 0.5) / s], -1))
        shapes.append((s, s))
        starts.append(start)
        start += s * s
    src, pos = torch.cat(srcs, 1), torch.cat(pos, 0)[None]
    n = x.shape[0]
    ref = torch.cat(refs, 0)[None, :, None, :].expand(n, -1, lv, 2)
    shapes, starts = np.array(shapes, np.int64), np.array(starts, np.int64)
    for k in range(cfg["layers"]):
        pre = f"encoder.layers.{k}."
        attn = msdeform(src + pos, ref, src, shapes, starts, p, pre + "self_attn.", cfg["heads"],
                        lv, cfg["points"])
        src = F.layer_norm(src + attn, (c,), p[pre + "norm1.weight"], p[pre + "norm1.bias"], 1e-5)
        ffn = F.linear(F.gelu(F.linear(src, p[pre + "linear1.weight"], p[pre + "linear1.bias"])),
                       p[pre + "linear2.weight"], p[pre + "linear2.bias"])
        src = F.layer_norm(src + ffn, (c,), p[pre + "norm2.weight"], p[pre + "norm2.bias"], 1e-5)
    return F.linear(src.mean(1), p["classifier.weight"], p["classifier.bias"]), new_bufs


def torch_run(cfg, params, bufs, x, d_logits, training, dtype):
    tp = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in params.items()}
    tb = {k: torch.tensor(v, dtype=dtype) for k, v in bufs.items()}
    logits, new_bufs = torch_forward(cfg, tp, tb, torch.tensor(x, dtype=dtype), training)
    logits.backward(torch.tensor(d_logits, dtype=dtype))
    res = {"logits": logits.detach()}
    res.update({"grad " + k: v.grad for k, v in tp.items()})
    res.update({"buffer " + k: v for k, v in new_bufs.items()})
    return {k: v.double().numpy() for k, v in res.items()}


def make_model(cfg, seed):
    m = attnkit.ImageModel(json.dumps(cfg))
    m.init_random(seed)
    rng = np.random.default_rng(seed)
    for name in m.parameter_names():
        p = m.parameter(name)
        if name.endswith("sampling_offsets.bias"):
            p += 1.0 / 16  # off the bilinear kinks (module docstring)
        elif name.endswith("sampling_offsets.weight"):
            p += 0.01 * rng.standard_normal(p.shape)
        elif "attention_weights" in name:
            p += 0.5 * rng.standard_normal(p.shape)
        elif p.ndim == 1:  # biases, norm weights
            p += 0.1 * rng.standard_normal(p.shape)
    for name in m.buffer_names():  # as if some training had happened
        b = m.buffer(name)
        b[...] = 0.1 * rng.standard_normal(b.shape) + (1.0 if name.endswith("running_var") else 0.0)
    return m


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("cfg,n", [(TINY, 4), (dict(model_type="deformable"), 2)],
                         ids=["tiny16", "default28"])
def test_logits_gradients_and_buffers_match_torch(cfg, n, training):
    m = make_model(cfg, 5)
    full = json.loads(m.config_json)
    s = full["image_size"]
    rng = np.random.default_rng(6)
    x = rng.standard_normal((n, 1, s, s)).astype(np.float32)
    d_logits = rng.standard_normal((n, full["num_labels"])).astype(np.float32)
    params = {k: m.parameter(k).copy() for k in m.parameter_names()}
    bufs = {k: m.buffer(k).copy() for k in m.buffer_names()}
    m.set_training(training)
    m.zero_grad()
    ours = {"logits": m.forward(x)}
    m.backward(d_logits)
    ours.update({"grad " + k: m.gradient(k).copy() for k in m.parameter_names()})
    ours.update({"buffer " + k: m.buffer(k).copy() for k in m.buffer_names()})
    ref64 = torch_run(full, params, bufs, x, d_logits, training, torch.float64)
    ref32 = torch_run(full, params, bufs, x, d_logits, training, torch.float32)
    assert set(ours) == set(ref64)
    for name, val in ours.items():
        assert val.shape == ref64[name].shape, name
        ta.assert_within_bar(val, ref64[name], ref32[name], 2 if name == "logits" else 3, name)
    # every parameter is reached by the loss (eval: batch-norm statistics are constants)
    for k in m.parameter_names():
        assert np.abs(ours["grad " + k]).max() > 0, k


def test_save_load_and_bad_configs(tmp_path):
    m = make_model(TINY, 7)
    x = np.random.default_rng(8).standard_normal((2, 1, 16, 16)).astype(np.float32)
    want = m.forward(x)
    m.save(str(tmp_path / "m"))
    back = attnkit.ImageModel.load(str(tmp_path / "m"))
    assert back.model_type == "deformable" and back.num_classes == 3
    np.testing.assert_array_equal(back.forward(x), want)
    with pytest.raises(ValueError, match="points"):
        attnkit.ImageModel(json.dumps(dict(TINY, points=0)))
    with pytest.raises(ValueError, match="levels"):
        attnkit.ImageModel(json.dumps(dict(TINY, levels=2)))
    with pytest.raises(ValueError, match="unknown key 'head'"):
        attnkit.ImageModel(json.dumps(dict(TINY, head=2)))
