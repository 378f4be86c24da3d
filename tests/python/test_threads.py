"""attnkit's threads and BLAS do not depend on what else the process loaded or in which order.

Each case runs in a fresh interpreter, since the import order is the thing under test. Importing
torch first sets OpenMP's default thread count to 1; attnkit must still use every CPU of the
process's affinity mask, compute bitwise the same results (flash attention, and a convolution that
oneDNN runs when attnkit is built with it), and let set_num_threads win.
"""
import json
import os
import subprocess
import sys

import pytest

_CHILD = r"""
import hashlib, json, os, sys
order = sys.argv[1]
if order == "torch":
    import torch
    import attnkit
else:
    import attnkit
    import torch
import numpy as np
try:
    import scipy.linalg  # noqa: F401  (maps its own BLAS wrappers; attnkit's must not change)
except ImportError:
    pass
if len(sys.argv) > 2:
    attnkit.set_num_threads(int(sys.argv[2]))
info = attnkit.build_info()
rng = np.random.default_rng(0)
q = rng.standard_normal((300, 8, 64), dtype=np.float32)
k = rng.standard_normal((300, 2, 64), dtype=np.float32)
v = rng.standard_normal((300, 2, 64), dtype=np.float32)
out, lse = attnkit.flash_attention(q, k, v, causal=True, return_lse=True)
dout = rng.standard_normal(out.shape, dtype=np.float32)
grads = attnkit.flash_attention_backward(dout, q, k, v, out, lse, causal=True)
# A 16 → 16 channel 3×3 layer on 7×7 planes: every pass by oneDNN's convolution in a oneDNN build
# (whose OpenMP runtime torch shares), by the built-in paths otherwise.
x = rng.standard_normal((20, 16, 7, 7), dtype=np.float32)
w = rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
y = attnkit.nn.conv2d(x, w, padding=1)
conv = [y, *attnkit.nn.conv2d_backward(rng.standard_normal(y.shape, dtype=np.float32), x, w, has_bias=False,
                                       padding=1)[:2]]
digest = hashlib.sha256(out.tobytes() + b"".join(g.tobytes() for g in grads if g is not None) +
                        b"".join(c.tobytes() for c in conv)).hexdigest()
maps = sorted({os.path.realpath(line.split()[-1]) for line in open("/proc/self/maps")
               if "libopenblas" in line})
print(json.dumps({"info": info, "digest": digest, "openblas": maps,
                  "torch_threads": torch.get_num_threads()}))
"""


def _run(order, *extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    r = subprocess.run([sys.executable, "-c", _CHILD, order, *extra], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs():
    return {"torch": _run("torch"), "attnkit": _run("attnkit")}


def test_torch_first_uses_every_allowed_cpu(runs):
    cpus = len(os.sched_getaffinity(0))
    for order, r in runs.items():
        assert r["info"]["threads"] == cpus, order
        assert r["info"]["threads_source"] == "CPU affinity", order
        assert r["info"]["blas_threads"] == cpus, order


def test_results_are_bitwise_equal_in_either_import_order(runs):
    assert runs["torch"]["digest"] == runs["attnkit"]["digest"]


def test_one_openblas_build_serves_attnkit_in_either_order(runs):
    for order, r in runs.items():
        assert len(r["openblas"]) == 1, (order, r["openblas"])
        assert r["openblas"][0] == r["info"]["blas_library"], order
        assert "openblas-openmp" in r["info"]["blas_library"], order


def test_set_num_threads_wins_after_torch():
    r = _run("torch", "1")
    assert r["info"]["threads"] == 1
    assert r["info"]["threads_source"] == "set_num_threads"
    assert r["info"]["blas_threads"] == 1


def test_omp_num_threads_is_honoured():
    env = dict(os.environ, OMP_NUM_THREADS="3")
    r = subprocess.run([sys.executable, "-c", "import attnkit, json; print(json.dumps(attnkit.build_info()))"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["threads"] == 3 and info["threads_source"] == "OMP_NUM_THREADS"
