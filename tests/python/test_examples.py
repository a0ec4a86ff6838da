"""The Python examples under examples/ run (on the CPU, in seconds) and check themselves:
each ends with an "ok" line after asserting its gradients (issue 30)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("script", ["dreamer_lambda_returns.py", "meta_gradient_gamma.py"])
def test_example_runs(script):
    pytest.importorskip("torch")
    import puffadv
    path = str(Path(puffadv.__file__).resolve().parents[1])  # the puffadv these tests import
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (path, os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.rstrip().splitlines()[-1].startswith("ok"), done.stdout[-2000:]
