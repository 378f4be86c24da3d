"""`attnkit train cnn`, `attnkit classify` and `attnkit eval` on a small slice of Debian's
Fashion-MNIST: training reaches well above chance, a resumed run equals the uninterrupted one bit
for bit, `--precision bf16` trains as well with other weights, classify reads PGM / PNG (resized) /
IDX files and agrees with the Python module's forward, and bad input is one line with exit code 2."""
import gzip
import json
import struct
import subprocess

import numpy as np
import pytest

import attnkit
from cli_helpers import CLI, FASHION


def write_idx(path, a):
    head = struct.pack(">BBBB", 0, 0, 0x08, a.ndim) + struct.pack(">" + "I" * a.ndim, *a.shape)
    path.write_bytes(gzip.compress(head + a.astype(np.uint8).tobytes()))


@pytest.fixture(scope="module")
def data():
    return FASHION


def run(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)


def train(data, out, *extra):
    return run("train", "cnn", "--data-dir", str(data), "--out", str(out), "--widths", "16,32",
               "--attention", "se", "--batch", "50", "--lr", "1e-2", "--warmup-epochs", "0.2",
               "--train-limit", "2000",
               "--eval-limit", "500", "--no-augment", "--threads", "1", "--json", *extra)


def test_train_cnn_learns_and_resume_is_exact(data, tmp_path):
    r = train(data, tmp_path / "full", "--epochs", "2")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["model_type"] == "cnn" and len(j["epochs"]) == 2
    assert j["test_accuracy"] >= 0.55, j  # chance is 0.1; measured 0.67
    assert (tmp_path / "full" / "preprocessor_config.json").exists()
    r = train(data, tmp_path / "part", "--epochs", "2", "--max-minutes", "1e-9")  # stops after one step
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["epochs"][-1]["step"] == 1
    r = train(data, tmp_path / "part", "--epochs", "2", "--resume")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["test_accuracy"] == j["test_accuracy"]
    assert ((tmp_path / "part" / "model.safetensors").read_bytes() ==
            (tmp_path / "full" / "model.safetensors").read_bytes())
    r = run("eval", "--model", str(tmp_path / "full"), "--data-dir", str(data), "--windows", "500")
    assert r.returncode == 0, r.stderr
    assert f"test accuracy {j['test_accuracy']:.4f}" in r.stdout
    r = run("eval", "--model", str(tmp_path / "full"), "--data-dir", str(data), "--windows", "500", "--json")
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)
    assert e["accuracy"] == j["test_accuracy"] and e["images"] == 500 and e["model_type"] == "cnn"


@pytest.mark.skipif(not attnkit.bf16_available(), reason="no AVX512-BF16 / AMX, or built without oneDNN")
def test_train_cnn_in_bf16_learns_and_differs_from_f32(data, tmp_path):
    """--precision bf16 reaches the f32 run's accuracy within a few points, with other weights (the
    convolution and linear products really are bf16)."""
    f32 = json.loads(train(data, tmp_path / "f32", "--epochs", "1").stdout)
    r = train(data, tmp_path / "bf16", "--epochs", "1", "--precision", "bf16")
    assert r.returncode == 0, r.stderr
    bf16 = json.loads(r.stdout)
    assert abs(bf16["test_accuracy"] - f32["test_accuracy"]) <= 0.05, (bf16, f32)
    assert ((tmp_path / "bf16" / "model.safetensors").read_bytes() !=
            (tmp_path / "f32" / "model.safetensors").read_bytes())


def test_classify_reads_pgm_png_and_idx(data, tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    model_dir = tmp_path / "m"
    assert train(data, model_dir, "--epochs", "1").returncode == 0
    images, _ = attnkit.load_fashion_mnist(FASHION, "test")
    images = np.asarray(images)[:3]
    pgm = tmp_path / "a.pgm"
    pgm.write_bytes(b"P5\n28 28\n255\n" + images[0].tobytes())
    png = tmp_path / "b.png"  # 56x56 RGBA: grey again after stb's luma, 28x28 again after resizing
    plt.imsave(png, np.kron(images[1], np.ones((2, 2), np.uint8)), cmap="gray", vmin=0, vmax=255)
    idx = tmp_path / "c-images-idx3-ubyte.gz"
    write_idx(idx, images[2:3])
    r = run("classify", "--model", str(model_dir), str(pgm), str(png), str(idx), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "resized from 56x56 to 28x28" in r.stderr
    # The same images through the Python module with the model's recorded normalisation.
    pre = json.loads((model_dir / "preprocessor_config.json").read_text())
    x = ((images / 255.0 - pre["image_mean"][0]) / pre["image_std"][0]).astype(np.float32)
    model = attnkit.ImageModel.load(str(model_dir))
    logits = model.forward(x[:, None])
    assert [o["class"] for o in out] == logits.argmax(1).tolist()
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose([o["probability"] for o in out], p.max(1), rtol=1e-4)


@pytest.mark.parametrize("args,message", [
    (["train", "cnn", "--out", "X", "--attention", "transformer"], "--attention"),
    (["train", "cnn", "--out", "X", "--data-dir", "/nonexistent"], "/nonexistent"),
    (["classify", "--model", "/nonexistent", "x.png"], "/nonexistent"),
    (["train", "cnn", "--out", "X", "--precision", "fp8"], "--precision"),
] + ([] if attnkit.bf16_available() else [(["train", "cnn", "--out", "X", "--precision", "bf16"], "bf16")]))
def test_bad_input_is_one_line_exit_2(args, message, tmp_path):
    r = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert not (tmp_path / "X").exists()  # refused before the run directory is made


def test_classify_rejects_a_non_image(data, tmp_path):
    model = tmp_path / "m"
    assert train(data, model, "--epochs", "1").returncode == 0
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 10)
    r = run("classify", "--model", str(model), str(junk))
    assert r.returncode == 2 and "junk.png" in r.stderr and r.stderr.count("\n") == 1


def test_classify_rejects_a_cut_or_unscaled_pgm(data, tmp_path):
    """stb decodes a binary PGM whose pixels are cut short, or whose maxval is 0, without an error:
    the header is checked against the file's size."""
    model = tmp_path / "m"
    assert train(data, model, "--epochs", "1").returncode == 0
    cases = {"cut.pgm": (b"P5\n28 28\n255\n" + bytes(100), "cut short (100 of 784 bytes)"),
             "wide.pgm": (b"P5\n# comment\n4 4\n65535\n" + bytes(20), "cut short (20 of 32 bytes)"),
             "maxval0.pgm": (b"P5\n28 28\n0\n" + bytes(784), "maxval 0")}
    for name, (content, words) in cases.items():
        (tmp_path / name).write_bytes(content)
        r = run("classify", "--model", str(model), str(tmp_path / name))
        assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
    (tmp_path / "whole.pgm").write_bytes(b"P5\n# comment\n28 28\n255\n" + bytes(784))
    assert run("classify", "--model", str(model), str(tmp_path / "whole.pgm")).returncode == 0
