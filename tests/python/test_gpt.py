"""The GPT model (Llama architecture) against the same network written in PyTorch 1.13 here:
logits, loss and every parameter gradient, with weights passed through safetensors and a
Hugging Face-style config.json."""
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnkit
import torch_attention as ta

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "vocab_size": 61, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
}


def random_weights(cfg, rng):
    """Llama-named float32 weights; separate q/k/v/o and MLP matrices as Hugging Face stores them."""
    c, h, hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d, f, v = c // h, cfg["intermediate_size"], cfg["vocab_size"]
    w = {"model.embed_tokens.weight": rng.normal(0, 0.5, (v, c)),
         "model.norm.weight": rng.normal(1, 0.1, c)}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        w[p + "input_layernorm.weight"] = rng.normal(1, 0.1, c)
        w[p + "post_attention_layernorm.weight"] = rng.normal(1, 0.1, c)
        w[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.3, (h * d, c))
        w[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.3, (hkv * d, c))
        w[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.3, (hkv * d, c))
        w[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.3, (c, h * d))
        w[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.3, (f, c))
        w[p + "mlp.up_proj.weight"] = rng.normal(0, 0.3, (f, c))
        w[p + "mlp.down_proj.weight"] = rng.normal(0, 0.3, (c, f))
    return {k: x.astype(np.float32) for k, x in w.items()}


def torch_gpt(w, cfg, tokens, targets, cu, dtype, t=None):
    """Logits and mean loss of the network in torch, and autograd gradients (float64 numpy).

    t: optional dict of torch leaf tensors to use instead of fresh copies of w."""
    if t is None:
        t = {k: torch.tensor(x, dtype=dtype, requires_grad=True) for k, x in w.items()}
    c, h, hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d, eps, theta = c // h, cfg["rms_norm_eps"], cfg["rope_theta"]
    pos = np.concatenate([np.arange(cu[b + 1] - cu[b]) for b in range(len(cu) - 1)])

    def rms(x, weight):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight

    x = t["model.embed_tokens.weight"][torch.tensor(tokens, dtype=torch.long)]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        hn = rms(x, t[p + "input_layernorm.weight"])
        q = (hn @ t[p + "self_attn.q_proj.weight"].T).reshape(-1, h, d)
        k = (hn @ t[p + "self_attn.k_proj.weight"].T).reshape(-1, hkv, d)
        v = (hn @ t[p + "self_attn.v_proj.weight"].T).reshape(-1, hkv, d)
        q, k = ta.rope(q, pos, theta), ta.rope(k, pos, theta)
        a, _ = ta.attention(q, k, v, window=(-1, 0), cu_q=cu, cu_k=cu)
        x = x + a.reshape(-1, h * d) @ t[p + "self_attn.o_proj.weight"].T
        h2 = rms(x, t[p + "post_attention_layernorm.weight"])
        m = F.silu(h2 @ t[p + "mlp.gate_proj.weight"].T) * (h2 @ t[p + "mlp.up_proj.weight"].T)
        x = x + m @ t[p + "mlp.down_proj.weight"].T
    logits = rms(x, t["model.norm.weight"]) @ t["model.embed_tokens.weight"].T
    loss = F.cross_entropy(logits, torch.tensor(targets, dtype=torch.long), ignore_index=-1)
    loss.backward()
    grads = {k: x.grad.double().numpy() for k, x in t.items()}
    return logits.detach().double().numpy(), float(loss), grads


@pytest.fixture
def model_dir(tmp_path):
    rng = np.random.default_rng(0)
    w = random_weights(CONFIG, rng)
    attnkit.save_safetensors(str(tmp_path / "model.safetensors"), w)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    return tmp_path, w


def test_logits_loss_and_every_gradient_match_pytorch(model_dir):
    path, w = model_dir
    rng = np.random.default_rng(1)
    cu = np.array([0, 11, 30], np.int32)  # two packed sequences
    tokens = rng.integers(0, CONFIG["vocab_size"], 30).astype(np.int32)
    targets = np.roll(tokens, -1)
    targets[[10, 29]] = -1  # no target across a sequence end
    m = attnkit.load_model(path)
    assert m.config["num_key_value_heads"] == 2
    logits = m.logits(tokens, cu)
    loss, grads = m.loss_and_grads(tokens, targets, cu)
    ref = torch_gpt(w, CONFIG, tokens, targets, cu, torch.float64)
    pt = torch_gpt(w, CONFIG, tokens, targets, cu, torch.float32)
    ta.assert_within_bar(logits, ref[0], pt[0], 2, "logits")
    ta.assert_within_bar(np.array(loss), np.array(ref[1]), np.array(pt[1]), 2, "loss")
    scale = max(ta.finite_max(g) for g in ref[2].values())
    assert set(grads) == set(ref[2])
    for name, g in grads.items():
        ta.assert_within_bar(g, ref[2][name], pt[2][name], 3, name, scale=scale)


def test_save_and_load_round_trip(model_dir, tmp_path_factory):
    path, w = model_dir
    m = attnkit.load_model(path)
    out = tmp_path_factory.mktemp("saved")
    m.save(out)
    again = attnkit.load_model(out)
    for name, x in m.parameters().items():
        np.testing.assert_array_equal(x, again.parameters()[name])
    tokens = np.arange(20, dtype=np.int32) % CONFIG["vocab_size"]
    np.testing.assert_array_equal(m.logits(tokens), again.logits(tokens))


def test_bad_checkpoints_raise_value_error(model_dir):
    path, w = model_dir
    bad = dict(w)
    bad["model.norm.weight"] = bad["model.norm.weight"][:-1]
    attnkit.save_safetensors(str(path / "model.safetensors"), bad)
    with pytest.raises(ValueError, match="model.norm.weight"):
        attnkit.load_model(path)
    del bad["model.norm.weight"]
    attnkit.save_safetensors(str(path / "model.safetensors"), bad)
    with pytest.raises(ValueError, match="no tensor"):
        attnkit.load_model(path)
    (path / "config.json").write_text(json.dumps({**CONFIG, "num_key_value_heads": 3}))
    with pytest.raises(ValueError, match="num_key_value_heads"):
        attnkit.load_model(path)


def adamw_batch():
    """The two-document batch and AdamW settings of the ten-step comparisons."""
    rng = np.random.default_rng(2)
    cu = np.array([0, 16, 32], np.int32)
    tokens = rng.integers(0, CONFIG["vocab_size"], 32).astype(np.int32)
    targets = np.roll(tokens, -1)
    targets[[15, 31]] = -1
    return tokens, targets, cu, dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def torch_adamw_losses(w, tokens, targets, cu, kw, dtype, autocast=False):
    """PyTorch's losses before each of ten AdamW steps and after the last (norms not decayed), in
    dtype, optionally under torch.autocast("cpu", dtype=torch.bfloat16)."""
    t = {k: torch.tensor(x, dtype=dtype, requires_grad=True) for k, x in w.items()}
    no_decay = [x for k, x in t.items() if "norm" in k]
    decay = [x for k, x in t.items() if "norm" not in k]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": kw["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=kw["lr"], betas=kw["betas"], eps=kw["eps"])
    out = []
    for step in range(11):
        opt.zero_grad()
        for x in t.values():
            x.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            _, loss, _ = torch_gpt(w, CONFIG, tokens, targets, cu, dtype, t=t)
        out.append(loss)
        if step < 10:
            opt.step()
    return np.array(out)


def test_ten_adamw_steps_match_torch(model_dir):
    path, w = model_dir
    tokens, targets, cu, kw = adamw_batch()
    ours = attnkit.load_model(path).adamw_losses(tokens, targets, cu, steps=10, **kw)

    def torch_losses(dtype):
        return torch_adamw_losses(w, tokens, targets, cu, kw, dtype)

    ref, pt = torch_losses(torch.float64), torch_losses(torch.float32)
    assert ours[-1] < ours[0] - 0.5  # it learns the batch
    ta.assert_within_bar(np.array(ours), ref, pt, 3, "losses over 10 AdamW steps")
