"""The sink profiler and streaming evaluation against PyTorch 1.13: the profile's probabilities of
query N equal torch.softmax over [scale·q_N·kᵀ, sink logit] with q and k from the same network
written in torch (weights through safetensors), for plain, learned-sink, off-by-one and
head-wise-gated models; gate means equal torch's sigmoid gates; the dense stream's losses equal
torch's full-forward cross-entropy."""
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnkit
import torch_attention as ta
from test_gpt import CONFIG, random_weights

VARIANTS = {
    "plain": {},
    "learned_sink": {"attnkit_sink": "learned"},
    "off_by_one": {"attnkit_sink": "off_by_one", "attnkit_window": 9},
    "headwise_gate": {"attnkit_gate": "headwise", "attnkit_sink": "learned"},
}


def make_model(tmp_path, extra, rng):
    cfg = {**CONFIG, **extra}
    w = random_weights(cfg, rng)
    h, c = cfg["num_attention_heads"], cfg["hidden_size"]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}.self_attn."
        if extra.get("attnkit_sink") == "learned":
            w[p + "sinks"] = rng.normal(0, 1.0, h).astype(np.float32)
        if extra.get("attnkit_gate") == "headwise":
            w[p + "output_gate.weight"] = rng.normal(0, 0.3, (h, c)).astype(np.float32)
            w[p + "output_gate.bias"] = rng.normal(-1, 0.5, h).astype(np.float32)
    attnkit.save_safetensors(str(tmp_path / "model.safetensors"), w)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return cfg, w


def torch_profile(w, cfg, tokens, query, dtype):
    """Per layer: probabilities [H, query+1] and sink share [H] of query `query`, gates [T, H]
    (or None), the logits [T, V], and the L2 norms by position of the residual stream entering
    each layer and leaving the last [L + 1, T] and of the keys [L, Hkv, T]; the network of
    test_gpt.py plus sinks, window and gates."""
    t = {k: torch.tensor(x, dtype=dtype) for k, x in w.items()}
    c, h, hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d, eps, theta = c // h, cfg["rms_norm_eps"], cfg["rope_theta"]
    win = cfg.get("attnkit_window", -1)
    sink = cfg.get("attnkit_sink", "none")
    pos = np.arange(len(tokens))

    def rms(x, weight):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight

    x = t["model.embed_tokens.weight"][torch.tensor(tokens, dtype=torch.long)]
    rows, gates, hidden, keys = [], [], [], []
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        hidden.append(x.norm(dim=-1))
        hn = rms(x, t[p + "input_layernorm.weight"])
        q = ta.rope((hn @ t[p + "self_attn.q_proj.weight"].T).reshape(-1, h, d), pos, theta)
        k = ta.rope((hn @ t[p + "self_attn.k_proj.weight"].T).reshape(-1, hkv, d), pos, theta)
        keys.append(k.norm(dim=-1).T)
        v = (hn @ t[p + "self_attn.v_proj.weight"].T).reshape(-1, hkv, d)
        sinks = (t[p + "self_attn.sinks"] if sink == "learned"
                 else torch.zeros(h, dtype=dtype) if sink == "off_by_one" else None)
        # The profiled row: softmax over [visible scores, sink logit].
        kk = k[: query + 1].repeat_interleave(h // hkv, dim=1)
        s = torch.einsum("hd,jhd->hj", q[query], kk) / math.sqrt(d)
        if win >= 0:
            s[:, : max(0, query - win)] = -math.inf
        if sinks is not None:
            s = torch.cat([s, sinks[:, None]], dim=1)
        prob = torch.softmax(s, dim=1)
        rows.append((prob[:, : query + 1], prob[:, query + 1] if sinks is not None else torch.zeros(h)))
        a, _ = ta.attention(q, k, v, window=(win, 0), sinks=sinks)
        if cfg.get("attnkit_gate") == "headwise":
            g = torch.sigmoid(hn @ t[p + "self_attn.output_gate.weight"].T + t[p + "self_attn.output_gate.bias"])
            gates.append(g)
            a = a * g[:, :, None]
        x = x + a.reshape(-1, h * d) @ t[p + "self_attn.o_proj.weight"].T
        h2 = rms(x, t[p + "post_attention_layernorm.weight"])
        m = F.silu(h2 @ t[p + "mlp.gate_proj.weight"].T) * (h2 @ t[p + "mlp.up_proj.weight"].T)
        x = x + m @ t[p + "mlp.down_proj.weight"].T
    hidden.append(x.norm(dim=-1))
    logits = rms(x, t["model.norm.weight"]) @ t["model.embed_tokens.weight"].T
    return rows, gates, logits, (torch.stack(hidden), torch.stack(keys))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_profile_matches_torch_softmax(tmp_path, variant):
    rng = np.random.default_rng(3)
    cfg, w = make_model(tmp_path, VARIANTS[variant], rng)
    m = attnkit.load_model(tmp_path)
    tokens = rng.integers(0, cfg["vocab_size"], 40).astype(np.int32)
    query, starts = 15, (0, 40 - 16)  # two windows: the first and the last 16 tokens
    prof = m.sink_profile(tokens, query, windows=2, gate_bins=5)
    L, H = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    assert prof["mass"].shape == (L, H, query + 1)
    ref = {dt: [torch_profile(w, cfg, tokens[s:s + query + 1], query, dt) for s in starts]
           for dt in (torch.float64, torch.float32)}

    def mean_rows(dt, part):
        return np.mean([[r[part].double().numpy() for r in run[0]] for run in ref[dt]], axis=0)

    for part, ours in ((0, prof["mass"]), (1, prof["sink_share"])):
        ta.assert_within_bar(ours, mean_rows(torch.float64, part), mean_rows(torch.float32, part), 2,
                             f"{variant} {'mass' if part == 0 else 'sink share'}")
    np.testing.assert_allclose(prof["mass"].sum(-1) + prof["sink_share"], 1.0, rtol=0, atol=1e-12)
    for part, name in ((0, "hidden_norm"), (1, "key_norm")):
        norms = {dt: np.mean([run[3][part].double().numpy() for run in ref[dt]], axis=0)
                 for dt in ref}
        assert prof[name].shape == norms[torch.float64].shape
        ta.assert_within_bar(prof[name], norms[torch.float64], norms[torch.float32], 2,
                             f"{variant} {name}")
    if "attnkit_sink" in cfg:
        assert prof["sink_share"].min() > 0
    else:
        assert np.all(prof["sink_share"] == 0)
    if cfg.get("attnkit_gate") == "headwise":
        g64 = np.mean([[g.mean(0).numpy() for g in run[1]] for run in ref[torch.float64]], axis=0)
        g32 = np.mean([[g.double().mean(0).numpy() for g in run[1]] for run in ref[torch.float32]], axis=0)
        ta.assert_within_bar(prof["gate_mean"], g64, g32, 2, "gate mean")
        np.testing.assert_allclose(prof["gate_hist"].sum(-1), 1.0, rtol=0, atol=1e-12)


def test_dense_stream_equals_full_forward_loss(tmp_path):
    rng = np.random.default_rng(4)
    cfg, w = make_model(tmp_path, VARIANTS["learned_sink"], rng)
    m = attnkit.load_model(tmp_path)
    tokens = rng.integers(0, cfg["vocab_size"], 30).astype(np.int32)
    nll = m.stream_eval(tokens, policy="dense")["nll"]
    target = torch.tensor(tokens[1:], dtype=torch.long)
    ref = [F.cross_entropy(torch_profile(w, cfg, tokens, 0, dt)[2][:-1], target, reduction="none")
           .double().numpy() for dt in (torch.float64, torch.float32)]
    ta.assert_within_bar(nll, ref[0], ref[1], 2, "stream nll")
    # recompute with a window that holds everything is the same computation
    again = m.stream_eval(tokens, policy="recompute", window=30)["nll"]
    ta.assert_within_bar(again, ref[0], ref[1], 2, "recompute nll")


def test_bad_arguments_raise_value_error(tmp_path):
    cfg, _ = make_model(tmp_path, {}, np.random.default_rng(5))
    m = attnkit.load_model(tmp_path)
    tokens = np.arange(20, dtype=np.int32) % cfg["vocab_size"]
    # errors name the Python arguments, not the CLI's flags
    with pytest.raises(ValueError, match="^query_pos: must be < the model's context"):
        m.sink_profile(tokens, 64)  # past the context (64)
    with pytest.raises(ValueError, match="^windows: must be >= 1"):
        m.sink_profile(tokens, 8, windows=0)
    with pytest.raises(ValueError, match="policy"):
        m.stream_eval(tokens, policy="lru")
    with pytest.raises(ValueError, match="^count: the text has only 20 tokens"):
        m.stream_eval(tokens, policy="sink", window=4, count=21)
    with pytest.raises(ValueError, match="^sink_tokens: must be >= 0"):
        m.stream_eval(tokens, policy="sink", window=4, sink_tokens=-1)


def test_cli_json_has_the_norms_of_the_python_profile(tmp_path):
    """`attnkit sink-profile --json` prints hidden_norm [L + 1][N + 1] and key_norm [L][Hkv][N + 1]
    equal to the Python profile over the same windows (one text file: the whole file is the text)."""
    import os
    import subprocess
    cli = os.path.join(os.path.dirname(attnkit.__file__), "..", "..", "attnkit")
    rng = np.random.default_rng(6)
    cfg, _ = make_model(tmp_path, {"vocab_size": 261}, rng)  # byte tokens + <|endoftext|>
    text = bytes(rng.integers(32, 127, 60).astype(np.uint8))
    (tmp_path / "text.txt").write_bytes(text)
    p = subprocess.run([cli, "sink-profile", "--model", str(tmp_path), "--data", str(tmp_path / "text.txt"),
                        "--split", "all", "--query-pos", "11", "--windows", "3", "--json", "--threads", "1"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    tokens = np.concatenate([[256], np.frombuffer(text, np.uint8)]).astype(np.int32)  # <|endoftext|> first
    prof = attnkit.load_model(tmp_path).sink_profile(tokens, 11, windows=3)
    L, hkv = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    assert np.asarray(j["hidden_norm"]).shape == (L + 1, 12)
    assert np.asarray(j["key_norm"]).shape == (L, hkv, 12)
    np.testing.assert_array_equal(np.asarray(j["hidden_norm"]), prof["hidden_norm"])
    np.testing.assert_array_equal(np.asarray(j["key_norm"]), prof["key_norm"])
