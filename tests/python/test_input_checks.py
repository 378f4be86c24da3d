"""Python wrappers' argument checks: bad input raises a short TypeError/ValueError naming it."""
import json

import numpy as np
import pytest
import torch

import attnkit as A
import attnkit.torch as fa
from attnkit import _attnkit, nn


def r(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def raises(error, match, call):
    """call() raises `error` with a short one-line message matching `match`."""
    with pytest.raises(error, match=match) as e:
        call()
    assert "\n" not in str(e.value) and len(str(e.value)) < 200, str(e.value)


def test_batch_norm_relu_backward_needs_the_bias():
    x, w, b = r(2, 3, 4, 4), r(3), r(3)
    _, mean, rstd, _, _ = nn.batch_norm2d(x, w, b, relu=True)
    raises(ValueError, "b: required when relu=True",
           lambda: nn.batch_norm2d_backward(r(2, 3, 4, 4), x, w, mean, rstd, relu=True))
    nn.batch_norm2d_backward(r(2, 3, 4, 4), x, w, mean, rstd, relu=True, has_bias=False)


BLOCK = {"qkv_proj_weight": r(24, 8), "o_proj_weight": r(8, 8)}  # H = Hkv = 2, D = 4, C = 8


def block(**kw):
    return nn.attention_block(r(3, 8), BLOCK, heads=2, head_dim=4, **kw)


@pytest.mark.parametrize("kw,error,match", [
    ({"cu_seqlens": np.array([0.0, 3.0])}, TypeError, "cu_seqlens: expected an integer"),
    ({"cu_seqlens": np.array([0, 2 ** 32 + 3])}, ValueError, "cu_seqlens: entries must be in"),
    ({"positions": np.array([0.5, 1.5, 2.5])}, TypeError, "positions: expected an integer"),
    ({"positions": np.array([2 ** 64 - 1, 1, 2], np.uint64)}, ValueError,
     "positions: entries must be in"),
], ids=["cu float", "cu int64 wraps", "positions float", "positions uint64"])
def test_attention_block_index_arguments(kw, error, match):
    raises(error, match, lambda: block(**kw))


@pytest.mark.parametrize("positions,error", [
    (np.array([0.5, 1, 2, 3]), TypeError), (np.array([True, False, True, True]), TypeError),
    (np.array([2 ** 64 - 1, 1, 2, 3], np.uint64), ValueError)], ids=["float", "bool", "uint64"])
def test_rope_positions_are_integers_in_range(positions, error):
    raises(error, "positions: ", lambda: nn.rope(r(4, 2, 8), positions))


def _flash_bwd(q, k, v, **kw):
    out, lse = np.zeros(q.shape, np.float32), np.zeros((0, q.shape[2], q.shape[1]), np.float32)
    return A.flash_attention_backward(out, q, k, v, out, lse, **kw)


ATTENTION = {
    "flash_attention": A.flash_attention, "attention_reference": A.attention_reference,
    "flash_attention_backward": _flash_bwd,
    "attention_reference_backward": lambda q, k, v, **kw: A.attention_reference_backward(
        q, q, k, v, **kw)}


@pytest.mark.parametrize("fn", ATTENTION.values(), ids=ATTENTION.keys())
@pytest.mark.parametrize("hkv,kw,match", [
    (2, {"dropout_p": 5.0}, "dropout_p"), (2, {"scale": -1.0}, "scale"),
    (3, {}, "multiple of KV heads")], ids=["dropout_p", "scale", "Hkv"])
def test_empty_batch_is_validated(fn, hkv, kw, match):
    raises(ValueError, match, lambda: fn(r(0, 5, 4, 8), r(0, 6, hkv, 8), r(0, 6, hkv, 8), **kw))


def test_empty_cu_seqlens_is_not_absent():
    empty = np.array([], np.int32)
    raises(ValueError, "cu_seqlens_q: needs at least 2 entries", lambda: A.flash_attention(
        r(6, 4, 8), r(6, 2, 8), r(6, 2, 8), cu_seqlens_q=empty, cu_seqlens_k=empty))


@pytest.mark.parametrize("call", [
    lambda: nn.avg_pool2d_backward(r(2, 3, 2, 2), (5, 7, 4, 4), 2),
    lambda: nn.max_pool2d_backward(*nn.max_pool2d(r(2, 3, 4, 4), 2), (2, 5, 4, 4)),
    lambda: nn.global_avg_pool_backward(r(2, 4), (2, 3, 6, 6)),
    lambda: nn.global_max_pool_backward(*nn.global_max_pool(r(2, 3, 4, 4)), (5, 3, 4, 4)),
], ids=["avg", "max", "global avg", "global max"])
def test_pool_backward_checks_x_shape(call):
    raises(ValueError, "d_y: N, C", call)


@pytest.mark.parametrize("pool", [nn.max_pool2d, nn.avg_pool2d])
def test_pool_stride_zero_is_not_the_default(pool):
    raises(ValueError, "stride: must be >= 1", lambda: pool(r(1, 1, 4, 4), 2, stride=0))


@pytest.mark.parametrize("call,match", [
    (lambda: nn.conv2d(r(1, 1, 6, 6), r(1, 1, 7, 7)),
     "conv2d_forward: kernel 7×7 is larger than the padded input 6×6"),
    (lambda: nn.conv2d(r(1, 1, 6, 6), r(2, 1, 7, 7)), "conv2d_forward: kernel 7×7 is larger"),
    (lambda: nn.conv2d(r(1, 1, 6, 6), r(1, 1, 9, 9), padding=1), "padded input 8×8"),
    (lambda: nn.conv2d_backward(r(1, 1, 1, 1), r(1, 1, 6, 6), r(1, 1, 7, 7)),
     "conv2d_backward: kernel 7×7 is larger"),
    (lambda: nn.max_pool2d(r(1, 1, 4, 4), 5), "max_pool2d_forward: kernel 5×5 is larger"),
    (lambda: nn.avg_pool2d(r(1, 1, 4, 4), 5), "avg_pool2d_forward: kernel 5×5 is larger"),
    (lambda: nn.avg_pool2d_backward(r(1, 1, 1, 1), (1, 1, 4, 4), 5), "kernel 5×5 is larger"),
    (lambda: nn.global_avg_pool(r(1, 2, 0, 0)), "global_avg_pool: x: empty plane"),
    (lambda: nn.global_max_pool(r(1, 2, 0, 0)), "global_max_pool: x: empty plane"),
], ids=["conv2d", "conv2d O=2", "conv2d padded", "conv2d_backward", "max_pool2d", "avg_pool2d",
        "avg_pool2d_backward", "global_avg_pool", "global_max_pool"])
def test_window_larger_than_input(call, match):
    raises(ValueError, match, call)


def _torch_attention(window):
    q = torch.from_numpy(r(1, 5, 2, 8))
    return fa.flash_attn_func(q, q, q, window_size=window)


WINDOW_CALLS = {
    "flash_attention": lambda w: A.flash_attention(*(r(1, 5, 2, 8) for _ in range(3)), window=w),
    "attention_block": lambda w: block(window=w, causal=False),
    "torch": _torch_attention,
}


@pytest.mark.parametrize("call", WINDOW_CALLS.values(), ids=WINDOW_CALLS.keys())
@pytest.mark.parametrize("window,error,match", [
    ((1.5, 2.7), TypeError, "expected an integer"), ((1, 2, 3), ValueError, "expected a pair"),
    ((2 ** 31, 0), ValueError, r"entries must be in \[-1, 2\*\*31-1\]"),
], ids=["float", "3 entries", "2^31"])
def test_window_entries(call, window, error, match):
    raises(error, f"window(_size)?: {match}", lambda: call(window))


def test_adamw_gradient_shape_must_match():
    raises(ValueError, r"grads\['w'\]: shape", lambda: A.train.AdamW(
        {"w": np.zeros((3, 4), np.float32)}, {"w": np.ones((4, 3), np.float32)}))


def test_adamw_losses_steps_is_not_negative():
    cfg = {"vocab_size": 261, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
           "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
           "max_position_embeddings": 32}
    model = A.Model(_attnkit._GptModel(json.dumps(cfg)))
    tokens = np.arange(8, dtype=np.int32)
    raises(ValueError, "steps: must be >= 0", lambda: model.adamw_losses(tokens, tokens, steps=-1))
    assert len(model.adamw_losses(tokens, tokens, steps=0)) == 1  # 0 steps: the loss only


@pytest.mark.parametrize("name,value", [("dropout_p", None), ("softcap", None),
                                        ("softmax_scale", "a")])
def test_torch_float_options_are_numbers(name, value):
    q = torch.from_numpy(r(1, 5, 2, 8))
    raises(TypeError, f"{name}: expected a number",
           lambda: fa.flash_attn_func(q, q, q, **{name: value}))


def test_torch_im2col_step_accepts_numpy_integers():
    value, loc, w = (torch.from_numpy(r(*s)) for s in ((1, 4, 2, 4), (1, 3, 2, 1, 2, 2),
                                                       (1, 3, 2, 1, 2)))
    shapes, starts = torch.tensor([[2, 2]]), torch.tensor([0])
    out = fa.ms_deform_attn(value, shapes, starts, loc.sigmoid(), w, np.int64(64))
    assert out.shape == (1, 3, 8)


def test_positions_from_cu_seqlens_refuses_non_integers():
    from attnkit.block import positions_from_cu_seqlens
    raises(TypeError, "cu_seqlens: expected an integer array", lambda: positions_from_cu_seqlens(np.array([0.0, 2.5, 4.0]), 4))
    assert positions_from_cu_seqlens(np.array([0, 2, 4]), 4).tolist() == [0, 1, 0, 1]


def test_torch_gradient_under_create_graph_is_the_first_order_one():
    """create_graph=True (as in gradient-penalty code) gives the plain first-order gradient."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 3, 2, 4, generator=g) for _ in range(3))
    grads = []
    for create_graph in (False, True):
        qg = q.clone().requires_grad_(True)
        out = fa.flash_attn_func(qg, k, v, causal=True)
        grads.append(torch.autograd.grad(out.sum(), qg, create_graph=create_graph)[0])
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("call", [
    lambda: A.flash_attention(r(4, 8), r(4, 8), r(4, 8)),                           # rank, in the wrapper
    lambda: A.flash_attention(r(4, 2, 8), r(1, 4, 2, 8), r(1, 4, 2, 8)),             # ranks differ
    lambda: A.flash_attention(r(1, 4, 2, 8), r(1, 4, 2, 4), r(1, 4, 2, 8)),          # head dim, compiled
    lambda: nn.max_pool2d(r(1, 1, 4, 4), 2, stride=0),
    lambda: fa.flash_attn_func(torch.zeros(1, 4, 2, 8), torch.zeros(1, 4, 2, 8), torch.zeros(1, 4, 3, 8)),
], ids=["rank", "ranks differ", "head dim", "pool stride", "torch heads"])
def test_argument_errors_are_attnkit_errors(call):
    """Whether the wrapper or the compiled module finds it, a bad argument is an attnkit.Error
    (a ValueError), so `except attnkit.Error` catches every one."""
    with pytest.raises(A.Error):
        call()
