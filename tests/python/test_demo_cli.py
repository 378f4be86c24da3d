"""`attnkit demo --quick` end to end: every section runs, the streaming section goes past the
training context, and the sink cache's memory does not grow with the tokens generated."""
import os
import re
import subprocess

import pytest

from cli_helpers import CLI

pytestmark = pytest.mark.skipif(not os.path.isdir("/usr/share/games/fortunes"),
                                reason="fortunes not installed")


def test_quick_demo_runs_every_section_and_streams_in_constant_memory(tmp_path):
    r = subprocess.run([CLI, "demo", "--quick", "--train-steps", "3", "--stream-tokens", "400",
                        "--threads", "2", "--out", str(tmp_path / "demo")],
                       capture_output=True, text=True, errors="replace", timeout=300)
    assert r.returncode == 0, r.stderr
    for title in ["1. KV-cache memory", "2. Flash vs naive", "4. Decode", "5. Train", "6. Streaming"]:
        assert title in r.stdout
    # MHA / GQA / MQA bytes per token of the 70B shape: 2 * 80 layers * Hkv * 128 * 2 bytes.
    for hkv in (64, 8, 1):
        assert re.search(rf"\s{hkv}\s+{2 * 80 * hkv * 128 * 2 / 1e3:.1f}\s", r.stdout)
    m = re.search(r"cache ([\d.]+) MiB at the training context and ([\d.]+) MiB after (\d+) tokens "
                  r"\((\d+) held\)", r.stdout)
    assert m, r.stdout
    assert m.group(1) == m.group(2)
    assert int(m.group(3)) > 128 * 3 and int(m.group(4)) == 128
    assert os.path.isfile(tmp_path / "demo" / "model.safetensors")


def test_demo_rejects_bad_options():
    r = subprocess.run([CLI, "demo", "--train-steps", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("attnkit: error: --train-steps")
