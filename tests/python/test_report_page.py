"""attnkit.report_page: a finding says whether it agrees with or contradicts the notes and whether
it differs from docs/claims.md; commands the report did not execute (an existing model's recorded
training) are never shown as executed commands; a page written before every step ran names the steps
that did not run."""
import re
from types import SimpleNamespace

from attnkit import report_claims as rc
from attnkit import report_page

CLAIMS = [rc.Claim("S6", "sink", "evicting token 0 blows up perplexity", "window 4.46 = sink 4.46",
                   "not reproduced", "no sink"),
          rc.Claim("F2", "flash", "flash is faster", "3.0-3.9x", "reproduced", "measured")]


def page(findings, recorded=(), not_run=(), mode="full"):
    section = dict(title="T", text="x", commands=["attnkit eval --model m"], figure=None, table=None,
                   findings=findings, recorded=list(recorded))
    r = SimpleNamespace(mode=mode, cli="/bin/attnkit", sections=[section], findings=findings, claims_path="c.md")
    return report_page.render(r, [], 60, "machine", "2026-12-03 17:00", "python3 -m attnkit.report", CLAIMS,
                              list(not_run))


def test_a_contradicting_finding_says_so_against_the_notes_and_the_claims_table():
    text = page([rc.Finding("S6", "window 400, sink 10", "reproduced", "t"),
                 rc.Finding("F2", "0.8x", "not reproduced", "t")])
    s6, f2 = re.findall(r"<p class='finding'>(.*?)</p>", text)
    assert "Agrees with the notes" in s6 and "It differs from docs/claims.md" in s6 and "window 4.46" in s6
    assert "Contradicts the notes" in f2 and "It differs from docs/claims.md" in f2
    same = re.findall(r"<p class='finding'>(.*?)</p>", page([rc.Finding("F2", "3x", "reproduced", "t")]))[0]
    assert "Agrees with the notes" in same and "Same verdict as docs/claims.md" in same
    assert "differs" not in same


def test_recorded_commands_are_not_shown_as_executed():
    text = page([], recorded=[("run/commands.log, last of 3", "attnkit train gpt --resume --steps 4000")])
    assert re.findall(r"Command: <code>(.*?)</code>", text) == ["attnkit eval --model m"]
    assert "Recorded training command (not run by this report; from run/commands.log, last of 3)" in text
    assert "attnkit train gpt --resume --steps 4000" in text


def test_a_page_written_early_names_the_steps_not_run():
    text = page([], not_run=["gpt", "vision"])
    assert "<b>Not run:</b> gpt, vision." in text
    assert "Not run:" not in page([])


def test_each_command_gives_the_load_it_ran_under():
    findings = []
    section = dict(title="T", text="x", commands=["attnkit bench decode"], figure=None, table=None,
                   findings=findings, recorded=[])
    r = SimpleNamespace(mode="full", cli="/bin/attnkit", sections=[section], findings=findings, claims_path="c.md",
                        loads={"attnkit bench decode": (11.25, 9.5)})
    text = report_page.render(r, [], 60, "machine", "2026-12-03 17:00", "python3 -m attnkit.report", CLAIMS)
    assert "Command: <code>attnkit bench decode</code> on machine, load average 11.2 at its start and 9.5 at its end" in text
