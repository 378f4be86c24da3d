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


def torch_logits(t, cfg, xt):
    """The network in torch over parameter tensors t {HF name: tensor}: logits [N, K]."""
    c, h, p = cfg["hidden_size"], cfg["num_attention_heads"], cfg["patch_size"]
    d, eps = c // h, cfg["layer_norm_eps"]
    approx = "none" if cfg["hidden_act"] == "gelu" else "tanh"
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
    return lin(pooled, "classifier")


def torch_vit(w, cfg, x, r, dtype):
    """Logits and autograd gradients of loss = sum(logits * r) in `dtype` (float64 numpy)."""
    t = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in w.items()}
    logits = torch_logits(t, cfg, torch.tensor(x, dtype=dtype))
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


def no_decay(name, shape):
    """The image trainer's weight-decay exclusions (rank < 2, cls token, position table)."""
    return len(shape) < 2 or "cls_token" in name or "position_embeddings" in name


def torch_training(w, cfg, batches, lrs, wd, dtype):
    """Mean cross-entropy of each step of torch.optim.AdamW training, then the final logits of
    the first batch (float64 numpy)."""
    t = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in w.items()}
    opt = torch.optim.AdamW(
        [{"params": [v for k, v in t.items() if not no_decay(k, v.shape)], "weight_decay": wd},
         {"params": [v for k, v in t.items() if no_decay(k, v.shape)], "weight_decay": 0.0}], lr=1.0)
    losses = []
    for (x, y), lr in zip(batches, lrs):
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        loss = F.cross_entropy(torch_logits(t, cfg, torch.tensor(x, dtype=dtype)), torch.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        logits = torch_logits(t, cfg, torch.tensor(batches[0][0], dtype=dtype)).double().numpy()
    return np.array(losses), logits


@pytest.mark.parametrize("initializer", ["trunc_normal", "fan_in"])
def test_adamw_training_steps_match_pytorch(initializer):
    """Twelve AdamW steps (weight decay with the trainer's exclusions, warmup + cosine, softmax
    cross-entropy) from the same initial weights on the same batches: every step's loss and the
    final logits at 4x torch float32's error against float64, as the single-step test."""
    cfg = config(pooling="mean", initializer=initializer)
    m = attnkit.ImageModel(json.dumps(cfg))
    m.init_random(7)
    names = m.parameter_names()
    w = {n: np.array(m.parameter(n)) for n in names}
    rng = np.random.default_rng(8)
    batches = [(rng.standard_normal((6, 2, 8, 12)).astype(np.float32), rng.integers(0, 3, 6))
               for _ in range(12)]
    lrs = [attnkit.train.warmup_cosine_lr(s, 3e-3, 1e-5, 3, 12) for s in range(12)]
    wd = 0.05
    excluded = [n for n in names if no_decay(n, w[n].shape)]
    opt = attnkit.train.AdamW({n: m.parameter(n) for n in names}, {n: m.gradient(n) for n in names},
                              weight_decay=wd, no_decay=excluded)
    losses = []
    for (x, y), lr in zip(batches, lrs):
        m.zero_grad()
        z = np.array(m.forward(x), np.float64)
        lp = z - z.max(1, keepdims=True)
        lp -= np.log(np.exp(lp).sum(1, keepdims=True))
        losses.append(-lp[np.arange(len(y)), y].mean())
        d = np.exp(lp)
        d[np.arange(len(y)), y] -= 1
        m.backward((d / len(y)).astype(np.float32))
        opt.step(lr)
    logits = np.array(m.forward(batches[0][0]))
    ref_losses, ref_logits = torch_training(w, cfg, batches, lrs, wd, torch.float64)
    pt_losses, pt_logits = torch_training(w, cfg, batches, lrs, wd, torch.float32)
    assert ref_losses[-1] < ref_losses[0]  # it learns
    ta.assert_within_bar(np.array(losses), ref_losses, pt_losses, 4, "losses")
    ta.assert_within_bar(logits, ref_logits, pt_logits, 4, "logits after training")


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
