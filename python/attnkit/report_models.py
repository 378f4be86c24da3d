"""The GPT models of `attnkit report`'s sink, streaming, gate and conversion sections: what a model
is (shape from its config.json, training budget from the training command that made it) and how
that budget compares with the conditions under which attention sinks are reported to appear.

A model is either trained by the report (its training command is one the report executed) or an
existing run directory given with --sink-model / --gate-model (its training command is the one
recorded in DIR/commands.log by the script that trained it, e.g. scripts/experiments/sink_emergence;
the page shows it as recorded, never as run by the report).

The conditions (docs/claims.md, "Sink emergence at context 512"): Gu et al. (ICLR 2025) see sinks
after about 1-2 k training steps and from context 256 up, not with windows of 64-128; StreamingLLM
(Xiao et al., ICLR 2024) sees them beyond the bottom two layers.
"""
import json
import os
import shlex
from dataclasses import dataclass, field
from typing import List, Optional

MIN_STEPS = 1000    # Gu et al.: sinks after about 1-2 k steps
MIN_CONTEXT = 256   # Gu et al.: from context 256 up
MIN_LAYERS = 3      # StreamingLLM: beyond the bottom two layers

# The report's own sink model for --quick and the full report: the shape of
# scripts/experiments/sink_emergence (Llama, 6 layers, d_model 128, 4 heads of 32, context 512).
SINK_SHAPE = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "vocab_size": 262, "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 32,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
# --tiny: the pipeline check (seconds), 2 layers at context 128.
TINY_SHAPE = dict(SINK_SHAPE, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=128)


@dataclass
class ModelInfo:
    """A GPT run directory's shape and training budget (None: not recorded)."""
    path: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    context: int
    registers: int
    gate: str
    sink: str
    steps: Optional[int]
    batch: Optional[int]
    seq: Optional[int]
    schedule: Optional[int] = None  # --steps of the training command (the learning-rate schedule's length)
    trained_by: List[str] = field(default_factory=list)  # training commands as recorded
    recorded_in: Optional[str] = None  # where trained_by was read (None: executed by the report)

    @property
    def tokens(self):
        """Training tokens (steps x batch x seq), None if any is unknown."""
        if None in (self.steps, self.batch, self.seq):
            return None
        return self.steps * self.batch * self.seq

    def shortfalls(self):
        """The sink conditions this model does not meet, as phrases (empty: it meets all three)."""
        out = []
        if self.steps is None:
            out.append("training steps not recorded")
        elif self.steps < MIN_STEPS:
            out.append(f"{self.steps} training steps < {MIN_STEPS}")
        if self.context < MIN_CONTEXT:
            out.append(f"context {self.context} < {MIN_CONTEXT}")
        if self.layers < MIN_LAYERS:
            out.append(f"{self.layers} layers (sinks are reported beyond the bottom two)")
        return out

    def shape_text(self):
        extras = []
        if self.registers:
            extras.append(f"{self.registers} learned sink token{'s' if self.registers > 1 else ''} at position 0")
        if self.gate != "none":
            extras.append(f"{self.gate} output gate")
        if self.sink != "none":
            extras.append(f"{self.sink} sink logit")
        return (f"{self.layers} layers, d_model {self.d_model}, {self.heads} heads ({self.kv_heads} KV heads), "
                f"context {self.context}" + "".join(", " + e for e in extras))

    def budget_text(self):
        """One paragraph: the model, its budget, and whether a sink can be expected of it."""
        if self.steps is None:
            budget = "training steps not recorded"
        elif self.tokens is None:
            budget = f"{self.steps} steps (tokens per step not recorded)"
        else:
            n = f"{self.tokens / 1e6:.2f} M" if self.tokens >= 10**5 else f"{self.tokens}"
            budget = f"{self.steps} steps of {self.batch} × {self.seq} tokens ({n} tokens)"
        if self.schedule and self.steps is not None and self.schedule > self.steps:
            budget += f", checkpoint of a {self.schedule}-step schedule"
        short = self.shortfalls()
        verdict = (f"Below the conditions under which sinks are reported ({'; '.join(short)}): a sink is not "
                   "expected of this model, and its absence here does not test the claims."
                   if short else
                   "It meets the step, context and depth conditions under which sinks are reported (Gu et al.: "
                   f"after about 1–2 k steps, from context {MIN_CONTEXT}; StreamingLLM: beyond the bottom two "
                   "layers), with far fewer tokens than the pretrained models those papers measure.")
        return f"Model {self.path}: {self.shape_text()}; trained {budget}. {verdict}"


def flag_value(argv, flag):
    """The value after `flag` in an argument list, or None."""
    for i, a in enumerate(argv[:-1]):
        if a == flag:
            return argv[i + 1]
    return None


def recorded_train_commands(run_dir):
    """The `train gpt` command lines recorded in RUN_DIR/commands.log ('$ ' lines) that made the run
    in it: from the last one that started training afresh (no --resume) on, in order."""
    try:
        lines = open(os.path.join(run_dir, "commands.log"), encoding="utf-8").read().splitlines()
    except OSError:
        return []
    cmds = [line[2:] for line in lines if line.startswith("$ ") and " train gpt " in f" {line[2:]} "]
    fresh = [i for i, c in enumerate(cmds) if "--resume" not in shlex.split(c)]
    return cmds[fresh[-1]:] if fresh else cmds


def committed_step(run_dir):
    """The step of RUN_DIR's committed checkpoint (`latest` and its manifest), None if it has none."""
    try:
        name = open(os.path.join(run_dir, "latest")).read().strip()
        return int(json.load(open(os.path.join(run_dir, name, "manifest.json")))["step"])
    except (OSError, ValueError, KeyError):
        return None


def kept_checkpoint(run_dir):
    """(step, run directory) for a checkpoint kept by scripts/experiments/sink_emergence as
    RUN/ckpt/step_<N>; None for any other directory."""
    parent, name = os.path.split(os.path.normpath(run_dir))
    if os.path.basename(parent) == "ckpt" and name.startswith("step_") and name[5:].isdigit():
        return int(name[5:]), os.path.dirname(parent)
    return None


def describe(run_dir, train_argv=None):
    """ModelInfo of RUN_DIR. train_argv: the training command the report executed (its --steps,
    --batch and --seq are the budget); without it, the budget is the committed checkpoint's step and
    the last training command recorded in RUN_DIR/commands.log (for a kept checkpoint RUN/ckpt/step_N:
    step N and RUN/commands.log)."""
    cfg = json.load(open(os.path.join(run_dir, "config.json")))
    heads = int(cfg["num_attention_heads"])
    recorded_in = None
    if train_argv is not None:
        commands, argv = [], [str(a) for a in train_argv]
        steps = int(flag_value(argv, "--steps"))
    else:
        kept = kept_checkpoint(run_dir)
        steps, log_dir = kept if kept else (committed_step(run_dir), run_dir)
        commands = recorded_train_commands(log_dir)
        argv = shlex.split(commands[-1]) if commands else []
        recorded_in = os.path.join(log_dir, "commands.log")
    batch, seq, schedule = (flag_value(argv, f) for f in ("--batch", "--seq", "--steps"))
    return ModelInfo(path=run_dir, layers=int(cfg["num_hidden_layers"]), d_model=int(cfg["hidden_size"]),
                     heads=heads, kv_heads=int(cfg.get("num_key_value_heads", heads)),
                     context=int(cfg["max_position_embeddings"]), registers=int(cfg.get("attnkit_registers", 0)),
                     gate=cfg.get("attnkit_gate", "none"), sink=cfg.get("attnkit_sink", "none"), steps=steps,
                     batch=int(batch) if batch else None, seq=int(seq) if seq else None,
                     schedule=int(schedule) if schedule else None,
                     trained_by=commands, recorded_in=recorded_in)
