"""attnkit.ImageModel with model_type "cnn" (residual CNN with none / SE / CBAM attention) against
the same network written here with torch.nn.functional (PyTorch 1.13): logits, every parameter
gradient and the batch-norm running statistics, in training mode (batch statistics) and eval mode
(running statistics), with FlashAttention's bar (at most 2x (forward) / 3x (gradients) torch
float32's own error against torch float64, plus float32 rounding at the result's scale)."""
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnkit
from torch_attention import assert_within_bar


def config(attention, widths=(4, 8, 8, 12), image=12, labels=5):
    return json.dumps({"model_type": "cnn", "image_size": image, "num_labels": labels,
                       "widths": list(widths), "attention": attention, "reduction": 2,
                       "spatial_kernel": 5})


def torch_cnn(p, buffers, x, cfg, training):
    """The network of models/cnn.hpp; p, buffers: name -> tensor (buffers updated in place)."""
    eps, mom = 1e-5, 0.1

    def bn(v, prefix):
        return F.batch_norm(v, buffers[prefix + ".running_mean"], buffers[prefix + ".running_var"],
                            p[prefix + ".weight"], p[prefix + ".bias"], training, mom, eps)

    def mlp(v, a):
        return F.linear(F.relu(F.linear(v, p[a + "fc1.weight"], p[a + "fc1.bias"])),
                        p[a + "fc2.weight"], p[a + "fc2.bias"])

    widths = cfg["widths"]
    h = F.max_pool2d(F.relu(bn(F.conv2d(x, p["stem.conv.weight"], padding=1), "stem.bn")), 2)
    for i in range(1, len(widths)):
        s = f"stages.{i}."
        r = F.relu(bn(F.conv2d(h, p[s + "conv1.weight"], padding=1), s + "bn1"))
        r = bn(F.conv2d(r, p[s + "conv2.weight"], padding=1), s + "bn2")
        if cfg["attention"] == "se":
            r = r * torch.sigmoid(mlp(r.mean((2, 3)), s + "se."))[..., None, None]
        elif cfg["attention"] == "cbam":
            a = s + "cbam."
            r = r * torch.sigmoid(mlp(r.mean((2, 3)), a) + mlp(r.amax((2, 3)), a))[..., None, None]
            d = torch.cat([r.mean(1, True), r.amax(1, True)], 1)
            k = p[a + "spatial.weight"].shape[-1]
            r = r * torch.sigmoid(F.conv2d(d, p[a + "spatial.weight"], p[a + "spatial.bias"],
                                           padding=k // 2))
        sc = h
        if widths[i] != widths[i - 1]:
            sc = bn(F.conv2d(h, p[s + "shortcut.conv.weight"]), s + "shortcut.bn")
        h = F.relu(r + sc)
        if i + 1 < len(widths):
            h = F.max_pool2d(h, 2)
    return F.linear(h.mean((2, 3)), p["fc.weight"], p["fc.bias"])


def run_torch(model, x, d_logits, dtype, training):
    cfg = json.loads(model.config_json)
    p = {n: torch.tensor(np.array(model.parameter(n)), dtype=dtype, requires_grad=True)
         for n in model.parameter_names()}
    buffers = {n: torch.tensor(np.array(model.buffer(n)), dtype=dtype) for n in model.buffer_names()}
    logits = torch_cnn(p, buffers, torch.tensor(x, dtype=dtype), cfg, training)
    (logits * torch.tensor(d_logits, dtype=dtype)).sum().backward()
    out = {"logits": logits.detach().double().numpy()}
    out |= {"d_" + n: t.grad.double().numpy() for n, t in p.items()}
    out |= {"buffer_" + n: t.double().numpy() for n, t in buffers.items()}
    return out


@pytest.mark.parametrize("attention", ["none", "se", "cbam"])
@pytest.mark.parametrize("training", [True, False])
def test_cnn_matches_torch(attention, training):
    model = attnkit.ImageModel(config(attention))
    model.init_random(7)
    rng = np.random.default_rng(3)
    for n in model.parameter_names():  # non-trivial batch-norm affine parameters
        if ".bn" in n or "bn." in n:
            model.parameter(n)[...] += rng.standard_normal(model.parameter(n).shape).astype(np.float32) * 0.3
    for n in model.buffer_names():     # eval mode reads the running statistics
        b = model.buffer(n)
        b[...] = (rng.uniform(0.5, 1.5, b.shape) if n.endswith("var") else
                  rng.standard_normal(b.shape) * 0.2).astype(np.float32)
    x = rng.standard_normal((6, 1, 12, 12)).astype(np.float32)
    d_logits = rng.standard_normal((6, 5)).astype(np.float32)
    ref = run_torch(model, x, d_logits, torch.float64, training)
    pt = run_torch(model, x, d_logits, torch.float32, training)
    model.set_training(training)
    model.zero_grad()
    logits = model.forward(x)
    model.backward(d_logits)
    assert_within_bar(logits, ref["logits"], pt["logits"], 2, "logits")
    grad_scale = max(np.abs(ref["d_" + n]).max() for n in model.parameter_names())
    for n in model.parameter_names():
        assert_within_bar(model.gradient(n), ref["d_" + n], pt["d_" + n], 3, "d_" + n,
                          scale=grad_scale)
    for n in model.buffer_names():
        assert_within_bar(model.buffer(n), ref["buffer_" + n], pt["buffer_" + n], 2, n)


def test_image_model_errors_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="model_type"):
        attnkit.ImageModel('{"model_type": "lstm"}')
    with pytest.raises(ValueError, match="attention"):
        attnkit.ImageModel(json.dumps({"model_type": "cnn", "attention": "global"}))
    model = attnkit.ImageModel(config("se"))
    with pytest.raises(ValueError, match="x"):
        model.forward(np.zeros((2, 1, 10, 10), np.float32))
    with pytest.raises(ValueError, match="no tensor"):
        model.parameter("nope")
    with pytest.raises(ValueError):
        attnkit.ImageModel.load(str(tmp_path / "missing"))
    model.init_random(1)
    model.save(str(tmp_path / "m"))
    (tmp_path / "m" / "model.safetensors").write_bytes(b"\x10\x00\x00")  # truncated
    with pytest.raises(ValueError):
        attnkit.ImageModel.load(str(tmp_path / "m"))
