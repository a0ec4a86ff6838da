"""PufferLib's real trainer on puffadv. These tests run in a virtual environment of
their own (PufferLib 3.0.0 pins numpy<2), which scripts/test.d/55-pufferlib.sh
builds: torch, puffadv's wheel, PufferLib 3.0.0's pure-Python dependencies, the
pufferlib-core 3.0.23 wheel (--no-deps), and the import hook of
`python -m puffadv.pufferlib_compat install`. PufferLib 3.0.0's sdist tree
is named by PUFFADV_PUFFERLIB_SDIST (its setup.py cannot run here, so it goes on
PYTHONPATH, as a user would have to). Every scenario runs in a fresh process:
puffadv decides once per process, and a wrong import order aborts one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD = ROOT / "build" / "pufferlib"


def _sdist() -> Path:
    value = os.environ.get("PUFFADV_PUFFERLIB_SDIST")
    if not value or not (Path(value) / "pufferlib" / "pufferl.py").exists():
        pytest.fail("PUFFADV_PUFFERLIB_SDIST must name PufferLib 3.0.0's unpacked sdist; "
                    "run scripts/test.d/55-pufferlib.sh, which fetches it")
    return Path(value).resolve()


@pytest.fixture(scope="session")
def sdist() -> Path:
    return _sdist()


@pytest.fixture(scope="session")
def pysquared(sdist) -> Path:
    return sdist / "pufferlib" / "ocean" / "pysquared" / "pysquared.py"


@pytest.fixture(scope="session")
def tree_with_extension(sdist) -> Path:
    """PufferLib 3.0.0 as a user who could build it has it: the same tree plus its
    own CPU extension (pufferlib/extensions/pufferlib.cpp, compiled by torch's
    cpp_extension, as its setup.py would on a machine without nvcc)."""
    built = BUILD / "extension"
    built.mkdir(parents=True, exist_ok=True)
    source = sdist / "pufferlib" / "extensions" / "pufferlib.cpp"
    # A process of its own: loading the library registers torch.ops.pufferlib.
    build = ("import sys, torch.utils.cpp_extension as ce; ce.load(name='_C', sources=[sys.argv[1]], "
             "build_directory=sys.argv[2], extra_cflags=['-O2'], is_python_module=False)")
    done = subprocess.run([sys.executable, "-c", build, str(source), str(built)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    tree = BUILD / "tree-with-extension"  # symbolic links to the sdist's files, and _C.so
    package = tree / "pufferlib"
    package.mkdir(parents=True, exist_ok=True)
    for entry in (sdist / "pufferlib").iterdir():
        link = package / entry.name
        if not link.is_symlink():
            link.symlink_to(entry)
    extension = package / "_C.so"
    extension.unlink(missing_ok=True)
    extension.symlink_to(built / "_C.so")
    return tree


def run_python(code_or_args, pythonpath=None, timeout=300, cwd=None):
    """A fresh interpreter of this environment (so with the import hook installed)."""
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else list(code_or_args)
    BUILD.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd or BUILD)


def puffadv_lines(stderr: str) -> list[str]:
    """What puffadv said: its logger's lines on stderr."""
    return [line for line in stderr.splitlines() if line.startswith("puffadv: ")]


@pytest.fixture(scope="session")
def train(pysquared, tmp_path_factory):
    """Runs PufferLib's trainer (train_pysquared.py); returns (report, stderr, seconds)."""
    import time

    def run(steps, pythonpath=None):
        out = tmp_path_factory.mktemp("train") / "report.json"
        started = time.perf_counter()
        done = run_python([str(HERE / "train_pysquared.py"), str(pysquared), str(steps), str(out)],
                          pythonpath=pythonpath)
        seconds = time.perf_counter() - started
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(out.read_text()), done.stderr, seconds
    return run
