#!/usr/bin/env python3
"""Writes the safetensors fuzzing seed corpus into fuzz/corpus/ (small files, valid and invalid).

Pure struct + json, independent of attnkit, so the seeds do not inherit our writer's choices.
Run from anywhere: python3 fuzz/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
         "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}


def file_bytes(entries, metadata=None, pad=True, extra=b""):
    """entries: (name, dtype, shape); data is a byte ramp laid out in list order."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in entries:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-(8 + len(text)) % 8)
    data = bytes(i % 251 for i in range(offset))
    return struct.pack("<Q", len(text)) + text + data + extra


def main():
    os.makedirs(HERE, exist_ok=True)
    seeds = {
        "valid_small": file_bytes([("w", "F32", (2, 3)), ("b", "F16", (3,))], {"format": "pt"}),
        "valid_all_dtypes": file_bytes([(f"t_{d.lower()}", d, (2,)) for d in SIZES]),
        "valid_rank0_empty": file_bytes([("s", "BF16", ()), ("e", "F32", (0, 4)), ("v", "I8", (3,))],
                                        pad=False),
        "valid_no_tensors": file_bytes([], {"k": "v"}),
        "invalid_trailing": file_bytes([("w", "F32", (2,))], extra=b"\x00\x01"),
        "invalid_duplicate": (lambda t: struct.pack("<Q", len(t)) + t + bytes(8))(
            b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
            b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'),
        "invalid_overlap": (lambda t: struct.pack("<Q", len(t)) + t + bytes(6))(
            b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
            b'"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}'),
        "invalid_truncated": file_bytes([("w", "F64", (4,))])[:-5],
    }
    for name, content in seeds.items():
        with open(os.path.join(HERE, name + ".safetensors"), "wb") as f:
            f.write(content)
    print(f"wrote {len(seeds)} seeds to {HERE}")


if __name__ == "__main__":
    main()
