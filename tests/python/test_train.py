"""attnkit.train against PyTorch 1.13: AdamW vs torch.optim.AdamW (ten steps, weight decay with an
excluded parameter, lr from the schedule), clipping vs torch.nn.utils.clip_grad_norm_, and the
warmup + cosine schedule vs the formula written out here.

AdamW bars: our parameters' error against a float64 torch run is at most 2x torch float32's own
error against it, plus 4 float32 roundings at the parameters' scale per step; and since we
follow torch's float32 operation order, we are within one ulp per step of torch float32 itself.
"""
import math

import numpy as np
import pytest
import torch

import attnkit
from attnkit import train

SHAPES = {"h.0.attn.c_attn.weight": (17, 33), "h.0.ln_1.weight": (33,),
          "h.0.attn.c_attn.bias": (51,), "wte.weight": (61, 8)}
EXCLUDED = {"h.0.ln_1.weight", "h.0.attn.c_attn.bias"}


def formula_lr(step, max_lr, min_lr, warmup, total):
    """llm.c's get_learning_rate, clamped at min_lr past the end."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    ratio = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)


def torch_adamw_run(init, grads_per_step, lrs, dtype, betas, eps, wd):
    """Runs torch.optim.AdamW with two groups (decay / no decay); returns params and state."""
    ps = {n: torch.tensor(a, dtype=dtype, requires_grad=True) for n, a in init.items()}
    groups = [{"params": [ps[n] for n in ps if n not in EXCLUDED], "weight_decay": wd},
              {"params": [ps[n] for n in ps if n in EXCLUDED], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lrs[0], betas=betas, eps=eps)
    for grads, lr in zip(grads_per_step, lrs):
        for n, p in ps.items():
            p.grad = torch.tensor(grads[n], dtype=dtype)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
    params = {n: p.detach().double().numpy() for n, p in ps.items()}
    state = {n: (opt.state[p]["exp_avg"].double().numpy(),
                 opt.state[p]["exp_avg_sq"].double().numpy()) for n, p in ps.items()}
    return params, state


@pytest.mark.parametrize("betas,wd", [((0.9, 0.999), 0.01), ((0.9, 0.95), 0.1)])
def test_adamw_ten_steps_match_torch(betas, wd, tmp_path):
    rng = np.random.default_rng(0)
    init = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    steps = [{n: (rng.standard_normal(s) * 10.0 ** rng.uniform(-3, 1)).astype(np.float32)
              for n, s in SHAPES.items()} for _ in range(10)]
    lrs = [formula_lr(t, 1e-2, 1e-3, 3, 10) for t in range(10)]

    params = {n: a.copy() for n, a in init.items()}
    grads = {n: np.zeros(s, np.float32) for n, s in SHAPES.items()}
    opt = train.AdamW(params, grads, betas=betas, eps=1e-8, weight_decay=wd)
    for g, lr in zip(steps, lrs):
        for n in grads:
            grads[n][...] = g[n]  # refill in place: the optimizer holds these arrays
        opt.step(lr)
    assert opt.step_count == 10

    t32, s32 = torch_adamw_run(init, steps, lrs, torch.float32, betas, 1e-8, wd)
    t64, s64 = torch_adamw_run(init, steps, lrs, torch.float64, betas, 1e-8, wd)
    for n in SHAPES:
        ours = params[n].astype(np.float64)
        scale = np.abs(t64[n]).max()
        bar = 2 * np.abs(t32[n] - t64[n]).max() + 10 * 4 * 2.0 ** -24 * scale
        assert np.abs(ours - t64[n]).max() <= bar, n
        # Same float32 operation sequence as torch: at most about one ulp apart per step.
        np.testing.assert_allclose(ours, t32[n], rtol=0, atol=10 * 2.0 ** -23 * scale)
        # The excluded parameter really is excluded: with decay it would differ by ~lr·wd·|p|.
        assert (n in EXCLUDED) == (not opt._opt.decays(list(SHAPES).index(n)))

    # Moments (exposed for checkpoints, and through a safetensors file) equal torch's.
    state = opt.state()
    opt.save_state(tmp_path / "adamw.safetensors")
    saved = attnkit.load_safetensors(str(tmp_path / "adamw.safetensors"))
    assert attnkit.load_safetensors_metadata(str(tmp_path / "adamw.safetensors"))["step"] == "10"
    for n in SHAPES:
        m32, v32 = s32[n]
        np.testing.assert_allclose(state[n + ".exp_avg"], m32.ravel(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(state[n + ".exp_avg_sq"], v32.ravel(), rtol=1e-5, atol=1e-12)
        np.testing.assert_array_equal(saved[n + ".exp_avg"], state[n + ".exp_avg"])


def test_adamw_exclusion_changes_the_result():
    """Guard against a vacuous pass: decaying the excluded parameters would move them."""
    p = {"w.bias": np.ones(4, np.float32)}
    g = {"w.bias": np.full(4, 0.5, np.float32)}
    q = {"w.bias": np.ones(4, np.float32)}
    train.AdamW(p, g, weight_decay=0.5).step(0.1)
    train.AdamW(q, g, weight_decay=0.5, no_decay=None).step(0.1)
    assert np.all(np.abs(p["w.bias"] - q["w.bias"]) > 0.04)


def test_adamw_rejects_bad_arrays():
    p = {"w": np.ones(4, np.float64)}
    with pytest.raises(attnkit.Error, match="float32"):
        train.AdamW(p, {"w": np.ones(4, np.float32)})
    with pytest.raises(ValueError, match="differ"):
        train.AdamW({"w": np.ones(4, np.float32)}, {"v": np.ones(4, np.float32)})
    with pytest.raises(attnkit.Error, match="C-contiguous"):
        train.AdamW({"w": np.ones((4, 4), np.float32)[:, 1]}, {"w": np.ones(4, np.float32)})


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_matches_torch(max_norm):
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(33, 7), (5,), (1000,), (0,)]]
    tp = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for p, g in zip(tp, grads):
        p.grad = torch.tensor(g)
    ref = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads))
    torch_norm = torch.nn.utils.clip_grad_norm_(tp, max_norm).item()
    norm = train.clip_grad_norm(grads, max_norm)
    assert norm == pytest.approx(ref, rel=1e-14)
    assert norm == pytest.approx(torch_norm, rel=1e-6)
    for p, g in zip(tp, grads):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=2e-7, atol=0)
    if max_norm < ref:
        assert train.global_grad_norm(grads) == pytest.approx(max_norm, rel=1e-5)
    else:
        assert train.global_grad_norm(grads) == pytest.approx(norm, rel=1e-12)


def test_schedule_matches_formula():
    for warmup, total in [(0, 20), (5, 40), (7, 7)]:
        for step in range(total + 5):
            ours = train.warmup_cosine_lr(step, 6e-4, 6e-5, warmup, total)
            assert ours == pytest.approx(formula_lr(step, 6e-4, 6e-5, warmup, total),
                                         rel=1e-14, abs=0), (warmup, total, step)
    with pytest.raises(attnkit.Error):
        train.warmup_cosine_lr(0, 1.0, 0.1, 10, 5)


def test_tokenizer_and_sampler():
    data = bytes(range(256)) + b"\xc3\x28\xff"
    ids = train.encode(data)
    assert ids.dtype == np.int32 and list(ids) == list(data)
    assert train.decode(ids) == data
    assert train.decode([train.END_OF_TEXT, 104, 105]) == b"<|endoftext|>hi"
    assert train.decode([train.END_OF_TEXT, 104, 105], skip_special=True) == b"hi"
    with pytest.raises(attnkit.Error, match="out of range"):
        train.decode([train.VOCAB_SIZE])
    tokens = np.arange(500, dtype=np.int32)
    a = train.sample_batch(tokens, 3, 8, seed=5, step=2)
    b = train.sample_batch(tokens, 3, 8, seed=5, step=2)
    assert a.shape == (3, 9)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[:, 1:] - a[:, :-1], 1)  # contiguous windows
    assert not np.array_equal(a, train.sample_batch(tokens, 3, 8, seed=5, step=3))
