"""Shared fixtures: every test runs over each array framework and device this
machine has (NumPy, torch CPU, and on a GPU machine torch CUDA and CuPy)."""
from __future__ import annotations

import os
import secrets
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # for `import reference`


def _available_targets():
    targets = ["numpy"]
    try:
        import torch
        targets.append("torch-cpu")
        if torch.cuda.is_available():
            targets.append("torch-cuda")
    except ImportError:
        pass
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            targets.append("cupy")
    except Exception:
        pass
    return targets


TARGETS = _available_targets()


class Target:
    """Moves NumPy arrays to a framework/device and back."""

    def __init__(self, name):
        self.name = name
        self.is_gpu = name in ("torch-cuda", "cupy")

    def put(self, a):
        if self.name == "numpy":
            return a
        if self.name.startswith("torch"):
            import torch
            return torch.from_numpy(np.ascontiguousarray(a)).to("cuda" if self.is_gpu else "cpu")
        import cupy
        return cupy.asarray(a)

    def get(self, x):
        if self.name == "numpy":
            return np.asarray(x)
        if self.name.startswith("torch"):
            return x.cpu().numpy()
        return x.get()

    def full(self, shape, value, dtype):
        return self.put(np.full(shape, value, dtype=dtype))

    def synchronize(self):
        if self.name == "torch-cuda":
            import torch
            torch.cuda.synchronize()
        elif self.name == "cupy":
            import cupy
            cupy.cuda.get_current_stream().synchronize()

    def __repr__(self):
        return self.name


@pytest.fixture(params=TARGETS)
def target(request):
    return Target(request.param)


# The rng fixture's seeds: one per test, from the test's id and a session seed that
# is fresh every run (more inputs seen over time) unless PUFFADV_TEST_SEED replays one.
# A failing test that used it reports its seed (pytest's "rng seed" section).
SESSION_SEED = int(os.environ.get("PUFFADV_TEST_SEED") or secrets.randbits(32))


# Under pytest-xdist (CI runs `pytest -n 2`) each worker imports this file and would
# draw its own session seed; the controller hands its seed to every worker, so one
# run has one seed and the header's replay line holds for every test.
@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["puffadv_session_seed"] = SESSION_SEED


def pytest_configure(config):
    global SESSION_SEED
    seed = getattr(config, "workerinput", {}).get("puffadv_session_seed")
    if seed is not None:
        SESSION_SEED = seed


def pytest_report_header(config):
    return f"puffadv rng fixture: session seed {SESSION_SEED} (replay with PUFFADV_TEST_SEED={SESSION_SEED})"


@pytest.fixture
def rng(request):
    seed = (SESSION_SEED ^ zlib.crc32(request.node.nodeid.encode())) & 0xFFFFFFFF
    request.node.puffadv_rng_seed = seed
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seed = getattr(item, "puffadv_rng_seed", None)
    if report.failed and seed is not None:
        report.sections.append(("rng seed", f"np.random.default_rng({seed}); rerun with "
                                            f"PUFFADV_TEST_SEED={SESSION_SEED} to get the same inputs"))


# The fused backward's calls (test_gradients_fused, test_gradients): torch and puffadv are
# imported by the fixture, so that test files without torch still load this conftest.
@pytest.fixture
def spy(monkeypatch):
    """Counts the backward calls the fused kernel computed."""
    from puffadv import _vjp_fused
    calls = []
    real = _vjp_fused.vjp

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(_vjp_fused, "vjp", counted)
    return calls
