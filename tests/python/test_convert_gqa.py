"""MHA → GQA conversion (`attnkit.convert_gqa`, `attnkit convert-gqa`) checked with torch: the
K/V projections equal ``w.view(N, m, D, C).mean(1)`` (or the first head of each group), every
other tensor and config key is copied unchanged, and the converted model's logits equal the same
network written in torch (test_gpt.torch_gpt) with torch-pooled weights."""
import json
import subprocess

import numpy as np
import pytest
import torch

import attnkit
import torch_attention as ta
from test_gpt import CONFIG, random_weights, torch_gpt
from cli_helpers import CLI

MHA = {**CONFIG, "num_key_value_heads": CONFIG["num_attention_heads"], "transformers_version": "4.46.0",
       "eos_token_id": [2, 3]}  # keys convert_gqa copies without reading them


@pytest.fixture
def mha_dir(tmp_path):
    w = random_weights(MHA, np.random.default_rng(3))
    w["model.rotary_emb.inv_freq"] = np.arange(4, dtype=np.float32)  # an extra tensor: copied
    (tmp_path / "mha").mkdir()
    attnkit.save_safetensors(str(tmp_path / "mha" / "model.safetensors"), w)
    (tmp_path / "mha" / "config.json").write_text(json.dumps(MHA))
    return tmp_path, w


def torch_pool(x, n, method):
    """K/V weight [H·D, C] → [N·D, C] pooled over contiguous groups of heads, in torch."""
    h = MHA["num_attention_heads"]
    d = MHA["hidden_size"] // h
    t = torch.tensor(x, dtype=torch.float64).view(n, h // n, d, -1)
    pooled = t.mean(dim=1) if method == "mean" else t[:, 0]
    return pooled.reshape(n * d, -1).float().numpy()


@pytest.mark.parametrize("n", [2, 1])
@pytest.mark.parametrize("method", ["mean", "first"])
def test_pooled_weights_and_logits_match_torch(mha_dir, n, method):
    root, w = mha_dir
    attnkit.convert_gqa(root / "mha", root / "out", n, method=method)
    cfg = json.loads((root / "out" / "config.json").read_text())
    assert cfg == {**MHA, "num_key_value_heads": n}
    got = attnkit.load_safetensors(str(root / "out" / "model.safetensors"))
    assert set(got) == set(w)
    expected = {k: torch_pool(x, n, method) if ("k_proj" in k or "v_proj" in k) else x
                for k, x in w.items()}
    for k in w:
        np.testing.assert_array_equal(got[k], expected[k], err_msg=k)
    del expected["model.rotary_emb.inv_freq"]
    tokens = np.random.default_rng(4).integers(0, cfg["vocab_size"], 25).astype(np.int32)
    cu = np.array([0, 25], np.int32)
    logits = attnkit.load_model(root / "out").logits(tokens)
    ref = torch_gpt(expected, cfg, tokens, np.roll(tokens, -1), cu, torch.float64)
    pt = torch_gpt(expected, cfg, tokens, np.roll(tokens, -1), cu, torch.float32)
    ta.assert_within_bar(logits, ref[0], pt[0], 2, "logits")


def test_cli_converts_and_refuses_bad_arguments(mha_dir):
    root, w = mha_dir
    r = subprocess.run([CLI, "convert-gqa", "--in", root / "mha", "--out", root / "rand", "--kv-heads", "2",
                        "--method", "random", "--seed", "9"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = attnkit.load_safetensors(str(root / "rand" / "model.safetensors"))
    d = MHA["hidden_size"] // MHA["num_attention_heads"]
    k = got["model.layers.0.self_attn.k_proj.weight"].reshape(2, d, -1)
    heads = w["model.layers.0.self_attn.k_proj.weight"].reshape(2, 2, d, -1)
    assert all(any((k[g] == heads[g, j]).all() for j in range(2)) for g in range(2))
    for args, message in [(["--kv-heads", "3", "--out", root / "x"], "must divide"),
                          (["--kv-heads", "2", "--out", root / "mha" / "sub"], "never overwritten"),
                          (["--kv-heads", "2", "--out", root / "rand"], "not empty"),
                          (["--kv-heads", "2", "--out", root / "y", "--method", "median"], "--method")]:
        r = subprocess.run([CLI, "convert-gqa", "--in", root / "mha", *args], capture_output=True, text=True)
        assert r.returncode == 2 and r.stderr.startswith("attnkit: error:") and message in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert not (root / "x").exists() and not (root / "mha" / "sub").exists()
    with pytest.raises(ValueError, match="must divide"):
        attnkit.convert_gqa(root / "mha", root / "z", 3)
