"""`attnkit report`: generates the report (``--tiny`` by default: seconds; set ATTNKIT_REPORT_MODE=quick
to run the quick report, ~15 minutes), checks that every figure is a PNG on disk and every table has
numbers, that every command the page shows is one the report executed and every command it executed
is shown (attnkit is replaced by a recorder that logs its argv, then runs the real binary), that the
page ends with the claims table of docs/claims.md, then opens index.html in headless Chromium
(Debian's `chromium`), checks in the rendered page that every image decoded, and saves a screenshot
(copied to ATTNKIT_REPORT_SCREENSHOT if set)."""
import html
import html.parser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from attnkit import report_claims
from cli_helpers import CLI

CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-default-apps", "--no-first-run",
                  "--disable-breakpad", "--virtual-time-budget=10000"]


class Page(html.parser.HTMLParser):
    """Collects image sources and the text of every table cell, by table."""

    def __init__(self):
        super().__init__()
        self.images, self.tables, self.classes, self.cell = [], [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        elif tag == "table":
            self.tables.append([])
            self.classes.append(dict(attrs).get("class"))
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


RECORDER = """#!{python}
import json, os, sys
with open({log!r}, "a") as f:
    f.write(json.dumps({{"ppid": os.getppid(), "argv": sys.argv[1:]}}) + "\\n")
os.execv({cli!r}, [{cli!r}] + sys.argv[1:])
"""
# Runs the report module with --cli pointing at the recorder (the CLI passes its own path), in this
# process (exec keeps the pid, which it writes to pid_file); other calls (the CLI's check that the
# interpreter can import the module) pass through.
PYTHON_SHIM = """#!{python}
import os, sys
args = sys.argv[1:]
if "--cli" in args:
    open({pid_file!r}, "w").write(str(os.getpid()))
    args[args.index("--cli") + 1] = {recorder!r}
os.execv({python!r}, [{python!r}] + args)
"""


@pytest.fixture(scope="module")
def recorded_report(tmp_path_factory):
    """(output dir, the report module's process id, [recorded attnkit calls]) of one report run."""
    out = tmp_path_factory.mktemp("report")
    tools = tmp_path_factory.mktemp("tools")
    log = tools / "calls.jsonl"
    recorder = tools / "attnkit"  # the page names a command by its program's file name
    recorder.write_text(RECORDER.format(python=sys.executable, log=str(log), cli=os.path.realpath(CLI)))
    shim = tools / "python_shim"
    pid_file = tools / "report.pid"
    shim.write_text(PYTHON_SHIM.format(python=sys.executable, recorder=str(recorder), pid_file=str(pid_file)))
    recorder.chmod(0o755)
    shim.chmod(0o755)
    mode = os.environ.get("ATTNKIT_REPORT_MODE", "tiny")
    p = subprocess.Popen([CLI, "report", "--out", str(out), f"--{mode}", "--python", str(shim)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=3600 if mode == "quick" else 600)
    assert p.returncode == 0, err[-3000:]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return out, int(pid_file.read_text()), calls


@pytest.fixture(scope="module")
def report(recorded_report):
    return recorded_report[0]


def shown_commands(page_html):
    """The commands the page shows, as argument lists."""
    return [shlex.split(html.unescape(c)) for c in re.findall(r"Command: <code>(.*?)</code>", page_html)]


def test_every_command_shown_is_the_command_executed(recorded_report):
    out, pid, calls = recorded_report
    shown = shown_commands((out / "index.html").read_text())
    shown_attnkit = {tuple(c[1:]) for c in shown if c[0] == "attnkit"}
    direct = {tuple(c["argv"]) for c in calls if c["ppid"] == pid}  # run by the report itself
    assert direct, "the recorder saw no call from the report"
    assert shown_attnkit == direct, (sorted(shown_attnkit - direct)[:3], sorted(direct - shown_attnkit)[:3])
    # the experiment script the page shows ran, and its own attnkit calls went through the recorder
    scripts = [c for c in shown if c[0] != "attnkit"]
    assert any(a.endswith("bert_vs_gpt.py") for c in scripts for a in c)
    assert any(c["ppid"] != pid for c in calls)


def test_the_page_ends_with_the_claims_table(report):
    claims = report_claims.load_claims(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "claims.md"))
    page = Page()
    text = (report / "index.html").read_text()
    page.feed(text)
    assert page.classes[-1] == "claims"
    head, *rows = page.tables[-1]
    assert head[:3] == ["#", "claim", "verdict"]
    assert [r[0] for r in rows] == [c.id for c in claims]
    # tiny sizes are no evidence: every verdict is the documented one, and each measured claim says so
    assert [r[2] for r in rows] == [c.verdict for c in claims]
    assert text.count("tiny mode: a pipeline check, not evidence") >= 8


def test_every_figure_is_a_png_and_every_table_has_numbers(report):
    page = Page()
    page.feed((report / "index.html").read_text())
    assert len(page.images) >= 8 and len(page.tables) >= 8
    for src in page.images:
        data = (report / src).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, src
    for table, cls in zip(page.tables, page.classes):
        if cls == "claims":  # words, checked by test_the_page_ends_with_the_claims_table
            continue
        head, *rows = table
        assert rows, f"table {head} has no rows"
        for row in rows:
            assert len(row) == len(head)
            assert any(re.fullmatch(r"-?[0-9][0-9,.]*(e[-+]?[0-9]+)?", c.strip()) for c in row), (head, row)
    text = (report / "index.html").read_text()
    assert "Failed sections" not in text
    assert text.count("Command: <code>attnkit") >= 8  # every figure names its command and machine
    assert text.count("Command: <code>") == len(re.findall(r"Command: <code>.*?</code> on [^<]*, load average "
                                                           r"[0-9.]+ at its start and [0-9.]+ at its end", text))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is installed by scripts/setup")
def test_headless_chromium_loads_every_image(report, tmp_path):
    url = (report / "index.html").as_uri()
    dom = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, "--dump-dom", url], capture_output=True, text=True,
                         timeout=120).stdout
    n = (report / "index.html").read_text().count("<img ")
    assert f"images: {n} of {n} loaded" in dom, re.findall(r"images: [^<]*", dom)
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--screenshot={shot}", "--window-size=1100,3000", url],
                   capture_output=True, text=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("ATTNKIT_REPORT_SCREENSHOT"):
        shutil.copy(shot, os.environ["ATTNKIT_REPORT_SCREENSHOT"])


def test_report_runs_again_into_the_same_out(report):
    """A second run into a finished report's --out replaces its page and its models (the GQA
    conversions and training runs under work/ are redone, not refused as existing outputs)."""
    page = report / "index.html"
    first = page.stat().st_mtime_ns
    r = subprocess.run([CLI, "report", "--out", str(report), "--tiny"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert page.stat().st_mtime_ns > first and "failed" not in r.stderr, r.stderr[-3000:]


def test_report_needs_out():
    r = subprocess.run([CLI, "report"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--out" in r.stderr


@pytest.mark.parametrize("python,message", [
    ("/bin/true", "/bin/true cannot run the report module"),   # exits 0 without running Python
    ("/bin/false", "/bin/false cannot run the report module"),
    ("/bin/echo", "cannot run the report module"),
    ("{tmp}/text", "is not an executable file"),
    ("{tmp}/script", "Exec format error"),                     # executable, but not a program
    ("/", "is not an executable file"),
])
def test_report_refuses_an_interpreter_that_cannot_run_it(python, message, tmp_path):
    (tmp_path / "text").write_text("x")
    (tmp_path / "script").write_text("x")
    (tmp_path / "script").chmod(0o755)
    python = python.format(tmp=tmp_path)
    r = subprocess.run([CLI, "report", "--out", str(tmp_path / "out"), "--tiny", "--python", python],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and message in r.stderr, (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out").exists()  # refused before the module ran


def test_every_section_says_what_it_means_for_the_notes_claims(report):
    """Each section's measurement is tied to the claims it bears on (agreeing, contradicting or
    informational), so a contradiction cannot go unsaid in a section without findings."""
    body = (report / "index.html").read_text().split("<h2>Claims of the notes")[0]
    blocks = body.split("<h2>")[1:]
    assert len(blocks) >= 10
    for block in blocks:
        title = block.split("</h2>")[0]
        assert re.search(r"<p class='finding'>Claim [A-Z][0-9]+ of the notes", block), title


def test_the_sink_sections_describe_the_model_and_its_budget(report):
    text = html.unescape((report / "index.html").read_text())
    sinks = text.split("<h2>Attention sinks</h2>")[1].split("<h2>")[0]
    # --tiny trains 2 layers at context 128 for a few steps: the page says it is below the conditions
    assert re.search(r"2 layers, d_model 64, .*context 128; trained [0-9]+ steps of", sinks)
    assert "Below the conditions under which sinks are reported" in sinks


def test_an_existing_model_is_profiled_with_its_recorded_training(tmp_path):
    """--sink-model: the sink sections measure an existing run directory; its training command is
    listed as recorded in its commands.log, never as a command the report ran."""
    from attnkit import report as rep
    from attnkit import report_models as rm
    run = tmp_path / "run"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(dict(rm.TINY_SHAPE, attnkit_registers=1)))
    train = [CLI, "train", "gpt", "--config", str(cfg), "--out", str(run), "--data", "bible", "--steps", "2",
             "--batch", "2", "--seq", "128", "--checkpoint-every", "0", "--eval-every", "0", "--quiet", "--threads", "1"]
    subprocess.run(train, check=True, capture_output=True, timeout=120)
    (run / "commands.log").write_text("$ " + shlex.join(train) + "\n")
    r = rep.Report(os.path.realpath(CLI), tmp_path / "out", "tiny", sink_model=str(run))
    r.gpt()
    sinks, streams = r.sections[0], r.sections[1]
    assert not any(" train gpt " in c for s in r.sections[:2] for c in s["commands"])
    assert sinks["recorded"] == [(str(run / "commands.log"), shlex.join(train))]
    assert "1 learned sink token at position 0; trained 2 steps of 2 × 128 tokens" in sinks["text"]
    assert sinks["table"][0][3] == "largest head, query 64" and len(sinks["table"]) == 3  # 2 layers
    assert any("sink-profile" in c and "--query-pos 64" in c for c in sinks["commands"])
    assert [f.id for f in streams["findings"]] == ["S6", "S7", "S9"]  # the sink token's own cache is streamed
    assert ["sink token", 1, 127] == streams["table"][-1][:3]
    assert all(f.verdict is None for f in sinks["findings"])  # 2 steps: below the conditions
    r.write([], 1, "test")
    page = (tmp_path / "out" / "index.html").read_text()
    assert "Recorded training command (not run by this report" in page


def test_sink_model_must_be_a_model_directory(tmp_path):
    r = subprocess.run([CLI, "report", "--out", str(tmp_path / "out"), "--tiny", "--sink-model", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("attnkit: error: --sink-model:") and "config.json" in r.stderr
    assert not (tmp_path / "out").exists()


def test_claims_md_lists_the_claims_the_report_measures(report):
    """docs/claims.md names the claims `attnkit report` measures; they are the ones its sections
    report findings for (S9 needs a model with a learned sink token, which --tiny does not train)."""
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "claims.md"), encoding="utf-8").read()
    m = re.search(r"\*\*Measured by `attnkit report` itself:\*\* ([A-Z0-9, ]+)\.", text)
    assert m, "docs/claims.md does not say which claims the report measures"
    listed = set(m.group(1).split(", "))
    found = set(re.findall(r"<p class='finding'>Claim ([A-Z][0-9]+) of the notes", (report / "index.html").read_text()))
    assert listed == found | {"S9"}, (sorted(listed - found), sorted(found - listed))


def test_gate_model_must_have_a_gate(tmp_path):
    from attnkit import report_models as rm
    (tmp_path / "config.json").write_text(json.dumps(rm.TINY_SHAPE))
    r = subprocess.run([CLI, "report", "--out", str(tmp_path / "out"), "--tiny", "--gate-model", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("attnkit: error: --gate-model:") and "no output gate" in r.stderr
