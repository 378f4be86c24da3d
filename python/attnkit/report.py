"""attnkit report: runs the experiments of the project's issues at sizes that fit this machine and
writes OUT/index.html with PNG figures and tables. Every number in it is measured by the run that
wrote it; every figure names the command and the machine that produced it.

Run through the CLI: ``attnkit report --out DIR [--quick | --tiny]``. Sizes:
  --tiny   seconds; the pipeline check the test suite runs (numbers are not meaningful)
  --quick  under 15 minutes on a 2-core machine
  (none)   the full sizes, about an hour on a 2-core machine
"""
import argparse
import datetime
import html
import json
import os
import platform
import subprocess
import sys
import time

SIZES = {  # mode -> experiment sizes
    "tiny": dict(flash_lens=[64, 128], flash_shape=(4, 2, 32), decode_context=512, gpt_steps=3,
                 stream_tokens=160, sides=[4, 8, 16], vision_images=64, vision_epochs=1, bert_steps=3,
                 threads=1, gpt_batch=2, eval_windows=4),
    "quick": dict(flash_lens=[256, 512, 1024, 2048], flash_shape=(32, 8, 128), decode_context=16384,
                  gpt_steps=300, stream_tokens=1024, sides=[4, 8, 16, 32, 64], vision_images=6000,
                  vision_epochs=1, bert_steps=60, threads=0, gpt_batch=8, eval_windows=64),
    "full": dict(flash_lens=[256, 512, 1024, 2048, 4096], flash_shape=(32, 8, 128), decode_context=65536,
                 gpt_steps=1500, stream_tokens=4096, sides=[4, 8, 16, 32, 64, 96], vision_images=60000,
                 vision_epochs=2, bert_steps=300, threads=0, gpt_batch=8, eval_windows=256),
}


def stream_points(csv_path, chunk):
    """(tokens streamed, perplexity of the chunk ending there) from eval-stream's CSV."""
    import csv
    import math
    with open(csv_path) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    nll = [float(r["nll"]) for r in rows]
    return [(i + chunk, math.exp(sum(nll[i:i + chunk]) / len(nll[i:i + chunk])))
            for i in range(0, len(nll), chunk) if nll[i:i + chunk]]


class Report:
    def __init__(self, cli, out, mode):
        self.cli, self.out, self.mode, self.size = cli, out, mode, SIZES[mode]
        self.sections = []
        os.makedirs(out, exist_ok=True)
        self.work = os.path.join(out, "work")
        os.makedirs(self.work, exist_ok=True)
        self.log = open(os.path.join(out, "commands.log"), "w")

    def run(self, *args):
        """Runs `attnkit ARGS`; returns stdout; logs the command. Raises on failure."""
        args = [str(a) for a in args]
        if self.size["threads"] and args[0] not in ("kv-plan", "convert-gqa", "eval"):
            args += ["--threads", str(self.size["threads"])]
        shown = "attnkit " + " ".join(args)
        print("$ " + shown, file=sys.stderr, flush=True)
        t0 = time.time()
        p = subprocess.run([self.cli] + args, capture_output=True, text=True)
        self.log.write(f"$ {shown}\n# exit {p.returncode}, {time.time() - t0:.1f} s\n{p.stderr[-2000:]}\n")
        self.log.flush()
        if p.returncode != 0:
            raise RuntimeError(f"{shown} failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")
        return p.stdout

    def json(self, *args):
        return json.loads(self.run(*args, "--json"))

    def section(self, title, text, commands, figure=None, table=None):
        self.sections.append(dict(title=title, text=text, commands=commands, figure=figure, table=table))

    def figure(self, name, draw):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=100)
        draw(ax)
        fig.tight_layout()
        fig.savefig(os.path.join(self.out, name))
        plt.close(fig)
        return name

    # --- experiments -------------------------------------------------------------------------
    def kv_cache(self):
        contexts = [4096, 32768, 131072]
        rows = []
        for s in contexts:
            j = self.json("kv-plan", "--preset", "llama3-70b", "--context", s)
            rows.append((s, j["mha"]["bytes_per_sequence"], j["bytes_per_sequence"], j["mqa"]["bytes_per_sequence"]))

        def draw(ax):
            import numpy as np
            x = np.arange(len(contexts))
            for i, (label, col) in enumerate([("MHA (64 KV heads)", 1), ("GQA (8)", 2), ("MQA (1)", 3)]):
                ax.bar(x + (i - 1) * 0.27, [r[col] / 1e9 for r in rows], 0.27, label=label)
            ax.axhline(80, color="red", linestyle="--", label="80 GB (one GPU)")
            ax.set_yscale("log")
            ax.set_xticks(x, [f"{s // 1024}K" for s in contexts])
            ax.set_xlabel("context (tokens)")
            ax.set_ylabel("KV cache per sequence (GB)")
            ax.set_title("Llama-3-70B shape, f16 cache")
            ax.legend(fontsize=8)
        fig = self.figure("kv_cache.png", draw)
        table = [["context", "MHA GB", "GQA GB", "MQA GB"]] + [[s, f"{a / 1e9:.2f}", f"{b / 1e9:.2f}", f"{c / 1e9:.2f}"]
                                                               for s, a, b, c in rows]
        self.section("KV-cache size: MHA vs GQA vs MQA", "Bytes of the K/V cache of one sequence "
                     "(80 layers, 64 query heads of 128, f16), from the planner (exact integers).",
                     [f"attnkit kv-plan --preset llama3-70b --context S --json (S = {', '.join(map(str, contexts))})"],
                     fig, table)

    def flash(self):
        h, hkv, d = self.size["flash_shape"]
        rows = []
        for n in self.size["flash_lens"]:
            j = self.json("bench", "attention", "--seq", n, "--heads", h, "--kv-heads", hkv, "--head-dim", d,
                          "--causal", "--repeats", 2)
            rows.append((n, j["ms"], j["naive_ms"], j["peak_rss_delta_bytes"], j["naive_scratch_bytes"],
                         j["tensor_bytes"], j["fraction_of_sgemm"]))

        def draw(ax):
            ax.plot([r[0] for r in rows], [r[1] for r in rows], "o-", label="flash (tiled, online softmax)")
            ax.plot([r[0] for r in rows], [r[2] for r in rows], "s-", label="naive (scores materialised)")
            ax2 = ax.twinx()
            ax2.plot([r[0] for r in rows], [r[4] / 2**20 for r in rows], "s:", color="gray", label="naive scores MiB")
            ax2.plot([r[0] for r in rows], [r[5] / 2**20 for r in rows], "o:", color="black", label="q,k,v,out MiB")
            ax2.set_ylabel("memory (MiB)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("sequence length L")
            ax.set_ylabel("forward time (ms)")
            ax.legend(loc="upper left", fontsize=8)
            ax2.legend(loc="lower right", fontsize=8)
        fig = self.figure("flash_vs_naive.png", draw)
        table = [["L", "flash ms", "naive ms", "speed-up", "flash % of sgemm", "naive scores MiB"]] + [
            [n, f"{a:.2f}", f"{b:.2f}", f"{b / a:.2f}", f"{100 * f:.0f}", f"{s / 2**20:.1f}"]
            for n, a, b, _, s, _, f in rows]
        self.section("Flash vs naive attention", f"Causal forward, H = {h}, Hkv = {hkv}, D = {d}. Time (left axis) "
                     "and memory (right axis): the naive path's score matrix grows as L²; flash never builds it.",
                     [f"attnkit bench attention --seq L --heads {h} --kv-heads {hkv} --head-dim {d} --causal --json"],
                     fig, table)

    def decode(self):
        s = self.size["decode_context"]
        j = self.json("bench", "decode", "--kv-heads", "32,8,1", "--context", s)
        rows = [(r["kv_heads"], r["ms_per_token"], r["gbps"], r["fraction_of_bandwidth"]) for r in j]

        def draw(ax):
            ax.bar([str(r[0]) for r in rows], [r[1] for r in rows])
            ax.set_xlabel("KV heads (Hkv), 32 query heads")
            ax.set_ylabel("ms per decoded token")
            ax.set_title(f"one token against {s} cached tokens (f16)")
        fig = self.figure("decode_vs_hkv.png", draw)
        table = [["Hkv", "ms/token", "GB/s", "% of read bandwidth"]] + [
            [a, f"{b:.3f}", f"{c:.1f}", f"{100 * d:.0f}"] for a, b, c, d in rows]
        self.section("Decode time vs KV heads", "Split-KV decode reads each K/V head once for its whole group.",
                     [f"attnkit bench decode --kv-heads 32,8,1 --context {s} --json"], fig, table)

    def gpt(self):
        steps = self.size["gpt_steps"]
        base = os.path.join(self.work, "gpt")
        gated_cfg = os.path.join(self.work, "gated_config.json")
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
               "vocab_size": 261, "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
               "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "tie_word_embeddings": True, "attnkit_gate": "headwise"}
        with open(gated_cfg, "w") as f:
            json.dump(cfg, f)
        common = ["--data", "bible", "--steps", steps, "--batch", self.size["gpt_batch"], "--seq", 128, "--lr", "3e-3", "--warmup",
                  max(1, steps // 10), "--eval-every", 0, "--checkpoint-every", 0, "--quiet"]
        self.run("train", "gpt", "--preset", "tiny", "--out", base, *common)
        self.run("train", "gpt", "--config", gated_cfg, "--out", base + "_gated", *common)
        train_cmd = (f"attnkit train gpt --preset tiny --data bible --steps {steps} --batch {self.size['gpt_batch']} "
                     "--seq 128 --lr 3e-3")
        # Sink mass by key position.
        prof = self.json("sink-profile", "--model", base, "--data", "bible", "--query-pos", 127, "--windows", self.size["eval_windows"])
        buckets = {k: prof["overall"][k] for k in ("token0", "tokens1_3", "middle", "recent")}
        names = list(buckets.keys())

        def draw_sink(ax):
            ax.bar(names, [max(float(buckets[n]), 1e-6) for n in names])
            ax.set_yscale("log")
            ax.set_ylabel("mean attention mass of query 127")
            ax.tick_params(axis="x", labelsize=7)
        fig = self.figure("sink_mass.png", draw_sink)
        self.section("Attention sinks", "Attention mass of the last query of 128-token windows by key position, "
                     "averaged over layers, heads and windows of the KJV Bible's validation text (float64 from "
                     "the model's own q and k).",
                     [train_cmd + " --out M", "attnkit sink-profile --model M --data bible --query-pos 127 --windows 8 --json"],
                     fig, [["key bucket", "mass"]] + [[n, f"{float(buckets[n]):.4f}"] for n in names])
        # Perplexity vs tokens streamed.
        curves, finals = {}, {}
        for policy in ("dense", "window", "sink"):
            csv_path = os.path.join(self.work, f"stream_{policy}.csv")
            finals[policy] = self.json("eval-stream", "--model", base, "--data", "bible", "--policy", policy,
                                       "--tokens", self.size["stream_tokens"], "--chunk", 64, "--csv", csv_path)
            curves[policy] = stream_points(csv_path, 64)

        def draw_stream(ax):
            for policy, pts in curves.items():
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=policy)
            ax.axvline(128, color="gray", linestyle=":", label="training context")
            ax.set_xlabel("tokens streamed")
            ax.set_ylabel("perplexity (per 64-token chunk)")
            ax.legend(fontsize=8)
        fig = self.figure("stream_perplexity.png", draw_stream)
        self.section("Perplexity vs tokens streamed", "Perplexity of each 64-token chunk of the KJV Bible's validation text "
                     "streamed through the dense cache, a sliding window, and the sink cache (4 sink tokens + "
                     "recent window); the model was trained on 128-token windows (dotted line).",
                     [f"attnkit eval-stream --model M --policy P --tokens {self.size['stream_tokens']} --chunk 64 --json"],
                     fig, [["policy", "perplexity", "perplexity past the context"]] +
                     [[p, f"{j['ppl']:.3f}", f"{j['ppl_past_context']:.3f}"] for p, j in finals.items()])
        # Gate activations.
        gp = self.json("sink-profile", "--model", base + "_gated", "--data", "bible", "--query-pos", 127,
                       "--windows", self.size["eval_windows"], "--gates")
        heads = [h for layer in gp["layers"] for h in layer["heads"]]
        hist = [sum(h["gate_hist"][i] for h in heads) / len(heads) for i in range(len(heads[0]["gate_hist"]))]
        mean = gp["gate_mean"]

        def draw_gates(ax):
            if hist:
                ax.bar([f"{i / len(hist):.1f}" for i in range(len(hist))], hist)
            ax.set_xlabel("gate value sigmoid(g) (bin start)")
            ax.set_ylabel("fraction")
            ax.set_title(f"head-wise gate, mean {mean:.3f}")
        fig = self.figure("gates.png", draw_gates)
        self.section("Gate activations", "Histogram of the head-wise output gate's values over the profiled tokens.",
                     [train_cmd.replace("--preset tiny", "--config gated.json") + " --out G",
                      "attnkit sink-profile --model G --data bible --query-pos 127 --windows 8 --gates --json"],
                     fig, [["statistic", "value"], ["mean gate", f"{mean:.4f}"]])
        # MHA -> GQA conversion (the tiny preset has 4 query heads and 2 KV heads).
        rows = []
        for n in (2, 1):
            for method in ("mean", "first"):
                out = os.path.join(self.work, f"gqa_{n}_{method}")
                if n < 2:
                    self.run("convert-gqa", "--in", base, "--out", out, "--kv-heads", n, "--method", method)
                text = self.run("eval", "--model", out if n < 2 else base, "--data", "bible", "--windows", self.size["eval_windows"])
                loss = float(text.split()[1])
                rows.append((n, method if n < 2 else "(trained)", loss))
                if n == 2:
                    break
        self.section("GQA conversion", "Validation loss after converting the trained model's KV heads "
                     "(no uptraining).", ["attnkit convert-gqa --in M --out C --kv-heads 1 --method METHOD",
                                         "attnkit eval --model C --data bible --windows 16"], None,
                     [["KV heads", "method", "validation loss"]] + [[a, b, f"{c:.4f}"] for a, b, c in rows])

    def bert_vs_gpt(self):
        script = os.path.join(os.path.dirname(self.cli), "..", "scripts", "experiments", "bert_vs_gpt.py")
        steps = self.size["bert_steps"]
        if not os.path.exists(script):
            self.section("BERT vs GPT supervision", "scripts/experiments/bert_vs_gpt.py not found next to the CLI.",
                         [], None, None)
            return
        env = dict(os.environ, ATTNKIT_CLI=self.cli)
        threads = str(self.size["threads"] or os.cpu_count())
        p = subprocess.run([sys.executable, script, "--steps", str(steps), "--out", os.path.join(self.work, "bert_vs_gpt"),
                            "--finetune-steps", "0", "--threads", threads, "--eval-windows",
                            str(self.size["eval_windows"])], capture_output=True, text=True, env=env)
        self.log.write(f"$ scripts/experiments/bert_vs_gpt.py --steps {steps}\n# exit {p.returncode}\n{p.stderr[-2000:]}\n")
        if p.returncode != 0:
            raise RuntimeError("bert_vs_gpt.py failed: " + p.stderr.strip()[-300:])
        table = [[c.strip() for c in line.strip("|").split("|")] for line in p.stdout.splitlines()
                 if line.startswith("|") and not line.startswith("|---")]
        self.section("BERT vs GPT supervision", "Same width, depth and computed tokens per step: the fraction of "
                     "positions that carry a loss and each model's validation loss on its own objective.",
                     [f"scripts/experiments/bert_vs_gpt.py --steps {steps}"], None, table or None)

    def vision(self):
        n, epochs = self.size["vision_images"], self.size["vision_epochs"]
        rows = []
        for kind, extra in (("cnn", ["--attention", "none"]), ("cnn", ["--attention", "se"]),
                            ("cnn", ["--attention", "cbam"]), ("vit", []), ("deformable", [])):
            out = os.path.join(self.work, kind + ("_" + extra[1] if extra else ""))
            try:
                j = self.json("train", kind, *extra, "--out", out, "--epochs", epochs, "--train-limit", n,
                              "--batch", min(128, n // 2),
                              "--eval-limit", max(64, n // 6))
            except RuntimeError as e:
                if "train" in str(e) and ("unknown" in str(e).lower() or "not found" in str(e).lower() or
                                          "The following argument" in str(e) or "subcommand" in str(e)):
                    continue  # a model this build does not have
                raise
            rows.append((kind + (" " + extra[1] if extra else ""), j["parameters"], j["test_accuracy"],
                         j["images_per_second"]))

        def draw(ax):
            ax.barh([r[0] for r in rows], [100 * r[2] for r in rows])
            ax.set_xlabel("test accuracy (%)")
            ax.set_xlim(0, 100)
        fig = self.figure("vision_accuracy.png", draw)
        self.section("ViT / CNN (none, SE, CBAM) / deformable on Fashion-MNIST",
                     f"{epochs} epoch(s) on the first {n} training images, scored on test images; short runs "
                     "for the report (the README has the full-length results).",
                     [f"attnkit train MODEL [--attention A] --epochs {epochs} --train-limit {n} --batch {min(128, n // 2)} --json"], fig,
                     [["model", "parameters", "test accuracy", "images/s"]] +
                     [[a, b, f"{c:.4f}", f"{d:.0f}"] for a, b, c, d in rows])

    def deformable(self):
        j = self.json("bench", "deformable", "--sides", *self.size["sides"], "--min-seconds", 0.02)
        rows = j["rows"]

        def draw(ax):
            ax.loglog([r["n"] for r in rows], [r["deform_ms"] for r in rows], "o-",
                      label=f"deformable (slope {j['deform_slope']:.2f})")
            ax.loglog([r["n"] for r in rows], [r["dense_ms"] for r in rows], "s-",
                      label=f"dense flash (slope {j['dense_slope']:.2f})")
            ax.set_xlabel("tokens N")
            ax.set_ylabel("forward ms")
            ax.legend(fontsize=8)
        fig = self.figure("deformable_vs_dense.png", draw)
        self.section("Deformable vs dense attention", f"Time vs N at fixed K = Lv·P samples; fitted crossover "
                     f"N ≈ {j.get('crossover_n', float('nan')):.0f}.",
                     ["attnkit bench deformable --sides " + " ".join(map(str, self.size["sides"])) + " --json"], fig,
                     [["N", "deformable ms", "dense ms"]] + [[r["n"], f"{r['deform_ms']:.3f}", f"{r['dense_ms']:.3f}"]
                                                             for r in rows])

    # --- output --------------------------------------------------------------------------------
    def machine(self):
        cpu = "unknown CPU"
        try:
            for line in open("/proc/cpuinfo"):
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"

    def write(self, failures, seconds):
        machine = self.machine()
        when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>attnkit report</title><style>"
                 "body{font-family:sans-serif;max-width:980px;margin:2em auto;padding:0 1em}"
                 "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;padding:2px 8px;"
                 "text-align:right}th{background:#eee}code{background:#f4f4f4}img{max-width:100%}"
                 ".cmd{font-size:85%;color:#333}</style></head><body>",
                 f"<h1>attnkit report ({html.escape(self.mode)} mode)</h1>",
                 f"<p>Machine: {html.escape(machine)}. Generated {when} in {seconds / 60:.1f} min by "
                 f"<code>attnkit report --out DIR{'' if self.mode == 'full' else ' --' + self.mode}</code>. "
                 "Every figure and table below was measured by this run.</p>"]
        if failures:
            parts.append("<p><b>Failed sections:</b> " + html.escape("; ".join(failures)) + "</p>")
        for s in self.sections:
            parts.append(f"<h2>{html.escape(s['title'])}</h2><p>{html.escape(s['text'])}</p>")
            if s["figure"]:
                parts.append(f"<img src='{s['figure']}' alt='{html.escape(s['title'])}'>")
            if s["table"]:
                head, *body = s["table"]
                parts.append("<table><tr>" + "".join(f"<th>{html.escape(str(c))}</th>" for c in head) + "</tr>" +
                             "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
                                     for r in body) + "</table>")
            for c in s["commands"]:
                parts.append(f"<div class='cmd'>Command: <code>{html.escape(c)}</code> on {html.escape(machine)}</div>")
        # For headless checks: after load, record whether every image decoded.
        parts.append("<p id='status'>images: not checked</p><script>window.addEventListener('load',()=>{"
                     "const imgs=[...document.images];const ok=imgs.filter(i=>i.complete&&i.naturalWidth>0).length;"
                     "document.getElementById('status').textContent='images: '+ok+' of '+imgs.length+' loaded';"
                     "});</script></body></html>")
        with open(os.path.join(self.out, "index.html"), "w") as f:
            f.write("\n".join(parts))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="attnkit report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cli", required=True, help="the attnkit binary to run")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true")
    g.add_argument("--tiny", action="store_true")
    a = ap.parse_args(argv)
    mode = "tiny" if a.tiny else "quick" if a.quick else "full"
    try:
        r = Report(os.path.abspath(a.cli), a.out, mode)
    except OSError as e:  # one line, as every attnkit command fails
        print(f"attnkit: error: --out: {a.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    t0 = time.time()
    failures = []
    for step in (r.kv_cache, r.flash, r.decode, r.gpt, r.bert_vs_gpt, r.vision, r.deformable):
        try:
            step()
        except Exception as e:  # one failed experiment must not lose the others
            failures.append(f"{step.__name__}: {e}")
            print(f"report: {step.__name__} failed: {e}", file=sys.stderr)
    r.write(failures, time.time() - t0)
    print(f"report: wrote {os.path.join(a.out, 'index.html')} ({len(r.sections)} sections, "
          f"{len(failures)} failed) in {(time.time() - t0) / 60:.1f} min")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
