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


def test_the_core_entry_switch_gets_every_array_by_role(monkeypatch, rng):
    """With the core's one entry present (_core.estimate), every call reaches it with its
    arrays keyed by role and its scalars and options by name."""
    seen = []
    monkeypatch.setattr(_engine, "_ONE_ENTRY", lambda kind, arrays, **kw: seen.append((kind, arrays, kw)))
    v, r, d, i = random_puff_inputs(rng, 3, 7)
    out = np.empty_like(v)
    assert puffadv.compute_puff_advantage(v, r, d, i, out, 0.9, 0.8, 1.5, 1.2) is out
    kind, arrays, kw = seen.pop()
    assert kind == "puff_advantage" and arrays["terminated"] is d and arrays["values"] is v
    assert arrays["advantages"] is out and arrays["importance"] is i
    assert (kw["gamma"], kw["lambda_"], kw["rho_clip"], kw["c_clip"], kw["lambda_name"]) == \
        (0.9, 0.8, 1.5, 1.2, "gae_lambda")
    term = d > 0
    puffadv.gae(r, v, term, last_value=v[:, -1], gamma=0.9, gae_lambda=0.8, time_axis=1, sums=True)
    kind, arrays, kw = seen.pop()
    assert kind == "gae" and arrays["rewards"] is r and arrays["terminated"] is term
    assert arrays["advantages"].shape == (3, 7) and arrays["sums"].shape == (3,) and arrays["abs_sums"] is None
    assert (kw["lambda_"], kw["lambda_name"], kw["time_axis"], kw["stream"]) == (0.8, "gae_lambda", 1, 0)
    puffadv.retrace(r, v, v, term, target_log_probs=i, behaviour_log_probs=i, c_clip=0.7, time_axis=-1)
    kind, arrays, kw = seen.pop()
    assert kind == "retrace" and arrays["target_probs"] is i and arrays["next_values"] is v
    assert kw["log_probs"] is True and kw["c_clip"] == 0.7 and kw["lambda_name"] == "lambda_"
    puffadv.n_step_returns(r, v, term, n=3, last_value=v[:, -1], time_axis=-1)
    assert seen.pop()[2]["n"] == 3
    puffadv.episodic_cumsum(r, term, boundary="starts_at", time_axis=-1)
    kind, arrays, kw = seen.pop()
    assert kind == "episodic_sum" and arrays["rewards"] is r and kw["reset_at_start"] is True
    assert arrays["returns"] is None and arrays["advantages"].shape == r.shape


def test_the_core_entry_checks_alone_with_check_only(rng):
    """_core.estimate(..., check_only=True): the call's every check, raising as the call
    would, and nothing written (the torch autograd path checks the outputs a caller gives
    with it before computing into tensors of its own)."""
    from puffadv import _core
    v, r, d, i = random_puff_inputs(rng, 3, 7)
    out = np.full_like(v, 7.0)
    arrays = {"values": v, "rewards": r, "terminated": d, "importance": i, "advantages": out}
    _core.estimate("puff_advantage", arrays, gamma=0.9, lambda_=0.8, lambda_name="gae_lambda", check_only=True)
    assert (out == 7.0).all()  # checked, not computed
    _core.estimate("puff_advantage", arrays, gamma=0.9, lambda_=0.8, lambda_name="gae_lambda")
    assert not (out == 7.0).all()  # the same call computes
    for bad, error, words in [({"advantages": np.full((3, 6), 7.0, np.float32)}, ValueError, "advantages has shape"),
                              ({"advantages": r}, ValueError, "overlaps"),
                              ({"importance": i.astype(np.float64)}, TypeError, "importance has dtype")]:
        with pytest.raises(error, match=words):
            _core.estimate("puff_advantage", {**arrays, **bad}, gamma=0.9, lambda_=0.8, lambda_name="gae_lambda",
                           check_only=True)
    with pytest.raises(ValueError, match="gamma"):
        _core.estimate("gae", {"rewards": r, "values": v, "terminated": d > 0, "last_value": v[:, -1],
                               "advantages": out}, gamma=1.5, lambda_=0.9, time_axis=1, check_only=True)
