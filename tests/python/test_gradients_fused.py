"""The backward on the engine's own kernels (the core's value_vjp kind, _vjp_fused; n-step
returns on their own kernel, _n_step_windows): GAE, TD(lambda), V-trace, discounted and
n-step returns differentiated through rewards, values and the
bootstrap (GAE's next_values too), with importance ratios that do not require grad (plain
and leaky V-trace; its pg advantages' cotangent too), with gamma and lambda numbers or
per-step arrays, and as tensors that require grad (0-d or per step: their gradients come
beside the kernel's; with ratios the formulas take them, and ratios that require grad).
Checked against finite differences (gradcheck in float64) and against _vjp's formulas
(which test_gradients_reference holds to autograd of float64 references) on fresh
random episodes with ends at the first and last steps, truncations, both time layouts,
strided views, float32 and float64; NaN isolation; the path is really taken; and the
kind's own checks name its arrays."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
puffadv = pytest.importorskip("puffadv")

from puffadv import _vjp_fused  # noqa: E402

from gradient_cases import episode_arrays, layout  # noqa: E402

# case -> (function, differentiated arrays, fixed arrays (flags, ratios), outputs, lambda's name[, scalars])
_SUMS = {"abs_sums": True, "sums": True, "square_sums": True}
_CLIPS = {"rho_clip": 1.2, "c_clip": 0.9}
_VTRACE_CLIPS = {"rho_clip": 1.5, "c_clip": 1.1, "rho_pg_clip": 1.3}
CASES = {
    "gae_bootstrap": ("gae", ("rewards", "values", "bootstrap_values"), ("terminated", "truncated"),
                      {"advantages": True, "returns": True, **_SUMS}, "gae_lambda"),
    "gae_bootstrap_at_the_end": ("gae", ("rewards", "values", "bootstrap_values"), ("terminated",),
                                 {"advantages": True, "returns": True}, "gae_lambda"),
    "gae_last_value": ("gae", ("rewards", "values", "last_value"), ("terminated",),
                       {"advantages": True, "returns": True}, "gae_lambda"),
    "gae_advantages_only": ("gae", ("rewards", "values", "last_value"), ("terminated",),
                            {"advantages": True, "returns": False}, "gae_lambda"),
    "gae_returns_only": ("gae", ("rewards", "values", "bootstrap_values"), ("terminated", "truncated"),
                         {"advantages": False, "returns": True}, "gae_lambda"),
    "gae_next_values": ("gae", ("rewards", "values", "next_values"), ("terminated", "truncated"),
                        {"advantages": True, "returns": True, **_SUMS}, "gae_lambda"),
    "gae_next_values_advantages_only": ("gae", ("rewards", "values", "next_values"), ("terminated",),
                                        {"advantages": True, "returns": False}, "gae_lambda"),
    "td_lambda_returns": ("td_lambda_returns", ("rewards", "values", "bootstrap_values"),
                          ("terminated", "truncated"), {"returns": True}, "lambda_"),
    "td_lambda_returns_last_value": ("td_lambda_returns", ("rewards", "values", "last_value"), ("terminated",),
                                     {"returns": True, "advantages": True, **_SUMS}, "lambda_"),
    "discounted_returns": ("discounted_returns", ("rewards", "bootstrap_values"), ("terminated", "truncated"),
                           {"returns": True, **_SUMS}, None),
    "discounted_returns_last_value": ("discounted_returns", ("rewards", "last_value"), ("terminated",),
                                      {"returns": True}, None),
    # Importance ratios that do not require grad: the kernel gives e = rho a.
    "gae_ratios": ("gae", ("rewards", "values", "bootstrap_values"), ("terminated", "truncated", "importance"),
                   {"advantages": True, "returns": True, **_SUMS}, "gae_lambda", _CLIPS),
    "gae_next_values_ratios": ("gae", ("rewards", "values", "next_values"), ("terminated", "importance"),
                               {"advantages": True, "returns": True}, "gae_lambda", _CLIPS),
    "td_lambda_ratios_last_value": ("td_lambda_returns", ("rewards", "values", "last_value"),
                                    ("terminated", "importance"), {"returns": True, "advantages": True},
                                    "lambda_", _CLIPS),
    "vtrace": ("vtrace", ("rewards", "values", "bootstrap_values"), ("terminated", "truncated", "importance"),
               {"vs": True, "pg_advantages": True, **_SUMS}, "lambda_", _VTRACE_CLIPS),
    "vtrace_last_value_vs_only": ("vtrace", ("rewards", "values", "last_value"), ("terminated", "importance"),
                                  {"vs": True, "pg_advantages": False}, "lambda_", _VTRACE_CLIPS),
    "vtrace_pg_only": ("vtrace", ("rewards", "values", "bootstrap_values"), ("terminated", "truncated", "importance"),
                       {"vs": False, "pg_advantages": True, "sums": True}, "lambda_", _VTRACE_CLIPS),
    "vtrace_leaky": ("vtrace", ("rewards", "values", "bootstrap_values"), ("terminated", "truncated", "importance"),
                     {"vs": True, "pg_advantages": True}, "lambda_", {**_VTRACE_CLIPS, "alpha": 0.6}),
    "vtrace_next_values_vs_only": ("vtrace", ("rewards", "values", "next_values"),
                                   ("terminated", "truncated", "importance"), {"vs": True, "pg_advantages": False},
                                   "lambda_", _VTRACE_CLIPS),
    # PufferLib's index convention ([rows, horizon] only, numbers gamma and lambda).
    "puff_advantage": ("compute_puff_advantage", ("values", "rewards"), ("dones", "importance"),
                       {"returns": True, **_SUMS}, "gae_lambda", {"rho_clip": 1.4, "c_clip": 0.9}),
    "puff_advantage_alone": ("compute_puff_advantage", ("values", "rewards"), ("dones", "importance"), {},
                             "gae_lambda", {"rho_clip": 1.1, "c_clip": 1.0}),
    # Retrace: GAE with next_values (q in the values' place) and lambda_t c_{t+1} per step.
    "retrace": ("retrace", ("rewards", "q_values", "next_values"),
                ("terminated", "truncated", "target_probs", "behaviour_probs"),
                {"advantages": True, "returns": True, **_SUMS}, "lambda_", {"c_clip": 0.8}),
    "retrace_log_probs": ("retrace", ("rewards", "q_values", "next_values"),
                          ("terminated", "target_log_probs", "behaviour_log_probs"),
                          {"advantages": False, "returns": True}, "lambda_", {"c_clip": 1.1}),
    # Q(lambda): Watkins (greedy flags) and Peng.
    "q_lambda": ("q_lambda", ("rewards", "q_values", "next_values"), ("terminated", "truncated", "greedy"),
                 {"advantages": True, "returns": True, **_SUMS}, "lambda_"),
    "q_lambda_peng": ("q_lambda", ("rewards", "q_values", "next_values"), ("terminated",),
                      {"advantages": True, "returns": False}, "lambda_"),
    "td_lambda_next_values": ("td_lambda_returns", ("rewards", "values", "next_values"), ("terminated", "truncated"),
                              {"returns": True, "advantages": True}, "lambda_"),  # Q(lambda)'s recursion
    # n-step returns: the n_step_returns kernel on the cotangent flipped in time (_n_step_windows).
    "n_step_bootstrap": ("n_step_returns", ("rewards", "values", "bootstrap_values"), ("terminated", "truncated"),
                         {"returns": True, "advantages": True, **_SUMS}, "lambda_", {"n": 3}),
    "n_step_last_value_longer_than_rows": ("n_step_returns", ("rewards", "values", "last_value"), ("terminated",),
                                           {"returns": True}, "lambda_", {"n": 9}),
    "n_step_next_values": ("n_step_returns", ("rewards", "values", "next_values"), ("terminated", "truncated"),
                           {"returns": True, "advantages": True}, "lambda_", {"n": 2}),
    "n_step_one": ("n_step_returns", ("rewards", "values", "bootstrap_values"), ("terminated", "truncated"),
                   {"returns": False, "advantages": True}, "lambda_", {"n": 1}),
    # The episodic sums: their backward is the discounted_returns kernel run on the cotangent.
    "eligibility_traces": ("eligibility_traces", ("inputs", "seed"), ("dones",), {}, "lambda_"),
    "episodic_cumsum_starts_at": ("episodic_cumsum", ("inputs", "seed"), ("dones",), {}, None,
                                  {"boundary": "starts_at"}),
}
PUFF = frozenset(case for case, spec in CASES.items() if spec[0] == "compute_puff_advantage")
EPISODIC = frozenset({"eligibility_traces", "episodic_cumsum_starts_at"})
NO_GAMMA = frozenset({"episodic_cumsum_starts_at"})
RATIOS = frozenset(case for case, spec in CASES.items()
                   if "importance" in spec[2] or spec[0] == "retrace")
# Their fused backward makes no gamma / lambda gradients: the formulas take those calls.
NO_DECAYS = RATIOS | {"q_lambda", "q_lambda_peng", "td_lambda_next_values"} | \
    {case for case, spec in CASES.items() if spec[0] == "n_step_returns"}


def _takes_kernel(case, decays_grad, per_step=False):
    """With ratios the decays' gradients need a itself, and the episodic sums' per-step
    decays are read a step later: the formulas compute those backwards."""
    if case in EPISODIC:
        return not (decays_grad or per_step)
    return not (decays_grad and case in NO_DECAYS)


def _call(case, seed=0, time_major=False, strided=False, per_step=False, dtype=torch.float64, rows=3,
          horizon=6, device="cpu", decays_grad=False):
    """decays_grad: gamma and lambda require grad (0-d tensors, or per_step arrays) and come
    last among the leaves, as meta-gradient RL differentiates them."""
    function, arrays, flags, outputs, lambda_name, *extra = CASES[case]
    if case in PUFF and (time_major or per_step):
        pytest.skip("the puff advantage is [rows, horizon] with numbers gamma and lambda (PufferLib's schema)")
    if case in NO_GAMMA and (per_step or decays_grad):
        pytest.skip("episodic_cumsum takes no gamma")
    data = episode_arrays(seed, rows, horizon)
    # Episode ends at the first and the last step of some rows.
    data["terminated"][0, 0] = data["terminated"][1, -1] = True
    if "truncated" in flags:
        data["truncated"][0, 0] = data["truncated"][1, -1] = False
        data["truncated"][2, -1], data["terminated"][2, -1] = True, False
    # next_values: NaN where terminated (never read, so it must stay out), finite elsewhere.
    nv = data["next_values"]
    nv[~data["terminated"] & np.isnan(nv)] = 0.5
    nv[data["terminated"]] = np.nan
    cast = lambda x: layout(torch.tensor(x), time_major, strided).to(device)  # noqa: E731
    leaves = [cast(data[name]).to(dtype).detach().requires_grad_() for name in arrays]
    fixed = {name: cast(data[name]) if data[name].dtype == bool else cast(data[name]).to(dtype) for name in flags}
    fixed.update(*extra)  # the clips
    scalars = {} if case in NO_GAMMA else {"gamma": cast(data["gamma"]).to(dtype) if per_step else 0.9}
    if lambda_name:
        scalars[lambda_name] = cast(data[lambda_name]).to(dtype) if per_step else 0.8
    names = arrays
    if decays_grad:
        decays = {k: (v if per_step else torch.tensor(v, dtype=dtype, device=device)).detach().requires_grad_()
                  for k, v in scalars.items()}
        leaves, names, scalars = [*leaves, *decays.values()], (*arrays, *decays), {}
    fn = getattr(puffadv, function)

    layout_kw = {} if case in PUFF else {"time_axis": 0 if time_major else -1}

    def call(*values):
        result = fn(**fixed, **scalars, **outputs, **dict(zip(names, values)), **layout_kw)
        return tuple(x for x in (result if isinstance(result, tuple) else (result,)) if x is not None)

    return call, leaves, names


def _grads(call, leaves, weights=None, fused=True, monkeypatch=None):
    outputs = call(*leaves)
    weights = weights or [torch.randn(o.shape, dtype=o.dtype, generator=torch.Generator().manual_seed(i))
                          for i, o in enumerate(outputs)]
    loss = sum((o * w).sum() for o, w in zip(outputs, weights))
    if fused:
        return torch.autograd.grad(loss, leaves), weights
    with monkeypatch.context() as patch:  # the formulas: _vjp
        patch.setattr(_vjp_fused, "applies", lambda *a, **k: False)
        return torch.autograd.grad(loss, leaves), weights


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("time_major,strided", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("decays_grad", [False, True])
def test_gradcheck_on_the_fused_kernel(case, time_major, strided, per_step, decays_grad, spy):
    """Finite differences of the real kernels in float64, through the fused backward, gamma
    and lambda differentiated too or not."""
    call, leaves, _ = _call(case, seed=1, time_major=time_major, strided=strided, per_step=per_step,
                            decays_grad=decays_grad)
    assert torch.autograd.gradcheck(call, tuple(leaves), eps=1e-6, atol=1e-7, rtol=1e-5)
    assert bool(spy) == _takes_kernel(case, decays_grad, per_step), "the fused backward was not taken"


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("decays_grad", [False, True])
def test_equal_to_the_formulas(case, dtype, per_step, time_major, decays_grad, monkeypatch, spy):
    """The fused kernel's gradients equal _vjp's on larger random calls (rows of 1 to 70
    steps: every traversal's edge blocks), gamma's and lambda's too where they require grad."""
    for seed, (rows, horizon) in enumerate([(5, 1), (9, 8), (7, 37), (33, 70)]):
        call, leaves, names = _call(case, seed=seed + 10, time_major=time_major, per_step=per_step, dtype=dtype,
                                    rows=rows, horizon=horizon, decays_grad=decays_grad)
        fused, weights = _grads(call, leaves)
        formulas, _ = _grads(call, leaves, weights, fused=False, monkeypatch=monkeypatch)
        tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-5)
        for name, a, b in zip(names, fused, formulas):
            torch.testing.assert_close(a, b, **tol, msg=f"{case} {name} {rows}x{horizon}")
    assert len(spy) == 4 * _takes_kernel(case, decays_grad, per_step)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("time_major", [False, True])
def test_a_loss_summed_over_the_outputs(case, time_major, monkeypatch, spy):
    """`out.sum()`'s cotangent is an expanded (0-strided) tensor: the kernel reads it in
    the call's own layout and gives the formulas' gradients."""
    call, leaves, names = _call(case, seed=7, time_major=time_major, rows=9, horizon=37)
    fused = torch.autograd.grad(sum(o.sum() for o in call(*leaves)), leaves)
    with monkeypatch.context() as patch:
        patch.setattr(_vjp_fused, "applies", lambda *a, **k: False)
        formulas = torch.autograd.grad(sum(o.sum() for o in call(*leaves)), leaves)
    for name, a, b in zip(names, fused, formulas):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)
    assert len(spy) == 1


@pytest.mark.parametrize("case", ["gae_bootstrap", "gae_next_values", "td_lambda_returns_last_value",
                                  "discounted_returns", "vtrace", "gae_ratios", "puff_advantage", "retrace",
                                  "q_lambda", "eligibility_traces"])
def test_nan_stays_in_its_row_and_episode(case, spy):
    """A NaN in the first differentiated array (rewards; the puff advantage's values, the
    episodic sums' inputs) poisons its own row's gradients only, and never the steps of later
    episodes of that row (the backward runs forwards in time: an episode's adjoint starts
    afresh); NaN bootstrap values where a step is terminated (never read) poison nothing."""
    call, leaves, names = _call(case, seed=4, rows=4, horizon=9)
    with torch.no_grad():
        leaves[0][1, 3] = float("nan")
    terminated = episode_arrays(4, 4, 9)["terminated"]
    terminated[0, 0] = terminated[1, -1] = True
    outputs = call(*leaves)
    loss = sum(o[[0, 2, 3]].sum() if o.ndim == 2 else o[[0, 2, 3]].sum() for o in outputs)
    grads = torch.autograd.grad(loss, leaves)
    for name, g in zip(names, grads):
        assert torch.isfinite(g[[0, 2, 3]]).all(), name
    assert spy


@pytest.mark.parametrize("case", sorted(CASES.keys() - NO_GAMMA))
def test_gamma_tensor_that_requires_grad_takes_the_kernel(case, spy):
    """A gamma that requires grad (meta-gradient RL): the kernel still computes the arrays'
    gradients, the same as with a number gamma, and gamma's comes beside them."""
    function, arrays, flags, outputs, lambda_name, *extra = CASES[case]
    call, leaves, _ = _call(case, seed=2)
    plain, weights = _grads(call, leaves)
    assert len(spy) == 1
    gamma = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
    data = episode_arrays(2)
    data["terminated"][0, 0] = data["terminated"][1, -1] = True
    if "truncated" in flags:
        data["truncated"][0, 0] = data["truncated"][1, -1] = False
        data["truncated"][2, -1], data["terminated"][2, -1] = True, False
    kwargs = {name: torch.tensor(data[name]) for name in flags}
    kwargs.update(*extra)
    if lambda_name:
        kwargs[lambda_name] = 0.8
    if case not in PUFF:
        kwargs["time_axis"] = -1
    result = getattr(puffadv, function)(**kwargs, **outputs, **dict(zip(arrays, leaves)), gamma=gamma)
    result = [x for x in (result if isinstance(result, tuple) else (result,)) if x is not None]
    grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(result, weights)), [*leaves, gamma])
    assert len(spy) == 1 + _takes_kernel(case, True)  # the kernel, both times (with ratios: the formulas)
    for a, b in zip(grads, plain):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert grads[-1] != 0


def test_double_backward_keeps_the_formulas(spy):
    """create_graph: the gradient is differentiable again (the formulas' graph)."""
    call, leaves, _ = _call("gae_last_value", seed=3)
    (adv, ret) = call(*leaves)
    g = torch.autograd.grad((adv ** 2).sum() + ret.sum(), leaves, create_graph=True)
    assert not spy and g[0].requires_grad
    torch.autograd.grad(g[0].sum(), leaves[1])


def test_the_kind_names_its_arrays():
    """The core's value_vjp kind: its arrays by the names its table gives them."""
    from puffadv import _core
    u = np.ones((2, 4))
    flags = np.zeros((2, 4), bool)
    out = np.full((2, 4), np.nan)
    with pytest.raises(ValueError, match="value_vjp takes no last_value"):
        _core.estimate("value_vjp", {"rewards": u, "terminated": flags, "last_value": np.ones(2),
                                     "advantages": out}, gamma=0.9, lambda_=0.8)
    with pytest.raises(ValueError, match="grad_returns"):
        _core.estimate("value_vjp", {"rewards": u, "values": np.ones((2, 3)), "terminated": flags,
                                     "advantages": out}, gamma=0.9, lambda_=0.8)
    _core.estimate("value_vjp", {"rewards": u, "terminated": flags, "advantages": out}, gamma=0.5, lambda_=0.5)
    # a_t = 1 + 0.25 a_{t-1}: 1, 1.25, 1.3125, 1.328125 (no episode ends)
    np.testing.assert_allclose(out, [[1, 1.25, 1.3125, 1.328125]] * 2)


_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
# (rows, horizon) that take every GPU traversal: row groups, whole rows flat and vector,
# split and long rows (also scripts/gpu/backward_workload.py's, under compute-sanitizer).
GPU_TRAVERSAL_SHAPES = ((19, 64), (4100, 8), (3, 4501), (3, 4500), (1024, 128), (37, 50))


@_GPU
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("per_step", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("decays_grad", [False, True])
def test_cuda_equals_cpu(case, dtype, per_step, time_major, decays_grad, spy):
    """The GPU kernel's gradients equal the CPU kernel's, over shapes that take every GPU
    traversal (row groups, whole rows flat and vector, split and long rows, time-major
    strided), outputs poisoned by torch's allocator as they come."""
    for seed, (rows, horizon) in enumerate(GPU_TRAVERSAL_SHAPES):
        call, leaves, names = _call(case, seed=seed + 20, time_major=time_major, per_step=per_step, dtype=dtype,
                                    rows=rows, horizon=horizon, decays_grad=decays_grad)
        cpu, weights = _grads(call, leaves)
        gpu_call, on_gpu, _ = _call(case, seed=seed + 20, time_major=time_major, per_step=per_step, dtype=dtype,
                                    rows=rows, horizon=horizon, device="cuda", decays_grad=decays_grad)
        gpu, _ = _grads(gpu_call, on_gpu, [w.cuda() for w in weights])
        tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-4)
        for name, a, b in zip(names, gpu, cpu):
            assert a.is_cuda
            torch.testing.assert_close(a.cpu(), b, **tol, msg=f"{case} {name} {rows}x{horizon}")
    assert len(spy) == 2 * len(GPU_TRAVERSAL_SHAPES) * _takes_kernel(case, decays_grad, per_step)



def test_decay_gradients_only_when_asked(monkeypatch, spy):
    """gamma and lambda given as tensors that do not require grad: the kernel's backward
    makes no per-step decay gradients (their passes are skipped); when gamma requires grad
    it makes them."""
    made = []
    real = _vjp_fused._decay_gradients
    monkeypatch.setattr(_vjp_fused, "_decay_gradients", lambda *a, **k: made.append(1) or real(*a, **k))
    call, leaves, _ = _call("gae_last_value", seed=9)
    function, arrays, flags, outputs, _ = CASES["gae_last_value"]
    data = episode_arrays(9)
    fixed = {name: torch.tensor(data[name]) for name in flags}
    for requires in (False, True):
        gamma = torch.tensor(0.9, dtype=torch.float64, requires_grad=requires)
        lam = torch.tensor(0.8, dtype=torch.float64)
        out = puffadv.gae(**fixed, **dict(zip(arrays, leaves)), gamma=gamma, gae_lambda=lam, time_axis=-1)
        wrt = [*leaves, gamma] if requires else leaves
        grads = torch.autograd.grad((out.advantages ** 2).sum(), wrt)
        assert all(torch.isfinite(g).all() for g in grads)
        assert len(made) == int(requires)
    assert len(spy) == 2


@pytest.mark.parametrize("case", ["gae_ratios", "vtrace", "vtrace_leaky"])
def test_ratios_that_require_grad_keep_the_formulas(case, spy):
    """Importance ratios that require grad: their gradient needs a itself, which the kernel
    does not give: the formulas compute the backward, and it matches finite differences."""
    function, arrays, flags, outputs, lambda_name, extra = CASES[case]
    data = episode_arrays(5)
    data["terminated"][0, 0] = data["terminated"][1, -1] = True
    fixed = {name: torch.tensor(data[name]) for name in flags if name != "importance"}
    leaves = [torch.tensor(data[name]).requires_grad_() for name in (*arrays, "importance")]

    def call(*values):
        result = getattr(puffadv, function)(**fixed, **extra, **outputs, **dict(zip((*arrays, "importance"), values)),
                                            **{lambda_name: 0.8}, gamma=0.9, time_axis=-1)
        return tuple(x for x in result if x is not None)

    assert torch.autograd.gradcheck(call, tuple(leaves), eps=1e-6, atol=1e-7, rtol=1e-5)
    assert not spy

