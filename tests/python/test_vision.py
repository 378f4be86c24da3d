"""attnkit.nn image layers (conv2d, pooling, global pooling, batch norm 2d, SE, CBAM) forward and
every gradient against PyTorch 1.13 autograd, with FlashAttention's bar (test_nn.check: at most
2x (forward) / 3x (gradients) torch float32's own error against torch float64, plus 4 float32
roundings at the result's scale). SE and CBAM are written here in torch from their papers."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnkit
from attnkit import nn
from test_nn import check, randn


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias", [
    (2, 3, 9, 8, 4, 3, 1, 1, True), (1, 2, 11, 11, 5, 3, 2, 1, False),
    (3, 8, 5, 6, 16, 1, 1, 0, True), (2, 2, 10, 9, 1, 7, 1, 3, True), (17, 3, 6, 5, 2, 2, 2, 0, True),
    # Winograd F(2x2, 3x3) (3x3, stride 1, padding 1, >= 8 channels; sides >= 12, or all tiles of
    # a plane in one vector, as 7x7) for y and d_x
    (4, 16, 14, 13, 12, 3, 1, 1, True), (2, 32, 12, 12, 32, 3, 1, 1, False),
    (3, 8, 7, 7, 12, 3, 1, 1, True)])
def test_conv2d(reference, n, c, h, w, o, k, stride, padding, bias):
    rng = np.random.default_rng(n * 100 + k)
    x, wt = randn(rng, n, c, h, w), randn(rng, o, c, k, k, scale=0.3)
    b = randn(rng, o) if bias else None
    y = nn.conv2d(x, wt, b, stride=stride, padding=padding, reference=reference)
    d_y = randn(rng, *y.shape)
    d_x, d_w, d_b = nn.conv2d_backward(d_y, x, wt, has_bias=bias, stride=stride, padding=padding,
                                       reference=reference)
    inputs = {"x": x, "w": wt} | ({"b": b} if bias else {})
    ours = {"out0": y, "d_x": d_x, "d_w": d_w} | ({"d_b": d_b} if bias else {})
    check(ours, lambda x, w, b=None: F.conv2d(x, w, b, stride=stride, padding=padding), inputs,
          [d_y])


ENGINES = ["builtin", "auto"] + (["onednn"] if attnkit.build_info()["conv2d_onednn"] else [])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias", [
    # >= 16 channels each way: oneDNN under "auto" for all passes on 7x7, for d_w on 13x12
    (5, 16, 7, 7, 24, 3, 1, 1, True), (3, 16, 13, 12, 16, 3, 1, 1, False),
    # only "onednn" sends these to oneDNN: stride 2, a 7x7 kernel, 1x1, few channels
    (2, 3, 11, 10, 5, 3, 2, 1, True), (2, 2, 10, 9, 1, 7, 1, 3, True), (3, 8, 5, 6, 16, 1, 1, 0, False)])
def test_conv2d_every_engine(engine, n, c, h, w, o, k, stride, padding, bias):
    saved = attnkit.conv2d_engine()
    attnkit.set_conv2d_engine(engine)
    try:
        test_conv2d(False, n, c, h, w, o, k, stride, padding, bias)
    finally:
        attnkit.set_conv2d_engine(saved)


@pytest.mark.parametrize("path", ["auto", "openblas", "onednn"])
@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding,bias", [
    (4, 16, 14, 14, 32, 3, 1, 1, True),  # Winograd: one batched product per chunk
    (2, 8, 16, 16, 16, 3, 2, 1, True), (3, 32, 8, 8, 48, 1, 1, 0, False)])  # im2col, pointwise
def test_conv2d_on_every_sgemm_path(path, n, c, h, w, o, k, stride, padding, bias):
    """The built-in convolutions' GEMM tiles (each at least 32³ multiply-adds) on OpenBLAS, on
    oneDNN's matmul, or as 'auto' decides for this process's kernels: the same bars."""
    saved_engine, saved_path = attnkit.conv2d_engine(), attnkit.sgemm_path()
    attnkit.set_conv2d_engine("builtin")
    attnkit.set_sgemm_path(path)
    try:
        test_conv2d(False, n, c, h, w, o, k, stride, padding, bias)
    finally:
        attnkit.set_sgemm_path(saved_path)
        attnkit.set_conv2d_engine(saved_engine)


def test_conv2d_engine_switch():
    saved = attnkit.conv2d_engine()
    try:
        for engine in ENGINES:
            attnkit.set_conv2d_engine(engine)
            assert attnkit.conv2d_engine() == engine
        if "onednn" not in ENGINES:
            with pytest.raises(ValueError, match="built without it"):
                attnkit.set_conv2d_engine("onednn")
        with pytest.raises(ValueError, match="expected 'auto', 'builtin' or 'onednn'"):
            attnkit.set_conv2d_engine("fast")
    finally:
        attnkit.set_conv2d_engine(saved)


@pytest.mark.parametrize("kernel,stride,padding", [(2, None, 0), (3, 2, 1), (3, 1, 1)])
def test_max_and_avg_pool2d(kernel, stride, padding):
    rng = np.random.default_rng(kernel + padding)
    x = randn(rng, 2, 3, 9, 7)
    y, argmax = nn.max_pool2d(x, kernel, stride, padding)
    d_y = randn(rng, *y.shape)
    d_x = nn.max_pool2d_backward(d_y, argmax, x.shape)
    check({"out0": y, "d_x": d_x}, lambda x: F.max_pool2d(x, kernel, stride, padding), {"x": x},
          [d_y])
    for include in (True, False):
        y = nn.avg_pool2d(x, kernel, stride, padding, count_include_pad=include)
        d_x = nn.avg_pool2d_backward(d_y, x.shape, kernel, stride, padding, count_include_pad=include)
        check({"out0": y, "d_x": d_x},
              lambda x: F.avg_pool2d(x, kernel, stride, padding, count_include_pad=include),
              {"x": x}, [d_y])


def test_global_pools():
    rng = np.random.default_rng(3)
    x, d_y = randn(rng, 3, 5, 4, 6), randn(rng, 3, 5)
    y = nn.global_avg_pool(x)
    check({"out0": y, "d_x": nn.global_avg_pool_backward(d_y, x.shape)},
          lambda x: x.mean((2, 3)), {"x": x}, [d_y])
    y, argmax = nn.global_max_pool(x)
    check({"out0": y, "d_x": nn.global_max_pool_backward(d_y, argmax, x.shape)},
          lambda x: x.amax((2, 3)), {"x": x}, [d_y])


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("relu", [False, True])
def test_batch_norm2d(training, affine, relu):
    rng = np.random.default_rng(7)
    x = randn(rng, 4, 3, 5, 6, scale=2.0) + np.float32(1.5)
    wt, b = (randn(rng, 3), randn(rng, 3)) if affine else (None, None)
    rm, rv = randn(rng, 3), (rng.random(3) + 0.5).astype(np.float32)
    y, mean, rstd, rm2, rv2 = nn.batch_norm2d(x, wt, b, rm, rv, training=training, momentum=0.2,
                                              relu=relu)
    if relu:
        assert 0 < np.count_nonzero(y == 0) < y.size  # the ReLU clips some outputs, not all
    d_y = randn(rng, *y.shape)
    d_x, d_w, d_b = nn.batch_norm2d_backward(d_y, x, wt, mean, rstd, b=b, has_bias=affine,
                                             training=training, relu=relu)
    rm_t, rv_t = torch.tensor(rm, dtype=torch.float64), torch.tensor(rv, dtype=torch.float64)

    def torch_bn(x, w=None, b=None):
        # Running statistics live outside autograd; a copy per call keeps both precisions equal.
        y = F.batch_norm(x, rm_t.clone().to(x.dtype), rv_t.clone().to(x.dtype), w, b,
                         training=training, momentum=0.2, eps=1e-5)
        return F.relu(y) if relu else y

    inputs = {"x": x} | ({"w": wt, "b": b} if affine else {})
    ours = {"out0": y, "d_x": d_x} | ({"d_w": d_w, "d_b": d_b} if affine else {})
    check(ours, torch_bn, inputs, [d_y])
    # Running statistics: PyTorch's update rule (unbiased variance) in float64.
    rm64, rv64 = rm_t.clone(), rv_t.clone()
    F.batch_norm(torch.tensor(x, dtype=torch.float64), rm64, rv64, training=training, momentum=0.2)
    np.testing.assert_allclose(rm2, rm64.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rv2, rv64.numpy(), rtol=1e-6, atol=1e-6)
    if not training:
        np.testing.assert_array_equal(rm2, rm)


def torch_se(x, w1, w2, b1=None, b2=None):
    a = torch.sigmoid(F.linear(F.relu(F.linear(x.mean((2, 3)), w1, b1)), w2, b2))
    return x * a[:, :, None, None]


def torch_cbam(x, w1, w2, ws, b1=None, b2=None, bs=None):
    mlp = lambda v: F.linear(F.relu(F.linear(v, w1, b1)), w2, b2)
    x1 = x * torch.sigmoid(mlp(x.mean((2, 3))) + mlp(x.amax((2, 3))))[:, :, None, None]
    d = torch.cat([x1.mean(1, keepdim=True), x1.amax(1, keepdim=True)], 1)
    return x1 * torch.sigmoid(F.conv2d(d, ws, bs, padding=ws.shape[-1] // 2))


@pytest.mark.parametrize("bias", [True, False])
def test_se_block(bias):
    rng = np.random.default_rng(11)
    n, c, r, h, w = 3, 8, 2, 5, 4
    x, w1, w2 = randn(rng, n, c, h, w), randn(rng, r, c), randn(rng, c, r)
    b1, b2 = (randn(rng, r), randn(rng, c)) if bias else (None, None)
    y = nn.se_block(x, w1, b1, w2, b2)
    d_y = randn(rng, *y.shape)
    g = nn.se_block_backward(d_y, x, w1, b1, w2, b2)
    inputs = {"x": x, "w1": w1, "w2": w2} | ({"b1": b1, "b2": b2} if bias else {})
    check({"out0": y} | g, torch_se, inputs, [d_y])
    assert set(g) == {"d_" + k for k in inputs}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("k", [7, 3])
def test_cbam(bias, k):
    rng = np.random.default_rng(13 + k)
    n, c, r, h, w = 2, 8, 4, 9, 7
    x, w1, w2 = randn(rng, n, c, h, w), randn(rng, r, c), randn(rng, c, r)
    ws = randn(rng, 1, 2, k, k, scale=0.3)
    b1, b2, bs = (randn(rng, r), randn(rng, c), randn(rng, 1)) if bias else (None, None, None)
    y = nn.cbam(x, w1, b1, w2, b2, ws, bs)
    d_y = randn(rng, *y.shape)
    g = nn.cbam_backward(d_y, x, w1, b1, w2, b2, ws, bs)
    inputs = {"x": x, "w1": w1, "w2": w2, "ws": ws} | ({"b1": b1, "b2": b2, "bs": bs} if bias else {})
    check({"out0": y} | g, torch_cbam, inputs, [d_y])
    assert set(g) == {"d_" + k for k in inputs}


def test_bad_arguments_raise_value_error():
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(ValueError, match="w: expected \\[O, C, KH, KW\\] with C = 2"):
        nn.conv2d(x, np.zeros((3, 1, 3, 3), np.float32))
    with pytest.raises(attnkit.Error, match="padding"):
        nn.max_pool2d(x, 2, 2, 2)
    with pytest.raises(ValueError, match="odd kernel"):
        nn.cbam(x, np.zeros((1, 2), np.float32), None, np.zeros((2, 1), np.float32), None,
                np.zeros((1, 2, 2, 2), np.float32), None)
