"""BERT against the same network written in PyTorch 1.13 here: hidden states, pooled vectors,
every head's logits and loss, and every parameter gradient, with Hugging Face-named weights
passed through safetensors and a Hugging Face BertConfig config.json. Packed batches include a
padding segment that must not influence the real sequences."""
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnkit
import torch_attention as ta

BASE = {
    "model_type": "bert", "vocab_size": 37, "hidden_size": 16, "num_hidden_layers": 2,
    "num_attention_heads": 4, "intermediate_size": 24, "max_position_embeddings": 24,
    "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
}
HEADS = {
    "BertForPreTraining": {"bert.pooler.dense": 16, "cls.predictions.transform.dense": 16,
                           "cls.seq_relationship": 2},
    "BertForMaskedLM": {"cls.predictions.transform.dense": 16},
    "BertForSequenceClassification": {"bert.pooler.dense": 16, "classifier": 3},
    "BertForTokenClassification": {"classifier": 3},
    "BertForQuestionAnswering": {"qa_outputs": 2},
}


def config(arch, **kw):
    return {**BASE, "architectures": [arch], "num_labels": 3, **kw}


def random_weights(cfg, rng):
    c, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    w = {}

    def dense(name, out, inp):
        w[name + ".weight"] = rng.normal(0, 0.3, (out, inp))
        w[name + ".bias"] = rng.normal(0, 0.1, out)

    def norm(name):
        w[name + ".weight"] = rng.normal(1, 0.1, c)
        w[name + ".bias"] = rng.normal(0, 0.1, c)

    e = "bert.embeddings."
    w[e + "word_embeddings.weight"] = rng.normal(0, 0.5, (v, c))
    w[e + "position_embeddings.weight"] = rng.normal(0, 0.5, (cfg["max_position_embeddings"], c))
    w[e + "token_type_embeddings.weight"] = rng.normal(0, 0.5, (cfg["type_vocab_size"], c))
    norm(e + "LayerNorm")
    for layer in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{layer}."
        for name in ("query", "key", "value"):
            dense(p + "attention.self." + name, c, c)
        dense(p + "attention.output.dense", c, c)
        norm(p + "attention.output.LayerNorm")
        dense(p + "intermediate.dense", f, c)
        dense(p + "output.dense", c, f)
        norm(p + "output.LayerNorm")
    for name, out in HEADS[cfg["architectures"][0]].items():
        dense(name, out, c)
    if "cls.predictions.transform.dense" in HEADS[cfg["architectures"][0]]:
        norm("cls.predictions.transform.LayerNorm")
        w["cls.predictions.bias"] = rng.normal(0, 0.1, v)
    return {k: x.astype(np.float32) for k, x in w.items()}


def torch_bert(w, cfg, batch, targets, dtype):
    """Outputs, losses and autograd gradients of the network in torch (float64 numpy)."""
    t = {k: torch.tensor(x, dtype=dtype, requires_grad=True) for k, x in w.items()}
    arch = cfg["architectures"][0]
    c, h = cfg["hidden_size"], cfg["num_attention_heads"]
    d, eps = c // h, cfg["layer_norm_eps"]
    approx = "none" if cfg["hidden_act"] == "gelu" else "tanh"
    cu, seqs = batch["cu_seqlens"], batch["sequences"]
    pos = np.concatenate([np.arange(cu[s + 1] - cu[s]) for s in range(len(cu) - 1)])
    ids = torch.tensor(batch["tokens"], dtype=torch.long)
    types = torch.tensor(batch["token_type_ids"], dtype=torch.long)

    def ln(x, name):
        return F.layer_norm(x, (c,), t[name + ".weight"], t[name + ".bias"], eps)

    def lin(x, name):
        return x @ t[name + ".weight"].T + t[name + ".bias"]

    e = "bert.embeddings."
    x = (t[e + "word_embeddings.weight"][ids] + t[e + "position_embeddings.weight"][torch.tensor(pos)]
         + t[e + "token_type_embeddings.weight"][types])
    x = ln(x, e + "LayerNorm")
    for layer in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{layer}."
        q, k, v = (lin(x, p + "attention.self." + n).reshape(-1, h, d) for n in ("query", "key", "value"))
        a, _ = ta.attention(q, k, v, cu_q=cu, cu_k=cu)
        hh = ln(x + lin(a.reshape(-1, c), p + "attention.output.dense"), p + "attention.output.LayerNorm")
        m = F.gelu(lin(hh, p + "intermediate.dense"), approximate=approx)
        x = ln(hh + lin(m, p + "output.dense"), p + "output.LayerNorm")
    out = {"sequence_output": x}
    cls_rows = torch.tensor([cu[s] for s in seqs], dtype=torch.long)
    loss = torch.zeros((), dtype=dtype)
    if "bert.pooler.dense.weight" in t:
        out["pooled_output"] = torch.tanh(lin(x[cls_rows], "bert.pooler.dense"))
    if "cls.predictions.bias" in t:
        tr = ln(F.gelu(lin(x, "cls.predictions.transform.dense"), approximate=approx),
                "cls.predictions.transform.LayerNorm")
        out["mlm_logits"] = tr @ t[e + "word_embeddings.weight"].T + t["cls.predictions.bias"]
        if "mlm_labels" in targets:
            loss = loss + F.cross_entropy(out["mlm_logits"], torch.tensor(targets["mlm_labels"], dtype=torch.long),
                                          ignore_index=-1)
    if arch == "BertForPreTraining":
        out["task_logits"] = lin(out["pooled_output"], "cls.seq_relationship")
        labels = targets["nsp_labels"]
    elif arch == "BertForSequenceClassification":
        out["task_logits"] = lin(out["pooled_output"], "classifier")
        labels = targets.get("labels")
    elif arch == "BertForTokenClassification":
        out["task_logits"] = lin(x, "classifier")
        labels = targets.get("labels")
    elif arch == "BertForQuestionAnswering":
        out["task_logits"] = z = lin(x, "qa_outputs")
        span = 0
        for b, s in enumerate(seqs):
            zs = z[cu[s]:cu[s + 1]]
            span = span + F.cross_entropy(zs[:, 0][None], torch.tensor([int(targets["start_positions"][b])]))
            span = span + F.cross_entropy(zs[:, 1][None], torch.tensor([int(targets["end_positions"][b])]))
        loss = loss + span / (2 * len(seqs))
        labels = None
    else:
        labels = None
    if labels is not None and arch != "BertForQuestionAnswering":
        loss = loss + F.cross_entropy(out["task_logits"], torch.tensor(labels, dtype=torch.long), ignore_index=-1)
    loss.backward()
    res = {k: v.detach().double().numpy() for k, v in out.items()}
    res["loss"] = float(loss)
    res["grads"] = {k: x.grad.double().numpy() if x.grad is not None else np.zeros(x.shape) for k, x in t.items()}
    return res


def make_dir(tmp_path, cfg, seed=0):
    w = random_weights(cfg, np.random.default_rng(seed))
    attnkit.save_safetensors(str(tmp_path / "model.safetensors"), w)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return w


def packed_batch(rng, vocab):
    """Two real sequences and a padding segment between them: segments [0,9) [9,13) [13,24)."""
    cu = np.array([0, 9, 13, 24], np.int32)
    tokens = rng.integers(0, vocab, 24).astype(np.int32)
    types = np.zeros(24, np.int32)
    types[5:9] = 1
    types[19:24] = 1
    return {"tokens": tokens, "token_type_ids": types, "cu_seqlens": cu,
            "sequences": np.array([0, 2], np.int32)}


def compare(ours, w, cfg, batch, targets, names):
    ref = torch_bert(w, cfg, batch, targets, torch.float64)
    pt = torch_bert(w, cfg, batch, targets, torch.float32)
    for name in names:
        ta.assert_within_bar(ours[name], ref[name], pt[name], 2, name)
    ta.assert_within_bar(np.array(ours["loss"]), np.array(ref["loss"]), np.array(pt["loss"]), 2, "loss")
    scale = max(ta.finite_max(g) for g in ref["grads"].values())
    assert set(ours["grads"]) == set(ref["grads"])
    for name, g in ours["grads"].items():
        ta.assert_within_bar(g, ref["grads"][name], pt["grads"][name], 3, name, scale=scale)


def test_pretraining_outputs_losses_and_every_gradient_match_pytorch(tmp_path):
    cfg = config("BertForPreTraining")
    w = make_dir(tmp_path, cfg)
    rng = np.random.default_rng(1)
    batch = packed_batch(rng, cfg["vocab_size"])
    mlm = np.full(24, -1, np.int32)
    mlm[[2, 3, 7, 15, 20]] = rng.integers(0, cfg["vocab_size"], 5)
    targets = {"mlm_labels": mlm, "nsp_labels": np.array([0, 1], np.int32)}
    m = attnkit.load_bert(tmp_path)
    ours = m.run(**batch, **targets, backward=True, mlm_logits=True)
    assert ours["mlm_count"] == 5
    assert ours["loss"] == pytest.approx(ours["mlm_loss"] + ours["nsp_loss"])
    compare(ours, w, cfg, batch, targets,
            ["sequence_output", "pooled_output", "task_logits", "mlm_logits"])


@pytest.mark.parametrize("arch,act", [("BertForSequenceClassification", "gelu"),
                                      ("BertForTokenClassification", "gelu_new"),
                                      ("BertForQuestionAnswering", "gelu"),
                                      ("BertForMaskedLM", "gelu_pytorch_tanh")])
def test_task_heads_match_pytorch(tmp_path, arch, act):
    cfg = config(arch, hidden_act=act)
    w = make_dir(tmp_path, cfg, seed=3)
    rng = np.random.default_rng(4)
    batch = packed_batch(rng, cfg["vocab_size"])
    if arch == "BertForSequenceClassification":
        targets = {"labels": np.array([2, 0], np.int32)}
    elif arch == "BertForTokenClassification":
        labels = rng.integers(0, 3, 24).astype(np.int32)
        labels[9:13] = -1  # padding segment
        labels[0] = -1
        targets = {"labels": labels}
    elif arch == "BertForQuestionAnswering":
        targets = {"start_positions": np.array([2, 1], np.int32), "end_positions": np.array([4, 9], np.int32)}
    else:
        mlm = np.full(24, -1, np.int32)
        mlm[[1, 4, 17]] = [5, 6, 7]
        targets = {"mlm_labels": mlm}
    ours = attnkit.load_bert(tmp_path).run(**batch, **targets, backward=True,
                                            mlm_logits=arch == "BertForMaskedLM")
    names = ["sequence_output"] + (["mlm_logits"] if arch == "BertForMaskedLM" else ["task_logits"])
    compare(ours, w, cfg, batch, targets, names)


def test_padding_and_other_sequences_do_not_leak(tmp_path):
    cfg = config("BertForPreTraining")
    make_dir(tmp_path, cfg)
    m = attnkit.load_bert(tmp_path)
    batch = packed_batch(np.random.default_rng(5), cfg["vocab_size"])
    a = m.run(**batch)["sequence_output"]
    changed = dict(batch, tokens=batch["tokens"].copy())
    changed["tokens"][9:13] = (changed["tokens"][9:13] + 7) % cfg["vocab_size"]  # padding only
    b = m.run(**changed)["sequence_output"]
    np.testing.assert_array_equal(a[:9], b[:9])
    np.testing.assert_array_equal(a[13:], b[13:])
    # The first sequence alone gives the same outputs as inside the packed batch.
    alone = m.run(tokens=batch["tokens"][:9], token_type_ids=batch["token_type_ids"][:9])
    ta.assert_within_bar(alone["sequence_output"], a[:9].astype(np.float64), a[:9], 1, "alone")


def test_save_load_round_trip_and_bad_input(tmp_path):
    cfg = config("BertForPreTraining")
    w = make_dir(tmp_path, cfg)
    m = attnkit.load_bert(tmp_path)
    out = tmp_path / "saved"
    m.save(out)
    saved = json.loads((out / "config.json").read_text())
    assert saved["architectures"] == ["BertForPreTraining"] and saved["model_type"] == "bert"
    again = attnkit.load_bert(out)
    for name, x in m.parameters().items():
        np.testing.assert_array_equal(x, again.parameters()[name])
    with pytest.raises(ValueError, match="token_type_ids"):
        m.run(tokens=np.arange(5, dtype=np.int32), token_type_ids=np.array([0, 0, 2, 0, 0], np.int32))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        m.run(tokens=np.zeros(25, np.int32))
    with pytest.raises(ValueError, match="nsp"):
        m.run(tokens=np.zeros(5, np.int32), nsp_labels=np.array([0, 1], np.int32))
    with pytest.raises(ValueError, match="sequences"):
        m.run(tokens=np.zeros(5, np.int32), cu_seqlens=np.array([0, 5, 5], np.int32),
              sequences=np.array([1], np.int32))
    bad = dict(w)
    del bad["bert.encoder.layer.1.attention.self.key.bias"]
    attnkit.save_safetensors(str(tmp_path / "model.safetensors"), bad)
    with pytest.raises(ValueError, match="key.bias"):
        attnkit.load_bert(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "architectures": ["BertModelX"]}))
    with pytest.raises(ValueError, match="architectures"):
        attnkit.load_bert(tmp_path)
