"""`attnkit bench decode` end to end on tiny warm shapes: one JSON row per Hkv with the issue's keys,
rounds reported as medians with per-round time ratios, and bad arguments give one error line."""
import json
import subprocess

from cli_helpers import CLI


def run(*args):
    return subprocess.run([CLI, "bench", "decode", *args], capture_output=True, text=True)


def test_json_rows_over_rounds():
    r = run("--heads", "4", "--kv-heads", "4,2,1", "--head-dim", "16", "--context", "256",
            "--repeats", "2", "--rounds", "3", "--warm", "--threads", "1", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["kv_heads"] for row in rows] == [4, 2, 1]
    for row in rows:
        assert row["rounds"] == 3
        for key in ("ms_per_token", "gbps", "fraction_of_bandwidth", "measured_read_gbps"):
            assert row[key] > 0, key
        # bytes per second follow from the reported (median) time
        assert abs(row["gbps"] - row["cache_bytes"] / (row["ms_per_token"] * 1e-3) * 1e-9) <= 1e-6 * row["gbps"]
    assert [row["cache_bytes"] for row in rows] == [256 * 2 * 16 * 2 * h for h in (4, 2, 1)]
    assert "time_ratio_to_previous" not in rows[0]
    assert rows[1]["time_ratio_to_previous"] > 0 and rows[2]["time_ratio_to_previous"] > 0


def test_table_names_the_rounds():
    r = run("--heads", "2", "--kv-heads", "2,1", "--head-dim", "8", "--context", "64",
            "--repeats", "1", "--rounds", "2", "--warm", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "medians of the rounds" in r.stdout and "rounds: 2" in r.stdout
    assert "Hkv 2 → 1: time ratio" in r.stdout


def test_bad_arguments_exit_with_one_line():
    for args in (["--rounds", "0"], ["--repeats", "0"], ["--kv-heads", "3", "--heads", "4"], ["--kv-heads", "x"]):
        r = run(*args, "--context", "16", "--warm")
        assert r.returncode != 0, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("attnkit: error:") and r.stderr.count("\n") == 1, r.stderr
