"""One build of the torch operator library serves every torch release from its
floor on (it is built on torch's LibTorch Stable ABI): the library this process
loaded, built against this process's torch, is loaded into a second torch
release in a child process, which runs the operator tests there.

The second release is a Python with another torch, given by
PUFFADV_SECOND_TORCH_PYTHON (scripts/test.d/15-torch-versions.sh makes one);
without it this file skips."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import puffadv  # noqa: E402
import puffadv.torch  # noqa: E402,F401
from puffadv import _torch_status  # noqa: E402

SECOND_PYTHON = os.environ.get("PUFFADV_SECOND_TORCH_PYTHON")
if SECOND_PYTHON:  # absolute, not resolved: a venv's python is a symlink that must stay one
    SECOND_PYTHON = os.path.abspath(SECOND_PYTHON)
pytestmark = pytest.mark.skipif(
    not SECOND_PYTHON, reason="PUFFADV_SECOND_TORCH_PYTHON (a Python with another torch release) not set")
TESTS = Path(__file__).resolve().parent
OP_TESTS = [str(TESTS / "test_torch_ops.py"), str(TESTS / "test_torch_conventions.py")]


def child_env(tmp_path: Path) -> dict:
    """PYTHONPATH with this very puffadv package and nothing else of this
    environment (whose site-packages holds the first torch)."""
    (tmp_path / "puffadv").symlink_to(Path(puffadv.__file__).resolve().parent, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(tmp_path)
    return env


def test_the_op_library_built_here_runs_in_a_second_torch_release(tmp_path):
    here = puffadv.backend()["torch_ops"]
    assert here["loaded"] and here["built_against"].split("+")[0] == torch.__version__.split("+")[0]
    env = child_env(tmp_path)
    probe = subprocess.run(
        [SECOND_PYTHON, "-c",
         "import torch, puffadv, puffadv.torch; r = puffadv.backend()['torch_ops']; "
         "print(torch.__version__, r['built_against'], r['library'], r['loaded'])"],
        capture_output=True, text=True, env=env, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    second, built_against, library, loaded = probe.stdout.split()
    print(f"built against torch {built_against}, loaded into torch {second}", file=sys.stderr)
    assert _torch_status.release(second) != _torch_status.release(torch.__version__), (
        "the second Python has the same torch release")
    assert built_against == here["built_against"] and loaded == "True"
    assert Path(library).resolve() == Path(here["library"]).resolve()  # the very same binary
    run = subprocess.run([SECOND_PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", *OP_TESTS],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1800)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    print(f"torch {second}: {summary}", file=sys.stderr)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert " passed" in summary and "failed" not in summary
