"""The estimator family of issue 20 given bad input: each error names the
argument the caller passed (TypeError/ValueError), mixed frameworks, outputs
aliasing inputs, and GPU-claimed arrays through the CPU fallback. The
correctness tests are in test_family.py."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference as ref

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="the mixed-framework cases need torch")
GAMMA, LAM = 0.97, 0.9



def _args(rng=np.random.default_rng(0)):
    return ref.random_off_policy(rng, 4, 10, np.float32)


@pytest.mark.parametrize("call_it, error, words", [
    (lambda e: puffadv.retrace(e["rewards"], e["q_values"], e["next_values"], e["terminated"],
                               target_probs=e["target_probs"], behaviour_log_probs=e["behaviour_probs"], time_axis=-1),
     ValueError, "not a mix"),
    (lambda e: puffadv.retrace(e["rewards"], e["q_values"], e["next_values"], e["terminated"],
                               target_log_probs=e["target_probs"], time_axis=-1), ValueError, "^behaviour_log_probs"),
    (lambda e: puffadv.retrace(e["rewards"], e["q_values"], e["next_values"], e["terminated"],
                               target_probs=e["target_probs"], time_axis=-1), ValueError, "behaviour_probs"),
    (lambda e: puffadv.retrace(e["rewards"], e["q_values"], e["next_values"], e["terminated"], time_axis=-1),
     ValueError, "target_probs"),
    (lambda e: puffadv.retrace(e["rewards"], None, e["next_values"], e["terminated"], target_probs=e["target_probs"],
                               behaviour_probs=e["behaviour_probs"], time_axis=-1), TypeError, "^q_values must be an array"),
    (lambda e: puffadv.retrace(e["rewards"], e["q_values"], e["next_values"][:, :9], e["terminated"],
                               target_probs=e["target_probs"], behaviour_probs=e["behaviour_probs"], time_axis=-1),
     ValueError, "^next_values"),
    (lambda e: puffadv.retrace(e["rewards"], e["q_values"], e["next_values"], e["terminated"],
                               target_probs=e["target_probs"], behaviour_probs=e["behaviour_probs"], c_clip=-1.0, time_axis=-1),
     ValueError, "^c_clip"),
    (lambda e: puffadv.retrace(e["rewards"], e["q_values"], e["next_values"], e["terminated"],
                               target_log_probs=e["target_log_probs"][:, :9],
                               behaviour_log_probs=e["behaviour_log_probs"], time_axis=-1),
     ValueError, "^target_log_probs has shape"),
    (lambda e: puffadv.q_lambda(e["rewards"], e["q_values"], e["next_values"], e["terminated"],
                                greedy=e["greedy"][:3], time_axis=-1), ValueError, "^greedy"),
    (lambda e: puffadv.q_lambda(e["rewards"], e["q_values"], e["next_values"].astype(np.float64), e["terminated"], time_axis=-1),
     TypeError, "next_values"),
    (lambda e: puffadv.q_lambda(e["rewards"], e["q_values"], e["next_values"], e["terminated"],
                                greedy=e["greedy"].astype(np.int32), time_axis=-1),
     TypeError, "^greedy has dtype int32.*expected bool, uint8"),
    (lambda e: puffadv.n_step_returns(e["rewards"], e["values"], e["terminated"], n=2.0,
                                      last_value=e["last_value"], time_axis=-1), TypeError, "^n must be an int"),
    (lambda e: puffadv.n_step_returns(e["rewards"], e["values"], e["terminated"], n=True,
                                      last_value=e["last_value"], time_axis=-1), TypeError, "^n must be an int"),
    (lambda e: puffadv.n_step_returns(e["rewards"], e["values"], e["terminated"], n=0,
                                      last_value=e["last_value"], time_axis=-1), ValueError, "^n must be"),
    (lambda e: puffadv.n_step_returns(e["rewards"], e["values"], e["terminated"], n=-10**30,
                                      last_value=e["last_value"], time_axis=-1), ValueError, "^n must be"),
    (lambda e: puffadv.n_step_returns(e["rewards"], e["values"], e["terminated"], n=2, time_axis=-1),
     ValueError, "bootstrap"),
    (lambda e: puffadv.discounted_returns(e["rewards"], e["terminated"], e["truncated"], time_axis=-1),
     ValueError, "truncated needs bootstrap_values"),
    (lambda e: puffadv.discounted_returns(e["rewards"], e["terminated"], gamma=1.5, time_axis=-1), ValueError, "^gamma"),
    (lambda e: puffadv.episodic_cumsum(e["rewards"], e["terminated"], boundary="end", time_axis=-1), ValueError, "^boundary"),
    (lambda e: puffadv.episodic_cumsum(e["rewards"], e["terminated"], boundary=None, time_axis=-1), ValueError, "^boundary"),
    # Found by issue 31's probe: nanobind's signature dump (the 0-d array passed `in` as a numpy.bool).
    (lambda e: puffadv.episodic_cumsum(e["rewards"], e["terminated"], boundary=np.array("starts_at"), time_axis=-1),
     TypeError, r"^boundary must be a str, 'ends_at' or 'starts_at', got numpy.ndarray$"),
    (lambda e: puffadv.episodic_cumsum(e["rewards"], e["terminated"][:, :5], time_axis=-1), ValueError, "^dones"),
    (lambda e: puffadv.episodic_cumsum(e["rewards"].astype(np.int32), e["terminated"], time_axis=-1), TypeError, "^inputs"),
    (lambda e: puffadv.episodic_cumsum(e["rewards"], e["terminated"], seed=e["last_value"][:2], time_axis=-1),
     ValueError, "^seed"),
    (lambda e: puffadv.episodic_cumsum(e["rewards"], e["terminated"], out=np.zeros((4, 9), np.float32), time_axis=-1),
     ValueError, "^out has shape"),
    (lambda e: puffadv.eligibility_traces(e["rewards"], e["terminated"], gamma=0.9, lambda_=-0.1, time_axis=-1),
     ValueError, "^lambda_"),
    (lambda e: puffadv.eligibility_traces(e["rewards"], [[1]], gamma=0.9, lambda_=0.5, time_axis=-1), TypeError, "^dones"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_bad_input_is_named(call_it, error, words):
    with pytest.raises(error, match=words):
        call_it(_args())


@needs_torch
def test_mixed_frameworks_name_the_new_arguments():
    e = _args()
    t = lambda x: torch.from_numpy(x)
    with pytest.raises(TypeError, match="^next_values is a numpy array but rewards is a torch array"):
        puffadv.q_lambda(t(e["rewards"]), t(e["q_values"]), e["next_values"], t(e["terminated"]), time_axis=-1)
    with pytest.raises(TypeError, match="^behaviour_probs is a numpy array"):
        puffadv.retrace(t(e["rewards"]), t(e["q_values"]), t(e["next_values"]), t(e["terminated"]),
                        target_probs=t(e["target_probs"]), behaviour_probs=e["behaviour_probs"], time_axis=-1)
    with pytest.raises(TypeError, match="^seed is a numpy array but inputs is a torch array"):
        puffadv.episodic_cumsum(t(e["rewards"]), t(e["terminated"]), seed=e["last_value"], time_axis=-1)


def test_outputs_must_not_alias_inputs():
    e = _args()
    with pytest.raises(ValueError, match="^returns overlaps q_values in memory"):
        puffadv.q_lambda(e["rewards"], e["q_values"], e["next_values"], e["terminated"], returns=e["q_values"], time_axis=-1)


def test_out_aliasing_inputs_is_named():
    e = _args()
    with pytest.raises(ValueError, match="^out overlaps inputs in memory"):
        puffadv.episodic_cumsum(e["rewards"], e["terminated"], out=e["rewards"], time_axis=-1)


def test_gpu_arrays_without_a_usable_backend_fall_back_to_the_host(rng, monkeypatch):
    """The family's keyword arrays (next_values, probabilities, greedy) travel
    through the CPU fallback like the positional ones, absent ones included."""
    import warnings

    from fake_device import FakeGpuArray
    from puffadv import _fallback
    if puffadv.backend()["cuda"]["device_count"] > 0:
        pytest.skip("this machine computes CUDA arrays itself: no fallback to exercise")
    real_writer = _fallback._writer
    monkeypatch.setattr(_fallback, "_writer", lambda framework, out, name: (
        (lambda dst, host: np.copyto(dst.host, np.asarray(host))), out) if isinstance(out, FakeGpuArray)
        else real_writer(framework, out, name))
    monkeypatch.delenv("PUFFADV_FALLBACK", raising=False)
    e = ref.random_off_policy(rng, 5, 33, np.float32)
    fake = lambda x: FakeGpuArray(np.ascontiguousarray(x))
    out, sums = FakeGpuArray(np.full((5, 33), np.nan, np.float32)), FakeGpuArray(np.full(5, np.nan, np.float32))
    counter = FakeGpuArray(np.full((5, 33), np.nan, np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", puffadv.FallbackWarning)
        got = puffadv.retrace(*map(fake, (e["rewards"], e["q_values"], e["next_values"], e["terminated"])),
                              target_log_probs=fake(e["target_log_probs"]),
                              behaviour_log_probs=fake(e["behaviour_log_probs"]), gamma=GAMMA, lambda_=LAM,
                              advantages=out, returns=False, sums=sums, time_axis=-1)
        puffadv.episodic_cumsum(fake(e["rewards"]), fake(e["terminated"]), seed=fake(e["last_value"]), out=counter, time_axis=-1)
    assert got.advantages is out and got.sums is sums and got.returns is None
    want, _ = ref.retrace(e["rewards"], e["q_values"], e["next_values"], e["terminated"], None,
                          e["target_log_probs"], e["behaviour_log_probs"], True, GAMMA, LAM, 1.0)
    assert ref.relative_error(out.host, want) <= 1e-5
    assert ref.relative_error(sums.host, want.sum(1)) <= 1e-5
    assert ref.relative_error(counter.host, ref.episodic_sum(e["rewards"], e["terminated"], e["last_value"])) <= 1e-5


# ---- row sums without the advantages on a GPU (the GPU engine, gpu/engine.cuh, refuses them for
# n_step_returns, retrace and q_lambda: the Python layer allocates the advantages itself) ----

def _gpu_sum_kinds():
    from puffadv import _eager, _estimators as e
    return _eager, [e.N_STEP_RETURNS, e.RETRACE, e.Q_LAMBDA]


def test_gpu_sums_without_advantages_get_hidden_advantages(monkeypatch):
    """The decision alone (no GPU here): which calls get an advantages array allocated for the
    kernel. Sums as True or as an array count; a given or requested advantages array, no sums,
    other kinds, host arrays and plain DLPack producers (which cannot allocate on a GPU) do not."""
    from puffadv import _frameworks
    conv, kinds = _gpu_sum_kinds()
    x = np.zeros((2, 3), np.float32)
    sums = np.zeros(2, np.float32)
    monkeypatch.setattr(_frameworks, "is_gpu", lambda a: True)
    from puffadv import _estimators
    roles = _estimators.OUTPUT_ROLES

    def decide(kind, framework, x, specs):  # the specs by role, in the core's order
        return conv.advantages_for_sums(kind, framework, x, dict(zip(roles, specs)))

    for kind in kinds:
        for framework in ("torch", "cupy", "jax"):
            for specs in [(False, True, False, True, False), (None, False, True, False, False),
                          (False, False, False, False, sums), (False, True, sums, sums, sums)]:
                assert decide(kind, framework, x, specs), (kind.function, framework, specs)
            for specs in [(True, True, False, True, False), (x, False, False, True, False),
                          (False, True, False, False, False), (None, None, None, None, None)]:
                assert not decide(kind, framework, x, specs), (kind.function, framework, specs)
        assert not decide(kind, "dlpack", x, (False, True, False, True, False))
    for kind in (_estimators.GAE, _estimators.TD_LAMBDA, _estimators.VTRACE, _estimators.DISCOUNTED_RETURNS,
                 _estimators.EPISODIC_CUMSUM, _estimators.ELIGIBILITY_TRACES):
        assert not decide(kind, "torch", x, (False, True, False, True, False)), kind.function
    monkeypatch.setattr(_frameworks, "is_gpu", lambda a: False)
    for kind in kinds:
        assert not decide(kind, "torch", x, (False, True, False, True, False)), kind.function


@pytest.mark.parametrize("which", ["n_step", "retrace", "q_lambda"])
def test_hidden_advantages_reach_the_kernel_and_stay_hidden(rng, monkeypatch, which):
    """The plumbing, on the CPU with the decision forced: the kernel gets an advantages array,
    the caller gets advantages None, and the sums and returns are those of a plain call."""
    conv, _ = _gpu_sum_kinds()
    e = ref.random_off_policy(rng, 5, 40, np.float64)
    call = {
        "n_step": lambda **kw: puffadv.n_step_returns(
            e["rewards"], e["values"], e["terminated"], e["truncated"], n=3,
            bootstrap_values=e["bootstrap_values"], gamma=GAMMA, lambda_=LAM, **{"time_axis": -1, **kw}),
        "retrace": lambda **kw: puffadv.retrace(
            e["rewards"], e["q_values"], e["next_values"], e["terminated"], e["truncated"],
            target_probs=e["target_probs"], behaviour_probs=e["behaviour_probs"], gamma=GAMMA, lambda_=LAM, **{"time_axis": -1, **kw}),
        "q_lambda": lambda **kw: puffadv.q_lambda(
            e["rewards"], e["q_values"], e["next_values"], e["terminated"], e["truncated"], gamma=GAMMA,
            lambda_=LAM, **{"time_axis": -1, **kw}),
    }[which]
    plain = call(advantages=True, sums=True, square_sums=True)
    passed = []
    real_run = conv._engine.run
    monkeypatch.setattr(conv._engine, "run",
                        lambda kernel, framework, inputs, outputs, *rest: (
                            passed.append(outputs["advantages"]), real_run(kernel, framework, inputs, outputs, *rest)))
    monkeypatch.setattr(conv, "advantages_for_sums", lambda kind, framework, rewards, specs: True)
    got = call(advantages=False, sums=True, square_sums=True)
    assert got.advantages is None
    assert len(passed) == 1 and isinstance(passed[0], np.ndarray) and passed[0].shape == (5, 40)
    np.testing.assert_array_equal(passed[0], plain.advantages)
    np.testing.assert_array_equal(got.sums, plain.sums)
    np.testing.assert_array_equal(got.square_sums, plain.square_sums)
    np.testing.assert_array_equal(got.returns, plain.returns)


@pytest.mark.skipif(torch is None or not torch.cuda.is_available() or puffadv.backend()["cuda"]["device_count"] == 0,
                    reason="needs a CUDA device and puffadv's CUDA backend")
def test_gpu_row_sums_without_advantages_are_computed(rng):
    e = ref.random_off_policy(rng, 4, 50, np.float32)
    cuda = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()
    got = puffadv.n_step_returns(*map(cuda, (e["rewards"], e["values"], e["terminated"], e["truncated"])), n=3,
                                 bootstrap_values=cuda(e["bootstrap_values"]), gamma=GAMMA, lambda_=LAM, sums=True, time_axis=-1)
    want = ref.n_step_returns(e["rewards"], e["values"], e["terminated"], e["truncated"], None,
                              e["bootstrap_values"], 3, GAMMA, LAM) - e["values"]
    assert got.advantages is None
    assert ref.relative_error(got.sums.cpu().numpy(), want.sum(1)) <= 1e-4
    for fn, extra in [(puffadv.retrace, dict(target_probs=e["target_probs"], behaviour_probs=e["behaviour_probs"])),
                      (puffadv.q_lambda, {})]:
        out = fn(*map(cuda, (e["rewards"], e["q_values"], e["next_values"], e["terminated"], e["truncated"])),
                 **{k: cuda(v) for k, v in extra.items()}, advantages=False, sums=True, time_axis=-1)
        assert out.advantages is None and out.sums is not None
    # Under torch.compile (python/puffadv/_compiled.py decides the same).
    args = [cuda(e[k]) for k in ("rewards", "values", "terminated", "truncated", "bootstrap_values")]
    compiled = torch.compile(lambda r, v, d, t, b: puffadv.n_step_returns(
        r, v, d, t, n=3, bootstrap_values=b, gamma=GAMMA, lambda_=LAM, sums=True, time_axis=-1).sums, fullgraph=True)
    assert ref.relative_error(compiled(*args).cpu().numpy(), want.sum(1)) <= 1e-4
