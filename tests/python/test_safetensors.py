"""Safetensors through the Python module, checked against an implementation we did not write.

Debian's torch 1.13 has no safetensors, so the oracle is a minimal reader and writer written
here from the format's definition (8-byte little-endian header length, JSON header, raw
little-endian data) with struct + json: files we write must parse with it, and files it writes
(unpadded, unaligned, in its own order) must load with ours. torch supplies the BF16 rounding.
"""
import json
import os
import struct

import numpy as np
import pytest
import torch

import attnkit

# safetensors dtype -> numpy dtype of the raw bytes (BF16 is decoded separately).
RAW = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "F8_E4M3": "u1", "F8_E5M2": "u1",
       "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
       "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "u1"}


def ref_read(path):
    """(tensors, metadata, header_len) decoded with struct + json only; BF16 widened to float32."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = buf[8 + n:]
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        raw = np.frombuffer(data[begin:end], dtype=RAW[e["dtype"]]).reshape(e["shape"])
        if e["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "BOOL":
            raw = raw != 0
        out[name] = raw
    return out, meta, n


def ref_write(path, entries, metadata=None):
    """entries: list of (name, dtype, shape, raw bytes), laid out in list order, header unpadded."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(raw for *_, raw in entries))
    return len(text)


def sample_tensors():
    rng = np.random.default_rng(0)
    base = rng.standard_normal((4, 6)).astype(np.float32)
    return {
        "f64": rng.standard_normal((3, 2)),
        "f32": base,
        "f16": rng.standard_normal(5).astype(np.float16),
        "i64": np.array([np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max]),
        "i32": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
        "i16": np.array([-32768, 32767], dtype=np.int16),
        "i8": np.array([-128, 127, 0], dtype=np.int8),
        "u8": np.arange(250, 256, dtype=np.uint8),
        "u16": np.array([65535, 1], dtype=np.uint16),
        "u32": np.array([2**32 - 1], dtype=np.uint32),
        "u64": np.array([2**64 - 1, 5], dtype=np.uint64),
        "bool": np.array([[True, False], [False, True]]),
        "scalar": np.array(2.5, dtype=np.float32),            # rank 0
        "empty": np.zeros((0, 7), dtype=np.float32),          # zero elements
        "transposed": base.T,                                 # non-contiguous
        "strided": base[:, ::2],                              # non-contiguous
        "big_endian": base.astype(">f4"),                     # byte-swapped on save
        "n\u00e4me/with.\u2713": np.ones(2, dtype=np.float32),  # UTF-8 name
    }


def test_round_trip_every_numpy_dtype(tmp_path):
    path = tmp_path / "model.safetensors"
    tensors = sample_tensors()
    meta = {"format": "np", "note": "h\u00e9llo"}
    attnkit.save_safetensors(str(path), tensors, meta)
    back = attnkit.load_safetensors(str(path))
    assert set(back) == set(tensors)
    for name, want in tensors.items():
        got = back[name]
        assert got.shape == want.shape, name
        assert got.dtype == want.dtype.newbyteorder("="), name
        assert got.flags.c_contiguous and got.flags.writeable, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert attnkit.load_safetensors_metadata(str(path)) == meta


def test_our_file_parses_with_independent_reader(tmp_path):
    path = tmp_path / "ours.safetensors"
    tensors = sample_tensors()
    attnkit.save_safetensors(path, tensors, {"k": "v"})  # os.PathLike accepted
    got, meta, n = ref_read(path)
    assert meta == {"k": "v"}
    assert (8 + n) % 8 == 0, "header must be padded to a multiple of 8 bytes"
    for name, want in tensors.items():
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    # Data section ordered by name and tiled without gaps (Hugging Face's layout).
    with open(path, "rb") as f:
        f.read(8)
        header = json.loads(f.read(n))
    header.pop("__metadata__")
    offsets = [header[k]["data_offsets"] for k in sorted(header)]
    assert offsets[0][0] == 0
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))
    assert offsets[-1][1] == os.path.getsize(path) - 8 - n


def test_reads_file_from_independent_writer(tmp_path):
    path = tmp_path / "theirs.safetensors"
    f32 = np.array([[1.5, -2.0], [3.25, 1e-20]], dtype=np.float32)
    # BF16 bits from torch's own float32 -> bfloat16 rounding (values not exactly representable).
    src = torch.tensor([1.0, -3.14159, 1e30, 0.1], dtype=torch.float32)
    bf16_bits = src.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2")
    bf16_want = src.to(torch.bfloat16).to(torch.float32).numpy()
    f8 = bytes([0x00, 0x38, 0xff, 0x7e])
    entries = [  # deliberately not sorted by name, odd header length so data is unaligned
        ("zeta", "F32", (2, 2), f32.tobytes()),
        ("alpha", "BF16", (4,), bf16_bits.tobytes()),
        ("half", "F16", (3,), np.array([0.5, -65504, 6e-8], dtype="<f2").tobytes()),
        ("mask", "BOOL", (3,), bytes([0, 1, 2])),
        ("fp8", "F8_E4M3", (2, 2), f8),
        ("ids", "I64", (2,), np.array([-1, 2**40], dtype="<i8").tobytes()),
        ("s", "F64", (), np.array(7.0, dtype="<f8").tobytes()),
        ("none", "I32", (3, 0), b""),
    ]
    n = ref_write(path, entries, {"src": "ref"})
    if n % 2 == 0:  # make the data section start at an odd offset
        n = ref_write(path, entries, {"src": "ref", "pad": "x"})
    assert n % 2 == 1
    back = attnkit.load_safetensors(path)
    np.testing.assert_array_equal(back["zeta"], f32)
    assert back["alpha"].dtype == np.float32
    np.testing.assert_array_equal(back["alpha"], bf16_want)
    np.testing.assert_array_equal(back["half"], np.array([0.5, -65504, 6e-8], dtype=np.float16))
    np.testing.assert_array_equal(back["mask"], [False, True, True])
    assert back["mask"].view(np.uint8).tolist() == [0, 1, 1]  # normalised to numpy's 0/1
    assert back["fp8"].dtype == np.uint8 and back["fp8"].tobytes() == f8
    np.testing.assert_array_equal(back["ids"], [-1, 2**40])
    assert back["s"].shape == () and back["s"] == 7.0
    assert back["none"].shape == (3, 0) and back["none"].dtype == np.int32
    assert attnkit.load_safetensors_metadata(path)["src"] == "ref"


def good_file_bytes():
    text = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    return struct.pack("<Q", len(text)) + text + np.array([1, 2], dtype="<f4").tobytes()


def with_header(header_text, data=b""):
    raw = header_text.encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.mark.parametrize("content, reason", [
    (good_file_bytes()[:-3], "out of bounds"),
    (b"\x05\x00\x00", "shorter than the 8-byte header length"),
    (struct.pack("<Q", 10**10) + b"{}", "header length 10000000000 exceeds file size"),
    (with_header('{"w": '), "not valid JSON"),
    (with_header("[]"), "not a JSON object"),
    (with_header('{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},'
                 ' "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', bytes(8)),
     "duplicate tensor name"),
    (with_header('{"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}', bytes(1)), "unknown dtype"),
    (with_header('{"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},'
                 ' "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}', bytes(3)), "overlap"),
    (good_file_bytes() + b"\x00", "trailing bytes"),
])
def test_malformed_file_raises_value_error(tmp_path, content, reason):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=reason) as info:
        attnkit.load_safetensors(path)
    assert isinstance(info.value, attnkit.Error)
    assert str(path) in str(info.value)
    with pytest.raises(ValueError, match=reason):
        attnkit.load_safetensors_metadata(path)


def test_save_rejects_bad_input_and_keeps_old_file(tmp_path):
    path = tmp_path / "keep.safetensors"
    attnkit.save_safetensors(path, {"x": np.arange(4, dtype=np.float32)})
    before = path.read_bytes()
    bad_inputs = [
        ({"c": np.zeros(2, dtype=np.complex64)}, None, "unsupported numpy dtype complex64"),
        ({"o": np.array([object()])}, None, "unsupported numpy dtype object"),
        ({1: np.zeros(2)}, None, "tensor names must be str"),
        ({"__metadata__": np.zeros(2)}, None, "reserved"),
        ({"x": np.zeros(2)}, {"k": 1}, "metadata must map str to str"),
    ]
    for tensors, meta, reason in bad_inputs:
        with pytest.raises(ValueError, match=reason):
            attnkit.save_safetensors(path, tensors, meta)
        assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["keep.safetensors"]  # no temp files left


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "absent.safetensors"
    with pytest.raises(ValueError, match="absent.safetensors: cannot open"):
        attnkit.load_safetensors(path)
