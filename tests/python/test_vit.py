"""ViT image classifier (attnkit.ImageModel with model_type "vit") against the same network written
in PyTorch 1.13 here with explicit ops (Hugging Face ViTForImageClassification: conv patch
embedding, [CLS] + learned positions, pre-LN layers, exact or tanh GELU, final LayerNorm, [CLS] or
mean pooling, classifier): logits and every parameter gradient, with FlashAttention's bar (our
error against torch float64 at most 4x torch float32's own error, plus float32 rounding at the
result's scale). Plus save/load, dropout keying and bad input."""
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnkit
import torch_attention as ta

BASE = {
    "model_type": "vit", "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
    "intermediate_size": 24, "image_size": [8, 12], "patch_size": 4, "num_channels": 2,
    "num_labels": 3, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "qkv_bias": True,
}


def config(**kw):
    return {**BASE, **kw}


def noisy_model(cfg, seed):
    """An ImageModel with HF init plus noise (non-trivial LayerNorm weights and biases)."""
    m = attnkit.ImageModel(json.dumps(cfg))
    m.init_random(seed)
    rng = np.random.default_rng(seed + 100)
    for name in m.parameter_names():
        p = m.parameter(name)
        p += rng.normal(0, 0.3, p.shape).astype(np.float32)
    return m


def torch_vit(w, cfg, x, r, dtype):
    """Logits and autograd gradients of loss = sum(logits * r) in `dtype` (float64 numpy)."""
    t = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in w.items()}
    c, h, p = cfg["hidden_size"], cfg["num_attention_heads"], cfg["patch_size"]
    d, eps = c // h, cfg["layer_norm_eps"]
    approx = "none" if cfg["hidden_act"] == "gelu" else "tanh"
    xt = torch.tensor(x, dtype=dtype)
    n = xt.shape[0]

    def ln(y, name):
        return F.layer_norm(y, (c,), t[name + ".weight"], t[name + ".bias"], eps)

    def lin(y, name, bias=True):
        out = y @ t[name + ".weight"].T
        return out + t[name + ".bias"] if bias else out

    e = "vit.embeddings."
    patches = F.conv2d(xt, t[e + "patch_embeddings.projection.weight"],
                       t[e + "patch_embeddings.projection.bias"], stride=p)
    y = torch.cat([t[e + "cls_token"].expand(n, 1, c), patches.flatten(2).transpose(1, 2)], dim=1)
    y = y + t[e + "position_embeddings"]
    for layer in range(cfg["num_hidden_layers"]):
        pre = f"vit.encoder.layer.{layer}."
        a = ln(y, pre + "layernorm_before")
        q, k, v = (lin(a, pre + "attention.attention." + s, cfg["qkv_bias"]).view(n, -1, h, d)
                   .transpose(1, 2) for s in ("query", "key", "value"))
        att = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1) @ v  # [N, H, S, D]
        y = y + lin(att.transpose(1, 2).reshape(n, -1, c), pre + "attention.output.dense")
        m = F.gelu(lin(ln(y, pre + "layernorm_after"), pre + "intermediate.dense"), approximate=approx)
        y = y + lin(m, pre + "output.dense")
    y = ln(y, "vit.layernorm")
    pooled = y[:, 0] if cfg.get("pooling", "cls") == "cls" else y[:, 1:].mean(dim=1)
    logits = lin(pooled, "classifier")
    (logits * torch.tensor(r, dtype=dtype)).sum().backward()
    return {"logits": logits.detach().double().numpy(),
            "grads": {k: v.grad.double().numpy() for k, v in t.items()}}


def run_ours(m, x, r):
    m.zero_grad()
    logits = np.array(m.forward(x))
    m.backward(r)
    return {"logits": logits, "grads": {n: np.array(m.gradient(n)) for n in m.parameter_names()}}


@pytest.mark.parametrize("pooling,act,qkv_bias", [("cls", "gelu", True), ("mean", "gelu", True),
                                                  ("cls", "gelu_new", False)])
def test_logits_and_every_gradient_match_pytorch(pooling, act, qkv_bias):
    cfg = config(pooling=pooling, hidden_act=act, qkv_bias=qkv_bias)
    m = noisy_model(cfg, 1)
    assert m.model_type == "vit" and m.num_classes == 3
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 2, 8, 12)).astype(np.float32)
    r = rng.standard_normal((5, 3)).astype(np.float32)
    ours = run_ours(m, x, r)
    w = {n: np.array(m.parameter(n)) for n in m.parameter_names()}
    ref = torch_vit(w, cfg, x, r, torch.float64)
    pt = torch_vit(w, cfg, x, r, torch.float32)
    assert set(ours["grads"]) == set(ref["grads"])
    expected = {"vit.embeddings.patch_embeddings.projection.weight": (16, 2, 4, 4),
                "vit.embeddings.position_embeddings": (1, 7, 16),
                "vit.embeddings.cls_token": (1, 1, 16), "classifier.weight": (3, 16)}
    for name, shape in expected.items():
        assert w[name].shape == shape, name
    assert ("vit.encoder.layer.0.attention.attention.query.bias" in w) == qkv_bias
    ta.assert_within_bar(ours["logits"], ref["logits"], pt["logits"], 4, "logits")
    scale = max(ta.finite_max(g) for g in ref["grads"].values())
    for name, g in ours["grads"].items():
        assert g.shape == ref["grads"][name].shape, name
        ta.assert_within_bar(g, ref["grads"][name], pt["grads"][name], 4, name, scale=scale)


def test_images_are_independent_and_batch_size_may_change():
    m = noisy_model(config(), 3)
    x = np.random.default_rng(4).standard_normal((4, 2, 8, 12)).astype(np.float32)
    full = np.array(m.forward(x))
    changed = x.copy()
    changed[2] += 1.0
    other = np.array(m.forward(changed))
    np.testing.assert_array_equal(np.delete(full, 2, 0), np.delete(other, 2, 0))
    assert not np.array_equal(full[2], other[2])
    # Alone, the image's rows land in other GEMM blocks: float32 rounding differences only.
    one = np.array(m.forward(x[1:2]))
    assert ta.max_err(one, full[1:2]) <= 64 * ta.EPS32 * ta.finite_max(full)


def test_dropout_is_off_in_eval_and_keyed_by_seed_in_training():
    m = noisy_model(config(hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2), 5)
    x = np.random.default_rng(6).standard_normal((3, 2, 8, 12)).astype(np.float32)
    eval1, eval2 = np.array(m.forward(x)), np.array(m.forward(x))
    np.testing.assert_array_equal(eval1, eval2)
    m.set_training(True, seed=1)
    a, a2 = np.array(m.forward(x)), np.array(m.forward(x))
    m.set_training(True, seed=2)
    b = np.array(m.forward(x))
    np.testing.assert_array_equal(a, a2)
    assert not np.array_equal(a, b) and not np.array_equal(a, eval1)
    m.set_training(False)
    np.testing.assert_array_equal(np.array(m.forward(x)), eval1)


def test_save_load_round_trip_is_bitwise(tmp_path):
    cfg = config(pooling="mean", id2label={"0": "a", "1": "b", "2": "c"})
    m = noisy_model(cfg, 7)
    m.save(str(tmp_path))
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "vit" and saved["architectures"] == ["ViTForImageClassification"]
    assert saved["image_size"] == [8, 12] and saved["pooling"] == "mean"
    assert saved["id2label"] == {"0": "a", "1": "b", "2": "c"}
    tensors = attnkit.load_safetensors(str(tmp_path / "model.safetensors"))
    assert set(tensors) == set(m.parameter_names())
    back = attnkit.ImageModel.load(str(tmp_path))
    for name in m.parameter_names():
        np.testing.assert_array_equal(back.parameter(name), m.parameter(name))
        np.testing.assert_array_equal(tensors[name], m.parameter(name))
    x = np.random.default_rng(8).standard_normal((2, 2, 8, 12)).astype(np.float32)
    np.testing.assert_array_equal(back.forward(x), m.forward(x))


@pytest.mark.parametrize("bad,key", [({"image_size": 10}, "patch_size"),
                                     ({"num_attention_heads": 5}, "num_attention_heads"),
                                     ({"pooling": "max"}, "pooling"),
                                     ({"hidden_act": "relu"}, "hidden_act"),
                                     ({"num_labels": 0}, "num_labels")])
def test_bad_configs_raise_naming_the_key(bad, key):
    with pytest.raises(ValueError, match=key):
        attnkit.ImageModel(json.dumps(config(**bad)))


def test_wrong_input_shape_raises():
    m = noisy_model(config(), 9)
    with pytest.raises(ValueError, match="x"):
        m.forward(np.zeros((2, 2, 12, 8), np.float32))
    with pytest.raises(ValueError):
        m.forward(np.zeros((2, 1, 8, 12), np.float32))
    m.forward(np.zeros((2, 2, 8, 12), np.float32))
    with pytest.raises(ValueError, match="d_logits"):
        m.backward(np.zeros((3, 3), np.float32))
