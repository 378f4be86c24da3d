"""attnkit report: runs the experiments of the project's issues at sizes that fit this machine and
writes OUT/index.html with PNG figures and tables. Every number in it is measured by the run that
wrote it; every figure names the command and the machine that produced it.

Every command the page shows is one this run executed, rendered from its argument list (every
command runs with OUT as its working directory, so the paths shown are the paths used). Where a
measurement bears on a claim of the notes, the section says whether it agrees or contradicts, and
the page ends with the claims table (attnkit.report_claims): docs/claims.md's rows, with this run's
measurement and verdict wherever it measured the claim.

The sink, streaming, gate and conversion sections (attnkit.report_sinks) measure GPTs the report
trains (6 layers at context 512 in --quick and full mode) or, with --sink-model / --gate-model,
existing run directories such as those of scripts/experiments/sink_emergence; each states the
model's training budget against the conditions under which sinks are reported.

The page is rewritten before every step, listing the steps not run yet, so a run stopped
early leaves a page that says what it covers.

Run through the CLI: ``attnkit report --out DIR [--quick | --tiny] [--sink-model DIR] [--gate-model DIR]``.
Sizes:
  --tiny   seconds; the pipeline check the test suite runs (numbers are not meaningful)
  --quick  under 15 minutes on a 2-core machine
  (none)   the full sizes, the longest (the page header gives how long the run took)
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time

from attnkit import report_claims as rc
from attnkit import report_page
from attnkit import report_sinks

# The source tree, when this module runs from a build directory inside it (BUILD/python/attnkit):
# docs/claims.md and scripts/experiments/ are found there.
SOURCE_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
SIZES = {  # mode -> experiment sizes
    # tiny decodes one warm layer: filling enough layers to read them cold took most of its time
    "tiny": dict(flash_lens=[64, 128], flash_shape=(4, 2, 32), decode_context=512, decode_warm=True, gpt_steps=3,
                 sides=[4, 8, 16], fit_min_n=16, vision_images=64, vision_epochs=1, bert_steps=3,
                 threads=1, gpt_batch=2, eval_windows=4),
    "quick": dict(flash_lens=[256, 512, 1024, 2048], flash_shape=(32, 8, 128), decode_context=16384,
                  gpt_steps=300, sides=[4, 8, 16, 32, 64], vision_images=6000,
                  vision_epochs=1, bert_steps=60, threads=0, gpt_batch=4, eval_windows=32),
    "full": dict(flash_lens=[256, 512, 1024, 2048, 4096], flash_shape=(32, 8, 128), decode_context=65536,
                 gpt_steps=1000, sides=[4, 8, 16, 32, 64, 96], vision_images=60000,
                 vision_epochs=2, bert_steps=300, threads=0, gpt_batch=4, eval_windows=64),
}


def shown_command(argv):
    """The command line the page shows for an executed argument list: argv[0] named by its file name
    (the header gives the full path of attnkit), every argument shell-quoted."""
    return shlex.join([os.path.basename(argv[0])] + [str(a) for a in argv[1:]])


class Report:
    def __init__(self, cli, out, mode, claims_path=None, sink_model=None, gate_model=None):
        self.cli, self.out, self.mode, self.size = cli, os.path.abspath(out), mode, SIZES[mode]
        self.sink_model, self.gate_model = sink_model, gate_model  # existing run directories, or None
        self.sections, self.executed, self.findings = [], [], []
        self.loads = {}  # command as shown -> 1-minute load average (before, after): the machine is shared
        self.claims_path = claims_path or os.path.join(SOURCE_ROOT, "docs", "claims.md")
        os.makedirs(self.out, exist_ok=True)
        self.work = "work"  # relative to self.out, the working directory of every command
        os.makedirs(self.path(self.work), exist_ok=True)
        self.log = open(self.path("commands.log"), "w")

    def path(self, rel):
        """Absolute path of `rel`, a path relative to the output directory (the commands' cwd)."""
        return os.path.join(self.out, rel)

    def execute(self, argv, env=None):
        """Runs argv in the output directory; records and logs the command as shown; returns the
        CompletedProcess. Raises on failure."""
        argv = [str(a) for a in argv]
        shown = shown_command(argv)
        print("$ " + shown, file=sys.stderr, flush=True)
        t0, load = time.time(), os.getloadavg()[0]
        p = subprocess.run(argv, capture_output=True, text=True, cwd=self.out, env=env)
        self.executed.append(shown)
        self.loads[shown] = (load, os.getloadavg()[0])
        self.log.write(f"$ {shown}\n# exit {p.returncode}, {time.time() - t0:.1f} s, load average "
                       f"{load:.1f} -> {self.loads[shown][1]:.1f}\n{p.stderr[-2000:]}\n")
        self.log.flush()
        if p.returncode != 0:
            raise RuntimeError(f"{shown} failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")
        return p

    def run(self, *args):
        """Runs `attnkit ARGS`; returns stdout. Raises on failure."""
        args = [str(a) for a in args]
        if self.size["threads"] and args[0] not in ("kv-plan", "convert-gqa", "eval"):
            args += ["--threads", str(self.size["threads"])]
        return self.execute([self.cli] + args).stdout

    def json(self, *args):
        return json.loads(self.run(*args, "--json"))

    def mark(self):
        """A position in the executed-commands record, for since()."""
        return len(self.executed)

    def since(self, mark):
        """The commands executed since mark() returned `mark`, as shown."""
        return self.executed[mark:]

    def section(self, title, text, commands, figure=None, table=None, findings=(), recorded=()):
        """Adds a section; `commands` are executed commands as shown (from since()), `findings` the
        report_claims.Finding objects its measurements give, `recorded` (where recorded, command)
        pairs of commands this run did not execute (an existing model's training)."""
        self.findings += list(findings)
        self.sections.append(dict(title=title, text=text, commands=commands, figure=figure, table=table,
                                  findings=list(findings), recorded=list(recorded)))

    def figure(self, name, draw):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=100)
        draw(ax)
        fig.tight_layout()
        fig.savefig(self.path(name))
        plt.close(fig)
        return name

    # --- experiments -------------------------------------------------------------------------
    def kv_cache(self):
        contexts = [4096, 32768, 131072]
        mark = self.mark()
        rows = []
        for s in contexts:
            j = self.json("kv-plan", "--preset", "llama3-70b", "--context", s)
            rows.append((s, j["mha"]["bytes_per_sequence"], j["bytes_per_sequence"], j["mqa"]["bytes_per_sequence"]))
            if s == 32768:
                read = rc.kv_read_time(j["mha"]["read_seconds"], j["read_seconds"])

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
                     self.since(mark), fig, table,
                     [rc.kv_sizes(*next(r[1:] for r in rows if r[0] == 32768)), read])

    def flash(self):
        h, hkv, d = self.size["flash_shape"]
        mark = self.mark()
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
                     self.since(mark), fig, table,
                     [rc.flash_faster([(r[0], r[1], r[2]) for r in rows]),
                      rc.flash_memory([(r[0], r[3], r[4], r[5]) for r in rows])])

    def decode(self):
        s = self.size["decode_context"]
        mark = self.mark()
        warm = ["--warm"] if self.size.get("decode_warm") else []
        j = self.json("bench", "decode", "--kv-heads", "32,8,1", "--context", s, *warm)
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
                     self.since(mark), fig, table, [rc.decode_scaling({r[0]: r[1] for r in rows})])

    def gpt(self):
        report_sinks.run_all(self)

    def bert_vs_gpt(self):
        script = os.path.join(SOURCE_ROOT, "scripts", "experiments", "bert_vs_gpt.py")
        steps = self.size["bert_steps"]
        if not os.path.exists(script):
            self.section("BERT vs GPT supervision", f"{script} not found (the report runs from a build directory "
                         "inside the source tree).",
                         [], None, None)
            return
        env = dict(os.environ, ATTNKIT_CLI=self.cli)
        threads = str(self.size["threads"] or os.cpu_count())
        mark = self.mark()
        p = self.execute([sys.executable, os.path.normpath(script), "--steps", steps, "--out",
                          os.path.join(self.work, "bert_vs_gpt"), "--finetune-steps", 0, "--threads", threads,
                          "--eval-windows", self.size["eval_windows"]], env=env)
        table = [[c.strip() for c in line.strip("|").split("|")] for line in p.stdout.splitlines()
                 if line.startswith("|") and not line.startswith("|---")]
        share = [float(m.group(1)) for row in table for m in [re.search(r"([0-9.]+) % of real tokens", " ".join(row))]
                 if m]
        self.section("BERT vs GPT supervision", "Same width, depth and computed tokens per step: the fraction of "
                     "positions that carry a loss and each model's validation loss on its own objective.",
                     self.since(mark), None, table or None, [rc.bert_positions(share[0])] if share else [])

    def vision(self):
        n, epochs = self.size["vision_images"], self.size["vision_epochs"]
        mark = self.mark()
        rows, skipped = [], []
        for kind, extra in (("cnn", ["--attention", "none"]), ("cnn", ["--attention", "se"]),
                            ("cnn", ["--attention", "cbam"]), ("vit", []), ("deformable", [])):
            out = os.path.join(self.work, kind + ("_" + extra[1] if extra else ""))
            try:
                j = self.json("train", kind, *extra, "--out", out, "--overwrite", "--epochs", epochs,
                              "--train-limit", n, "--batch", min(128, n // 2),
                              "--eval-limit", max(64, n // 6))
            except RuntimeError as e:
                if "train" in str(e) and ("unknown" in str(e).lower() or "not found" in str(e).lower() or
                                          "The following argument" in str(e) or "subcommand" in str(e)):
                    skipped.append(kind)  # a model this build does not have
                    continue
                raise
            rows.append((kind + (" " + extra[1] if extra else ""), j["parameters"], j["test_accuracy"],
                         j["images_per_second"]))

        def draw(ax):
            ax.barh([r[0] for r in rows], [100 * r[2] for r in rows])
            ax.set_xlabel("test accuracy (%)")
            ax.set_xlim(0, 100)
        fig = self.figure("vision_accuracy.png", draw)
        cnn = {r[0][4:]: r[2] for r in rows if r[0].startswith("cnn ")}
        findings = [rc.cnn_attention(cnn)]
        vit = [r[2] for r in rows if r[0] == "vit"]
        if vit and cnn:
            findings.append(rc.vit_vs_cnn(vit[0], max(cnn.values()), epochs, n))
        self.section("ViT / CNN (none, SE, CBAM) / deformable on Fashion-MNIST",
                     f"{epochs} epoch(s) on the first {n} training images, scored on test images; short runs "
                     "for the report (the README has the full-length results)." +
                     (f" Not in this build, so not run: {', '.join(skipped)}." if skipped else ""),
                     self.since(mark), fig,
                     [["model", "parameters", "test accuracy", "images/s"]] +
                     [[a, b, f"{c:.4f}", f"{d:.0f}"] for a, b, c, d in rows], findings)

    def deformable(self):
        mark = self.mark()
        j = self.json("bench", "deformable", "--sides", *self.size["sides"], "--min-seconds", 0.02,
                      "--fit-min-n", self.size.get("fit_min_n", 256))
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
                     self.since(mark), fig,
                     [["N", "deformable ms", "dense ms"]] + [[r["n"], f"{r['deform_ms']:.3f}", f"{r['dense_ms']:.3f}"]
                                                             for r in rows],
                     [rc.deformable_slope(j["deform_slope"], j["dense_slope"])])

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

    def write(self, failures, seconds, invocation, not_run=()):
        """Writes OUT/index.html (attnkit.report_page), ending with the claims table; `not_run`: the
        steps not run (yet)."""
        try:
            claims = rc.load_claims(self.claims_path)
        except FileNotFoundError:
            claims = None
        when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        page = report_page.render(self, failures, seconds, self.machine(), when, invocation, claims, list(not_run))
        with open(self.path("index.html"), "w") as f:
            f.write(page)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="attnkit report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cli", required=True, help="the attnkit binary to run")
    ap.add_argument("--claims", help="claims table to complete (default: docs/claims.md of the source tree)")
    ap.add_argument("--sink-model", help="an existing GPT run directory for the sink, streaming and conversion "
                                         "sections (default: train one at the mode's size)")
    ap.add_argument("--gate-model", help="an existing gated GPT run directory for the gate section "
                                         "(default: train one at the mode's size)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true")
    g.add_argument("--tiny", action="store_true")
    a = ap.parse_args(argv)
    mode = "tiny" if a.tiny else "quick" if a.quick else "full"
    try:
        for flag, d in (("--sink-model", a.sink_model), ("--gate-model", a.gate_model)):
            if d and not os.path.exists(os.path.join(d, "config.json")):
                print(f"attnkit: error: {flag}: {d}: no config.json (not a model directory)", file=sys.stderr)
                return 2
        if a.gate_model:
            try:
                gate = json.load(open(os.path.join(a.gate_model, "config.json"))).get("attnkit_gate", "none")
            except ValueError as e:
                print(f"attnkit: error: --gate-model: {a.gate_model}/config.json: {e}", file=sys.stderr)
                return 2
            if gate == "none":
                print(f"attnkit: error: --gate-model: {a.gate_model}: the model has no output gate (attnkit_gate)",
                      file=sys.stderr)
                return 2
        r = Report(os.path.abspath(a.cli), a.out, mode, a.claims, a.sink_model, a.gate_model)
    except OSError as e:  # one line, as every attnkit command fails
        print(f"attnkit: error: --out: {a.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    t0 = time.time()
    failures = []
    argv = sys.argv[1:] if argv is None else argv
    invocation = shlex.join([os.path.basename(sys.executable), "-m", "attnkit.report", *argv])
    steps = [r.kv_cache, r.flash, r.decode, r.deformable, r.bert_vs_gpt, r.gpt, r.vision]  # cheap first
    for i, step in enumerate(steps):
        r.write(failures, time.time() - t0, invocation, [s.__name__ for s in steps[i:]])
        try:
            step()
        except Exception as e:  # one failed experiment must not lose the others
            failures.append(f"{step.__name__}: {e}")
            print(f"report: {step.__name__} failed: {e}", file=sys.stderr)
    r.write(failures, time.time() - t0, invocation)
    print(f"report: wrote {os.path.join(a.out, 'index.html')} ({len(r.sections)} sections, "
          f"{len(failures)} failed) in {(time.time() - t0) / 60:.1f} min")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
