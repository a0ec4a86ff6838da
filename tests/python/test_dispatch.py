"""_engine.run, the one place Python reaches the core: behaviour that holds for
every public function. GPU specifics are simulated; the real thing runs in the
GPU suite (scripts/gpu/10-gpu-tests.sh)."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
from puffadv import _engine, _frameworks
from reference import random_puff_inputs


def test_jax_gpu_arrays_wait_for_the_write_before_returning(monkeypatch, rng):
    # JAX gives no stream to order its next read on, so the call must not return
    # before the kernel's write has landed: the wait comes after the kernel.
    events = []
    monkeypatch.setattr(_frameworks, "is_gpu", lambda x: True)
    monkeypatch.setattr(_frameworks, "current_stream", lambda framework, x, stream: 0)
    monkeypatch.setattr(_frameworks, "wait_for_gpu", lambda x: events.append("wait"))

    def kernel(arrays, stream):
        events.append("kernel")

    _engine.run(kernel, "jax", {"values": np.ones((2, 3))}, {"advantages": np.empty((2, 3))})
    assert events == ["kernel", "wait"]


def test_other_frameworks_never_wait(monkeypatch, rng):
    waits = []
    monkeypatch.setattr(_frameworks, "wait_for_gpu", lambda x: waits.append(x))
    inputs = random_puff_inputs(rng, 4, 9)
    out = puffadv.compute_puff_advantage(*inputs)
    assert np.isfinite(out).all()
    assert waits == []


def test_no_wait_after_an_argument_error(monkeypatch):
    waits = []
    monkeypatch.setattr(_frameworks, "is_gpu", lambda x: True)
    monkeypatch.setattr(_frameworks, "current_stream", lambda framework, x, stream: 0)
    monkeypatch.setattr(_frameworks, "wait_for_gpu", lambda x: waits.append(x))

    calls = []

    def kernel(arrays, stream):
        calls.append(arrays)
        raise ValueError("gamma must be finite and in [0, 1], got nan")

    # The error reaches the caller (pytest.raises fails if it were swallowed) and nothing waits.
    with pytest.raises(ValueError, match=r"^gamma must be finite and in \[0, 1\], got nan$"):
        _engine.run(kernel, "jax", {"values": np.ones((2, 3))}, {"advantages": np.empty((2, 3))})
    assert len(calls) == 1
    assert waits == []
