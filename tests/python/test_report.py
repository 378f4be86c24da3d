"""`attnkit report`: generates the report (``--tiny`` by default: seconds; set ATTNKIT_REPORT_MODE=quick
to run the quick report, ~15 minutes), checks that every figure is a PNG on disk and every table has
numbers, then opens index.html in headless Chromium (Debian's `chromium`), checks in the rendered
page that every image decoded, and saves a screenshot (copied to ATTNKIT_REPORT_SCREENSHOT if set)."""
import html.parser
import os
import re
import shutil
import subprocess

import pytest

from cli_helpers import CLI

CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-default-apps", "--no-first-run",
                  "--disable-breakpad", "--virtual-time-budget=10000"]


class Page(html.parser.HTMLParser):
    """Collects image sources and the text of every table cell, by table."""

    def __init__(self):
        super().__init__()
        self.images, self.tables, self.cell = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        elif tag == "table":
            self.tables.append([])
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


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    mode = os.environ.get("ATTNKIT_REPORT_MODE", "tiny")
    r = subprocess.run([CLI, "report", "--out", str(out), f"--{mode}"], capture_output=True, text=True,
                       timeout=3600 if mode == "quick" else 600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_every_figure_is_a_png_and_every_table_has_numbers(report):
    page = Page()
    page.feed((report / "index.html").read_text())
    assert len(page.images) >= 8 and len(page.tables) >= 8
    for src in page.images:
        data = (report / src).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, src
    for table in page.tables:
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
