"""`bench/train_ab.py`: a real one-round CNN comparison of the built attnkit against itself under a
second path prints a row per binary with a ratio; stand-in binaries that log fixed throughputs check
the alternating order and the ratio within a round; a missing binary, a failing run and a log.csv
without the column each stop with exit code 1 and one line on stderr."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import CLI, FASHION

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "train_ab.py"

# A stand-in for attnkit: appends its name to ORDER, writes NAME's log.csv into --out.
FAKE = """#!{python}
import os, sys
out = sys.argv[sys.argv.index("--out") + 1]
os.makedirs(out)
with open({order!r}, "a") as f:
    f.write({name!r} + "\\n")
with open(os.path.join(out, "log.csv"), "w") as f:
    f.write({log!r})
"""


def train_ab(*args, tmpdir=None):
    env = dict(os.environ, TMPDIR=str(tmpdir)) if tmpdir else None
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60, env=env)


def fake(tmp_path, name, log):
    path = tmp_path / name
    path.write_text(FAKE.format(python=sys.executable, order=str(tmp_path / "order"), name=name, log=log))
    path.chmod(0o755)
    return str(path)


def images_log(per_second):
    return f"epoch,step,images_per_second\n1,5,{per_second}\n"


@pytest.mark.skipif(not os.path.exists(CLI), reason="attnkit CLI not built")
@pytest.mark.skipif(not os.path.isdir(FASHION), reason="dataset-fashion-mnist not installed")
def test_real_cnn_against_itself(tmp_path):
    twin = tmp_path / "attnkit"
    twin.symlink_to(os.path.realpath(CLI))
    runs = tmp_path / "tmp"
    runs.mkdir()
    r = train_ab(CLI, str(twin), "--model", "cnn", "--rounds", "1", "--",
                 "--train-limit", "256", "--eval-limit", "50", "--epochs", "1", "--threads", "1",
                 tmpdir=runs)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("1 alternating rounds of `attnkit train cnn --train-limit 256")
    header = lines[2].split()
    assert header == ["binary", "images/s", "min", "max", "ratio"]
    rows = {line.split()[0]: line.split() for line in lines[3:]}
    assert set(rows) == {CLI, str(twin)}
    assert float(rows[CLI][-1]) == 1.0
    assert float(rows[str(twin)][1]) > 0 and float(rows[str(twin)][-1]) > 0
    assert not list(runs.iterdir())  # the run directories are removed


def test_ratio_within_rounds_and_alternating_order(tmp_path):
    a = fake(tmp_path, "a", images_log(100))
    b = fake(tmp_path, "b", images_log(150))
    r = train_ab(a, b, "--model", "vit", "--rounds", "3")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "order").read_text().split() == ["a", "b", "b", "a", "a", "b"]
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()[3:]}
    assert rows[a] == ["100.0", "100.0", "100.0", "1.000"]
    assert rows[b] == ["150.0", "150.0", "150.0", "1.500"]


def test_gpt_leaves_out_the_warmup_steps(tmp_path):
    log = "step,loss,lr,grad_norm,tokens_per_s,val_loss\n" + "".join(
        f"{i},1,1,1,{10 if i < 5 else 1000 + i},\n" for i in range(8))
    a = fake(tmp_path, "a", log)
    b = fake(tmp_path, "b", log)
    r = train_ab(a, b, "--model", "gpt", "--rounds", "1")
    assert r.returncode == 0, r.stderr
    assert "--preset small --steps 30" in r.stdout.splitlines()[0]  # the defaults
    assert r.stdout.splitlines()[3].split()[1:] == ["1006.0", "1006.0", "1006.0", "1.000"]


def one_error_line(r, *words):
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.startswith("train_ab: ") and r.stderr.count("\n") == 1, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def test_errors_are_one_line(tmp_path):
    good = fake(tmp_path, "good", images_log(100))
    one_error_line(train_ab(str(tmp_path / "missing"), good, "--model", "cnn"), "not an executable",
                   "missing")
    no_column = fake(tmp_path, "nocolumn", "epoch,step,seconds\n1,5,2\n")
    one_error_line(train_ab(good, no_column, "--model", "cnn", "--rounds", "1"),
                   "no column images_per_second")
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho first >&2\necho 'attnkit: error: broken' >&2\nexit 3\n")
    failing.chmod(0o755)
    one_error_line(train_ab(good, str(failing), "--model", "cnn", "--rounds", "1"),
                   "failed (exit 3): attnkit: error: broken")
    other = fake(tmp_path, "other", images_log(100))
    one_error_line(train_ab(good, other, "--model", "cnn", "--", "--out", "x"), "--out")
