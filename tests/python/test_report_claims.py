"""attnkit.report_claims: docs/claims.md parses into its claims and its summary line agrees with
its rows; the verdict rules apply their stated thresholds; the claims table takes this run's verdict
only where the run measured the claim (never in tiny mode) and flags verdicts that differ."""
import os
import re

import pytest

from attnkit import report_claims as rc

CLAIMS_MD = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "claims.md")


def test_claims_md_rows_agree_with_its_summary():
    claims = rc.load_claims(CLAIMS_MD)
    text = open(CLAIMS_MD, encoding="utf-8").read()
    m = re.search(r"\*\*Summary \((\d+) claims\)\.\*\* (\d+) reproduced, (\d+) partly, (\d+) not reproduced, "
                  r"(\d+) not tested", text)
    assert m, "docs/claims.md has no summary line"
    total, *counts = map(int, m.groups())
    assert len(claims) == total
    assert [sum(c.verdict == v for c in claims) for v in rc.VERDICTS] == counts
    assert len({c.id for c in claims}) == len(claims)


def test_a_malformed_row_is_an_error(tmp_path):
    p = tmp_path / "claims.md"
    p.write_text("## X\n\n| # | claim | measured | verdict | why |\n|---|---|---|---|---|\n"
                 "| X1 | a claim | a number | maybe | because |\n")
    with pytest.raises(ValueError, match="X1"):
        rc.load_claims(str(p))


def test_rules_apply_their_thresholds():
    s6, s7 = rc.eviction(window=400.0, sink=10.5, dense=30.0)
    assert (s6.verdict, s7.verdict) == ("reproduced", "reproduced")
    s6, s7 = rc.eviction(window=4.46, sink=4.46, dense=5.68)
    assert (s6.verdict, s7.verdict) == ("not reproduced", "reproduced")
    assert rc.eviction(window=8.0, sink=5.0, dense=5.0)[0].verdict == "partly"
    assert rc.decode_scaling({32: 4.0, 8: 1.05, 1: 0.74}).verdict == "partly"
    assert rc.decode_scaling({32: 4.0, 8: 1.0, 1: 0.15}).verdict == "reproduced"
    assert rc.sink_share(0.01, 0.42, 24, 511).verdict == "partly"
    assert rc.sink_share(0.2, 0.6, 24, 511).verdict == "reproduced"
    assert rc.sink_share(0.001, 0.003, 24, 511).verdict == "not reproduced"
    assert rc.gate_mean(0.116).verdict == "reproduced" and rc.gate_mean(0.37).verdict == "not reproduced"
    assert rc.kv_sizes(85.90e9, 10.74e9, 1.342e9).verdict == "reproduced"
    assert rc.kv_sizes(85.90e9, 21.5e9, 1.342e9).verdict == "not reproduced"
    assert rc.flash_faster([(512, 1.0, 0.9), (1024, 1.0, 3.0), (2048, 1.0, 3.5)]).verdict == "reproduced"
    assert rc.flash_faster([(64, 1.0, 1.2)]).verdict is None
    assert rc.deformable_slope(1.22, 2.0).verdict == "reproduced"


def test_table_rows_take_this_runs_verdict_only_where_measured():
    claims = [rc.Claim("S1", "sink", "c1", "m1", "not reproduced", "w1"),
              rc.Claim("S6", "sink", "c6", "m6", "not reproduced", "w6"),
              rc.Claim("G6", "gqa", "cg", "mg", "not reproduced", "wg")]
    findings = [rc.Finding("S6", "window 400, sink 10", "reproduced", "t"),
                rc.Finding("G6", "mean 2.1, first 2.0", None, "part only")]
    rows = rc.table_rows(claims, findings)
    assert [(r[2], r[4], r[5]) for r in rows] == [("not reproduced", "docs/claims.md", False),
                                                  ("reproduced", "this run", True),
                                                  ("not reproduced", "docs/claims.md + this run", False)]
    assert "mean 2.1" in rows[2][3] and "mg" in rows[2][3]
    tiny = rc.table_rows(claims, findings, evidence=False)
    assert [r[2] for r in tiny] == [c.verdict for c in claims] and not any(r[5] for r in tiny)
    assert rc.summary(rows) == {"reproduced": 1, "partly": 0, "not reproduced": 2, "not tested": 0}


def test_sink_rules_apply_their_thresholds_and_defer_below_the_conditions():
    assert rc.massive_activations(12.0, 3.0).verdict == "reproduced"
    assert rc.massive_activations(4.0, 1.2).verdict == "partly"
    assert rc.massive_activations(1.7, 1.6).verdict == "not reproduced"
    assert rc.sink_token(0.45, 30.0, 5.0).verdict == "reproduced"
    assert rc.sink_token(0.45, 5.1, 5.0).verdict == "partly"
    assert rc.sink_token(0.01, 5.1, 5.0).verdict == "not reproduced"
    assert rc.gate_sink(0.40, 0.70, 0.05).verdict == "reproduced"
    assert rc.gate_sink(0.40, 0.70, 0.15).verdict == "partly"
    assert rc.gate_sink(0.40, 0.70, 0.30).verdict == "not reproduced"
    assert rc.gate_sink(0.002, 0.004, 0.001).verdict is None  # no sink to remove
    # a model below the sink conditions: the sink findings are informational, S7 is not about sinks
    short = ["300 training steps < 1000"]
    assert rc.sink_share(0.2, 0.6, 24, 511, short).verdict is None
    assert "300 training steps < 1000" in rc.sink_share(0.2, 0.6, 24, 511, short).why
    assert rc.massive_activations(12.0, 3.0, short).verdict is None
    assert rc.sink_token(0.45, 30.0, 5.0, short).verdict is None
    s6, s7 = rc.eviction(400.0, 10.5, 30.0, short)
    assert (s6.verdict, s7.verdict) == (None, "reproduced")


def test_arithmetic_and_supervision_rules():
    assert rc.kv_read_time(0.025641, 0.003205).verdict == "reproduced"
    assert rc.kv_read_time(0.0513, 0.00641).verdict == "not reproduced"  # a halved bandwidth
    assert rc.bert_positions(14.7).verdict == "reproduced"
    assert rc.bert_positions(30.0).verdict == "not reproduced"
    assert rc.vit_vs_cnn(0.30, 0.70, 1, 6000).verdict is None
