"""attnkit.kv_plan: the KV-cache planner through Python, against the published llama3-70b figures.

M_tok = 2 * L * Hkv * D * b; llama3-70b is L=80, H=64, Hkv=8, D=128, f16, context 32768.
"""
import pytest

import attnkit

MIB, KIB = 1 << 20, 1 << 10
ROW_KEYS = {
    "kv_heads", "bytes_per_token", "scale_bytes_per_token", "bytes_per_sequence", "bytes_batch",
    "kv_heads_per_shard", "replication", "shard_bytes_per_token", "shard_bytes_per_sequence",
    "shard_bytes_batch", "total_bytes_batch", "read_seconds", "sequences_in_budget",
}
INPUT_KEYS = {
    "preset", "layers", "heads", "kv_heads", "head_dim", "dtype", "bytes_per_element", "context",
    "batch", "tp", "bandwidth", "memory",
}


def test_llama3_70b_published_figures():
    p = attnkit.kv_plan(preset="llama3-70b")
    mha, gqa, mqa = p["mha"], p, p["mqa"]
    assert (mha["kv_heads"], gqa["kv_heads"], mqa["kv_heads"]) == (64, 8, 1)
    # 2.5 MiB / 320 KiB / 40 KiB per token
    assert mha["bytes_per_token"] == 2621440 == int(2.5 * MIB)
    assert gqa["bytes_per_token"] == 327680 == 320 * KIB
    assert mqa["bytes_per_token"] == 40960 == 40 * KIB
    # 85.9 / 10.7 / 1.34 GB per 32768-token sequence
    assert mha["bytes_per_sequence"] == 85899345920
    assert gqa["bytes_per_sequence"] == 10737418240
    assert mqa["bytes_per_sequence"] == 1342177280
    assert round(mha["bytes_per_sequence"] / 1e9, 1) == 85.9
    assert round(gqa["bytes_per_sequence"] / 1e9, 1) == 10.7
    assert round(mqa["bytes_per_sequence"] / 1e9, 2) == 1.34
    # ~25.6 ms vs ~3.2 ms per decoded token at 3.35e12 B/s
    assert mha["read_seconds"] == pytest.approx(25.6e-3, rel=0.01)
    assert gqa["read_seconds"] == pytest.approx(3.2e-3, rel=0.01)
    # 80e9 B budget
    assert (mha["sequences_in_budget"], gqa["sequences_in_budget"], mqa["sequences_in_budget"]) == (0, 7, 59)
    assert p["preset"] == "llama3-70b"
    assert (p["layers"], p["heads"], p["head_dim"], p["dtype"], p["context"]) == (80, 64, 128, "f16", 32768)
    assert (p["bandwidth"], p["memory"]) == (3.35e12, 80_000_000_000)
    assert all(type(p[k]) is int for k in ROW_KEYS - {"read_seconds"})


def test_keys_match_the_cli_json():
    p = attnkit.kv_plan(preset="gpt-oss-120b")
    assert set(p) == INPUT_KEYS | ROW_KEYS | {"mha", "mqa"}
    assert set(p["mha"]) == ROW_KEYS
    assert set(p["mqa"]) == ROW_KEYS
    assert p["bytes_per_token"] == 2 * 36 * 8 * 64 * 2
    assert p["context"] == 131072


def test_explicit_arguments_override_the_preset():
    p = attnkit.kv_plan(preset="llama3-70b", kv_heads=64, context=8192, batch=3, memory=160e9)
    assert p["bytes_per_token"] == 2621440
    assert p["bytes_batch"] == 2621440 * 8192 * 3
    assert p["memory"] == 160_000_000_000
    q = attnkit.kv_plan(layers=2, heads=4, head_dim=8, context=10)   # no preset: Hkv defaults to H
    assert q["kv_heads"] == 4
    assert q["bytes_per_token"] == 2 * 2 * 4 * 8 * 2
    assert q["preset"] is None


def test_int8_counts_float32_scales():
    p = attnkit.kv_plan(preset="llama3-70b", dtype="int8")
    assert p["scale_bytes_per_token"] == 2 * 80 * 8 * 4
    assert p["bytes_per_token"] == 2 * 80 * 8 * 128 + 2 * 80 * 8 * 4
    f = attnkit.kv_plan(preset="llama3-70b", dtype="fp8")
    assert (f["bytes_per_token"], f["scale_bytes_per_token"]) == (2 * 80 * 8 * 128, 0)


def test_tensor_parallel_shards():
    p = attnkit.kv_plan(preset="llama3-70b", tp=2)
    assert (p["kv_heads_per_shard"], p["replication"]) == (4, 1)
    assert p["shard_bytes_per_token"] == 327680 // 2
    p = attnkit.kv_plan(preset="llama3-70b", tp=16)
    assert (p["kv_heads_per_shard"], p["replication"]) == (1, 2)
    assert p["total_bytes_batch"] == 2 * 10737418240
    assert (p["mqa"]["kv_heads_per_shard"], p["mqa"]["replication"]) == (1, 16)


@pytest.mark.parametrize("kwargs, field", [
    (dict(layers=2, heads=6, kv_heads=4, head_dim=8, context=16), "kv_heads"),
    (dict(layers=-3, heads=8, head_dim=8, context=16), "layers"),
    (dict(layers=2, heads=8, head_dim=0, context=16), "head_dim"),
    (dict(preset="llama3-70b", context=0), "context"),
    (dict(preset="llama3-70b", batch=-1), "batch"),
    (dict(preset="llama3-70b", tp=3), "tp"),
    (dict(preset="llama3-70b", bandwidth=0.0), "bandwidth"),
    (dict(preset="llama3-70b", memory=0), "memory"),
    (dict(preset="llama3-70b", memory=1.5), "memory"),
    (dict(preset="llama3-70b", dtype="int4"), "dtype"),
    (dict(preset="llama3-7b"), "preset"),
    (dict(layers=2, heads=8, head_dim=8), "context"),
    (dict(preset="llama3-70b", context=2**62), "context"),
    (dict(preset="llama3-70b", layers=2**70), "layers"),
    (dict(preset="llama3-70b", layers=2.0), "layers"),
    (dict(preset="llama3-70b", layers=True), "layers"),
])
def test_bad_input_raises_value_error_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field) as info:
        attnkit.kv_plan(**kwargs)
    assert isinstance(info.value, attnkit.Error)


def test_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        attnkit.kv_plan(80, 64, 8, 128)
