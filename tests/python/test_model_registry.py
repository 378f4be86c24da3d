"""The model_type registry as the Python loaders and the CLI use it: every golden directory
(tests/data/golden) loads through attnkit.load as its own class, and a loader or command given a
directory of the wrong kind refuses it, naming what it needs and what the directory holds."""
import os
import subprocess

import pytest

import attnkit

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "data", "golden")
CLI = os.path.join(os.path.dirname(attnkit.__file__), "..", "..", "attnkit")
KINDS = {"gpt": ("llama", "GPT", "Model"), "bert_pretraining": ("bert", "BERT", "BertModel"),
         "bert_classifier": ("bert", "BERT", "BertModel"), "vit": ("vit", "image", "ImageModel"),
         "cnn": ("cnn", "image", "ImageModel"), "deformable": ("deformable", "image", "ImageModel")}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_load_dispatches_on_model_type(name):
    d = os.path.join(GOLDEN, name)
    model_type, kind, cls = KINDS[name]
    assert attnkit.model_type(d) == (model_type, kind)
    assert type(attnkit.load(d)).__name__ == cls


def test_loaders_refuse_the_wrong_kind():
    bert, gpt, cnn = (os.path.join(GOLDEN, n) for n in ("bert_classifier", "gpt", "cnn"))
    with pytest.raises(ValueError, match=f"`attnkit.load_model` needs a GPT model; {bert} holds a bert model"):
        attnkit.load_model(bert)
    with pytest.raises(ValueError, match=f"`attnkit.load_bert` needs a BERT model; {cnn} holds a cnn model"):
        attnkit.load_bert(cnn)
    with pytest.raises(ValueError, match=f"needs an image model; {gpt} holds a llama model"):
        attnkit.ImageModel.load(gpt)


def test_compact_json_model_type(tmp_path):
    text = open(os.path.join(GOLDEN, "bert_classifier", "config.json")).read()
    compact = "".join(text.split())  # no whitespace at all: "model_type":"bert"
    (tmp_path / "config.json").write_text(compact)
    os.link(os.path.join(GOLDEN, "bert_classifier", "model.safetensors"), tmp_path / "model.safetensors")
    assert attnkit.model_type(tmp_path) == ("bert", "BERT")
    assert type(attnkit.load(tmp_path)).__name__ == "BertModel"


@pytest.mark.parametrize("argv, needs, holds", [
    (["generate", "--model", "bert_classifier"], "`generate` needs a GPT model", "a bert model"),
    (["classify", "--model", "gpt", "x.png"], "`classify` needs an image model", "a llama model"),
    (["finetune", "bert", "--init", "vit", "--out", "unused"], "`finetune bert --init` needs a BERT model",
     "a vit model"),
])
def test_cli_refuses_the_wrong_kind(argv, needs, holds):
    argv = [os.path.join(GOLDEN, a) if a in KINDS else a for a in argv]
    r = subprocess.run([CLI, *argv], capture_output=True, text=True)
    assert r.returncode != 0
    assert r.stderr.startswith("attnkit: error: " + needs), r.stderr
    assert holds in r.stderr and r.stderr.count("\n") == 1, r.stderr
