"""The opt-in bf16 mixed-precision mode (attnkit.set_matmul_precision): off by default, bad names
refused, and ten AdamW steps of a small GPT in bf16 against PyTorch 1.13: attnkit's loss error
against float64 at most twice that of torch.autocast("cpu", dtype=torch.bfloat16) on the same
network, and well above attnkit's own float32 error (the products really are bf16)."""
import numpy as np
import pytest
import torch

import attnkit
from test_gpt import CONFIG, model_dir, torch_gpt  # noqa: F401  (model_dir: the fixture)


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
    rng = np.random.default_rng(2)
    cu = np.array([0, 16, 32], np.int32)
    tokens = rng.integers(0, CONFIG["vocab_size"], 32).astype(np.int32)
    targets = np.roll(tokens, -1)
    targets[[15, 31]] = -1
    kw = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

    def torch_losses(dtype, autocast):
        t = {k: torch.tensor(x, dtype=dtype, requires_grad=True) for k, x in w.items()}
        no_decay = [x for k, x in t.items() if "norm" in k]
        decay = [x for k, x in t.items() if "norm" not in k]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": kw["weight_decay"]},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=kw["lr"], betas=kw["betas"], eps=kw["eps"])
        out = []
        for step in range(11):
            opt.zero_grad()
            for x in t.values():
                x.grad = None
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                _, loss, _ = torch_gpt(w, CONFIG, tokens, targets, cu, dtype, t=t)
            out.append(loss)
            if step < 10:
                opt.step()
        return np.array(out)

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
