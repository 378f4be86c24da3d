"""`attnkit train gpt`, `eval` and `generate` end to end on Debian's fortunes: a resumed run
reproduces the uninterrupted losses bit for bit, bf16 training (GPT and BERT), divergence stops with a clear message and keeps
the last checkpoint, and generation with a sink cache keeps constant memory."""
import csv
import json
import math
import os
import subprocess

import pytest

import attnkit
from cli_helpers import CLI, FORTUNES

pytestmark = pytest.mark.skipif(not os.path.isdir(FORTUNES), reason="fortunes not installed")


def train(out, *extra):
    return subprocess.run([CLI, "train", "gpt", "--preset", "tiny", "--batch", "4", "--seq", "32",
                           "--out", str(out), "--eval-every", "4", "--checkpoint-every", "4",
                           "--quiet", "--threads", "2", *extra],
                          capture_output=True, text=True)


def losses(out):
    with open(out / "log.csv") as f:
        return [(row["step"], row["loss"], row["val_loss"]) for row in csv.DictReader(f)]


def test_resume_in_a_fresh_process_reproduces_losses_bitwise(tmp_path):
    assert train(tmp_path / "a", "--steps", "12").returncode == 0
    assert train(tmp_path / "b", "--steps", "8").returncode == 0
    r = train(tmp_path / "b", "--steps", "12", "--resume")
    assert r.returncode == 0, r.stderr
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    a = attnkit.load_model(tmp_path / "a").parameters()
    b = attnkit.load_model(tmp_path / "b").parameters()
    assert all((a[k] == b[k]).all() for k in a)


@pytest.mark.skipif(not attnkit.bf16_available(), reason="no AVX512-BF16 / AMX, or built without oneDNN")
def test_bf16_run_resumes_bitwise_and_differs_from_f32(tmp_path):
    """--precision bf16 is deterministic for a thread count (a resumed run reproduces its losses),
    changes the products (losses differ from f32's) and stays close to f32 (within 1 %)."""
    assert train(tmp_path / "f32", "--steps", "8").returncode == 0
    assert train(tmp_path / "a", "--steps", "8", "--precision", "bf16").returncode == 0
    assert train(tmp_path / "b", "--steps", "4", "--precision", "bf16").returncode == 0
    r = train(tmp_path / "b", "--steps", "8", "--resume", "--precision", "bf16")
    assert r.returncode == 0, r.stderr
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    f32, bf16 = losses(tmp_path / "f32"), losses(tmp_path / "a")
    assert f32 != bf16
    for (_, lf, _), (_, lb, _) in zip(f32, bf16):
        assert abs(float(lb) - float(lf)) <= 0.01 * float(lf)


def test_bert_trains_in_bf16_and_refuses_a_bad_precision(tmp_path):
    """`train bert --precision bf16` trains (other weights than f32's); an unknown precision is one
    line and exit 2, before anything is created."""
    def bert(out, *extra):
        return subprocess.run([CLI, "train", "bert", "--preset", "tiny", "--batch", "4", "--seq", "32",
                               "--steps", "3", "--eval-every", "0", "--eval-examples", "4", "--quiet",
                               "--threads", "1", "--out", str(out), *extra], capture_output=True, text=True)
    r = bert(tmp_path / "bad", "--precision", "fp8")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--precision" in r.stderr, r.stderr
    assert not (tmp_path / "bad").exists()
    r = bert(tmp_path / "f32", "--precision", "f32")
    assert r.returncode == 0, r.stderr
    e = subprocess.run([CLI, "eval", "--model", str(tmp_path / "f32"), "--windows", "8", "--json"],
                       capture_output=True, text=True)
    assert e.returncode == 0, e.stderr
    e = json.loads(e.stdout)
    assert e["model_type"] == "bert" and e["objective"] == "mlm" and e["masked_positions"] > 0
    r = bert(tmp_path / "bf16", "--precision", "bf16")
    if not attnkit.bf16_available():
        assert r.returncode == 2 and "bf16" in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert ((tmp_path / "f32" / "model.safetensors").read_bytes() !=
            (tmp_path / "bf16" / "model.safetensors").read_bytes())


def test_divergence_stops_with_a_message_and_keeps_the_checkpoint(tmp_path):
    out = tmp_path / "run"
    assert train(out, "--steps", "4").returncode == 0
    before = (out / "model.safetensors").read_bytes()
    r = train(out, "--steps", "40", "--resume", "--lr", "1e30", "--warmup", "0", "--clip", "0")
    assert r.returncode == 2
    assert "diverged" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert (out / "model.safetensors").read_bytes() == before


def test_seq_defaults_to_the_models_context(tmp_path):
    """Without --seq a window is the model's context up to 256 tokens: the tiny preset (128) trains
    and resumes without naming it; a --seq past the context is still refused."""
    base = [CLI, "train", "gpt", "--preset", "tiny", "--batch", "2", "--eval-every", "0", "--quiet",
            "--threads", "1", "--out", str(tmp_path / "r")]
    r = subprocess.run(base + ["--steps", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "r" / "log.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2
    r = subprocess.run([CLI, "train", "gpt", "--out", str(tmp_path / "r"), "--resume", "--steps", "3",
                        "--eval-every", "0", "--quiet", "--threads", "1", "--batch", "2"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(base[:-1] + [str(tmp_path / "s"), "--seq", "129", "--steps", "1"], capture_output=True, text=True)
    assert r.returncode == 2 and "--seq: must be in [1, max_position_embeddings = 128]" in r.stderr, r.stderr


def test_eval_and_streaming_generation(tmp_path):
    out = tmp_path / "m"
    assert train(out, "--steps", "4").returncode == 0
    r = subprocess.run([CLI, "eval", "--model", str(out), "--windows", "4"], capture_output=True, text=True)
    assert r.returncode == 0 and "bits per byte" in r.stdout
    j = subprocess.run([CLI, "eval", "--model", str(out), "--windows", "4", "--json"], capture_output=True, text=True)
    assert j.returncode == 0, j.stderr
    j = json.loads(j.stdout)
    assert f"loss {j['loss']:.4f}" in r.stdout and j["model_type"] == "llama" and j["split"] == "validation"
    assert math.isclose(j["perplexity"], math.exp(j["loss"]), rel_tol=1e-12)
    g = subprocess.run([CLI, "generate", "--model", str(out), "--prompt", "Q: ", "--max-tokens",
                        "600", "--sink-tokens", "4", "--window", "32", "--no-stop", "--seed", "3"],
                       capture_output=True)
    assert g.returncode == 0
    assert b"600 tokens" in g.stderr and b"36 tokens held" in g.stderr, g.stderr


def test_python_presets_are_the_cli_presets(tmp_path):
    from attnkit import train as t
    assert t.GPT_PRESETS == ("tiny", "small") and t.BERT_PRESETS == ("tiny", "mini", "small")
    out = tmp_path / "run"
    assert train(out, "--steps", "1").returncode == 0
    assert t.gpt_preset("tiny") == json.loads((out / "config.json").read_text())
    small = t.gpt_preset("small")
    assert (small["hidden_size"], small["num_hidden_layers"], small["vocab_size"]) == (256, 6, t.VOCAB_SIZE)
    assert t.bert_preset("mini")["hidden_size"] == 128
    with pytest.raises(ValueError, match="--preset: unknown preset 'huge'"):
        t.gpt_preset("huge")
