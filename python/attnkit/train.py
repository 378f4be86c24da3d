"""attnkit.train: optimizer, learning-rate schedule, gradient clipping, byte tokenizer, sampler,
and the model presets of ``attnkit train gpt|bert --preset``.

Parameters and gradients are float32 numpy arrays updated in place (C-contiguous, no copies).
PyTorch equivalents: ``torch.optim.AdamW`` (1.13, single-tensor path) and
``torch.nn.utils.clip_grad_norm_``.
"""
import numpy as _np

from ._attnkit import _train as _t
from ._attnkit import Error
from ._attnkit._train import (BERT_PRESETS, END_OF_TEXT, GPT_PRESETS, PAD, VOCAB_SIZE, decode, encode,
                              global_grad_norm, is_bias_or_norm, sample_batch, warmup_cosine_lr)

__all__ = [
    "AdamW", "clip_grad_norm", "global_grad_norm", "warmup_cosine_lr", "is_bias_or_norm",
    "encode", "decode", "sample_batch", "VOCAB_SIZE", "END_OF_TEXT", "PAD",
    "gpt_preset", "bert_preset", "GPT_PRESETS", "BERT_PRESETS",
]


def gpt_preset(name):
    """config.json (dict) of GPT preset ``name`` (one of GPT_PRESETS), as ``attnkit train gpt
    --preset`` uses it; ``attnkit._attnkit._GptModel(json.dumps(config))`` builds the model."""
    import json
    return json.loads(_t.gpt_preset(str(name)))


def bert_preset(name):
    """config.json (dict) of BERT preset ``name`` (one of BERT_PRESETS), before ``attnkit train
    bert`` sets the architecture from its --objective."""
    import json
    return json.loads(_t.bert_preset(str(name)))


def _as_list(grads):
    return list(grads.values()) if isinstance(grads, dict) else list(grads)


def clip_grad_norm(grads, max_norm):
    """Scales float32 gradients (list or dict of arrays) in place to global L2 norm <= max_norm.

    Returns the norm before clipping (float64), like ``torch.nn.utils.clip_grad_norm_``; a
    non-finite norm is returned with the gradients left untouched.
    """
    return _t.clip_grad_norm(_as_list(grads), float(max_norm))


class AdamW:
    """AdamW over ``params`` {name: float32 array}, reading ``grads`` {name: array} at each step.

    Same update as ``torch.optim.AdamW(lr, betas, eps, weight_decay)`` in PyTorch 1.13. Weight
    decay skips the parameters ``no_decay`` selects: a predicate on the name (default:
    biases and normalisation weights), a collection of names, or None (decay everything).
    The arrays must stay alive and in place; refill the gradient arrays between steps.
    """

    def __init__(self, params, grads, *, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 no_decay=is_bias_or_norm):
        names = list(params)
        if set(grads) != set(names):
            raise Error(f"grads: names {sorted(grads)} differ from params {names}")
        for n in names:
            if _np.shape(grads[n]) != _np.shape(params[n]):
                raise Error(f"grads[{n!r}]: shape {_np.shape(grads[n])} != the parameter's "
                                 f"{_np.shape(params[n])}")
        if no_decay is None:
            mask = [True] * len(names)
        elif callable(no_decay):
            mask = [not no_decay(n) for n in names]
        else:
            excluded = set(no_decay)
            mask = [n not in excluded for n in names]
        self._opt = _t._AdamW(names, [params[n] for n in names], [grads[n] for n in names],
                              float(betas[0]), float(betas[1]), float(eps),
                              float(weight_decay), mask)

    def step(self, lr):
        """One update of every parameter (in place) with learning rate ``lr``."""
        self._opt.step(float(lr))

    @property
    def step_count(self):
        """Steps taken so far (t of the last update)."""
        return self._opt.step_count

    @step_count.setter
    def step_count(self, t):
        self._opt.step_count = int(t)

    def state(self):
        """Moments as {"<name>.exp_avg": m, "<name>.exp_avg_sq": v} (float32 copies)."""
        return self._opt.state()

    def save_state(self, path):
        """Writes the moments and step count to a safetensors file."""
        self._opt.save_state(str(path))

    def load_state(self, path):
        """Restores moments and step count written by save_state."""
        self._opt.load_state(str(path))
