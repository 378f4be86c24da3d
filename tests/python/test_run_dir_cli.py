"""The run directory's refusal rules through the CLI (docs/reliability.md): a new run never
replaces a run without --overwrite, --resume refuses what is missing or inconsistent and takes the
model from the run's own config.json, and flags, --out and the data split are checked before
anything is created. Every refusal is one line `attnkit: error: ...` with exit code 2."""
import os
import shutil
import subprocess

import pytest

from cli_helpers import CLI, FASHION, FORTUNES

SMALL = ["--batch", "2", "--seq", "16", "--eval-every", "0", "--checkpoint-every", "1", "--quiet", "--threads", "1"]
pytestmark = pytest.mark.skipif(not os.path.isdir(FORTUNES), reason="fortunes not installed")


def gpt(out, *extra):
    return subprocess.run([CLI, "train", "gpt", "--out", str(out), *SMALL, *extra], capture_output=True, text=True)


def refused(r, *words):
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith("attnkit: error:") and r.stderr.count("\n") == 1, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)


@pytest.fixture
def run(tmp_path):
    out = tmp_path / "run"
    r = gpt(out, "--preset", "tiny", "--steps", "2")
    assert r.returncode == 0, r.stderr
    return out


def test_a_new_run_never_replaces_a_run(run):
    before = (run / "model.safetensors").read_bytes()
    refused(gpt(run, "--preset", "tiny", "--steps", "2"), str(run), "--resume", "--overwrite")
    assert (run / "model.safetensors").read_bytes() == before
    (run / "notes.txt").write_text("mine")
    r = gpt(run, "--preset", "tiny", "--steps", "3", "--overwrite")
    assert r.returncode == 0, r.stderr
    assert (run / "latest").read_text() == "checkpoint-3\n" and (run / "notes.txt").exists()
    refused(gpt(run, "--steps", "3", "--overwrite", "--resume"), "--resume", "--overwrite")


def test_resume_uses_the_runs_config_and_refuses_a_different_one(run):
    refused(gpt(run, "--preset", "small", "--steps", "4", "--resume"), "hidden_size: run 64, given 256")
    r = gpt(run, "--steps", "4", "--resume")  # no --preset: the run's own config.json
    assert r.returncode == 0, r.stderr
    assert (run / "latest").read_text() == "checkpoint-4\n"
    r = gpt(run, "--preset", "tiny", "--steps", "5", "--resume")  # the same config repeated is fine
    assert r.returncode == 0, r.stderr
    refused(gpt(run, "--steps", "6", "--resume", "--seed", "9"), "--seed: 9 differs from the run's seed 1")


def test_resume_refuses_what_is_missing_or_inconsistent(run, tmp_path):
    refused(gpt(tmp_path / "missing", "--resume"), "does not exist")
    assert not (tmp_path / "missing").exists()
    (tmp_path / "empty").mkdir()
    refused(gpt(tmp_path / "empty", "--resume"), "holds no training run")
    legacy = tmp_path / "legacy"  # the layout of older attnkit: model and optimizer side by side
    shutil.copytree(run / "checkpoint-2", legacy)
    os.remove(legacy / "manifest.json")
    refused(gpt(legacy, "--resume"), "older attnkit", "--overwrite")
    broken = tmp_path / "broken"
    shutil.copytree(run, broken)
    os.remove(broken / "checkpoint-2" / "optimizer.safetensors")
    refused(gpt(broken, "--steps", "3", "--resume"), "checkpoint-2/optimizer.safetensors is missing")
    shutil.copy(run / "checkpoint-2" / "model.safetensors", broken / "checkpoint-2" / "optimizer.safetensors")
    refused(gpt(broken, "--steps", "3", "--resume"), "optimizer.safetensors has")


def test_flags_out_and_data_are_checked_before_anything_is_created(tmp_path):
    out = tmp_path / "new"
    for flags, words in ((["--lr", "nan"], ["--lr"]), (["--min-lr", "1"], ["--min-lr"]),
                         (["--warmup", "9"], ["--warmup", "--steps"]), (["--clip", "-1"], ["--clip"]),
                         (["--threads", "5000"], ["--threads"]), (["--checkpoint-every", "-1"], ["--checkpoint-every"]),
                         (["--seed", "-1"], ["--seed", "must be an integer in [0,"])):
        r = gpt(out, "--preset", "tiny", "--steps", "3", *flags)
        refused(r, *words)
        assert "training" not in r.stderr and "WarmupCosineSchedule" not in r.stderr
        assert not out.exists(), flags
    one = tmp_path / "one.txt"
    one.write_text("a single document of text, long enough for a few windows of sixteen bytes. " * 20)
    refused(gpt(out, "--preset", "tiny", "--steps", "3", "--data", str(one)), "--data", "validation split")
    assert not out.exists()
    (tmp_path / "file").write_text("x")
    refused(gpt(tmp_path / "file" / "sub", "--preset", "tiny", "--steps", "3"), "--out", "not a directory")


def test_bert_run_directory(tmp_path):
    out = tmp_path / "bert"
    args = [CLI, "train", "bert", "--out", str(out), "--batch", "4", "--seq", "32", "--eval-every", "0",
            "--eval-examples", "4", "--quiet", "--threads", "1"]
    r = subprocess.run(args + ["--preset", "tiny", "--steps", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    refused(subprocess.run(args + ["--preset", "tiny", "--steps", "2"], capture_output=True, text=True),
            "--resume", "--overwrite")
    r = subprocess.run(args + ["--steps", "3", "--resume"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (out / "latest").read_text() == "checkpoint-3\n"
    refused(subprocess.run(args + ["--preset", "mini", "--steps", "4", "--resume"], capture_output=True, text=True),
            "hidden_size: run 64, given 128")
    refused(subprocess.run([CLI, "train", "gpt", "--out", str(out), *SMALL, "--resume"], capture_output=True,
                           text=True), "holds a bert run")


@pytest.mark.skipif(not os.path.isdir(FASHION), reason="Fashion-MNIST not installed")
def test_image_resume_refuses_a_different_shape(tmp_path):
    out = tmp_path / "cnn"
    args = [CLI, "train", "cnn", "--data-dir", FASHION, "--batch", "10", "--train-limit", "20", "--eval-limit",
            "10", "--threads", "1", "--json", "--out", str(out)]
    shape = ["--attention", "se", "--widths", "8,16"]
    r = subprocess.run(args + shape + ["--epochs", "1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    refused(subprocess.run(args + ["--attention", "se", "--widths", "8,32", "--epochs", "2", "--resume"],
                           capture_output=True, text=True), "widths: run [8,16], given [8,32]", "model-shape flags")
    r = subprocess.run(args + shape + ["--epochs", "2", "--resume"], capture_output=True, text=True)  # same shape
    assert r.returncode == 0, r.stderr
    assert (out / "latest").read_text() == "checkpoint-4\n"
    r = subprocess.run(args + ["--epochs", "3", "--resume"], capture_output=True, text=True)  # the run's shape
    assert r.returncode == 0, r.stderr
    assert (out / "latest").read_text() == "checkpoint-6\n"
    fresh = [a if a != str(out) else str(tmp_path / "fresh") for a in args]
    refused(subprocess.run(fresh + ["--epochs", "1", "--lr", "inf"], capture_output=True, text=True), "--lr")
    assert not (tmp_path / "fresh").exists()
    vit = [CLI, "train", "vit", "--data-dir", FASHION, "--batch", "10", "--train-limit", "20", "--eval-limit", "10",
           "--threads", "1", "--json", "--out", str(out), "--epochs", "4", "--resume"]
    refused(subprocess.run(vit, capture_output=True, text=True), "holds a cnn run", "as a vit run")
    assert (out / "latest").read_text() == "checkpoint-6\n"


def test_init_inside_out_is_refused_and_kept(run):
    """--init in --out (or --out itself) would be overwritten or removed by the new run."""
    init = run / "checkpoint-2"
    before = (init / "model.safetensors").read_bytes()
    for spelt in (init, run / "." / "checkpoint-2"):
        refused(gpt(run, "--init", str(spelt), "--steps", "2", "--overwrite"), "--init", "lies in --out")
    assert (init / "model.safetensors").read_bytes() == before


@pytest.mark.parametrize("tokens", ["0", "99999999999999999999"])
def test_tokens_out_of_range_is_refused(tmp_path, tokens):
    refused(gpt(tmp_path / "t", "--preset", "tiny", "--tokens", tokens), "--tokens")
    assert not (tmp_path / "t").exists()
