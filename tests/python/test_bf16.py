"""The opt-in bf16 mixed-precision mode (attnkit.set_matmul_precision): off by default, bad names
refused, and ten AdamW steps of a small GPT in bf16 against PyTorch 1.13: attnkit's loss error
against float64 at most twice that of torch.autocast("cpu", dtype=torch.bfloat16) on the same
network, and well above attnkit's own float32 error (the products really are bf16)."""
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
