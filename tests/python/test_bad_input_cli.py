"""Bad input to the `attnkit` CLI: every case must end with exit code 2 and exactly one line
`attnkit: error: ...` on stderr that names the culprit (the flag or the file), with no Python
traceback and no bare `std::` exception name, and must leave every file it could see unchanged
(names, sizes and mtimes of the case's own folder and of the shared model folders, compared
before and after).

The cases are generated: every numeric flag of the main commands x {negative, zero, huge, NaN,
wrong type} where that value is invalid, every kind of input file x {missing, empty, truncated,
a directory, the wrong model type}, and output paths into missing folders. Models are tiny and
built once per session, so the suite runs in seconds."""
import json
import os
import subprocess

import numpy as np
import pytest

import attnkit
from attnkit import _attnkit

CLI = os.path.join(os.path.dirname(attnkit.__file__), "..", "..", "attnkit")

GPT_CONFIG = {"vocab_size": 261, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
              "max_position_embeddings": 32}
CNN_CONFIG = {"model_type": "cnn", "image_size": 12, "num_labels": 3, "widths": [4, 8],
              "attention": "none", "reduction": 2, "spatial_kernel": 3}
BERT_CONFIG = {"model_type": "bert", "vocab_size": 261, "hidden_size": 16, "num_hidden_layers": 1,
               "num_attention_heads": 2, "intermediate_size": 24, "max_position_embeddings": 24,
               "type_vocab_size": 2, "hidden_act": "gelu"}


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    """Shared read-only inputs: tiny GPT and CNN directories, a BERT config directory, and files
    that are missing, empty, truncated or of the wrong kind."""
    root = tmp_path_factory.mktemp("bad_input_cli")
    gpt = _attnkit._GptModel(json.dumps(GPT_CONFIG))
    gpt.init_random(0)
    gpt.save(str(root / "gpt"))
    attnkit.ImageModel(json.dumps(CNN_CONFIG)).save(str(root / "cnn"))
    (root / "cnn" / "preprocessor_config.json").write_text('{"image_mean": [0.5], "image_std": [0.25]}')
    (root / "bert").mkdir()
    (root / "bert" / "config.json").write_text(json.dumps(BERT_CONFIG))
    (root / "lstm").mkdir()
    (root / "lstm" / "config.json").write_text('{"model_type": "lstm"}')
    (root / "empty_dir").mkdir()
    (root / "empty_config").mkdir()
    (root / "empty_config" / "config.json").write_text("")
    (root / "cut_config").mkdir()
    (root / "cut_config" / "config.json").write_text(json.dumps(GPT_CONFIG)[:40])
    (root / "cut_weights").mkdir()
    (root / "cut_weights" / "config.json").write_text((root / "gpt" / "config.json").read_text())
    weights = (root / "gpt" / "model.safetensors").read_bytes()
    (root / "cut_weights" / "model.safetensors").write_bytes(weights[:len(weights) // 2])
    (root / "cut.safetensors").write_bytes(weights[:len(weights) // 2])
    (root / "empty.bin").write_bytes(b"")
    (root / "text.txt").write_text("To be, or not to be, that is the question.\n" * 40)
    (root / "not_an_image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    return root


def snapshot(*roots):
    """{path: (size, mtime_ns)} of every file and folder under roots."""
    out = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                p = os.path.join(folder, name)
                st = os.lstat(p)
                out[p] = (st.st_size if name in files else 0, st.st_mtime_ns)
    return out


def run_case(args, culprit, inputs, tmp_path):
    """Runs attnkit with `args` ({in} = the shared inputs, {tmp} = this case's folder) in tmp_path
    and checks the failure contract."""
    args = [a.format(**{"in": inputs, "tmp": tmp_path}) for a in args]
    culprit = culprit.format(**{"in": inputs, "tmp": tmp_path})
    before = snapshot(inputs, tmp_path)
    r = subprocess.run([CLI, *args], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    after = snapshot(inputs, tmp_path)
    err = r.stderr
    assert r.returncode == 2, (args, r.returncode, err)
    assert err.endswith("\n") and err.count("\n") == 1, (args, err)
    assert err.startswith("attnkit: error: "), (args, err)
    assert culprit in err, (args, culprit, err)
    assert "Traceback" not in err and "std::" not in err and "bad_alloc" not in err, (args, err)
    assert before == after, (args, set(before.items()) ^ set(after.items()))


# --- numeric flags ----------------------------------------------------------------------------
# (command prefix, flag, bad values). Each prefix is valid on its own; the flag's value alone is bad.
# HUGE overflows int64; MEM is a valid integer whose memory need exceeds any machine.
NEG, ZERO, NAN, WORD, HUGE, MEM, FRACTION = "-3", "0", "nan", "abc", "99999999999999999999", "1000000000000000", "1.5"
GPT = "{in}/gpt"
NUMERIC = [
    (["generate", "--model", GPT], "--max-tokens", [NEG, NAN, WORD, HUGE, MEM, FRACTION]),
    (["generate", "--model", GPT], "--temperature", [NEG, NAN, WORD, "1e400", "inf"]),
    (["generate", "--model", GPT], "--top-k", [NEG, NAN, WORD, HUGE]),
    (["generate", "--model", GPT], "--top-p", [NEG, ZERO, NAN, WORD, FRACTION]),
    (["generate", "--model", GPT], "--seed", [NEG, NAN, WORD, HUGE, FRACTION]),
    (["generate", "--model", GPT], "--threads", [NEG, NAN, WORD, "100000", HUGE]),
    (["generate", "--model", GPT], "--tp", [NEG, ZERO, WORD]),
    (["generate", "--model", GPT, "--sink-tokens", "4"], "--window", [NEG, ZERO, NAN, WORD, MEM]),
    (["generate", "--model", GPT, "--window", "8"], "--sink-tokens", [NEG, WORD]),
    (["eval", "--model", GPT], "--windows", [NEG, ZERO, NAN, WORD, HUGE]),
    (["sink-profile", "--model", GPT], "--query-pos", [NEG, NAN, WORD]),
    (["sink-profile", "--model", GPT, "--query-pos", "8"], "--windows", [NEG, ZERO, WORD]),
    (["sink-profile", "--model", GPT, "--query-pos", "8"], "--recent", [NEG, ZERO, WORD]),
    (["sink-profile", "--model", GPT, "--query-pos", "8"], "--gate-bins", [NEG, ZERO, "100000"]),
    (["sink-profile", "--model", GPT, "--query-pos", "8"], "--threads", [NEG, "100000"]),
    (["eval-stream", "--model", GPT], "--window", [NEG, NAN, WORD, MEM]),
    (["eval-stream", "--model", GPT], "--sink-tokens", [NEG, WORD]),
    (["eval-stream", "--model", GPT], "--tokens", [NEG, ZERO, WORD, HUGE]),
    (["eval-stream", "--model", GPT], "--chunk", [NEG, ZERO, WORD]),
    (["eval-stream", "--model", GPT], "--threads", [NEG, WORD]),
    (["bench", "attention"], "--batch", [NEG, ZERO, NAN, WORD, HUGE, MEM]),
    (["bench", "attention"], "--seq", [NEG, ZERO, WORD, MEM]),
    (["bench", "attention"], "--heads", [NEG, ZERO, WORD]),
    (["bench", "attention"], "--kv-heads", [NEG, ZERO]),
    (["bench", "attention"], "--head-dim", [NEG, ZERO, FRACTION]),
    (["bench", "attention"], "--repeats", [NEG, ZERO]),
    (["bench", "attention"], "--threads", [NEG, "100000", NAN]),
    (["bench", "decode"], "--heads", [NEG, ZERO]),
    (["bench", "decode"], "--head-dim", [ZERO, WORD]),
    (["bench", "decode"], "--context", [NEG, ZERO, MEM]),
    (["bench", "decode"], "--batch", [NEG, ZERO, NAN, MEM]),
    (["bench", "decode"], "--repeats", [ZERO]),
    (["bench", "decode"], "--rounds", [ZERO, NEG]),
    (["bench", "decode"], "--threads", [NEG]),
    (["bench", "generate", "--model", GPT], "--context", [NEG, WORD, MEM]),
    (["bench", "generate", "--model", GPT], "--tokens", [NEG, ZERO]),
    (["bench", "deformable"], "--heads", [ZERO, NEG]),
    (["bench", "deformable"], "--levels", [ZERO]),
    (["bench", "deformable"], "--points", [ZERO]),
    (["bench", "deformable"], "--sides", [ZERO, WORD]),
    (["bench", "deformable"], "--min-seconds", [NEG, NAN]),
    (["bench", "deformable"], "--repeats", [ZERO]),
    (["bench", "roofline"], "--threads", [NEG, WORD]),
    (["classify", "--model", "{in}/cnn", "{in}/not_an_image.png"], "--limit", [NEG, ZERO, WORD]),
    (["train", "cnn", "--out", "{tmp}/run"], "--epochs", [NEG, ZERO, NAN, WORD, FRACTION]),
    (["train", "cnn", "--out", "{tmp}/run"], "--batch", [NEG, ZERO, WORD]),
    (["train", "cnn", "--out", "{tmp}/run"], "--seed", [NEG, WORD]),
    (["train", "cnn", "--out", "{tmp}/run"], "--threads", [NEG, "100000"]),
    (["train", "gpt", "--out", "{tmp}/run"], "--seed", [NEG, HUGE]),
    (["train", "gpt", "--out", "{tmp}/run"], "--threads", [NEG, "100000"]),
    (["convert-gqa", "--in", GPT, "--out", "{tmp}/out"], "--kv-heads", [NEG, ZERO, WORD]),
    (["convert-gqa", "--in", GPT, "--out", "{tmp}/out", "--kv-heads", "1"], "--seed", [NEG]),
    (["demo"], "--train-steps", [NEG, ZERO]),
    (["demo"], "--stream-tokens", [ZERO]),
    (["demo"], "--threads", [NEG]),
]
def command_name(args):
    return " ".join(args[:2]) if len(args) > 1 and not args[1].startswith("-") else args[0]


NUMERIC_CASES = [pytest.param(prefix + [flag, value], flag, id=f"{command_name(prefix)} {flag}={value}")
                 for prefix, flag, values in NUMERIC for value in values]
# kv-plan's checks live in the library (shared with Python's attnkit.kv_plan), so its messages name
# the quantity without dashes: "kv_plan: batch must be >= 1, got 0".
KV_PLAN = [("--layers", [NEG, ZERO, WORD]), ("--batch", [NEG, ZERO, NAN]), ("--context", [NEG, WORD, HUGE]),
           ("--tp", [ZERO]), ("--head-dim", [ZERO]), ("--memory", [NEG, WORD]), ("--bandwidth", [NAN, NEG])]
NUMERIC_CASES += [pytest.param(["kv-plan", "--preset", "llama3-8b", flag, value], flag[2:].replace("-", "_"),
                               id=f"kv-plan {flag}={value}")
                  for flag, values in KV_PLAN for value in values]


@pytest.mark.parametrize("args,culprit", NUMERIC_CASES)
def test_bad_numeric_flag(args, culprit, inputs, tmp_path):
    run_case(args, culprit, inputs, tmp_path)


# --- input files and model directories -------------------------------------------------------
# (args, culprit). Model directories that are missing, empty, hold an empty or cut config.json,
# cut weights, or a model of the wrong type; files that are missing, empty, cut or directories.
BAD_DIRS = {"missing": "{in}/nowhere", "empty dir": "{in}/empty_dir", "empty config": "{in}/empty_config",
            "cut config": "{in}/cut_config", "file, not dir": "{in}/text.txt"}
GPT_COMMANDS = [["generate", "--model"], ["sink-profile", "--query-pos", "8", "--model"],
                ["eval-stream", "--model"], ["bench", "generate", "--model"], ["eval", "--model"],
                ["convert-gqa", "--out", "{tmp}/out", "--kv-heads", "1", "--in"]]
FILE_CASES = []
for cmd in GPT_COMMANDS:
    name = command_name(cmd)
    for kind, path in BAD_DIRS.items():
        FILE_CASES.append(pytest.param(cmd + [path], path, id=f"{name} {kind}"))
    FILE_CASES.append(pytest.param(cmd + ["{in}/lstm"], "lstm", id=f"{name} unknown model_type"))
    if cmd[0] != "eval":  # eval accepts BERT and image models
        FILE_CASES.append(pytest.param(cmd + ["{in}/bert"], "bert", id=f"{name} BERT dir"))
        FILE_CASES.append(pytest.param(cmd + ["{in}/cnn"], "cnn", id=f"{name} CNN dir"))
    if cmd[0] != "convert-gqa":
        FILE_CASES.append(pytest.param(cmd + ["{in}/cut_weights"], "model.safetensors",
                                       id=f"{name} cut weights"))
FILE_CASES += [
    pytest.param(["generate", "--model", "{in}/bert"], "needs a GPT", id="generate BERT says what it needs"),
    pytest.param(["inspect", "{in}/nowhere.safetensors"], "{in}/nowhere.safetensors", id="inspect missing"),
    pytest.param(["inspect", "{in}/empty.bin"], "{in}/empty.bin", id="inspect empty"),
    pytest.param(["inspect", "{in}/cut.safetensors"], "{in}/cut.safetensors", id="inspect cut"),
    pytest.param(["inspect", "{in}/text.txt"], "{in}/text.txt", id="inspect text"),
    pytest.param(["inspect", "{in}"], "{in}", id="inspect directory without config.json"),
    pytest.param(["classify", "--model", "{in}/cnn", "{in}/nowhere.png"], "{in}/nowhere.png", id="classify missing file"),
    pytest.param(["classify", "--model", "{in}/cnn", "{in}/empty.bin"], "{in}/empty.bin", id="classify empty file"),
    pytest.param(["classify", "--model", "{in}/cnn", "{in}/not_an_image.png"], "{in}/not_an_image.png",
                 id="classify cut png"),
    pytest.param(["classify", "--model", "{in}/cnn", "{in}/gpt"], "{in}/gpt", id="classify directory"),
    pytest.param(["classify", "--model", "{in}/gpt", "{in}/text.txt"], "--model", id="classify GPT model"),
    pytest.param(["classify", "--model", "{in}/bert", "{in}/text.txt"], "--model", id="classify BERT model"),
    pytest.param(["classify", "--model", "{in}/nowhere", "{in}/text.txt"], "{in}/nowhere", id="classify missing model"),
    pytest.param(["eval", "--model", GPT, "--data", "{in}/nowhere.txt"], "{in}/nowhere.txt", id="eval missing data"),
    pytest.param(["eval", "--model", GPT, "--data", "{in}/gpt"], "{in}/gpt", id="eval data is a directory"),
    pytest.param(["eval", "--model", GPT, "--data", "{in}/empty.bin", "--split", "all"], "--data",
                 id="eval empty data"),
    pytest.param(["eval", "--model", GPT, "--split", "test"], "--split", id="eval bad split"),
    pytest.param(["eval-stream", "--model", GPT, "--data", "{in}/nowhere.txt"], "{in}/nowhere.txt",
                 id="eval-stream missing data"),
    pytest.param(["sink-profile", "--model", GPT, "--query-pos", "8", "--data", "{in}/nowhere.txt"],
                 "{in}/nowhere.txt", id="sink-profile missing data"),
    pytest.param(["train", "gpt", "--out", "{tmp}/run", "--config", "{in}/nowhere.json"], "{in}/nowhere.json",
                 id="train gpt missing config"),
    pytest.param(["dataset", "--data-dir", "{in}/nowhere"], "{in}/nowhere", id="dataset missing dir"),
    pytest.param(["dataset", "--data-dir", "{in}/empty_dir"], "{in}/empty_dir", id="dataset empty dir"),
    pytest.param(["dataset", "--data-dir", "{in}/text.txt"], "{in}/text.txt", id="dataset file, not dir"),
    pytest.param(["convert-gqa", "--in", GPT, "--out", GPT, "--kv-heads", "1"], "--out", id="convert-gqa onto input"),
    pytest.param(["finetune", "bert", "--init", "{in}/bert", "--out", "{tmp}/ft", "--classes", "computers", "computers",
                  "--steps", "1"], "--classes", id="finetune bert duplicate class"),
]


@pytest.mark.parametrize("args,culprit", FILE_CASES)
def test_bad_input_file(args, culprit, inputs, tmp_path):
    run_case(args, culprit, inputs, tmp_path)


# --- output paths ----------------------------------------------------------------------------
OUTPUT_CASES = [
    pytest.param(["sink-profile", "--model", GPT, "--query-pos", "8", "--data", "{in}/text.txt", "--split", "all",
                  "--windows", "1", "--plot", "{tmp}/missing/p.png"], "--plot", id="sink-profile plot missing folder"),
    pytest.param(["sink-profile", "--model", GPT, "--query-pos", "8", "--data", "{in}/text.txt", "--split", "all",
                  "--windows", "1", "--plot", "{tmp}"], "--plot", id="sink-profile plot is a folder"),
    pytest.param(["eval-stream", "--model", GPT, "--data", "{in}/text.txt", "--split", "all", "--tokens", "40",
                  "--plot", "{tmp}/missing/p.png"], "--plot", id="eval-stream plot missing folder"),
    pytest.param(["eval-stream", "--model", GPT, "--data", "{in}/text.txt", "--split", "all", "--tokens", "40",
                  "--csv", "{tmp}/missing/s.csv"], "--csv", id="eval-stream csv missing folder"),
    pytest.param(["sink-profile", "--model", GPT, "--query-pos", "8", "--data", "{in}/text.txt", "--split", "all",
                  "--windows", "1", "--plot", "{tmp}/p.xyz"], "--plot", id="sink-profile plot unknown format"),
    pytest.param(["eval-stream", "--model", GPT, "--data", "{in}/text.txt", "--split", "all", "--tokens", "40",
                  "--plot", "{tmp}/p.xyz"], "--plot", id="eval-stream plot unknown format"),
    pytest.param(["report", "--tiny", "--out", "{in}/text.txt"], "--out", id="report out is a file"),
    pytest.param(["report", "--tiny", "--out", "/proc/attnkit/report"], "--out", id="report out not creatable"),
]


@pytest.mark.parametrize("args,culprit", OUTPUT_CASES)
def test_bad_output_path(args, culprit, inputs, tmp_path):
    run_case(args, culprit, inputs, tmp_path)


# --- the command line itself -----------------------------------------------------------------
PARSE_CASES = [
    pytest.param([], "subcommand", id="no subcommand"),
    pytest.param(["frobnicate"], "frobnicate", id="unknown subcommand"),
    pytest.param(["train", "nosuch"], "unknown command 'nosuch' for attnkit train", id="unknown train subcommand"),
    pytest.param(["finetune", "gpt"], "unknown command 'gpt' for attnkit finetune", id="unknown finetune subcommand"),
    pytest.param(["demo", "--quick", "--out", "{in}/gpt"], "give the demo another --out", id="demo onto a run"),
    pytest.param(["eval-stream", "--model", GPT, "--tokens", "64", "--policy", "paged"], "--policy",
                 id="eval-stream paged policy"),
    pytest.param(["report", "--tiny", "--out", "{tmp}/rep", "--sink-model", "{in}/cnn"], "--sink-model",
                 id="report sink model not a GPT"),
    pytest.param(["eval-stream", "--model", GPT, "--tokens", "64", "--data", "{in}/text.txt"],
                 "the validation split has only", id="eval-stream names the split"),
    pytest.param(["generate", "--model", GPT, "--frobnicate"], "--frobnicate", id="unknown flag"),
    pytest.param(["generate"], "--model", id="missing required flag"),
    pytest.param(["generate", "--model"], "--model", id="flag without value"),
    pytest.param(["generate", "--model", GPT, "--threads"], "--threads", id="threads without value"),
    pytest.param(["generate", "--model", GPT, "--cache-dtype", "f12"], "--cache-dtype", id="bad cache dtype"),
    pytest.param(["generate", "--model", GPT, "--sink-tokens", "4"], "--sink-tokens", id="sink without window"),
    pytest.param(["train", "gpt", "--out", "{tmp}/r", "--config", "{in}/gpt/config.json", "--preset", "small"],
                 "--preset", id="train gpt config and preset"),
    pytest.param(["train", "bert", "--out", "{tmp}/r", "--config", "{in}/bert/config.json", "--preset", "tiny"],
                 "--preset", id="train bert config and preset"),
    pytest.param(["train", "cnn", "--out", "{tmp}/r", "--anneal-by-time"], "--max-minutes",
                 id="anneal by time without a budget"),
    pytest.param(["train", "bert", "--out", "{tmp}/r", "--batch", "99999999999"], "--batch", id="bert batch huge"),
    pytest.param(["train", "bert", "--out", "{tmp}/r", "--eval-examples", "99999999999"], "--eval-examples",
                 id="bert eval examples huge"),
    pytest.param(["sink-profile", "--model", GPT, "--query-pos", "8", "--windows", "99999999999"], "--windows",
                 id="sink-profile windows huge"),
    pytest.param(["eval-stream", "--model", GPT, "--policy", "lru"], "lru", id="bad stream policy"),
    pytest.param(["eval-stream", "--model", GPT, "--policy", "paged"], "paged", id="paged is no stream policy"),
    # the cache's sink-token count was --sink (generate) and --sinks (eval-stream): both spellings
    # now stop with one line naming --sink-tokens, with or without a value, in both commands
    pytest.param(["generate", "--model", GPT, "--sink", "4", "--window", "8"], "--sink-tokens", id="old --sink"),
    pytest.param(["generate", "--model", GPT, "--sinks", "4", "--window", "8"], "--sink-tokens", id="old --sinks gen"),
    pytest.param(["eval-stream", "--model", GPT, "--sinks", "4"], "--sink-tokens", id="old --sinks"),
    pytest.param(["eval-stream", "--model", GPT, "--sink"], "--sink-tokens", id="old --sink no value"),
    pytest.param(["bench", "attention", "--heads", "6", "--kv-heads", "4"], "--kv-heads", id="kv-heads not dividing"),
    pytest.param(["bench", "decode", "--kv-heads", "3,x"], "--kv-heads", id="bad kv-heads list"),
    pytest.param(["bench", "decode", "--dtype", "f64"], "--dtype", id="bad decode dtype"),
    pytest.param(["train", "cnn", "--out", "{tmp}/run", "--attention", "lstm"], "--attention", id="bad attention"),
    pytest.param(["train", "gpt", "--out", "{tmp}/run", "--precision", "fp8"], "--precision", id="bad precision"),
    pytest.param(["convert-gqa", "--in", GPT, "--out", "{tmp}/o", "--kv-heads", "1", "--method", "max"], "--method",
                 id="bad pooling method"),
    pytest.param(["report", "--tiny", "--quick", "--out", "{tmp}/r"], "--quick", id="report exclusive flags"),
]


@pytest.mark.parametrize("args,culprit", PARSE_CASES)
def test_bad_command_line(args, culprit, inputs, tmp_path):
    run_case(args, culprit, inputs, tmp_path)


def test_case_count():
    """The generated suite stays broad: at least 150 CLI cases."""
    assert len(NUMERIC_CASES) + len(FILE_CASES) + len(OUTPUT_CASES) + len(PARSE_CASES) >= 150


def test_good_call_still_works(inputs, tmp_path):
    """The checks refuse bad input only: a valid call of a checked command succeeds."""
    r = subprocess.run([CLI, "generate", "--model", str(inputs / "gpt"), "--max-tokens", "3", "--seed", "1",
                        "--threads", "1", "--top-p", "0.9"], capture_output=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert b"3 tokens" in r.stderr
