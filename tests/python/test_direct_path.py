"""The direct paths (python/puffadv/_direct.py, and compute_puff_advantage's NumPy and
host-tensor branches in _api.py) give what the general path (_eager) gives, bit for bit,
and leave every other call to it: results compared with the general path forced, on
fresh random inputs with episode ends at the first and last steps and NaN-poisoned
outputs; and which calls the direct paths take."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
from puffadv import _direct, _eager, _route
from reference import random_puff_inputs

try:
    import torch
except ImportError:
    torch = None


def _inputs(rng, rows=5, horizon=33, dtype=np.float32):
    e = {k: rng.standard_normal((rows, horizon)).astype(dtype) for k in ("rewards", "values", "next_values")}
    terminated = rng.random((rows, horizon)) < 0.15
    terminated[:, 0] = terminated[:, -1] = True
    e.update(terminated=terminated, last_value=rng.standard_normal(rows).astype(dtype),
             importance=rng.uniform(0.0, 3.0, (rows, horizon)).astype(dtype),
             probs=rng.uniform(0.05, 1.0, (rows, horizon)).astype(dtype))
    return e


def _numpy_transposed(x):
    return np.ascontiguousarray(x.T)


def _numpy_flipped(x):
    return x[:, ::-1].copy()


def _calls(e, poisoned, transposed=_numpy_transposed, flipped=_numpy_flipped):
    """(name, call) pairs over every family estimator and output spec the direct path takes;
    `transposed` and `flipped` make a contiguous [T, B] copy and a time-reversed copy in the
    arrays' framework."""
    r, v, t, last, i, nv, p = (e[k] for k in ("rewards", "values", "terminated", "last_value", "importance",
                                              "next_values", "probs"))
    return [
        ("gae", lambda: puffadv.gae(r, v, t, last_value=last, gamma=0.9, gae_lambda=0.8, time_axis=-1)),
        ("gae all outputs", lambda: puffadv.gae(r, v, t, last_value=last, importance=i, abs_sums=True,
                                                sums=True, square_sums=True, time_axis=1)),
        ("gae given", lambda: puffadv.gae(r, v, t, last_value=last, advantages=poisoned(), returns=False, time_axis=-1)),
        ("gae time-major", lambda: puffadv.gae(transposed(r), transposed(v), transposed(t), last_value=last,
                                               time_axis=0, sums=True)),
        ("td_lambda", lambda: puffadv.td_lambda_returns(r, v, t, bootstrap_values=v, lambda_=0.7, sums=True, time_axis=-1)),
        ("vtrace", lambda: puffadv.vtrace(r, v, t, last_value=last, importance=i, rho_pg_clip=0.8,
                                          vs=poisoned(), abs_sums=True, time_axis=-1)),
        ("discounted", lambda: puffadv.discounted_returns(r, t, last_value=last, square_sums=True, time_axis=-1)),
        ("n_step", lambda: puffadv.n_step_returns(r, v, t, n=3, last_value=last, advantages=True, time_axis=-1)),
        ("n_step huge n", lambda: puffadv.n_step_returns(r, v, t, n=2**70, last_value=last, time_axis=-1)),
        ("retrace", lambda: puffadv.retrace(r, v, nv, t, target_probs=p, behaviour_probs=flipped(p),
                                            c_clip=0.9, sums=True, advantages=True, time_axis=-1)),
        ("q_lambda", lambda: puffadv.q_lambda(r, v, nv, t, lambda_=0.6, time_axis=-1)),
        ("episodic_cumsum", lambda: puffadv.episodic_cumsum(r, t, boundary="starts_at", time_axis=-1)),
        ("episodic_cumsum out", lambda: puffadv.episodic_cumsum(r, t, out=poisoned(), time_axis=-1)),
        ("eligibility", lambda: puffadv.eligibility_traces(r, t, gamma=0.9, lambda_=0.5, time_axis=-1)),
    ]


def _same(a, b, what):
    if isinstance(a, tuple):
        assert type(a) is type(b), what
        for x, y in zip(a, b):
            _same(x, y, what)
        return
    if a is None:
        assert b is None, what
        return
    assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape, what
    if torch is not None and isinstance(a, torch.Tensor):  # float64 holds every bfloat16 exactly
        assert a.is_contiguous() and b.is_contiguous() and a._version == b._version, what
        a, b = a.to(torch.float64).numpy(), b.to(torch.float64).numpy()
    np.testing.assert_array_equal(a, b, err_msg=what)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_direct_family_calls_equal_the_general_path(rng, monkeypatch, dtype):
    e = _inputs(rng, dtype=dtype)
    poisoned = lambda: np.full(e["rewards"].shape, np.nan, dtype)  # noqa: E731
    taken = []
    real = _eager.estimate
    monkeypatch.setattr(_eager, "estimate", lambda *a: (taken.append(a[0].function), real(*a))[1])
    direct = {name: call() for name, call in _calls(e, poisoned)}
    assert taken == [], taken  # every one of these went direct
    monkeypatch.setattr(_route, "_DIRECT", {name: (lambda args: _direct.MISSED) for name in _route._DIRECT})
    for name, call in _calls(e, poisoned):
        _same(direct[name], call(), name)
    assert len(taken) == len(direct)


def test_calls_the_direct_path_leaves_to_the_general_one(rng, monkeypatch):
    """Any other call goes the general way (and gets its checks and messages)."""
    e = _inputs(rng)
    r, v, t, last, p = e["rewards"], e["values"], e["terminated"], e["last_value"], e["probs"]
    taken = []
    real = _eager.estimate
    monkeypatch.setattr(_eager, "estimate", lambda *a: (taken.append(a[0].function), real(*a))[1])
    puffadv.gae(r, v, t, last_value=last, gamma=1, time_axis=-1)  # an int gamma
    puffadv.gae(r, v, t, last_value=last, gamma=np.float32(0.9), time_axis=-1)
    puffadv.gae(r, v, t, last_value=last, time_axis=np.int64(-1))
    puffadv.retrace(r, v, v, t, target_log_probs=np.log(p), behaviour_log_probs=np.log(p), time_axis=-1)
    puffadv.n_step_returns(r, v, t, n=np.int64(3), last_value=last, time_axis=-1)
    puffadv.q_lambda(r, v, v, t, advantages=False, sums=True, time_axis=-1)  # sums alone: _eager decides hidden advantages
    assert len(taken) == 6, taken
    with pytest.raises(TypeError, match="time_axis must be an int"):
        puffadv.gae(r, v, t, last_value=last, time_axis=1.0)
    with pytest.raises(TypeError, match="truncated must be an array"):
        puffadv.gae(r, v, t, [1.0], time_axis=-1)
    with pytest.raises(ValueError, match="boundary must be"):
        puffadv.episodic_cumsum(r, t, boundary="start", time_axis=-1)
    with pytest.raises(TypeError, match="is a numpy.ma.MaskedArray"):
        puffadv.gae(r, v, t, last_value=np.ma.masked_array(last), time_axis=-1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_direct_puff_advantage_equals_the_general_path(rng, dtype):
    v, r, d, i = random_puff_inputs(rng, 6, 40, dtype)
    d[:, 0] = d[:, -1] = 1
    out = np.full(v.shape, np.nan, v.dtype)
    direct = puffadv.compute_puff_advantage(v, r, d, i, out, 0.9, 0.8, 1.5, 1.2)
    allocated = puffadv.compute_puff_advantage(v, r, d, i, None, 0.9, 0.8, 1.5, 1.2)
    general = _eager.puff_advantage(v, r, d, i, None, (0.9, 0.8, 1.5, 1.2), None)
    assert direct is out and allocated.dtype == general.dtype == (np.float32 if dtype == np.float16 else dtype)
    given = _eager.puff_advantage(v, r, d, i, np.full(v.shape, np.nan, v.dtype), (0.9, 0.8, 1.5, 1.2), None)
    np.testing.assert_array_equal(direct, given)
    np.testing.assert_array_equal(allocated, general)
    # Not the common call: np.float64 scalars, a subclass output (the general path's message).
    np.testing.assert_array_equal(puffadv.compute_puff_advantage(v, r, d, i, None, np.float64(0.9), 0.8, 1.5, 1.2),
                                  general)
    with pytest.raises(TypeError, match="numpy.ma.MaskedArray"):
        puffadv.compute_puff_advantage(v, r, d, i, np.ma.masked_array(out), 0.9, 0.8, 1.5, 1.2)


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_direct_puff_advantage_on_host_tensors(rng):
    v, r, d, i = (torch.from_numpy(x) for x in random_puff_inputs(rng, 6, 40))
    want = _eager.puff_advantage(v.numpy(), r.numpy(), d.numpy(), i.numpy(), None, (0.9, 0.8, 1.5, 1.2), None)
    for _ in range(2):  # the first call loads the torch rules; the second goes direct
        out = torch.full(v.shape, float("nan"))
        version = out._version
        assert puffadv.compute_puff_advantage(v, r, d, i, out, 0.9, 0.8, 1.5, 1.2) is out
        np.testing.assert_array_equal(out.numpy(), want)
        assert out._version > version  # written as torch's in-place ops are
    with pytest.raises(ValueError, match="negative view"):
        puffadv.compute_puff_advantage(v, r, d, i, torch.zeros(6, 40, dtype=torch.complex64).conj().imag,
                                       0.9, 0.8, 1.5, 1.2)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        puffadv.compute_puff_advantage(v, r, d, i, torch.zeros(6, 40, requires_grad=True), 0.9, 0.8, 1.5, 1.2)


@pytest.mark.skipif(torch is None, reason="needs torch")
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_direct_family_calls_on_host_tensors_equal_the_general_path(rng, monkeypatch, dtype):
    """Host torch tensors, outputs allocated or given, go direct: bit for bit the general
    path's results, dtypes (float32 from bfloat16) and version counters."""
    e = {k: torch.from_numpy(x) if x.dtype == bool else torch.from_numpy(x).to(getattr(torch, dtype))
         for k, x in _inputs(rng, dtype=np.float64).items()}
    out_dtype = torch.float32 if dtype == "bfloat16" else getattr(torch, dtype)
    poisoned = lambda: torch.full(e["rewards"].shape, float("nan"), dtype=out_dtype)  # noqa: E731
    calls = lambda: _calls(e, poisoned, lambda x: x.T.contiguous(), lambda x: x.flip(1))  # noqa: E731
    taken = []
    real = _eager.estimate
    monkeypatch.setattr(_eager, "estimate", lambda *a: (taken.append(a[0].function), real(*a))[1])
    calls()[0][1]()  # the first tensor call loads the torch rules
    taken.clear()
    direct = {name: call() for name, call in calls()}
    assert taken == [], taken  # every one of these went direct
    assert direct["gae"].advantages.dtype == out_dtype
    monkeypatch.setattr(_route, "_DIRECT", {name: (lambda args: _direct.MISSED) for name in _route._DIRECT})
    for name, call in calls():
        _same(direct[name], call(), name)
    assert len(taken) == len(direct)


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_tensor_calls_the_direct_path_leaves_to_the_general_one(rng, monkeypatch):
    """Outputs torch's in-place rules refuse, tensors that require grad, mixed frameworks:
    the general path, with those rules' errors, a recorded graph, and its message."""
    e = {k: torch.from_numpy(x) for k, x in _inputs(rng).items()}
    r, v, t, last = e["rewards"], e["values"], e["terminated"], e["last_value"]
    taken = []
    real = _eager.estimate
    monkeypatch.setattr(_eager, "estimate", lambda *a: (taken.append(a[0].function), real(*a))[1])
    out = torch.full(r.shape, float("nan"))
    version = out._version
    puffadv.gae(r, v, t, last_value=last, advantages=out, returns=False, time_axis=-1)
    assert taken == [] and out._version > version and not out.isnan().any()  # direct, as torch writes
    # An output that requires grad is written by the recording path (copy_): it refuses a leaf by name.
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad .*: advantages"):
        puffadv.gae(r, v, t, last_value=last, advantages=torch.zeros(r.shape, requires_grad=True), time_axis=-1)
    with torch.inference_mode():
        made = torch.zeros(r.shape)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        puffadv.gae(r, v, t, last_value=last, advantages=made, time_axis=-1)
    neg = torch.randn(r.shape, dtype=torch.complex64).conj().imag  # memory holding -x
    with pytest.raises(ValueError, match="rewards is a negative view"):
        puffadv.gae(neg, v, t, last_value=last, time_axis=-1)
    with pytest.raises(ValueError, match="returns is a negative view"):
        puffadv.gae(r, v, t, last_value=last, returns=neg, time_axis=-1)
    assert taken == ["gae"] * 3
    taken.clear()
    leaf = v.clone().requires_grad_()
    result = puffadv.gae(r, leaf, t, last_value=last, time_axis=-1)
    assert result.advantages.requires_grad  # went through _torch_autograd, not the direct path
    with pytest.raises(TypeError, match="numpy"):
        puffadv.gae(r, v.numpy(), t, last_value=last, time_axis=-1)
    with torch.no_grad():
        taken.clear()
        assert not puffadv.gae(r, leaf, t, last_value=last, time_axis=-1).advantages.requires_grad
        assert taken == ["gae"]  # a tensor requiring grad goes the general way, which decides
