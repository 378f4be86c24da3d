"""The claims table of `attnkit report`: the notes' checkable claims as docs/claims.md lists them,
with the report's own measurement and verdict in place of the documented one wherever the report
measured the claim, and the rules that turn the report's numbers into verdicts.

A verdict is one of VERDICTS. Each rule below states its threshold in the `why` text it returns, so
the page says how a number became a verdict. Findings of a --tiny report are shown but never
replace a documented verdict (tiny sizes are a pipeline check, not evidence).
"""
import re
from dataclasses import dataclass
from typing import Optional

VERDICTS = ("reproduced", "partly", "not reproduced", "not tested")
_ROW = re.compile(r"^\|\s*([A-Z][0-9]+)\s*\|(.*)\|\s*$")


@dataclass
class Claim:
    """One row of docs/claims.md."""
    id: str
    section: str
    claim: str
    measured: str
    verdict: str
    why: str


@dataclass
class Finding:
    """What this report run measured for claim `id`; verdict None: informational (the run covers
    only part of the claim, so the documented verdict stands)."""
    id: str
    measured: str
    verdict: Optional[str]
    why: str


def load_claims(path):
    """Parses docs/claims.md's claim tables (`| id | claim | measured | verdict | why |` rows under
    `## section` headings); returns [Claim] in file order. Raises ValueError on a malformed row."""
    claims, section = [], ""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                section = line[3:].strip()
            m = _ROW.match(line.rstrip("\n"))
            if not m:
                continue
            cells = [c.strip() for c in m.group(2).split("|")]
            if len(cells) != 4 or cells[2] not in VERDICTS:
                raise ValueError(f"{path}: claim {m.group(1)}: expected 4 cells after the id with a verdict "
                                 f"in {VERDICTS}, got {cells}")
            claims.append(Claim(m.group(1), section, *cells))
    return claims


def table_rows(claims, findings, evidence=True):
    """[(Claim, Finding or None, verdict shown, measured shown, source, differs)]: the documented row,
    or this run's finding where it has one. `differs` is True where this run's verdict is not the
    documented one (the page flags it). With evidence=False (tiny mode) findings never set the verdict."""
    by_id = {f.id: f for f in findings}
    rows = []
    for c in claims:
        f = by_id.get(c.id)
        if f is None:
            rows.append((c, None, c.verdict, c.measured, "docs/claims.md", False))
        elif f.verdict is None or not evidence:
            note = "" if evidence else " (tiny mode: a pipeline check, not evidence)"
            rows.append((c, f, c.verdict, f"This run{note}: {f.measured} Documented: {c.measured}",
                         "docs/claims.md + this run", False))
        else:
            rows.append((c, f, f.verdict, f.measured, "this run", f.verdict != c.verdict))
    return rows


def summary(rows):
    """{verdict: count} over the shown verdicts."""
    out = {v: 0 for v in VERDICTS}
    for r in rows:
        out[r[2]] += 1
    return out


# --- rules: the report's numbers -> (verdict, why) ----------------------------------------------------

def kv_sizes(mha, gqa, mqa):
    """G2: cache bytes per 32K-token sequence (Llama-3-70B shape, f16) against the notes' 85.9 / 10.7 /
    1.34 GB (three significant figures, so within 0.5 %)."""
    notes = (85.9e9, 10.7e9, 1.34e9)
    ok = all(abs(x - n) <= 0.005 * n for x, n in zip((mha, gqa, mqa), notes))
    measured = f"{mha / 1e9:.2f} / {gqa / 1e9:.2f} / {mqa / 1e9:.3f} GB (MHA / 8 KV heads / MQA) at 32K tokens."
    return Finding("G2", measured, "reproduced" if ok else "not reproduced",
                   "Within 0.5 % of the notes' figures." if ok else "Differs from the notes' figures by more than 0.5 %.")


def decode_scaling(ms_by_hkv, heads=32):
    """G4: decode ms/token at Hkv = H, H/4, 1. Reproduced if each step down in Hkv speeds decoding by
    at least 3/4 of its byte ratio, partly if one step does."""
    h, g, q = heads, heads // 4, 1
    r1, r2 = ms_by_hkv[h] / ms_by_hkv[g], ms_by_hkv[g] / ms_by_hkv[q]
    hits = (r1 >= 0.75 * (h / g)) + (r2 >= 0.75 * (g / q))
    verdict = ("not reproduced", "partly", "reproduced")[hits]
    measured = (f"MHA / GQA = {r1:.2f}× for {h // g}× fewer bytes; GQA / MQA = {r2:.2f}× for {g}× fewer bytes "
                f"({ms_by_hkv[h]:.3f} / {ms_by_hkv[g]:.3f} / {ms_by_hkv[q]:.3f} ms per token).")
    return Finding("G4", measured, verdict, f"{hits} of 2 steps reach 3/4 of their byte ratio.")


def flash_faster(rows):
    """F2: [(L, flash ms, naive ms)]. Reproduced if flash is faster at every L >= 1024 measured
    (partly if only at some); without such L, informational."""
    long = [(n, b / a) for n, a, b in rows if n >= 1024]
    measured = "speed-up over the naive path " + ", ".join(f"{b / a:.2f}× (L = {n})" for n, a, b in rows) + "."
    if not long:
        return Finding("F2", measured, None, "No L >= 1024 measured.")
    wins = sum(s > 1 for _, s in long)
    verdict = "reproduced" if wins == len(long) else "partly" if wins else "not reproduced"
    return Finding("F2", measured, verdict, f"Flash faster at {wins} of {len(long)} lengths L >= 1024.")


def flash_memory(rows):
    """F3: [(L, RSS growth bytes, naive score bytes, tensor bytes)] of the largest L. Reproduced if
    the flash forward's peak RSS growth stays within 1.2x its tensors' bytes while the naive scores
    alone would take more than those tensors."""
    n, rss, naive, tensors = max(rows)
    ok = rss <= 1.2 * tensors and naive > tensors
    measured = (f"L = {n}: peak RSS growth {rss / 2**20:.1f} MiB for {tensors / 2**20:.1f} MiB of q, k, v, out; "
                f"the naive path's scores would take {naive / 2**20:.1f} MiB.")
    return Finding("F3", measured, "reproduced" if ok else "not reproduced",
                   "Growth within 1.2× the tensors' bytes." if ok else "Growth above 1.2× the tensors' bytes.")


def _below(shortfalls):
    """The `why` of a sink finding whose model is below the sink conditions (report_models)."""
    return ("The model is below the conditions under which sinks are reported (" + "; ".join(shortfalls) +
            "), so this is no test of the claim.")


def sink_share(mean, max_head, heads, query, shortfalls=(), position0="token 0"):
    """S1: position 0's share of query `query`'s mass. Reproduced if a head gives it more than half,
    partly if a head gives it more than 0.3; informational for a model below the sink conditions
    (`shortfalls`, from report_models.ModelInfo.shortfalls)."""
    verdict = "reproduced" if max_head > 0.5 else "partly" if max_head > 0.3 else "not reproduced"
    measured = (f"{position0} gets {mean:.4f} of query {query}'s mass on average over {heads} heads, at most "
                f"{max_head:.4f} in one head (uniform: {1 / (query + 1):.4f}).")
    if shortfalls:
        return Finding("S1", measured, None, _below(shortfalls))
    return Finding("S1", measured, verdict, "Thresholds: a head above 0.5 (reproduced) or above 0.3 (partly).")


def massive_activations(hidden_ratio, key_ratio, shortfalls=()):
    """S5: position 0's hidden-state and key L2 norms over the median position's (largest over layers
    and heads). Reproduced if the hidden-state ratio reaches 10 (an outlier of an order of magnitude),
    partly from 3; informational for a model below the sink conditions."""
    verdict = "reproduced" if hidden_ratio >= 10 else "partly" if hidden_ratio >= 3 else "not reproduced"
    measured = (f"position 0's hidden-state norm is at most {hidden_ratio:.2f}× the median position's over the "
                f"layers, its key norm at most {key_ratio:.2f}×.")
    if shortfalls:
        return Finding("S5", measured, None, _below(shortfalls))
    return Finding("S5", measured, verdict, "Thresholds: hidden-state norm ratio 10× (reproduced), 3× (partly).")


def eviction(window, sink, dense, shortfalls=(), kept="the first 4 tokens"):
    """S6 and S7 from streaming perplexities past the training context. S6: reproduced if evicting
    the first tokens (window) costs at least 10x the sink cache's perplexity, partly from 1.5x;
    informational for a model below the sink conditions. S7: reproduced if dense is at least 5 %
    above the sink cache past the context (no sink needed)."""
    r = window / sink
    measured = f"past the context: window {window:.3f}, sink cache keeping {kept} {sink:.3f} ({r:.2f}×)."
    if shortfalls:
        s6 = Finding("S6", measured, None, _below(shortfalls))
    else:
        s6 = Finding("S6", measured, "reproduced" if r >= 10 else "partly" if r >= 1.5 else "not reproduced",
                     "Thresholds: 10× (reproduced), 1.5× (partly).")
    s7 = Finding("S7", f"past the context: dense {dense:.3f} against {sink:.3f} for the sink cache.",
                 "reproduced" if dense >= 1.05 * sink else "not reproduced", "Threshold: dense 5 % above.")
    return [s6, s7]


def sink_token(max_share, evicted, kept, shortfalls=()):
    """S9, for a model pretrained with a learned sink token at position 0: reproduced if a head gives
    the token more than 0.3 of its mass and evicting it raises the perplexity past the context by at
    least 1.5x; partly if one of the two holds; informational below the sink conditions."""
    hits = (max_share > 0.3) + (evicted >= 1.5 * kept)
    measured = (f"the learned sink token gets at most {max_share:.4f} of the last query's mass in one head; "
                f"evicting it: perplexity past the context {evicted:.3f} against {kept:.3f} with it kept.")
    if shortfalls:
        return Finding("S9", measured, None, _below(shortfalls))
    return Finding("S9", measured, ("not reproduced", "partly", "reproduced")[hits],
                   f"{hits} of 2 hold: a head above 0.3 on the token; eviction costing 1.5×.")


def gate_sink(plain_mean, plain_max, gated_mean):
    """Q3: position 0's mean share without and with the gate (same shape and training). Reproduced if
    the gate cuts it at least 5x (the notes: 46.7 % to 4.8 %), partly from 2x; informational when
    the ungated model has no head above 0.3 on position 0 (no sink to remove)."""
    measured = f"position 0's mean share {plain_mean:.4f} without the gate, {gated_mean:.4f} with it."
    if plain_max <= 0.3:
        return Finding("Q3", measured, None, f"The ungated model has no sink to remove (largest head {plain_max:.4f}).")
    r = plain_mean / max(gated_mean, 1e-12)
    return Finding("Q3", measured, "reproduced" if r >= 5 else "partly" if r >= 2 else "not reproduced",
                   f"Cut {r:.1f}×; thresholds 5× (reproduced), 2× (partly).")


def gate_mean(mean):
    """Q2: the notes' mean gate of about 0.116; reproduced within [0.08, 0.16]."""
    ok = 0.08 <= mean <= 0.16
    return Finding("Q2", f"mean gate {mean:.3f}.", "reproduced" if ok else "not reproduced",
                   "Threshold: within 0.08–0.16 of the notes' 0.116.")


def deformable_slope(deform, dense):
    """D1: fitted log-log slopes of time against N; reproduced if deformable's is below 1.5 and dense's
    above 1.7 (O(NK) against O(N²))."""
    ok = deform < 1.5 and dense > 1.7
    return Finding("D1", f"slopes {deform:.2f} (deformable) and {dense:.2f} (dense flash).",
                   "reproduced" if ok else "not reproduced", "Thresholds: deformable < 1.5, dense > 1.7.")


def conversion(loss_mean, loss_first, kv):
    """G6 (part): validation loss right after converting to `kv` KV heads, no uptraining.
    Informational: the claim is about conversion plus uptraining."""
    better = "mean pooling" if loss_mean < loss_first else "the group's first head"
    return Finding("G6", f"right after conversion to {kv} KV head(s), no uptraining: mean {loss_mean:.4f}, "
                         f"first {loss_first:.4f} nats ({better} better).", None,
                   "Covers conversion only, not uptraining.")


def cnn_attention(acc):
    """C1 (part): {attention: test accuracy} of one short run each. Informational: one seed."""
    return Finding("C1", "one short run each: " + ", ".join(f"{k} {v:.4f}" for k, v in acc.items()) + ".", None,
                   "One seed of a short run cannot resolve differences of this size.")


def kv_read_time(mha_seconds, gqa_seconds):
    """G3: seconds to read one 32K-token cache at 3.35 TB/s (the planner's read_seconds) against the
    notes' roughly 26 ms (MHA) and 3.2 ms (8 KV heads); reproduced within 5 %."""
    ok = abs(mha_seconds - 0.026) <= 0.05 * 0.026 and abs(gqa_seconds - 0.0032) <= 0.05 * 0.0032
    return Finding("G3", f"{1e3 * mha_seconds:.2f} ms (MHA) and {1e3 * gqa_seconds:.2f} ms (8 KV heads) per decoded "
                         "token at 3.35 TB/s.", "reproduced" if ok else "not reproduced",
                   "Within 5 % of the notes' 26 and 3.2 ms." if ok else "More than 5 % from the notes' 26 and 3.2 ms.")


def bert_positions(bert_percent):
    """B1: BERT's share of real tokens that carry a loss (GPT: every position); reproduced within
    12-18 % of the notes' 15 %."""
    ok = 12 <= bert_percent <= 18
    return Finding("B1", f"BERT's masked LM put a loss on {bert_percent:.1f} % of real tokens, GPT's causal LM on "
                         "every position.", "reproduced" if ok else "not reproduced", "Threshold: 12–18 %.")


def vit_vs_cnn(vit_acc, cnn_acc, epochs, images):
    """T2 (part): ViT against the best CNN at equal epochs on little data. Informational: the claim's
    other half (it scales effectively) is not measured."""
    lower = "below" if vit_acc < cnn_acc else "not below"
    return Finding("T2", f"after {epochs} epoch(s) on {images} images: ViT {vit_acc:.4f}, best CNN {cnn_acc:.4f} "
                         f"(ViT {lower}).", None, "Covers learning speed on little data, not scaling.")
