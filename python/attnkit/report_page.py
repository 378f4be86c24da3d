"""HTML page of `attnkit report`: the header (machine, the exact invocation, what `attnkit` in the
commands is, the sections not run), one block per section (text, figure, table, what it says about
the notes' claims and docs/claims.md, the commands it executed, and commands it did not execute but
read from a record, marked as such) and the claims table at the end (attnkit.report_claims)."""
import html
import os

from attnkit import report_claims as rc

STYLE = ("body{font-family:sans-serif;max-width:980px;margin:2em auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;padding:2px 8px;"
         "text-align:right}th{background:#eee}code{background:#f4f4f4}img{max-width:100%}"
         ".cmd{font-size:85%;color:#333}.claims td{text-align:left;vertical-align:top;font-size:85%}"
         ".contradicts{color:#a00}.differs{background:#fff3cd}")
AGREEMENT = {"reproduced": "Agrees with the notes", "partly": "Partly contradicts the notes",
             "not reproduced": "Contradicts the notes", "not tested": "Does not test the notes' claim"}


def esc(x):
    return html.escape(str(x))


def table_html(rows, cls=None):
    head, *body = rows
    attr = f" class='{cls}'" if cls else ""
    return (f"<table{attr}><tr>" + "".join(f"<th>{esc(c)}</th>" for c in head) + "</tr>" +
            "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in body) + "</table>")


def finding_html(f, claim, evidence):
    """What one finding says about its claim: the notes' wording, this run's number, the verdict and
    whether it agrees with the notes and with docs/claims.md."""
    wording = f"Claim {f.id} of the notes: {claim.claim}" if claim else f"Claim {f.id} of the notes."
    parts = [f"<p class='finding'>{esc(wording)}<br>This run: {esc(f.measured)} "]
    if not evidence:
        parts.append("(tiny mode: a pipeline check, not evidence.)")
    elif f.verdict is None:
        parts.append(f"({esc(f.why)} The documented verdict stands: "
                     f"{esc(claim.verdict) if claim else 'none recorded'}.)")
    else:
        cls = "" if f.verdict == "reproduced" else " class='contradicts'"
        parts.append(f"<b{cls}>{esc(AGREEMENT[f.verdict])}</b> ({esc(f.verdict)}; {esc(f.why)})")
        if claim and claim.verdict != f.verdict:
            parts.append(f" <b class='contradicts'>It differs from docs/claims.md</b>, which records "
                         f"<i>{esc(claim.verdict)}</i> from the README's and earlier runs' measurements: "
                         f"{esc(claim.measured)}")
        elif claim:
            parts.append(" Same verdict as docs/claims.md (the README's and earlier runs' measurements).")
    parts.append("</p>")
    return "".join(parts)


def claims_html(claims, findings, evidence, claims_path):
    """The closing claims table, or a line saying why there is none."""
    if claims is None:
        return f"<h2>Claims</h2><p>No claims table: {esc(claims_path)} was not found.</p>"
    rows = rc.table_rows(claims, findings, evidence)
    counts = rc.summary(rows)
    out = ["<h2>Claims of the notes</h2>",
           f"<p>Every checkable claim listed in docs/claims.md ({len(rows)}): the verdict and measurement of this "
           "run where it measured the claim (source \u201cthis run\u201d), the documented ones elsewhere. "
           "Highlighted rows: this run's verdict differs from the documented one. Totals: " +
           ", ".join(f"{n} {v}" for v, n in counts.items()) + ".</p>",
           "<table class='claims'><tr><th>#</th><th>claim</th><th>verdict</th><th>measured</th><th>why</th>"
           "<th>source</th></tr>"]
    for c, f, verdict, measured, source, differs in rows:
        why = f.why if f is not None and f.verdict is not None and evidence else c.why
        cls = " class='differs'" if differs else ""
        out.append(f"<tr{cls}><td>{esc(c.id)}</td><td>{esc(c.claim)}</td><td>{esc(verdict)}</td>"
                   f"<td>{esc(measured)}</td><td>{esc(why)}</td><td>{esc(source)}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def render(r, failures, seconds, machine, when, invocation, claims, not_run=()):
    """The page of Report `r` as one HTML string; `claims`: [Claim] or None; `not_run`: names of the
    report's steps that have not run (a run in progress or stopped early)."""
    evidence = r.mode != "tiny"
    by_id = {c.id: c for c in claims or []}
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>attnkit report</title>"
             f"<style>{STYLE}</style></head><body>",
             f"<h1>attnkit report ({esc(r.mode)} mode)</h1>",
             f"<p>Machine: {esc(machine)}. Generated {esc(when)} in {seconds / 60:.1f} min by "
             f"<code>{esc(invocation)}</code>. Every figure and table below was measured by this run. Each "
             f"command shown is the one executed, in the output directory, with <code>attnkit</code> = "
             f"<code>{esc(r.cli)}</code>. The machine may be shared: each command gives the 1-minute load "
             f"average at its start and end, and timings taken under a load above the core count "
             f"({os.cpu_count()}) are slowed by other processes.</p>"]
    if failures:
        parts.append("<p><b>Failed sections:</b> " + esc("; ".join(failures)) + "</p>")
    if not_run:
        parts.append("<p class='notrun'><b>Not run:</b> " + esc(", ".join(not_run)) + ". This page was written "
                     "before these steps of the report ran (the run was stopped or is still going); their "
                     "sections and measurements are missing, and the claims table keeps the documented verdicts "
                     "for the claims they measure.</p>")
    for s in r.sections:
        parts.append(f"<h2>{esc(s['title'])}</h2><p>{esc(s['text'])}</p>")
        if s["figure"]:
            parts.append(f"<img src='{s['figure']}' alt='{esc(s['title'])}'>")
        if s["table"]:
            parts.append(table_html(s["table"]))
        for f in s["findings"]:
            parts.append(finding_html(f, by_id.get(f.id), evidence))
        for c in s["commands"]:
            load = getattr(r, "loads", {}).get(c)
            at = f", load average {load[0]:.1f} at its start and {load[1]:.1f} at its end" if load else ""
            parts.append(f"<div class='cmd'>Command: <code>{esc(c)}</code> on {esc(machine)}{esc(at)}</div>")
        for where, c in s.get("recorded", ()):
            parts.append(f"<div class='cmd'>Recorded training command (not run by this report; from "
                         f"{esc(where)}): <code>{esc(c)}</code></div>")
    parts.append(claims_html(claims, r.findings, evidence, r.claims_path))
    # For headless checks: after load, record whether every image decoded.
    parts.append("<p id='status'>images: not checked</p><script>window.addEventListener('load',()=>{"
                 "const imgs=[...document.images];const ok=imgs.filter(i=>i.complete&&i.naturalWidth>0).length;"
                 "document.getElementById('status').textContent='images: '+ok+' of '+imgs.length+' loaded';"
                 "});</script></body></html>")
    return "\n".join(parts)
