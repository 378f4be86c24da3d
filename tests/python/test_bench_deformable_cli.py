"""`attnkit bench deformable` end to end on tiny sizes: one row per size with N = Σ side_l², the
fitted slopes and crossover are reported, and bad arguments give one error line and exit 2."""
import json
import subprocess

from cli_helpers import CLI


def run(*args):
    return subprocess.run([CLI, "bench", "deformable", *args], capture_output=True, text=True)


def test_json_rows_and_fits():
    r = run("--sides", "2,4,8", "--levels", "2", "--points", "2", "--heads", "2", "--head-dim", "8",
            "--repeats", "1", "--min-seconds", "0", "--fit-min-n", "1", "--backward", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert [row["n"] for row in j["rows"]] == [4 + 1, 16 + 4, 64 + 16]
    for row in j["rows"]:
        assert row["deform_ms"] > 0 and row["dense_ms"] > 0
        assert row["deform_backward_ms"] > 0 and row["dense_backward_ms"] > 0
    for key in ("deform_slope", "dense_slope", "crossover_n", "read_gbps", "sgemm_gflops"):
        assert key in j and j[key] == j[key]  # present and not NaN


def test_bad_arguments_exit_2_with_one_line():
    for args in (["--sides", "0"], ["--points", "0"], ["--sides", "x"], ["--sides", "4,8"]):
        r = run(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("attnkit: error:") and r.stderr.count("\n") == 1, r.stderr
