#pragma once
// The matplotlib scripts behind --plot, run with Debian's python3 (python3-matplotlib, installed
// by scripts/setup). Kept in the binary so the CLI needs no files beside it.

namespace attnkit::cli {

// argv: profile.json out.png. Log-scale bars of the mean attention mass by key position, one
// panel per layer (the StreamingLLM figure).
inline constexpr const char* kSinkProfilePlot = R"PY(
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
p = json.load(open(sys.argv[1]))
layers = p["layers"]
fig, axes = plt.subplots(len(layers), 1, figsize=(7, 1.6 * len(layers) + 0.6), sharex=True, squeeze=False)
for ax, layer in zip(axes[:, 0], layers):
    mass = layer["mass"]
    ax.bar(range(len(mass)), [max(m, 1e-6) for m in mass], width=1.0, color="tab:blue")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, 1.0)
    label = "layer %d: token 0 %.2f" % (layer["layer"], layer["token0"])
    if p["has_sink_logit"]:
        label += ", sink logit %.2f" % layer["sink_logit"]
    ax.set_title(label, fontsize=8, loc="left")
    ax.tick_params(labelsize=7)
axes[-1, 0].set_xlabel("key position (query at %d, mean over heads and %d windows)" % (p["query_pos"], p["windows"]), fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=80)
)PY";

// argv: stream.csv out.png context. Chunk perplexity against tokens streamed, log scale.
inline constexpr const char* kStreamPlot = R"PY(
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
lines = open(sys.argv[1]).read().splitlines()
meta = dict(kv.split("=") for kv in lines[0][2:].split())
rows = [l.split(",") for l in lines[2:]]
x = [int(r[0]) for r in rows]
y = [float(r[2]) for r in rows]
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(x, y, lw=1, label="%s (window %s, sink tokens %s)" % (meta["policy"], meta["window"], meta["sink_tokens"]))
ax.axvline(int(sys.argv[3]), color="gray", ls=":", lw=1, label="training context")
ax.set_yscale("log")
ax.set_xlabel("tokens streamed")
ax.set_ylabel("perplexity (chunk)")
ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=80)
)PY";

}  // namespace attnkit::cli
