"""Uptraining: `attnkit train gpt --init DIR --tokens N` continues from a converted checkpoint with
its architecture, its weights and a fresh optimizer, for ceil(N / (batch · seq)) steps."""
import csv
import json
import os
import subprocess

import numpy as np
import pytest

import attnkit

CLI = os.path.join(os.path.dirname(attnkit.__file__), "..", "..", "attnkit")
pytestmark = pytest.mark.skipif(not os.path.isdir("/usr/share/games/fortunes"), reason="fortunes not installed")
SMALL = ["--batch", "4", "--seq", "32", "--quiet", "--threads", "2", "--eval-every", "0"]


def run(*args):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)


def test_uptraining_starts_from_the_converted_weights(tmp_path):
    assert run("train", "gpt", "--preset", "tiny", "--out", tmp_path / "mha", "--steps", "3", *SMALL).returncode == 0
    assert run("convert-gqa", "--in", tmp_path / "mha", "--out", tmp_path / "mqa", "--kv-heads", "1").returncode == 0
    # lr 0: the weights after 3 steps are the converted ones, bit for bit (so --init loaded them)
    r = run("train", "gpt", "--init", tmp_path / "mqa", "--out", tmp_path / "up", "--tokens", "300",
            "--lr", "0", "--min-lr", "0", "--warmup", "0", *SMALL)
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "up" / "log.csv") as f:
        assert [row["step"] for row in csv.DictReader(f)] == ["0", "1", "2"]  # ceil(300 / 128)
    assert json.loads((tmp_path / "up" / "config.json").read_text())["num_key_value_heads"] == 1
    a = attnkit.load_model(tmp_path / "mqa").parameters()
    b = attnkit.load_model(tmp_path / "up").parameters()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    r = run("train", "gpt", "--init", tmp_path / "mqa", "--out", tmp_path / "up2", "--tokens", "128", *SMALL)
    assert r.returncode == 0, r.stderr
    assert not np.array_equal(a["model.norm.weight"], attnkit.load_model(tmp_path / "up2").parameters()["model.norm.weight"])


def test_bad_init_arguments(tmp_path):
    for args in (["--init", tmp_path, "--preset", "tiny"], ["--init", tmp_path, "--out", tmp_path],
                 ["--tokens", "100", "--steps", "3"], ["--init", tmp_path / "missing"]):
        a = list(args) + ([] if "--out" in args else ["--out", tmp_path / "o"])
        r = run("train", "gpt", *a, *SMALL)
        assert r.returncode == 2 and r.stderr.startswith("attnkit: error:"), (args, r.stderr)
