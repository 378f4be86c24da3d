"""`attnkit train deformable` for a few steps on a slice of Debian's Fashion-MNIST: the run
finishes with finite losses, writes a model directory that the Python module and `attnkit eval`
load (same test accuracy), and a bad architecture flag is one line with exit code 2."""
import json
import math
import os
import subprocess

import pytest

import attnkit
from cli_helpers import CLI, FASHION

pytestmark = pytest.mark.skipif(not os.path.isdir(FASHION), reason="dataset-fashion-mnist not installed")

SMALL = ["--widths", "4,8,8,8", "--d-model", "16", "--heads", "4", "--points", "2", "--layers", "1",
         "--ffn-dim", "16"]


def run(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)


def test_train_deformable_runs_saves_and_evaluates(tmp_path):
    out = tmp_path / "m"
    r = run("train", "deformable", "--data-dir", FASHION, "--out", str(out), *SMALL, "--batch", "25",
            "--epochs", "1", "--train-limit", "100", "--eval-limit", "50", "--no-augment",
            "--threads", "1", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["model_type"] == "deformable" and len(j["epochs"]) == 1
    assert j["epochs"][0]["step"] == 4
    assert math.isfinite(j["epochs"][0]["train_loss"]) and math.isfinite(j["epochs"][0]["test_loss"])
    assert j["images_per_second"] > 0
    m = attnkit.ImageModel.load(str(out))
    cfg = json.loads(m.config_json)
    assert m.model_type == "deformable" and cfg["d_model"] == 16 and cfg["widths"] == [4, 8, 8, 8]
    assert cfg["id2label"]["9"] == "Ankle boot"
    r = run("eval", "--model", str(out), "--data-dir", FASHION, "--windows", "50")
    assert r.returncode == 0, r.stderr
    assert f"test accuracy {j['test_accuracy']:.4f}" in r.stdout


def test_bad_architecture_flag_is_one_line(tmp_path):
    r = run("train", "deformable", "--data-dir", FASHION, "--out", str(tmp_path / "x"), "--d-model", "30",
            "--heads", "4", "--train-limit", "10", "--eval-limit", "10")
    assert r.returncode == 2
    assert "d_model" in r.stderr and r.stderr.count("\n") == 1, r.stderr
