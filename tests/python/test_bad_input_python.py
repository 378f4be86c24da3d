"""Bad input to the Python module: wrong dtypes and argument types raise a short TypeError naming
the argument, wrong shapes and out-of-range values raise ValueError naming it, a copy that cannot
be allocated raises MemoryError (never a crash), and empty batches (B = 0, L = 0) give empty
results of the right shapes. The cases are generated: functions x {integer dtype, wrong rank,
empty, huge seed, negative seed, non-array}."""
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import attnkit
from attnkit import nn

RNG = np.random.default_rng(0)


def arr(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


B, L, S, H, HKV, D = 2, 5, 7, 4, 2, 8


def qkv(b=B, lq=L, lk=S):
    return arr(b, lq, H, D), arr(b, lk, HKV, D), arr(b, lk, HKV, D)


def flash_fwd(q, k, v, **kw):
    return attnkit.flash_attention(q, k, v, return_lse=True, **kw)


def ref_fwd(q, k, v, **kw):
    return attnkit.attention_reference(q, k, v, return_lse=True, **kw)


def grad_shape(q):
    """dout's shape for q (the batched shape when q is not an array)."""
    return q.shape if isinstance(q, np.ndarray) else (B, L, H, D)


def flash_bwd(q, k, v, **kw):
    # out and lse only need the right shapes here: the checks under test come first.
    shape = grad_shape(q)
    lse_shape = (shape[0], H, shape[1]) if len(shape) == 4 else (B, H, L)
    out, lse = np.zeros(shape, np.float32), np.zeros(lse_shape, np.float32)
    return attnkit.flash_attention_backward(np.ones(shape, np.float32), q, k, v, out, lse, **kw)


def ref_bwd(q, k, v, **kw):
    return attnkit.attention_reference_backward(np.ones(grad_shape(q), np.float32), q, k, v, **kw)


ATTENTION = {"flash_attention": flash_fwd, "attention_reference": ref_fwd,
             "flash_attention_backward": flash_bwd, "attention_reference_backward": ref_bwd}


def check_message(excinfo, name):
    """The message starts with the argument's name and is short (no dump of the inputs)."""
    msg = str(excinfo.value)
    assert re.match(rf"{re.escape(name)}\b", msg), msg
    assert len(msg) < 300 and "array(" not in msg, msg


# --- integer dtype, wrong rank, non-array ----------------------------------------------------
@pytest.mark.parametrize("fn", ATTENTION.values(), ids=ATTENTION.keys())
@pytest.mark.parametrize("arg", ["q", "k", "v"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_])
def test_attention_rejects_non_floating_dtype(fn, arg, dtype):
    x = dict(zip("qkv", qkv()))
    x[arg] = (x[arg] * 3).astype(dtype)
    with pytest.raises(TypeError) as e:
        fn(x["q"], x["k"], x["v"])
    check_message(e, arg)


@pytest.mark.parametrize("fn", ATTENTION.values(), ids=ATTENTION.keys())
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_attention_converts_other_floating_dtypes(fn, dtype):
    q, k, v = (x.astype(dtype) for x in qkv())
    got = fn(q, k, v)
    want = fn(*(x.astype(np.float32) for x in (q, k, v)))
    for a, b in zip(got, want):
        if a is not None:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fn", ATTENTION.values(), ids=ATTENTION.keys())
@pytest.mark.parametrize("arg", ["q", "k", "v"])
@pytest.mark.parametrize("bad", ["text", None, object(), [[1.0], [1.0, 2.0]]],
                         ids=["str", "None", "object", "ragged"])
def test_attention_rejects_non_arrays(fn, arg, bad):
    x = dict(zip("qkv", qkv()))
    x[arg] = bad
    with pytest.raises(TypeError) as e:
        fn(x["q"], x["k"], x["v"])
    check_message(e, arg)


@pytest.mark.parametrize("fn", ATTENTION.values(), ids=ATTENTION.keys())
@pytest.mark.parametrize("shape", [(L, H * D), (H,), (1, B, L, H, D)], ids=["2-D", "1-D", "5-D"])
def test_attention_rejects_wrong_rank(fn, shape):
    q, k, v = qkv()
    with pytest.raises(ValueError) as e:
        fn(arr(*shape), arr(*shape), arr(*shape))
    check_message(e, "q")


# --- seeds -----------------------------------------------------------------------------------
SEED_CALLS = {
    "flash_attention": lambda s: attnkit.flash_attention(*qkv(), dropout_p=0.1, seed=s),
    "attention_reference": lambda s: attnkit.attention_reference(*qkv(), dropout_p=0.1, seed=s),
    "attention_reference_backward": lambda s: ref_bwd(*qkv(), dropout_p=0.1, seed=s),
    "dropout_keep_mask": lambda s: attnkit.dropout_keep_mask(s, 0.5, 0, 0, 3, 3),
    "nn.dropout": lambda s: nn.dropout(arr(3, 4), 0.5, s),
    "nn.dropout_mask": lambda s: nn.dropout_mask((3, 4), 0.5, s),
    "ms_deform_attn_block_init": lambda s: nn.ms_deform_attn_block_init(d_model=8, heads=2, levels=1, points=1,
                                                                        seed=s),
}


def _image_model():
    import json
    return attnkit.ImageModel(json.dumps({"model_type": "cnn", "image_size": 8, "num_labels": 2, "widths": [2],
                                          "attention": "none", "reduction": 1, "spatial_kernel": 3}))


SEED_CALLS["ImageModel.init_random"] = lambda s: _image_model().init_random(s)
SEED_CALLS["ImageModel.set_training"] = lambda s: _image_model().set_training(True, s)


@pytest.mark.parametrize("call", SEED_CALLS.values(), ids=SEED_CALLS.keys())
@pytest.mark.parametrize("seed", [-1, -(2 ** 70), 2 ** 64, 10 ** 30], ids=["-1", "-2^70", "2^64", "1e30"])
def test_out_of_range_seed_is_a_short_value_error(call, seed):
    with pytest.raises(ValueError) as e:
        call(seed)
    check_message(e, "seed")


@pytest.mark.parametrize("call", SEED_CALLS.values(), ids=SEED_CALLS.keys())
@pytest.mark.parametrize("seed", ["1", 1.5, None, True], ids=["str", "float", "None", "bool"])
def test_non_integer_seed_is_a_short_type_error(call, seed):
    with pytest.raises(TypeError) as e:
        call(seed)
    check_message(e, "seed")


@pytest.mark.parametrize("call", SEED_CALLS.values(), ids=SEED_CALLS.keys())
def test_largest_seed_and_numpy_integers_are_accepted(call):
    call(2 ** 64 - 1)
    call(np.int64(7))


# --- empty inputs ----------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [flash_fwd, ref_fwd], ids=["flash", "reference"])
@pytest.mark.parametrize("b,lq,lk", [(0, L, S), (B, 0, S), (0, 0, 0)], ids=["B=0", "L=0", "all empty"])
def test_empty_batches_give_empty_results(fn, b, lq, lk):
    out, lse = fn(*qkv(b, lq, lk))
    assert out.shape == (b, lq, H, D) and out.dtype == np.float32
    assert lse.shape == (b, H, lq)


@pytest.mark.parametrize("fn", [flash_fwd, ref_fwd], ids=["flash", "reference"])
def test_queries_without_keys_give_zeros(fn):
    out, lse = fn(*qkv(B, L, 0))  # every row fully masked: zeros, lse = -inf (not NaN)
    assert out.shape == (B, L, H, D) and not out.any()
    assert lse.shape == (B, H, L) and np.isneginf(lse).all()


@pytest.mark.parametrize("fn", [flash_bwd, ref_bwd], ids=["flash", "reference"])
@pytest.mark.parametrize("b,lq,lk", [(0, L, S), (B, 0, S)], ids=["B=0", "L=0"])
def test_empty_batches_give_empty_gradients(fn, b, lq, lk):
    q, k, v = qkv(b, lq, lk)
    dq, dk, dv, _ = fn(q, k, v)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert not dk.any() and not dv.any()  # no query sees a key


@pytest.mark.parametrize("fn", [flash_fwd, ref_fwd], ids=["flash", "reference"])
def test_packed_empty_sequence_among_others(fn):
    q, k, v = arr(6, H, D), arr(6, HKV, D), arr(6, HKV, D)
    cu = np.array([0, 3, 3, 6], np.int32)
    out, lse = fn(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu)
    assert out.shape == (6, H, D) and np.isfinite(out).all()


# --- other functions -------------------------------------------------------------------------
NN_FLOAT_CALLS = {  # name -> (call(x), the argument's name); x replaces one floating input
    "nn.linear x": (lambda x: nn.linear(x, arr(3, 4)), "x"),
    "nn.linear w": (lambda x: nn.linear(arr(2, 4), x), "w"),
    "nn.layer_norm": (lambda x: nn.layer_norm(x), "x"),
    "nn.rms_norm": (lambda x: nn.rms_norm(x), "x"),
    "nn.gelu": (lambda x: nn.gelu(x), "x"),
    "nn.silu": (lambda x: nn.silu(x), "x"),
    "nn.swiglu": (lambda x: nn.swiglu(x, arr(2, 4)), "gate"),
    "nn.dropout": (lambda x: nn.dropout(x, 0.5, 0), "x"),
    "nn.embedding table": (lambda x: nn.embedding(np.array([0, 1]), x), "table"),
    "nn.cross_entropy": (lambda x: nn.cross_entropy(x, np.array([0, 1])), "logits"),
    "nn.conv2d": (lambda x: nn.conv2d(x.reshape(1, 1, 2, 4), arr(1, 1, 1, 1)), "x"),
    "ms_deform_attn value": (lambda x: attnkit.ms_deform_attn(
        x.reshape(1, 2, 1, 4), np.array([[1, 2]]), np.array([0]), arr(1, 1, 1, 1, 1, 2), arr(1, 1, 1, 1, 1)),
        "value"),
}


@pytest.mark.parametrize("name", NN_FLOAT_CALLS)
@pytest.mark.parametrize("dtype", [np.int64, np.bool_])
def test_layers_reject_non_floating_dtype(name, dtype):
    call, arg = NN_FLOAT_CALLS[name]
    with pytest.raises(TypeError) as e:
        call(np.ones((2, 4), dtype))
    check_message(e, arg)


@pytest.mark.parametrize("name", NN_FLOAT_CALLS)
def test_layers_reject_strings(name):
    call, arg = NN_FLOAT_CALLS[name]
    with pytest.raises(TypeError) as e:
        call(np.array([["a", "b", "c", "d"]] * 2))
    check_message(e, arg)


@pytest.mark.parametrize("call,arg", [
    (lambda: nn.embedding(np.array([0.0, 1.0]), arr(3, 4)), "ids"),
    (lambda: nn.cross_entropy(arr(2, 3), np.array([0.0, 1.0])), "targets"),
    (lambda: attnkit.ms_deform_attn(arr(1, 2, 1, 4), np.array([[1.0, 2.0]]), np.array([0]),
                                    arr(1, 1, 1, 1, 1, 2), arr(1, 1, 1, 1, 1)), "spatial_shapes"),
    (lambda: attnkit.flash_attention(arr(6, H, D), arr(6, HKV, D), arr(6, HKV, D),
                                     cu_seqlens_q=np.array([0.0, 6.0]), cu_seqlens_k=np.array([0, 6])),
     "cu_seqlens_q"),
], ids=["embedding ids", "cross_entropy targets", "spatial_shapes", "cu_seqlens_q"])
def test_index_arguments_reject_floats(call, arg):
    with pytest.raises(TypeError) as e:
        call()
    check_message(e, arg)


def test_kv_cache_and_decode_reject_integers():
    cache = attnkit.KVCache(layers=1, kv_heads=HKV, head_dim=D, capacity=8, dtype="f32")
    with pytest.raises(TypeError) as e:
        cache.append(np.ones((2, HKV, D), np.int32), arr(2, HKV, D))
    check_message(e, "k")
    cache.append(arr(2, HKV, D), arr(2, HKV, D))
    with pytest.raises(TypeError) as e:
        attnkit.decode_attention(np.ones((1, H, D), np.int64), cache)
    check_message(e, "q")
    with pytest.raises(ValueError) as e:
        attnkit.decode_attention(arr(H, D), cache)
    check_message(e, "q")


def test_convert_gqa_checks_its_arguments(tmp_path):
    with pytest.raises(ValueError) as e:
        attnkit.convert_gqa(tmp_path / "a", tmp_path / "b", 1, seed=-1)
    check_message(e, "seed")
    with pytest.raises(ValueError) as e:
        attnkit.convert_gqa(tmp_path / "a", tmp_path / "b", 0)
    check_message(e, "kv_heads")
    with pytest.raises(TypeError) as e:
        attnkit.convert_gqa(tmp_path / "a", tmp_path / "b", "two")
    check_message(e, "kv_heads")
    assert list(tmp_path.iterdir()) == []


def test_huge_cache_is_a_memory_error_that_says_so():
    with pytest.raises(MemoryError) as e:
        attnkit.KVCache(layers=1, kv_heads=2, head_dim=8, capacity=10 ** 15)
    assert "out of memory" in str(e.value) and "std::" not in str(e.value)


def test_thread_count_is_bounded():
    with pytest.raises(ValueError) as e:
        attnkit.set_num_threads(100000)
    check_message(e, "set_num_threads")
    with pytest.raises(TypeError):
        attnkit.set_num_threads("4")


# --- allocation failures ---------------------------------------------------------------------
# A broadcast array needs no memory, but its float32 copy needs about 2^42 bytes: the conversion
# fails. Run in a child process so that a crash is reported as a failure, not a dead test run.
MEMORY_SCRIPT = textwrap.dedent("""
    import numpy as np
    import attnkit
    big3 = np.broadcast_to(np.zeros(1, {dtype}), (1 << 30, 4, 256))
    big4 = np.broadcast_to(np.zeros(1, {dtype}), (1 << 20, 1 << 10, 4, 256))
    small = np.zeros((4, 1, 8), np.float32)
    {call}
""")
MEMORY_CALLS = {
    "flash_attention q float64": ("np.float64", "attnkit.flash_attention(big3, small, small)"),
    "flash_attention q broadcast float32": ("np.float32", "attnkit.flash_attention(big3, small, small)"),
    "attention_reference k": ("np.float64", "attnkit.attention_reference(small, big3, small)"),
    "nn.layer_norm": ("np.float64", "attnkit.nn.layer_norm(big4)"),
    "nn.conv2d": ("np.float64", "attnkit.nn.conv2d(big4, np.zeros((1, 1024, 1, 1), np.float32))"),
}


@pytest.mark.parametrize("name", MEMORY_CALLS)
def test_copies_that_cannot_be_allocated_raise_memory_error(name):
    dtype, call = MEMORY_CALLS[name]
    script = MEMORY_SCRIPT.format(dtype=dtype, call=call)
    wrapped = ("try:\n" + textwrap.indent(script, "    ") +
               "except MemoryError as e:\n    print('MemoryError', e)\n    raise SystemExit(0)\n"
               "raise SystemExit('no MemoryError')\n")
    r = subprocess.run([sys.executable, "-c", wrapped], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.stdout.startswith("MemoryError")

