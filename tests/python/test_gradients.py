"""Gradients of every estimator in torch (issue 30): torch.autograd.gradcheck in float64
(finite differences of the real kernels) for every differentiable argument, both
time layouts, strided views, episode ends at the first and last steps, truncations;
NaN isolation; no input that requires grad is detached or given no gradient."""
from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
puffadv = pytest.importorskip("puffadv")

from gradient_cases import CASES, PER_STEP, episode_arrays, make_call  # noqa: E402


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("time_major,strided", [(False, False), (True, False), (False, True)])
def test_gradcheck_every_argument(case, time_major, strided):
    call, leaves, names = make_call(case, seed=1, time_major=time_major, strided=strided)
    assert torch.autograd.gradcheck(call, tuple(leaves), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_input_gets_a_gradient(case):
    """Each differentiable argument's gradient exists and is not all zero (the estimator
    reads it), and the outputs carry a graph."""
    call, leaves, names = make_call(case, seed=2)
    outputs = call(*leaves)
    assert all(o.requires_grad for o in outputs)
    loss = sum((o * torch.linspace(0.5, 1.5, o.numel(), dtype=o.dtype).reshape(o.shape)).sum() for o in outputs)
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    for name, g in zip(names, grads):
        assert g is not None, name
        assert torch.isfinite(g).all(), name
        assert g.abs().sum() > 0, name


@pytest.mark.parametrize("case", ["gae", "vtrace", "retrace", "q_lambda", "n_step_returns"])
def test_nan_in_one_row_stays_in_that_row(case):
    """A NaN reward in row 0 poisons row 0's gradients only; the NaN next values after
    terminations (never read) poison nothing."""
    call, leaves, names = make_call(case, seed=3)
    with torch.no_grad():
        leaves[0][0, 2] = float("nan")
    outputs = call(*leaves)
    series = [o for o in outputs if o.ndim == 2]
    loss = sum(o[1:].sum() for o in series)
    grads = torch.autograd.grad(loss, [x for x in leaves if x.ndim == 2], allow_unused=True)
    for g in grads:
        assert torch.isfinite(g[1:]).all()


def _never_read(case: str, role: str) -> np.ndarray:
    """Where no formula reads a per-step gamma_t (role "gamma") or lambda_t: gamma at a
    terminated step (its bootstrap is +0, its trace cut); lambda where a flag cuts the
    trace (a done step); eligibility traces: both after a done (the reset). (The row's
    last step multiplies its lambda with a zero trace: a NaN there is read.)"""
    _, flags, *_ = CASES[case]
    e = episode_arrays(6)
    term = e["terminated"]
    if case.startswith("eligibility"):
        return np.concatenate([np.zeros_like(term[:, :1]), term[:, :-1]], axis=1)
    if role == "gamma":
        return term
    return term | (e["truncated"] if "truncated" in flags else np.zeros_like(term))


@pytest.mark.parametrize("case", PER_STEP)
def test_per_step_entries_never_read_stay_out(case):
    """NaN in the per-step gamma_t and lambda_t that no formula reads changes no output
    and no gradient (the flags win by selection, forward and backward), and those entries
    get a gradient of exactly 0."""
    call, leaves, names = make_call(case, seed=6)
    poisoned = [x.detach().clone().requires_grad_() for x in leaves]
    masks = {}
    for i, name in enumerate(names):
        role = "gamma" if name == "gamma" else "lambda" if name in ("gae_lambda", "lambda_") else None
        if role is not None:
            masks[i] = torch.from_numpy(_never_read(case, role))
            assert masks[i].any()
            with torch.no_grad():
                poisoned[i][masks[i]] = float("nan")
    assert masks
    weights = None
    results = []
    for inputs in (leaves, poisoned):
        outputs = call(*inputs)
        weights = weights or [torch.randn_like(o) for o in outputs]
        grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outputs, weights)), inputs)
        results.append(([o.detach() for o in outputs], grads))
    (clean_out, clean_grads), (out, grads) = results
    for a, b in zip(out, clean_out):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for i, (name, a, b) in enumerate(zip(names, grads, clean_grads)):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
        if i in masks:
            assert (a[masks[i]] == 0).all(), name


@pytest.mark.parametrize("case", ["gae", *sorted(c for c, (arrays, *_) in CASES.items() if "next_values" in arrays)])
def test_double_backward(case):
    """gradgradcheck; the cases with next_values hold NaN at the terminated steps, which are
    never read: the second derivatives stayed finite only after the formulas zeroed them
    first (a where's derivative times NaN is NaN; found 2026-12-06)."""
    call, leaves, names = make_call(case, seed=4)
    if "next_values" in names:
        assert torch.isnan(leaves[names.index("next_values")]).any()
    assert torch.autograd.gradgradcheck(call, tuple(leaves), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_grad_mode_off_records_nothing():
    call, leaves, _ = make_call("gae", seed=5)
    with torch.no_grad():
        assert not any(o.requires_grad for o in call(*leaves))


def test_an_output_given_in_place_follows_torch_rules():
    call, leaves, names = make_call("gae_last_value", seed=6)
    r, v, lv, gamma, lam = leaves
    terminated = torch.zeros(r.shape, dtype=torch.bool)
    out = torch.empty_like(r.detach())
    e = puffadv.gae(r, v, terminated, last_value=lv, advantages=out, time_axis=-1)
    assert e.advantages is out and out.requires_grad
    fresh = puffadv.gae(r, v, terminated, last_value=lv, time_axis=-1)
    torch.testing.assert_close(out, fresh.advantages)
    (g_out,) = torch.autograd.grad(out.sum(), v)
    (g_fresh,) = torch.autograd.grad(fresh.advantages.sum(), v)
    torch.testing.assert_close(g_out, g_fresh)
    leaf = torch.empty_like(r.detach()).requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        puffadv.gae(r, v, terminated, last_value=lv, advantages=leaf, time_axis=-1)


def test_a_clip_that_requires_grad_is_refused():
    call, leaves, _ = make_call("gae", seed=7)
    r = leaves[0]
    clip = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    with pytest.raises(TypeError, match="rho_clip is a tensor that requires grad"):
        puffadv.gae(r, r, torch.zeros(r.shape, dtype=torch.bool), last_value=r[:, 0], rho_clip=clip,
                    time_axis=-1)


def test_a_clip_is_refused_by_what_it_carries():
    """One predicate decides (_torch_forward_ad.derivative_carried): a torch.func transform's
    clip is refused by name; under no_grad a clip that requires grad is its number, also where
    a dual tensor sends the call through the Function (it had been refused there)."""
    r = torch.linspace(-1.0, 1.0, 12, dtype=torch.float64).reshape(2, 6)
    terminated = torch.zeros(r.shape, dtype=torch.bool)

    def advantages(clip, rewards=r):
        return puffadv.gae(rewards, r, terminated, last_value=r[:, 0], importance=r.exp(), rho_clip=clip,
                           time_axis=-1).advantages

    with pytest.raises(TypeError, match="^rho_clip is a torch.func transform's tensor, but puffadv"):
        torch.func.grad(lambda clip: advantages(clip).sum())(torch.tensor(1.0, dtype=torch.float64))
    clip = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    tangent = torch.rand_like(r)
    with torch.no_grad(), torch.autograd.forward_ad.dual_level():
        dual = advantages(clip, torch.autograd.forward_ad.make_dual(r, tangent))
        got = torch.autograd.forward_ad.unpack_dual(dual).tangent
    with torch.autograd.forward_ad.dual_level():
        want = torch.autograd.forward_ad.unpack_dual(advantages(1.0, torch.autograd.forward_ad.make_dual(r, tangent)))
    assert got is not None and want.tangent is not None
    torch.testing.assert_close(got, want.tangent)


def test_torch_func_grad_through_the_python_api():
    call, leaves, names = make_call("td_lambda_returns", seed=8)
    expected = torch.autograd.grad(call(*leaves)[0].sum(), leaves[1])[0]
    got = torch.func.grad(lambda v: call(leaves[0], v, *leaves[2:])[0].sum())(leaves[1].detach())
    torch.testing.assert_close(got, expected)


def test_the_issue_example_is_no_longer_zero():
    """Issue 30: torch.func.grad through discounted_returns gave all zeros (true sum 64.7)."""
    pytest.importorskip("puffadv.torch")
    r = torch.arange(1.0, 7.0, dtype=torch.float64).reshape(2, 3)
    terminated = torch.zeros(2, 3, dtype=torch.bool)
    grad = torch.func.grad(
        lambda r: (torch.ops.puffadv.discounted_returns(r, terminated, gamma=0.99, time_axis=-1) * r).sum())(r)
    reference = r.clone().requires_grad_()
    g = r.new_zeros(2)
    out = []
    for t in (2, 1, 0):
        g = reference[:, t] + 0.99 * g
        out.insert(0, g)
    (expected,) = torch.autograd.grad((torch.stack(out, 1) * reference).sum(), reference)
    torch.testing.assert_close(grad, expected)
    assert float(grad.sum()) == pytest.approx(float(expected.sum())) and float(grad.sum()) > 60


def test_16_bit_inputs_get_gradients_of_their_dtype():
    r = torch.randn(2, 5, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(2, 5, dtype=torch.bfloat16, requires_grad=True)
    e = puffadv.gae(r, v, torch.zeros(2, 5, dtype=torch.bool), last_value=v.detach()[:, 0], time_axis=-1)
    gr, gv = torch.autograd.grad(e.advantages.sum(), (r, v))
    assert gr.dtype == torch.bfloat16 and gv.dtype == torch.bfloat16
    assert np.isfinite(gr.float().numpy()).all()


def test_bad_input_that_requires_grad_gets_the_eager_errors():
    """Inputs that require grad take the differentiable path only when every array is a
    torch tensor: anything else gets the eager call's own TypeError, by name."""
    v = torch.randn(2, 4, requires_grad=True)
    flags = v.detach() > 0
    with pytest.raises(TypeError, match="values must be an array"):
        puffadv.compute_puff_advantage(None, v, flags, v)
    with pytest.raises(TypeError, match="importance is a numpy array but values is a torch array"):
        puffadv.compute_puff_advantage(v, v, flags, v.detach().numpy())
    with pytest.raises(TypeError, match="advantages is a numpy array but rewards is a torch array"):
        puffadv.gae(v, v, flags, last_value=v[:, 0], advantages=np.zeros((2, 4), np.float32), time_axis=-1)
    with pytest.raises(TypeError, match="values must be an array"):
        puffadv.gae(v, None, flags, last_value=v[:, 0], time_axis=-1)


def test_an_output_given_on_the_differentiable_path_gets_the_eager_checks():
    """Found by test_fuzz (2026-12-04): with an input requiring grad, a float16 or wider
    advantages output was written by copy_ (converted, broadcast) where the eager path
    refuses it. The same words as the eager call, and nothing written."""
    v = torch.randn(2, 4, requires_grad=True)
    r, flags = torch.randn(2, 4), torch.zeros(2, 4, dtype=torch.bool)
    for given, error, words in [(torch.full((2, 4), 7.0, dtype=torch.float16), TypeError,
                                 "^advantages has dtype float16; expected float32$"),
                                (torch.full((3, 4), 7.0), ValueError,
                                 r"^advantages has shape \[3, 4\] but {} has shape \[2, 4\]")]:
        with pytest.raises(error, match=words.format("rewards")):
            puffadv.gae(r, v, flags, last_value=v.detach()[:, 0], advantages=given, time_axis=-1)
        with pytest.raises(error, match=words.format("values")):  # the puff advantage's first array
            puffadv.compute_puff_advantage(v, r, flags, torch.ones(2, 4), given)
        assert (given == 7).all()
    with pytest.raises(ValueError, match=r"^sums has 4 elements but rewards has 2 rows; pass one per row$"):
        puffadv.gae(r, v, flags, last_value=v.detach()[:, 0], sums=torch.zeros(4), time_axis=-1)


_BAD_OUTPUTS = {  # an advantages output a caller may give, each refused by the core's checks
    "float16": lambda r: torch.full(r.shape, 7.0, dtype=torch.float16),
    "wrong shape": lambda r: torch.full((3, 4), 7.0),
    "meta": lambda r: torch.empty(r.shape, device="meta"),
    "sparse": lambda r: torch.zeros(r.shape).to_sparse(),
    "an input": lambda r: r,
    "overlapping an input": lambda r: r._base[4:].view(2, 4),  # rewards' second row and 4 more
}


@pytest.mark.parametrize("bad", _BAD_OUTPUTS)
@pytest.mark.parametrize("estimator", ["gae", "puff"])
def test_a_bad_output_given_with_an_input_requiring_grad_gets_the_eager_error(bad, estimator):
    """Found by test_fuzz on the H200 (2026-12-04): with an input that requires grad, a meta
    or sparse advantages output passed unchecked (the differentiable path computes into its own
    tensors and copy_s into the given one), where the eager call refuses it. Now the core checks
    the call, the given outputs included, before the forward: the same error, word for word."""
    r = torch.randn(12)[:8].view(2, 4)
    flags = torch.zeros(2, 4, dtype=torch.bool)
    v = torch.randn(2, 4)
    given = _BAD_OUTPUTS[bad](r)
    before = r.clone()

    def call(values):
        if estimator == "gae":
            return puffadv.gae(r, values, flags, last_value=values.detach()[:, 0], advantages=given, time_axis=-1)
        return puffadv.compute_puff_advantage(values, r, flags, torch.ones(2, 4), given)

    with pytest.raises((TypeError, ValueError)) as eager:
        call(v)
    with pytest.raises(eager.type, match=f"^{re.escape(str(eager.value))}$"):
        call(v.clone().requires_grad_())
    assert torch.equal(r, before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU machine)")
def test_a_cpu_gamma_tensor_beside_cuda_arrays_gets_its_gradient_on_the_cpu():
    """A 0-d gamma on the CPU that requires grad, the arrays on CUDA (torch lets a 0-d CPU
    tensor join CUDA arithmetic): its gradient comes back on the CPU (torch's autograd engine
    moves a 0-d gradient to its input's device), equal to the same call's on CPU arrays."""
    gen = torch.Generator().manual_seed(11)
    r, v = torch.randn(3, 6, generator=gen, dtype=torch.float64), torch.randn(3, 6, generator=gen, dtype=torch.float64)
    lv = torch.randn(3, generator=gen, dtype=torch.float64)
    terminated = torch.zeros(3, 6, dtype=torch.bool)
    terminated[0, 0] = terminated[1, -1] = True
    grads = {}
    for device in ("cpu", "cuda"):
        gamma = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
        values = v.to(device).requires_grad_()
        e = puffadv.gae(r.to(device), values, terminated.to(device), last_value=lv.to(device), gamma=gamma,
                        time_axis=-1)
        grads[device] = torch.autograd.grad(e.advantages.square().sum(), (gamma, values))
    assert grads["cuda"][0].device.type == "cpu"
    torch.testing.assert_close(grads["cuda"][0], grads["cpu"][0], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grads["cuda"][1].cpu(), grads["cpu"][1], rtol=1e-10, atol=1e-12)


def test_compile_fullgraph_with_a_tensor_gamma():
    """torch.compile(fullgraph=True) traces the Python API's forward and backward, with
    gamma a tensor that requires grad (meta-gradients)."""
    call, leaves, names = make_call("td_lambda_returns", seed=9)
    compiled = torch.compile(lambda *a: call(*a)[1].square().sum(), fullgraph=True)
    got = torch.autograd.grad(compiled(*leaves), leaves)
    want = torch.autograd.grad(call(*leaves)[1].square().sum(), leaves)
    for name, g, w in zip(names, got, want):
        torch.testing.assert_close(g, w, msg=name)


_FIRST_CALL = """
import torch, puffadv
gen = torch.Generator().manual_seed(3)
r, v = (torch.randn(2, 6, dtype=torch.float64, generator=gen).requires_grad_() for _ in range(2))
gamma = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
terminated = torch.zeros(2, 6, dtype=torch.bool)
terminated[0, 0] = terminated[1, -1] = True
def loss(r, v, gamma):
    return puffadv.td_lambda_returns(r, v, terminated, last_value=v[:, -1], gamma=gamma,
                                     time_axis=-1).returns.square().sum()
got = torch.autograd.grad(torch.compile(loss, fullgraph=True)(r, v, gamma), (r, v, gamma))
want = torch.autograd.grad(loss(r, v, gamma), (r, v, gamma))
for g, w in zip(got, want):
    torch.testing.assert_close(g, w)
print("equal")
"""


def test_compile_fullgraph_as_the_first_call_of_a_process():
    """Found on the H200 (2026-12-04): as the process's first puffadv call, a compiled forward
    and backward failed (dynamo: 'Unsafe side effect', fullgraph), because puffadv filled its
    array-type cache and its torch.compile memo inside the backward that dynamo traced; in a
    test session earlier tests had filled them, so only a fresh process shows it."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _FIRST_CALL], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "equal", done.stderr[-3000:]


_ARRAYS_ELSEWHERE = [  # (function, its arrays beside the scalar, the scalar's name, its value)
    ("discounted_returns", ("rewards", "terminated", "last_value"), "gamma", 0.9),
    ("gae", ("rewards", "values", "terminated", "last_value"), "gae_lambda", 0.8),
    ("gae", ("rewards", "values", "terminated", "last_value", "importance"), "rho_clip", 1.2),
    ("vtrace", ("rewards", "values", "terminated", "last_value", "importance"), "alpha", 0.6),
    ("eligibility_traces", ("inputs", "dones"), "lambda_", 0.7),
    ("linear_recurrence", ("inputs",), "decay", 0.7),
    ("compute_puff_advantage", ("values", "rewards", "dones", "importance"), "gamma", 0.9),
]


@pytest.mark.parametrize("kind", ["numpy", "jax"])
@pytest.mark.parametrize("function,arrays,name,number", _ARRAYS_ELSEWHERE)
def test_a_torch_scalar_beside_other_frameworks_arrays_is_refused_not_dropped(function, arrays, name, number,
                                                                                kind):
    """NumPy or JAX arrays with a torch 0-d gamma (lambda, a clip, alpha, decay) that requires
    grad: the call reads it as a number, and the result (NumPy, JAX) carries no gradient. It
    came back with gamma.grad None and no error (found 2026-12-06); now a TypeError names it.
    Under no_grad it is its number, as a detached one is."""
    data = episode_arrays(4, 3, 6)
    data["dones"] = data["terminated"].astype(np.float64) if function == "compute_puff_advantage" \
        else data["terminated"]
    if kind == "jax":
        jnp = pytest.importorskip("jax.numpy")
        given = {a: jnp.asarray(data[a]) for a in arrays}
    else:
        given = {a: data[a] for a in arrays}
    layout = {} if function == "compute_puff_advantage" else {"time_axis": -1}
    layout.update({"eligibility_traces": {"gamma": 0.9}, "linear_recurrence": {"reverse": True}}.get(function, {}))
    scalar = torch.tensor(number, dtype=torch.float64, requires_grad=True)
    call = getattr(puffadv, function)
    with pytest.raises(TypeError, match=f"^{name} is a 0-d torch tensor that requires grad, but this call reads it "
                                        "as a number and cannot differentiate it"):
        call(**given, **{name: scalar}, **layout)
    with torch.no_grad():
        got = call(**given, **{name: scalar}, **layout)
    wanted = call(**given, **{name: number}, **layout)
    for a, b in zip(*((x,) if not isinstance(x, tuple) else x for x in (got, wanted))):
        assert (a is None and b is None) or np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("rows,horizon", [(3, 0), (0, 5), (0, 0)])
@pytest.mark.parametrize("function,extra", [("n_step_returns", {"n": 3, "lambda_": 0.8}),
                                            ("n_step_returns", {"n": 1}),
                                            ("gae", {}), ("td_lambda_returns", {}), ("discounted_returns", {})])
def test_empty_calls_take_the_kernel_and_give_empty_gradients(rows, horizon, function, extra, spy):
    """A call with no steps or no rows: its backward runs (the fused path) and gives
    gradients of the inputs' shapes, zeros for last_value's rows (found 2026-12-06: n-step
    returns' backward indexed the empty time axis)."""
    g = torch.Generator().manual_seed(rows * 7 + horizon)
    leaf = lambda *shape: torch.rand(*shape, generator=g, dtype=torch.float64).requires_grad_()  # noqa: E731
    r, lv = leaf(rows, horizon), leaf(rows)
    arrays = {"rewards": r, "last_value": lv, "terminated": torch.zeros(rows, horizon, dtype=torch.bool)}
    if function != "discounted_returns":
        arrays["values"] = leaf(rows, horizon)
    result = getattr(puffadv, function)(**arrays, gamma=0.9, time_axis=-1, **extra)
    output = next(x for x in result if x is not None)  # the advantages, or the returns alone
    assert output.shape == (rows, horizon)
    leaves = [x for x in arrays.values() if x.requires_grad]
    grads = torch.autograd.grad(output.sum() + lv.sum() * 0, leaves, allow_unused=False)
    assert len(spy) == 1, spy  # the fused backward ran
    for x, grad in zip(leaves, grads):
        assert grad.shape == x.shape
    assert torch.equal(grads[1], torch.zeros(rows, dtype=torch.float64) if horizon == 0 else grads[1])
