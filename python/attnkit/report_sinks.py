"""The GPT sections of `attnkit report`: attention sinks, perplexity against tokens streamed, gate
activations and GQA conversion. They measure the models of attnkit.report_models: by default a plain
and a head-wise-gated GPT the report trains (--tiny: 2 layers at context 128, a pipeline check;
--quick and full: 6 layers at context 512, the shape of scripts/experiments/sink_emergence), or
existing run directories given with --sink-model and --gate-model. Each section states the model's
shape and training budget and whether the budget meets the conditions under which sinks are
reported; below them, the sink findings are informational and the documented verdicts stand.
"""
import json
import os
import shlex
import shutil

from attnkit import report_claims as rc
from attnkit import report_models as rm

STREAM_FACTOR = {"tiny": 2, "quick": 2, "full": 4}  # streamed tokens / the model's context


def stream_points(csv_path, chunk):
    """(tokens streamed, perplexity of the chunk ending there) from eval-stream's CSV."""
    import csv
    import math
    with open(csv_path) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    nll = [float(row["nll"]) for row in rows]
    return [(i + chunk, math.exp(sum(nll[i:i + chunk]) / len(nll[i:i + chunk])))
            for i in range(0, len(nll), chunk) if nll[i:i + chunk]]


def train(r, name, config_keys):
    """Trains work/NAME at the mode's size with the mode's shape plus config_keys; returns its ModelInfo
    (budget from the executed command)."""
    shape = rm.TINY_SHAPE if r.mode == "tiny" else rm.SINK_SHAPE
    cfg_path = os.path.join(r.work, f"{name}_config.json")
    with open(r.path(cfg_path), "w") as f:
        json.dump({**shape, **config_keys}, f)
    steps, out = r.size["gpt_steps"], os.path.join(r.work, name)
    mark = r.mark()
    r.run("train", "gpt", "--config", cfg_path, "--out", out, "--data", "bible", "--steps", steps,
          "--batch", r.size["gpt_batch"], "--seq", shape["max_position_embeddings"], "--lr", "3e-3",
          "--warmup", max(1, steps // 10), "--eval-every", 0, "--checkpoint-every", 0, "--quiet", "--overwrite")
    [cmd] = r.since(mark)
    info = rm.describe(r.path(out), shlex.split(cmd))
    info.path = out
    return info, [cmd]


def existing(path):
    """ModelInfo of an existing run directory (budget as recorded in it); no command executed."""
    return rm.describe(os.path.abspath(path)), []


def models(r):
    """{"sink": (ModelInfo, [executed training command]), "gate": (...)}; trains what was not given."""
    sink = existing(r.sink_model) if r.sink_model else train(r, "gpt", {})
    gate = existing(r.gate_model) if r.gate_model else train(r, "gpt_gated", {"attnkit_gate": "headwise"})
    return {"sink": sink, "gate": gate}


def provenance(info):
    """Text on how the model was trained: its shape and budget, and where an existing run's training
    command was read (the page lists it via recorded())."""
    text = info.budget_text()
    if info.recorded_in is None:
        return text
    if not info.trained_by:
        return text + f" Its training command is not recorded ({info.recorded_in} has no `train gpt` line)."
    return text + f" Its training commands are listed below as recorded in {info.recorded_in}."


def recorded(info):
    """The recorded training commands the page lists for an existing run: all of them if there are at
    most two, else the first and the last (a staged run records one per stage, the later ones
    resuming), each with where it was recorded."""
    cmds = info.trained_by
    if info.recorded_in is None or not cmds:
        return []
    if len(cmds) <= 2:
        return [(info.recorded_in, c) for c in cmds]
    return [(f"{info.recorded_in}, first of {len(cmds)}", cmds[0]),
            (f"{info.recorded_in}, last of {len(cmds)}", cmds[-1])]


def comparable(a, b):
    """True when two models differ at most in their gate (same shape, sink mechanism and budget)."""
    keys = ("layers", "d_model", "heads", "kv_heads", "context", "registers", "sink", "steps", "batch", "seq")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def profile_summary(prof):
    """(mean share of position 0, largest head share, heads, [per-layer rows], hidden ratio, key ratio)."""
    def ratio(row):
        rest = sorted(row[4:])
        med = rest[len(rest) // 2] if rest else 0
        return row[0] / med if med > 0 else float("nan")
    shares = [[h["mass"][0] for h in layer["heads"]] for layer in prof["layers"]]
    flat = [x for layer in shares for x in layer]
    hidden = [ratio(row) for row in prof["hidden_norm"]]
    keys = [max(ratio(row) for row in layer) for layer in prof["key_norm"]]
    rows = [[i, f"{sum(s) / len(s):.4f}", f"{max(s):.4f}", sum(x > 0.3 for x in s), f"{hidden[i]:.2f}",
             f"{keys[i]:.2f}"] for i, s in enumerate(shares)]
    return sum(flat) / len(flat), max(flat), len(flat), rows, max(hidden), max(keys)


def sinks(r, info, train_cmds):
    """The attention-sink section; returns the profile summary."""
    q = info.context - 1
    mark = r.mark()
    prof = r.json("sink-profile", "--model", info.path, "--data", "bible", "--query-pos", q,
                  "--windows", r.size["eval_windows"])
    mean, top, heads, rows, hidden, key = summary = profile_summary(prof)
    early_q = min(64, info.context // 2)  # sinks can be query-dependent: an early query too
    early = r.json("sink-profile", "--model", info.path, "--data", "bible", "--query-pos", early_q,
                   "--windows", r.size["eval_windows"])
    early_rows = profile_summary(early)[3]
    rows = [row[:3] + [early_row[2]] + row[3:] for row, early_row in zip(rows, early_rows)]
    buckets = {k: prof["overall"][k] for k in ("token0", "tokens1_3", "middle", "recent")}

    def draw(ax):
        ax.bar(list(buckets), [max(float(v), 1e-6) for v in buckets.values()])
        ax.set_yscale("log")
        ax.set_ylabel(f"mean attention mass of query {q}")
        ax.tick_params(axis="x", labelsize=7)
    fig = r.figure("sink_mass.png", draw)
    short = info.shortfalls()
    pos0 = "the learned sink token (position 0)" if info.registers else "token 0"
    findings = [rc.sink_share(mean, top, heads, q, short, pos0), rc.massive_activations(hidden, key, short)]
    r.section("Attention sinks", f"Attention mass of query {q} (the last position of the context) by key position, "
              "averaged over heads and windows of the KJV Bible's validation text (float64 from the model's own q "
              "and k); the table gives position 0's share per layer, the heads above 0.3, and position 0's "
              f"hidden-state and key norms over the median position's (query {q}), and the largest head share "
              f"of position 0 at the early query {early_q}. " + provenance(info),
              train_cmds + r.since(mark), fig,
              [["layer", "position-0 share (mean)", "largest head", f"largest head, query {early_q}",
                "heads > 0.3", "hidden ‖x₀‖/median", "key ‖k₀‖/median (max head)"]] + rows, findings, recorded(info))
    return summary


def streams(r, info, train_cmds, top_share):
    """The streaming section: dense, window and sink caches (and, for a model with a learned sink
    token, the cache that keeps exactly it); top_share: the sink section's largest head share."""
    ctx, regs = info.context, info.registers
    tokens = STREAM_FACTOR[r.mode] * ctx + 1
    policies = [("dense", ["--policy", "dense"]), ("window", ["--policy", "window", "--window", ctx]),
                ("sink", ["--policy", "sink", "--sink-tokens", 4, "--window", ctx - 4])]
    if regs:
        policies.append(("sink token", ["--policy", "sink", "--sink-tokens", regs, "--window", ctx - regs]))
    mark = r.mark()
    curves, finals = {}, {}
    for key, extra in policies:
        csv_path = os.path.join(r.work, f"stream_{key.replace(' ', '_')}.csv")
        finals[key] = r.json("eval-stream", "--model", info.path, "--data", "bible", *extra, "--tokens", tokens,
                             "--chunk", 64, "--csv", csv_path)
        curves[key] = stream_points(r.path(csv_path), 64)

    def draw(ax):
        for key, pts in curves.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=key)
        ax.axvline(ctx, color="gray", linestyle=":", label="training context")
        ax.set_xlabel("tokens streamed")
        ax.set_ylabel("perplexity (per 64-token chunk)")
        ax.legend(fontsize=8)
    fig = r.figure("stream_perplexity.png", draw)
    past = {k: j["ppl_past_context"] for k, j in finals.items()}
    kept = "sink token" if regs else "sink"
    findings = rc.eviction(past["window"], past[kept], past["dense"], info.shortfalls(),
                           "the learned sink token" if regs else f"the first {finals['sink']['sink_tokens']} tokens")
    if regs:
        findings.append(rc.sink_token(top_share, past["window"], past["sink token"], info.shortfalls()))
    r.section("Perplexity vs tokens streamed", f"Perplexity of each 64-token chunk of {tokens} tokens of the KJV Bible's "
              "validation text streamed through each cache (the table gives each cache's first tokens kept and "
              f"window, as run); the model was trained on {ctx}-token windows (dotted line). " + provenance(info),
              train_cmds + r.since(mark), fig,
              [["cache", "first tokens kept", "window", "perplexity", "perplexity past the context"]] +
              [[k, j["sink_tokens"], j["window"], f"{j['ppl']:.3f}", f"{j['ppl_past_context']:.3f}"]
               for k, j in finals.items()], findings, recorded(info))


def gates(r, info, train_cmds, plain):
    """The gate section; `plain`: (ModelInfo, profile summary) of the ungated model, for Q3."""
    q = info.context - 1
    mark = r.mark()
    gp = r.json("sink-profile", "--model", info.path, "--data", "bible", "--query-pos", q,
                "--windows", r.size["eval_windows"], "--gates")
    heads = [h for layer in gp["layers"] for h in layer["heads"]]
    hist = [sum(h["gate_hist"][i] for h in heads) / len(heads) for i in range(len(heads[0]["gate_hist"]))]
    mean = gp["gate_mean"]
    gated_share = profile_summary(gp)[0]

    def draw(ax):
        ax.bar([f"{i / len(hist):.1f}" for i in range(len(hist))], hist)
        ax.set_xlabel("gate value sigmoid(g) (bin start)")
        ax.set_ylabel("fraction")
        ax.set_title(f"{info.gate} gate, mean {mean:.3f}")
    fig = r.figure("gates.png", draw)
    findings = [rc.gate_mean(mean)]
    plain_info, plain_summary = plain
    if comparable(info, plain_info):
        findings.append(rc.gate_sink(plain_summary[0], plain_summary[1], gated_share))
        q3 = f" The ungated model of the sink section ({plain_info.path}) has the same shape and training."
    else:
        q3 = (f" Q3 (the gate removes the first-token sink) is not measured: this model and the ungated one "
              f"({plain_info.path}) differ in more than the gate.")
    r.section("Gate activations", f"Histogram of the {info.gate} output gate's values over the profiled tokens, and "
              "the mean gate per layer. " + provenance(info) + q3,
              train_cmds + r.since(mark), fig,
              [["layer", "mean gate"]] + [[i, f"{layer['gate_mean']:.4f}"] for i, layer in enumerate(gp["layers"])] +
              [["all", f"{mean:.4f}"]], findings, recorded(info))


def conversion(r, info, train_cmds):
    """MHA/GQA -> MQA conversion of the sink model by mean pooling and by the group's first head."""
    mark = r.mark()
    loss = {"base": float(r.run("eval", "--model", info.path, "--data", "bible",
                                "--windows", r.size["eval_windows"]).split()[1])}
    for method in ("mean", "first"):
        out = os.path.join(r.work, f"gqa_1_{method}")
        shutil.rmtree(r.path(out), ignore_errors=True)  # the report's own output of an earlier run
        r.run("convert-gqa", "--in", info.path, "--out", out, "--kv-heads", 1, "--method", method)
        loss[method] = float(r.run("eval", "--model", out, "--data", "bible",
                                   "--windows", r.size["eval_windows"]).split()[1])
    r.section("GQA conversion", f"Validation loss after converting the model's {info.kv_heads} KV heads to 1 "
              "(no uptraining). " + provenance(info), train_cmds + r.since(mark), None,
              [["KV heads", "method", "validation loss"], [info.kv_heads, "(trained)", f"{loss['base']:.4f}"]] +
              [[1, m, f"{loss[m]:.4f}"] for m in ("mean", "first")],
              [rc.conversion(loss["mean"], loss["first"], 1)], recorded(info))


def run_all(r):
    """The four GPT sections, in order."""
    m = models(r)
    (sink_info, sink_cmds), (gate_info, gate_cmds) = m["sink"], m["gate"]
    summary = sinks(r, sink_info, sink_cmds)
    streams(r, sink_info, sink_cmds, summary[1])
    gates(r, gate_info, gate_cmds, (sink_info, summary))
    conversion(r, sink_info, sink_cmds)
