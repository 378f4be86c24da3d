"""`pip install .` into a fresh venv made from Debian's Python (--system-site-packages: Debian's
numpy and torch), offline and with Debian's setuptools only; then, from a folder outside the
checkout and without PYTHONPATH: every module under python/attnkit/ imports from the venv, the
extension computes causal attention equal to a float64 numpy reference, and `attnkit --help` runs
from PATH.

Runs only with ATTNKIT_TEST_PIP=1. With ATTNKIT_BUILD_DIR=<configured build tree> (scripts/test
passes build/), pip copies that tree's extension and CLI after an incremental `cmake --build`;
without it, setup.py configures and builds a fresh release tree (minutes)."""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.environ.get("ATTNKIT_TEST_PIP") != "1",
                                reason="set ATTNKIT_TEST_PIP=1 (and ATTNKIT_BUILD_DIR=build to reuse a build)")

CHECK = r"""
import importlib, sys
from pathlib import Path
import numpy as np
import attnkit
modules = sys.argv[1].split()
for m in modules:
    importlib.import_module(m)
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((5, 2, 4)).astype(np.float32) for _ in range(3))
print(attnkit.__file__)
np.save(sys.argv[2], attnkit.flash_attention(q, k, v, causal=True))
np.save(sys.argv[3], np.stack([q, k, v]))
"""


def source_modules():
    """Dotted names of every module in the source package python/attnkit/."""
    base = ROOT / "python"
    names = []
    for f in sorted((base / "attnkit").rglob("*.py")):
        parts = f.relative_to(base).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def causal_reference(q, k, v):
    """softmax(q·kᵀ/sqrt(D) + causal mask)·v in float64; q, k, v [T, H, D]."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("thd,shd->hts", q, k) / np.sqrt(q.shape[-1])
    s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("hts,shd->thd", p / p.sum(-1, keepdims=True), v)


def test_pip_install_into_fresh_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    subprocess.run([venv / "bin" / "pip", "install", "-q", "--no-build-isolation", "--no-index", ROOT],
                   check=True, env=env, cwd=tmp_path)

    modules = source_modules()
    out_file, qkv_file = tmp_path / "out.npy", tmp_path / "qkv.npy"
    r = subprocess.run([venv / "bin" / "python", "-c", CHECK, " ".join(modules), out_file, qkv_file],
                       check=True, env=env, cwd=tmp_path, capture_output=True, text=True)
    assert Path(r.stdout.strip()).is_relative_to(venv), r.stdout  # the venv's copy, not the checkout's

    q, k, v = np.load(qkv_file)
    out, ref = np.load(out_file), causal_reference(q, k, v)
    bound = 16 * q.shape[-1] * np.finfo(np.float32).eps * np.abs(v).max()  # a few float32 roundings
    assert np.abs(out - ref).max() <= bound

    r = subprocess.run(["attnkit", "--help"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and "attnkit" in r.stdout, r.stderr
    assert Path(subprocess.run(["which", "attnkit"], env=env, capture_output=True, text=True,
                               check=True).stdout.strip()) == venv / "bin" / "attnkit"
