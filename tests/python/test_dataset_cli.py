"""`attnkit dataset`: counts, class histogram and pixel statistics of a generated IDX directory
(checked against numpy), the error contract (one line, exit 2) for a missing directory and a
malformed file, and the installed Fashion-MNIST test split when present."""
import gzip
import json
import os
import struct
import subprocess

import numpy as np
import pytest

from cli_helpers import CLI


def write_idx(path, a):
    head = struct.pack(">BBBB", 0, 0, 0x08, a.ndim) + struct.pack(">" + "I" * a.ndim, *a.shape)
    path.write_bytes(gzip.compress(head + a.astype(np.uint8).tobytes()))


def run(*args):
    return subprocess.run([CLI, "dataset", *args], capture_output=True, text=True, timeout=120)


def test_dataset_json_matches_numpy(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (30, 4, 5), dtype=np.uint8)
    labels = rng.integers(0, 10, 30).astype(np.uint8)
    write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", images)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels)
    r = run("--data-dir", str(tmp_path), "--split", "test", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert (j["count"], j["rows"], j["cols"]) == (30, 4, 5)
    assert j["per_class"] == np.bincount(labels, minlength=10).tolist()
    assert abs(j["pixel_mean"] - (images / 255.0).mean()) < 1e-9
    assert abs(j["pixel_std"] - (images / 255.0).std()) < 1e-9


def test_dataset_errors_are_one_line_exit_2(tmp_path):
    r = run("--data-dir", str(tmp_path / "missing"))
    assert r.returncode == 2 and r.stderr.startswith("attnkit: error: --data-dir")
    assert r.stderr.count("\n") == 1
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((2, 3, 3), np.uint8))
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.array([1, 12], np.uint8))
    r = run("--data-dir", str(tmp_path))
    assert r.returncode == 2 and "label 1 = 12 outside [0, 10)" in r.stderr
    r = run("--data-dir", str(tmp_path), "--split", "dev")
    assert r.returncode == 2 and "split" in r.stderr


@pytest.mark.skipif(not os.path.exists("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"),
                    reason="dataset-fashion-mnist not installed")
def test_installed_fashion_mnist_test_split():
    r = run("--split", "test", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["count"] == 10000 and j["per_class"] == [1000] * 10
