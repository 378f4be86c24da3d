"""attnkit.report_models: a run directory's shape and training budget are read from its config, its
committed checkpoint (or a kept RUN/ckpt/step_N copy) and the training command recorded in its
commands.log, or from the command the report executed; the budget is compared with the conditions
under which attention sinks are reported (steps, context, depth)."""
import json

from attnkit import report_models as rm

TRAIN = ("nice -n 19 build/attnkit train gpt --resume --data bible --out RUN --steps 4000 --batch 4 "
         "--seq {seq} --lr 0.003 --seed 1 --threads 1")


def make_run(d, layers, context, step=None, commands=(), registers=0):
    d.mkdir(parents=True, exist_ok=True)
    cfg = dict(rm.SINK_SHAPE, num_hidden_layers=layers, max_position_embeddings=context,
               attnkit_registers=registers)
    (d / "config.json").write_text(json.dumps(cfg))
    if step is not None:
        (d / "latest").write_text(f"checkpoint-{step}")
        (d / f"checkpoint-{step}").mkdir()
        (d / f"checkpoint-{step}" / "manifest.json").write_text(json.dumps({"trainer": "gpt", "step": step}))
    if commands:
        (d / "commands.log").write_text("".join(f"# 2026-12-03T10:00:00Z\n$ {c}\n# exit 0\n" for c in commands))
    return d


def test_an_existing_run_below_the_conditions(tmp_path):
    run = make_run(tmp_path / "run", layers=2, context=128, step=300,
                   commands=[TRAIN.format(seq=64), TRAIN.format(seq=128), "nice -n 19 build/attnkit eval --model RUN"])
    info = rm.describe(str(run))
    assert (info.layers, info.context, info.steps, info.batch, info.seq) == (2, 128, 300, 4, 128)  # last train line
    assert info.tokens == 300 * 4 * 128 and info.schedule == 4000
    assert len(info.trained_by) == 2 and info.recorded_in == str(run / "commands.log")
    short = info.shortfalls()
    assert len(short) == 3 and "300 training steps < 1000" in short[0] and "context 128 < 256" in short[1]
    text = info.budget_text()
    assert "Below the conditions" in text and "checkpoint of a 4000-step schedule" in text


def test_a_kept_checkpoint_meets_the_conditions(tmp_path):
    make_run(tmp_path / "run", layers=6, context=512, commands=[TRAIN.format(seq=512)])
    kept = make_run(tmp_path / "run" / "ckpt" / "step_2000", layers=6, context=512, registers=1)
    info = rm.describe(str(kept))
    assert (info.steps, info.seq, info.registers) == (2000, 512, 1)
    assert info.recorded_in == str(tmp_path / "run" / "commands.log")
    assert info.shortfalls() == []
    assert "meets the step, context and depth conditions" in info.budget_text()
    assert "1 learned sink token" in info.shape_text()


def test_a_run_without_a_record_says_so(tmp_path):
    info = rm.describe(str(make_run(tmp_path / "bare", layers=6, context=512)))
    assert info.steps is None and info.tokens is None and info.trained_by == []
    assert info.shortfalls() == ["training steps not recorded"]
    assert "training steps not recorded" in info.budget_text()


def test_the_budget_of_a_model_the_report_trained_is_its_executed_command(tmp_path):
    run = make_run(tmp_path / "gpt", layers=6, context=512, step=7, commands=[TRAIN.format(seq=64)])
    argv = ["attnkit", "train", "gpt", "--steps", "1500", "--batch", "4", "--seq", "512"]
    info = rm.describe(str(run), argv)
    assert (info.steps, info.batch, info.seq, info.recorded_in, info.trained_by) == (1500, 4, 512, None, [])
    assert info.shortfalls() == []
    info = rm.describe(str(run), ["attnkit", "train", "gpt", "--steps", "999", "--batch", "4", "--seq", "512"])
    assert info.shortfalls() == ["999 training steps < 1000"]


def test_the_recorded_commands_start_at_the_last_fresh_start(tmp_path):
    """A run restarted with --overwrite was made by that start and the resumes after it only."""
    fresh = TRAIN.format(seq=512).replace("--resume", "--config c.json --overwrite")
    cmds = [fresh.replace("--steps 4000", "--steps 100"), TRAIN.format(seq=512), fresh, TRAIN.format(seq=512)]
    info = rm.describe(str(make_run(tmp_path / "run", layers=6, context=512, step=4000, commands=cmds)))
    assert info.trained_by == cmds[2:]
