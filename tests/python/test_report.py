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
# Runs the report module with --cli pointing at the recorder (the CLI passes its own path).
PYTHON_SHIM = """#!{python}
import os, sys
args = sys.argv[1:]
args[args.index("--cli") + 1] = {recorder!r}
os.execv({python!r}, [{python!r}] + args)
"""


@pytest.fixture(scope="module")
def recorded_report(tmp_path_factory):
    """(output dir, report process id, [recorded attnkit calls]) of one report run."""
    out = tmp_path_factory.mktemp("report")
    tools = tmp_path_factory.mktemp("tools")
    log = tools / "calls.jsonl"
    recorder = tools / "attnkit"  # the page names a command by its program's file name
    recorder.write_text(RECORDER.format(python=sys.executable, log=str(log), cli=os.path.realpath(CLI)))
    shim = tools / "python_shim"
    shim.write_text(PYTHON_SHIM.format(python=sys.executable, recorder=str(recorder)))
    recorder.chmod(0o755)
    shim.chmod(0o755)
    mode = os.environ.get("ATTNKIT_REPORT_MODE", "tiny")
    p = subprocess.Popen([CLI, "report", "--out", str(out), f"--{mode}", "--python", str(shim)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=3600 if mode == "quick" else 600)
    assert p.returncode == 0, err[-3000:]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return out, p.pid, calls


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


def test_report_needs_out():
    r = subprocess.run([CLI, "report"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--out" in r.stderr
