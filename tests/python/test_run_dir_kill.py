"""Kill tests of the run directory (docs/reliability.md): `attnkit train gpt|bert|cnn` killed with SIGKILL at
every phase of a checkpoint write (ATTNKIT_TEST_KILL_AT=<step>:<phase> makes the process raise
SIGKILL there) and at timed points, then restarted (--resume if a checkpoint was committed,
--overwrite otherwise) until it finishes, ends with the same weights, optimizer state and log as
an uninterrupted run, bit for bit, and with no temporary file or uncommitted checkpoint left."""
import csv
import os
import signal
import subprocess
import time

import pytest

from cli_helpers import CLI, FASHION, FORTUNES

PHASES = ["model", "rename", "pointer", "publish", "prune"]


def gpt_args(out, steps):
    return [CLI, "train", "gpt", "--preset", "tiny", "--batch", "2", "--seq", "16", "--steps", str(steps),
            "--lr", "3e-3", "--warmup", "2", "--eval-every", "4", "--checkpoint-every", "1", "--quiet",
            "--threads", "1", "--out", str(out)]


def bert_args(out):
    return [CLI, "train", "bert", "--preset", "tiny", "--batch", "4", "--seq", "32", "--steps", "4",
            "--warmup", "1", "--eval-every", "2", "--eval-examples", "4", "--checkpoint-every", "1", "--quiet",
            "--threads", "1", "--out", str(out)]


def cnn_args(out):
    return [CLI, "train", "cnn", "--data-dir", FASHION, "--widths", "8,16", "--attention", "se", "--batch", "10",
            "--train-limit", "40", "--eval-limit", "20", "--epochs", "3", "--lr", "1e-2", "--warmup-epochs",
            "0.5", "--threads", "1", "--json", "--out", str(out)]


def restart_flag(out):
    """--resume when a checkpoint was committed, else --overwrite (killed before its first one)."""
    return ["--resume"] if (out / "latest").exists() else ["--overwrite"]


def committed_step(out):
    return int((out / "latest").read_text().strip().split("-")[1]) if (out / "latest").exists() else None


def killed_at(args, spec):
    """Runs args with ATTNKIT_TEST_KILL_AT=spec and checks that it died of SIGKILL."""
    env = dict(os.environ, ATTNKIT_TEST_KILL_AT=spec)
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, (spec, r.returncode, r.stderr)


def log_rows(out, columns):
    with open(out / "log.csv") as f:
        return [tuple(row[c] for c in columns) for row in csv.DictReader(f)]


def assert_same_run(a, b, columns):
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    ca, cb = (a / "latest").read_text(), (b / "latest").read_text()
    assert ca == cb
    ckpt = ca.strip()
    for name in ("optimizer.safetensors", "model.safetensors", "config.json"):
        assert (a / ckpt / name).read_bytes() == (b / ckpt / name).read_bytes(), name
    assert log_rows(a, columns) == log_rows(b, columns)


def assert_no_litter(out, extra=()):
    ckpt = (out / "latest").read_text().strip()
    assert sorted(os.listdir(out)) == sorted(["latest", ckpt, "config.json", "model.safetensors", "log.csv", *extra])
    assert sorted(os.listdir(out / ckpt)) == sorted(["config.json", "model.safetensors", "optimizer.safetensors",
                                                     "manifest.json", *extra])


def assert_killed_at_phases_resumes_bitwise(args, tmp_path, plan, columns, extra=()):
    """Runs args(dir) once to the end as the reference, then killed at each (step, phase) of `plan`
    (restarting from the second), checking the committed step after each kill; resumes and checks
    the result equals the reference and leaves nothing else behind."""
    assert subprocess.run(args(tmp_path / "ref"), capture_output=True).returncode == 0
    out = tmp_path / "run"
    for i, (step, phase, committed) in enumerate(plan):
        killed_at(args(out) + ([] if i == 0 else restart_flag(out)), f"{step}:{phase}")
        assert committed_step(out) == committed, (step, phase)
    r = subprocess.run(args(out) + ["--resume"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert_same_run(tmp_path / "ref", out, columns)
    assert_no_litter(out, extra)


GPT_COLUMNS = ("step", "loss", "lr", "grad_norm", "val_loss")


@pytest.mark.skipif(not os.path.isdir(FORTUNES), reason="fortunes not installed")
def test_gpt_killed_at_every_checkpoint_phase_resumes_bitwise(tmp_path):
    # Each (step, phase): the checkpoint that must be committed after the kill.
    plan = [(1, "model", None), (1, "rename", None), (1, "pointer", None), (1, "publish", 1), (2, "prune", 2),
            (3, "model", 2), (4, "rename", 3), (5, "pointer", 4), (6, "publish", 6), (7, "prune", 7),
            (8, "model", 7), (8, "publish", 8)]
    assert_killed_at_phases_resumes_bitwise(lambda out: gpt_args(out, 8), tmp_path, plan, GPT_COLUMNS)


@pytest.mark.skipif(not os.path.isdir(FORTUNES), reason="fortunes not installed")
def test_gpt_killed_at_timed_points_resumes_bitwise(tmp_path):
    steps = 40
    assert subprocess.run(gpt_args(tmp_path / "ref", steps), capture_output=True).returncode == 0
    out = tmp_path / "run"
    delays = [0.05, 0.12, 0.2, 0.27, 0.33, 0.41, 0.5, 0.58, 0.66, 0.75, 0.9, 1.1]
    kills = 0
    for i, delay in enumerate(delays):
        p = subprocess.Popen(gpt_args(out, steps) + ([] if i == 0 else restart_flag(out)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        _, err = p.communicate(timeout=120)
        assert p.returncode in (0, -signal.SIGKILL), err
        if p.returncode == 0:
            break
    assert kills >= 1  # the first delay is shorter than the start-up (reading the corpus)
    while committed_step(out) != steps:  # finish the run
        r = subprocess.run(gpt_args(out, steps) + restart_flag(out), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert_same_run(tmp_path / "ref", out, GPT_COLUMNS)
    assert_no_litter(out)


@pytest.mark.skipif(not os.path.isdir(FORTUNES), reason="fortunes not installed")
def test_bert_killed_at_checkpoint_phases_resumes_bitwise(tmp_path):
    plan = [(1, "model", None), (1, "publish", 1), (2, "pointer", 1), (3, "rename", 2), (3, "prune", 3),
            (4, "model", 3)]
    assert_killed_at_phases_resumes_bitwise(bert_args, tmp_path, plan,
                                            ("step", "loss", "mlm_loss", "lr", "grad_norm", "val_loss"))


@pytest.mark.skipif(not os.path.isdir(FASHION), reason="Fashion-MNIST not installed")
def test_cnn_killed_at_every_checkpoint_phase_resumes_bitwise(tmp_path):
    # 4 steps per epoch: checkpoints after steps 4, 8 and 12.
    plan = [(4, "model", None), (4, "rename", None), (4, "pointer", None), (4, "publish", 4), (8, "prune", 8),
            (12, "model", 8), (12, "rename", 8), (12, "pointer", 8), (12, "publish", 12)]
    assert_killed_at_phases_resumes_bitwise(cnn_args, tmp_path, plan,
                                            ("epoch", "step", "train_loss", "test_loss", "test_accuracy"),
                                            ["preprocessor_config.json"])
