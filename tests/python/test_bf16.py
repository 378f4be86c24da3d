"""The opt-in bf16 mixed-precision mode (attnkit.set_matmul_precision): off by default, bad names
refused, and ten AdamW steps of a small GPT in bf16 against PyTorch 1.13: attnkit's loss error
against float64 at most twice that of torch.autocast("cpu", dtype=torch.bfloat16) on the same
network, and well above attnkit's own float32 error (the products really are bf16); conv2d's y,
d_x and d_w in bf16 against torch.autocast's conv2d with the same two bars."""
import numpy as np
import pytest
import torch

import attnkit
from test_gpt import adamw_batch, model_dir, torch_adamw_losses  # noqa: F401  (model_dir: the fixture)


def test_f32_is_the_default_and_names_are_checked():
    assert attnkit.matmul_precision() == "f32"
    with pytest.raises(ValueError, match="precision"):
        attnkit.set_matmul_precision("fp8")
    assert attnkit.matmul_precision() == "f32"
    if not attnkit.bf16_available():
        with pytest.raises(ValueError, match="bf16"):
            attnkit.set_matmul_precision("bf16")


@pytest.mark.skipif(not attnkit.bf16_available(), reason="no AVX512-BF16 / AMX, or built without oneDNN")
def test_ten_adamw_steps_in_bf16_err_at_most_twice_torch_autocast(model_dir):  # noqa: F811
    path, w = model_dir
    tokens, targets, cu, kw = adamw_batch()

    def torch_losses(dtype, autocast):
        return torch_adamw_losses(w, tokens, targets, cu, kw, dtype, autocast)

    def ours(precision):
        attnkit.set_matmul_precision(precision)
        try:
            return np.array(attnkit.load_model(path).adamw_losses(tokens, targets, cu, steps=10, **kw))
        finally:
            attnkit.set_matmul_precision("f32")

    exact = torch_losses(torch.float64, False)
    err_autocast = np.abs(torch_losses(torch.float32, True) - exact).max()
    err_bf16 = np.abs(ours("bf16") - exact).max()
    err_f32 = np.abs(ours("f32") - exact).max()
    assert attnkit.matmul_precision() == "f32"
    assert err_bf16 <= 2 * err_autocast, (err_bf16, err_autocast)
    assert err_bf16 > 10 * err_f32, (err_bf16, err_f32)


def _conv_torch(x, w, b, d_y, stride, padding, dtype, autocast):
    """y, d_x, d_w of torch's conv2d in `dtype`, inside torch.autocast(bf16) when asked."""
    xt, wt = (torch.tensor(a, dtype=dtype, requires_grad=True) for a in (x, w))
    bt = torch.tensor(b, dtype=dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = torch.nn.functional.conv2d(xt, wt, bt, stride=stride, padding=padding)
    y.backward(torch.tensor(d_y, dtype=y.dtype))
    return [t.detach().double().numpy() for t in (y, xt.grad, wt.grad)]


@pytest.mark.skipif(not attnkit.bf16_available(), reason="no AVX512-BF16 / AMX, or built without oneDNN")
@pytest.mark.parametrize("engine", ["auto", "builtin"])  # auto: oneDNN's bf16 convolution where it applies
@pytest.mark.parametrize("n,c,h,w,o,k,stride,padding", [
    (4, 16, 14, 14, 16, 3, 1, 1),   # Winograd's class in f32; oneDNN for all three passes under auto
    (3, 1, 28, 28, 8, 3, 1, 1),     # the CNN's stem
    (2, 8, 9, 9, 12, 1, 1, 0),      # pointwise
    (2, 4, 12, 12, 6, 5, 2, 2),     # strided
    (2, 2, 10, 10, 1, 7, 1, 3)])    # CBAM's spatial gate (input gradient as a convolution)
def test_conv2d_in_bf16_err_at_most_twice_torch_autocast(engine, n, c, h, w, o, k, stride, padding):
    """attnkit's bf16 conv2d (y, d_x, d_w) against float64: at most twice the error of PyTorch's
    autocast conv2d, and well above attnkit's own float32 error (the products really are bf16)."""
    from attnkit import nn
    rng = np.random.default_rng(n * 100 + c + k)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (0.3 * rng.standard_normal((o, c, k, k))).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    oh = (h + 2 * padding - k) // stride + 1
    ow = (w + 2 * padding - k) // stride + 1
    d_y = rng.standard_normal((n, o, oh, ow)).astype(np.float32)

    def ours(precision):
        saved = attnkit.conv2d_engine()
        attnkit.set_matmul_precision(precision)
        attnkit.set_conv2d_engine(engine)
        try:
            y = nn.conv2d(x, wt, b, stride=stride, padding=padding)
            d_x, d_w, _ = nn.conv2d_backward(d_y, x, wt, has_bias=True, stride=stride, padding=padding)
        finally:
            attnkit.set_matmul_precision("f32")
            attnkit.set_conv2d_engine(saved)
        return [np.asarray(a, dtype=np.float64) for a in (y, d_x, d_w)]

    exact = _conv_torch(x, wt, b, d_y, stride, padding, torch.float64, False)
    autocast = _conv_torch(x, wt, b, d_y, stride, padding, torch.float32, True)
    bf16, f32 = ours("bf16"), ours("f32")
    assert attnkit.matmul_precision() == "f32"
    for name, e, a, o16, o32 in zip(["y", "d_x", "d_w"], exact, autocast, bf16, f32):
        err_autocast, err_bf16, err_f32 = (np.abs(v - e).max() for v in (a, o16, o32))
        assert err_bf16 <= 2 * err_autocast, (name, err_bf16, err_autocast)
        assert err_bf16 > 10 * err_f32, (name, err_bf16, err_f32)
