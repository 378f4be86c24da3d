"""`attnkit train vit` end to end on a tiny subset of Debian's Fashion-MNIST: a few steps of a
small ViT; the saved directory loads as a Hugging Face-style ViT (config.json keys, tensor
names), classifies and evaluates (`attnkit eval`); bad architecture flags stop with one error
line naming the problem."""
import json
import os
import subprocess

import numpy as np
import pytest

import attnkit
from cli_helpers import CLI

DATA = "/usr/share/datasets/fashion-mnist"
pytestmark = pytest.mark.skipif(not os.path.isdir(DATA), reason="dataset-fashion-mnist not installed")


def train_vit(out, **arch):
    arch = {"patch": 7, "dim": 32, "layers": 2, "heads": 2, "mlp-dim": 64, "pool": "cls", **arch}
    flags = [x for k, v in arch.items() for x in ("--" + k, str(v))]
    return subprocess.run([CLI, "train", "vit", "--out", str(out), "--epochs", "1", "--batch", "32",
                           "--train-limit", "128", "--eval-limit", "64", "--threads", "2", "--json",
                           *flags], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_train_vit_runs_saves_and_reloads(tmp_path, pool):
    r = train_vit(tmp_path / "m", pool=pool)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["model_type"] == "vit"
    assert 0.0 <= summary["test_accuracy"] <= 1.0
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["model_type"] == "vit" and cfg["architectures"] == ["ViTForImageClassification"]
    assert (cfg["patch_size"], cfg["hidden_size"], cfg["num_hidden_layers"]) == (7, 32, 2)
    assert cfg["pooling"] == pool and cfg["id2label"]["9"] == "Ankle boot"
    m = attnkit.ImageModel.load(str(tmp_path / "m"))
    assert "vit.embeddings.patch_embeddings.projection.weight" in m.parameter_names()
    assert m.parameter("vit.embeddings.position_embeddings").shape == (1, 17, 32)
    logits = m.forward(np.zeros((3, 1, 28, 28), np.float32))
    assert logits.shape == (3, 10) and np.isfinite(logits).all()
    e = subprocess.run([CLI, "eval", "--model", str(tmp_path / "m"), "--windows", "64"],
                       capture_output=True, text=True, timeout=300)
    assert e.returncode == 0 and "vit: test accuracy" in e.stdout, e.stderr


def test_bad_architecture_flags_fail_with_one_line(tmp_path):
    for arch, key in (({"patch": 5}, "patch_size"), ({"heads": 3}, "num_attention_heads"),
                      ({"pool": "max"}, "pool")):
        r = train_vit(tmp_path / "bad", **arch)
        assert r.returncode == 2, r.stderr
        assert key in r.stderr and r.stderr.count("\n") == 1, r.stderr
