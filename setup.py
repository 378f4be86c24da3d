"""Builds attnkit for pip with CMake: the `_attnkit` extension and the `attnkit` CLI.

`pip install .` runs this through setuptools (pyproject.toml). The extension is placed in the
`attnkit` package; the CLI is installed as the data file `bin/attnkit`, i.e. next to the
environment's `python` and on its PATH. Environment variables:
  ATTNKIT_MARCH       compile for this CPU (-march=VALUE, e.g. x86-64-v3); default: -march=native,
                      so the result runs only on CPUs with this machine's instruction set
  ATTNKIT_BUILD_DIR   an existing, configured attnkit CMake build tree to build and copy from
                      (e.g. $PWD/build, made by `cmake --preset default`) instead of build-pip/;
                      its Python must be this interpreter's version; its own flags are kept
  ATTNKIT_CMAKE_ARGS  extra arguments for the build-pip/ configure (e.g. -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  CMAKE_BUILD_PARALLEL_LEVEL  parallel compile jobs (default: all cores)
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
BUILD_BASE = "build-pip"  # setuptools' own build/ would land inside CMake's build/ tree
STAGED_CLI = f"{BUILD_BASE}/bin/attnkit"  # relative: setuptools' data_files paths must be


def project_version():
    """The version in CMakeLists.txt's project() call (the one source of the version)."""
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(attnkit VERSION ([0-9.]+)", text).group(1)


def run(cmd):
    """Runs cmd (a list), echoing it; raises CalledProcessError on failure."""
    print("setup.py:", shlex.join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


class CMakeBuild(build_ext):
    """build_ext that builds the CMake targets _attnkit and attnkit_cli and copies them out."""

    def build_extension(self, ext):
        build_dir = os.environ.get("ATTNKIT_BUILD_DIR")
        if build_dir:
            build_dir = Path(build_dir).resolve()
            if not (build_dir / "CMakeCache.txt").exists():
                sys.exit(f"setup.py: ATTNKIT_BUILD_DIR={build_dir} is not a configured CMake build tree")
        else:
            build_dir = Path(self.build_temp).resolve() / "cmake"
            args = ["-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}",
                    "-DATTNKIT_TESTS=OFF", "-DATTNKIT_BENCH=OFF", "-DATTNKIT_PYTHON=ON", "-DATTNKIT_CLI=ON"]
            args.append(f"-DATTNKIT_MARCH={os.environ.get('ATTNKIT_MARCH', '')}")  # always: the cache persists
            args += shlex.split(os.environ.get("ATTNKIT_CMAKE_ARGS", ""))
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            run(["cmake", "-S", ROOT, "-B", build_dir, *generator, *args])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        run(["cmake", "--build", build_dir, "-j", jobs, "--target", "_attnkit", "attnkit_cli"])

        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = build_dir / "python" / "attnkit" / f"_attnkit{suffix}"
        if not built.exists():
            sys.exit(f"setup.py: {built} not found: the build tree's Python differs from {sys.executable}")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)
        staged = ROOT / STAGED_CLI
        staged.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_dir / "attnkit", staged)


(ROOT / BUILD_BASE).mkdir(exist_ok=True)
setup(
    version=project_version(),
    ext_modules=[Extension("attnkit._attnkit", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    data_files=[("bin", [STAGED_CLI])],
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
)
