"""attnkit.load_idx / load_fashion_mnist against files written here with Python's gzip and
struct modules (an encoder we did not write in C++), and the installed Fashion-MNIST files
against a decoder written here with numpy."""
import gzip
import os
import struct

import numpy as np
import pytest

import attnkit

TYPES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D,
         np.float64: 0x0E}


def idx_bytes(a):
    a = np.asarray(a)
    head = struct.pack(">BBBB", 0, 0, TYPES[a.dtype.type], a.ndim)
    head += struct.pack(">" + "I" * a.ndim, *a.shape)
    return head + a.astype(a.dtype.newbyteorder(">")).tobytes()


@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("compress", [False, True])
def test_load_idx_round_trip(tmp_path, dtype, compress):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((3, 4, 5)) * 100).astype(dtype)
    raw = idx_bytes(a)
    path = tmp_path / "a.idx"
    path.write_bytes(gzip.compress(raw) if compress else raw)
    got = attnkit.load_idx(path)
    assert got.dtype == a.dtype and got.shape == a.shape
    np.testing.assert_array_equal(got, a)


def test_load_idx_rejects_with_value_error(tmp_path):
    path = tmp_path / "bad.idx"
    path.write_bytes(idx_bytes(np.arange(4, dtype=np.uint8))[:-1])
    with pytest.raises(ValueError, match="payload truncated"):
        attnkit.load_idx(path)
    path.write_bytes(gzip.compress(idx_bytes(np.arange(4, dtype=np.uint8)))[:-3])
    with pytest.raises(attnkit.Error, match="truncated gzip stream"):
        attnkit.load_idx(path)


def test_load_fashion_mnist_generated_dir(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    for stem, a in (("train-images-idx3-ubyte", images),
                    ("train-labels-idx1-ubyte", np.array([9, 4], np.uint8))):
        (tmp_path / (stem + ".gz")).write_bytes(gzip.compress(idx_bytes(a)))
    x, y = attnkit.load_fashion_mnist(tmp_path, "train")
    np.testing.assert_array_equal(x, images)
    np.testing.assert_array_equal(y, [9, 4])
    with pytest.raises(ValueError, match="split"):
        attnkit.load_fashion_mnist(tmp_path, "dev")


FMNIST = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.exists(FMNIST + "/t10k-images-idx3-ubyte.gz"),
                    reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_test_split_matches_numpy_decoder():
    x, y = attnkit.load_fashion_mnist(split="test")
    with gzip.open(FMNIST + "/t10k-images-idx3-ubyte.gz") as f:
        want_x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(FMNIST + "/t10k-labels-idx1-ubyte.gz") as f:
        want_y = np.frombuffer(f.read(), np.uint8, offset=8)
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(y, want_y)
