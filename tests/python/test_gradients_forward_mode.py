"""Forward-mode derivatives of every estimator (issue 30: no input's derivative silently
dropped): torch.autograd.forward_ad's dual tensors and torch.func.jvp / jacfwd, through
the public functions and the torch.ops.puffadv operators.

Every series is linear in the value arrays (rewards, values, Q values, next values,
bootstrap values, last_value, seed) with the flags, gamma, lambda and the ratios held:
their tangents are checked against gradcheck's numerical ones, and, for dual tensors that
do not require grad (which a call checking requires_grad alone used to compute without
their tangents), against the backward through <w, J t> = <J^T w, t>. A tangent of gamma,
lambda, the ratios or the probabilities is refused by name (reverse mode takes them)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("puffadv.torch")

import torch.autograd.forward_ad as fwAD  # noqa: E402

import puffadv  # noqa: E402
from gradient_cases import CASES, VALUE_ARRAYS, episode_arrays, make_call  # noqa: E402
from test_gradients_ops import op_call  # noqa: E402


def with_values(fixed, positions, values):
    args = list(fixed)
    for i, x in zip(positions, values):
        args[i] = x
    return args


def linear_positions(case):
    return [i for i, name in enumerate(CASES[case][0]) if name in VALUE_ARRAYS]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("time_major", [False, True])
def test_public_forward_mode_matches_the_numerical_derivative(case, time_major):
    call, leaves, _ = make_call(case, seed=5, time_major=time_major)
    fixed, linear = [x.detach() for x in leaves], linear_positions(case)
    assert torch.autograd.gradcheck(lambda *xs: call(*with_values(fixed, linear, xs)), tuple(leaves[i] for i in linear),
                                    eps=1e-6, atol=1e-7, rtol=1e-5, check_forward_ad=True,
                                    check_backward_ad=False, check_undefined_grad=False,
                                    check_batched_forward_grad=False)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("surface", ["public", "operator"])
def test_dual_tensors_that_do_not_require_grad(case, surface):
    call, leaves = op_call(case, seed=6) if surface == "operator" else make_call(case, seed=6)[:2]
    fixed, linear = [x.detach() for x in leaves], linear_positions(case)
    g = torch.Generator().manual_seed(6)
    tangents = [torch.randn(fixed[i].shape, generator=g, dtype=fixed[i].dtype) for i in linear]
    with fwAD.dual_level():
        outputs = call(*with_values(fixed, linear, [fwAD.make_dual(fixed[i], t) for i, t in zip(linear, tangents)]))
        primals = [fwAD.unpack_dual(o).primal.clone() for o in outputs]
        jvps = [fwAD.unpack_dual(o).tangent for o in outputs]
    assert all(t is not None for t in jvps), f"{case}: an output came back without its tangent"
    for p, plain in zip(primals, call(*fixed)):
        torch.testing.assert_close(p, plain, rtol=0, atol=0)
    # <w, J t> = <J^T w, t>, J^T w from the backward (gradcheck-tested on its own)
    wanted = [x.detach().requires_grad_(i in linear) for i, x in enumerate(fixed)]
    weights = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in primals]
    grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(call(*wanted), weights)),
                                [wanted[i] for i in linear])
    forward = sum((w * t).sum() for w, t in zip(weights, jvps))
    backward = sum((gr * t).sum() for gr, t in zip(grads, tangents))
    torch.testing.assert_close(forward, backward, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("time_major", [False, True])
def test_operator_forward_mode_matches_the_numerical_derivative(case, time_major):
    call, leaves = op_call(case, seed=7, time_major=time_major)
    fixed, linear = [x.detach() for x in leaves], linear_positions(case)
    assert torch.autograd.gradcheck(lambda *xs: call(*with_values(fixed, linear, xs)), tuple(leaves[i] for i in linear),
                                    eps=1e-6, atol=1e-7, rtol=1e-5, check_forward_ad=True,
                                    check_backward_ad=False, check_undefined_grad=False,
                                    check_batched_forward_grad=False)


def test_torch_func_jvp_and_jacfwd_of_an_operator():
    """torch.func.jvp through an operator gave all-zero tangents before."""
    call, (r, v, lv) = op_call("gae_last_value", seed=3)
    r, v, lv = r.detach(), v.detach(), lv.detach()
    jac = torch.func.jacrev(lambda v: call(r, v, lv)[0])(v)
    direction = torch.randn_like(v)
    _, tangent = torch.func.jvp(lambda v: call(r, v, lv)[0], (v,), (direction,))
    torch.testing.assert_close(tangent, torch.einsum("btij,ij->bt", jac, direction))
    assert tangent.abs().sum() > 0
    torch.testing.assert_close(torch.func.jacfwd(lambda v: call(r, v, lv)[0])(v), jac)


@pytest.mark.parametrize("argument", ["importance", "gamma"])
@pytest.mark.parametrize("surface", ["public", "operator"])
def test_a_tangent_outside_the_value_arrays_is_refused(argument, surface):
    case = "gae" if argument == "importance" else "gae_per_step"
    call, leaves = op_call(case, seed=8) if surface == "operator" else make_call(case, seed=8)[:2]
    fixed = [x.detach() for x in leaves]
    position = CASES[case][0].index(argument)
    with fwAD.dual_level():
        args = with_values(fixed, [position], [fwAD.make_dual(fixed[position], torch.ones_like(fixed[position]))])
        with pytest.raises(TypeError, match=rf"forward-mode derivative.*{argument}.*not linear"):
            call(*args)


def test_a_tangent_of_a_0d_gamma_is_refused():
    call, leaves, names = make_call("gae_last_value", seed=9)
    fixed = [x.detach() for x in leaves]
    gamma = names.index("gamma")
    with fwAD.dual_level():
        args = with_values(fixed, [gamma], [fwAD.make_dual(fixed[gamma], torch.ones_like(fixed[gamma]))])
        with pytest.raises(TypeError, match=r"forward-mode derivative.*gamma.*not linear"):
            call(*args)


def test_a_tangent_of_a_clip_is_refused():
    """A 0-d clip is read as a number: its tangent would be dropped, so it is refused."""
    data = episode_arrays(13)
    r, v, bv, rho = (torch.tensor(data[n]) for n in ("rewards", "values", "bootstrap_values", "importance"))
    terminated = torch.tensor(data["terminated"])
    with fwAD.dual_level():
        clip = fwAD.make_dual(torch.tensor(1.2, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
        with pytest.raises(TypeError, match=r"forward-mode derivative.*rho_clip.*not linear"):
            puffadv.vtrace(r, v, terminated, bootstrap_values=bv, importance=rho, rho_clip=clip, time_axis=-1)


def test_forward_over_reverse_keeps_the_tangent():
    """A backward run inside a dual level (a tangent on its cotangent) takes the formulas,
    whose torch operations carry tangents: the fused kernel would drop them."""
    call, leaves, names = make_call("gae_last_value", seed=14)
    fixed = [x.detach() for x in leaves]
    values = fixed[names.index("values")].requires_grad_()
    args = with_values(fixed, [names.index("values")], [values])
    weights, direction = torch.randn_like(fixed[0]), torch.randn_like(fixed[0])
    with fwAD.dual_level():
        dual_weights = fwAD.make_dual(weights, direction)
        (grad,) = torch.autograd.grad((call(*args)[0] * dual_weights).sum(), values)
        tangent = fwAD.unpack_dual(grad).tangent
    assert tangent is not None
    (expected,) = torch.autograd.grad((call(*args)[0] * direction).sum(), values)
    torch.testing.assert_close(tangent, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("surface", ["public", "operator"])
def test_reverse_over_forward_differentiates_the_tangent(surface):
    """J t recorded for the backward: d<w, J t>/dt = J^T w and, through gamma and lambda (per
    step here, so that the operators take them too), d<w, J t>/dgamma = d<w, f(t)>/dgamma."""
    case = "td_lambda_returns_per_step"
    call, leaves = op_call(case, seed=15) if surface == "operator" else make_call(case, seed=15)[:2]
    names = CASES[case][0]
    fixed = [x.detach() for x in leaves]
    gamma = fixed[names.index("gamma")].clone().requires_grad_()
    rewards = names.index("rewards")
    g = torch.Generator().manual_seed(15)
    direction = torch.randn(fixed[rewards].shape, generator=g, dtype=torch.float64, requires_grad=True)
    # the series only: J t is the call on t for them (the row sums |.| and (.)^2 are not linear)
    weights = [torch.randn(o.shape, generator=g, dtype=o.dtype) * (o.ndim == 2) for o in call(*fixed)]
    base = with_values(fixed, [names.index("gamma")], [gamma])
    with fwAD.dual_level():
        outputs = call(*with_values(base, [rewards], [fwAD.make_dual(fixed[rewards], direction)]))
        loss = sum((fwAD.unpack_dual(o).tangent * w).sum() for o, w in zip(outputs, weights))
    got = torch.autograd.grad(loss, [direction, gamma])
    # J t is the call itself on t in the value arrays' places (zeros where no tangent)
    on_tangent = with_values(base, [i for i, n in enumerate(names) if n in VALUE_ARRAYS],
                       [direction if n == "rewards" else torch.zeros_like(fixed[i])
                        for i, n in enumerate(names) if n in VALUE_ARRAYS])
    expected = torch.autograd.grad(sum((o * w).sum() for o, w in zip(call(*on_tangent), weights)),
                                   [direction, gamma])
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_torch_func_jvp_of_the_public_function_is_refused_by_name():
    """The operators take torch.func.jvp; the public functions cannot read its wrapped tensors."""
    call, leaves, names = make_call("gae_last_value", seed=16)
    fixed = [x.detach() for x in leaves]
    values = names.index("values")
    with pytest.raises(TypeError, match="inside a torch.func transform"):
        torch.func.jvp(lambda v: call(*with_values(fixed, [values], [v]))[0], (fixed[values],),
                       (torch.ones_like(fixed[values]),))


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_recurrence_forward_mode(time_major, reverse):
    """Its tangent is the same scan on x' + a' y_{t-1} seeded with seed' (decay included)."""
    g = torch.Generator().manual_seed(10)
    x, decay = torch.randn(3, 7, generator=g, dtype=torch.float64), torch.rand(3, 7, generator=g, dtype=torch.float64)
    seed = torch.randn(3, generator=g, dtype=torch.float64)
    leaves = tuple(t.requires_grad_() for t in (x, decay, seed))

    def call(x, decay, seed):
        flip = (lambda t: t.t()) if time_major else (lambda t: t)
        return puffadv.linear_recurrence(flip(x), flip(decay), seed=seed, reverse=reverse,
                                         time_axis=0 if time_major else 1)

    assert torch.autograd.gradcheck(call, leaves, eps=1e-6, atol=1e-7, rtol=1e-5, check_forward_ad=True,
                                    check_backward_ad=False, check_undefined_grad=False,
                                    check_batched_forward_grad=False)
    plain = [t.detach() for t in leaves]
    jac = torch.func.jacrev(lambda d: call(plain[0], d, plain[2]))(plain[1])
    torch.testing.assert_close(torch.func.jacfwd(lambda d: call(plain[0], d, plain[2]))(plain[1]), jac)


@pytest.mark.parametrize("transform", ["dual", "jvp", "jacfwd", "jacrev", "grad", "grad of decay", "vmap"])
def test_the_linear_recurrence_operator_under_every_transform(transform):
    """The operator hands a dual tensor or a torch.func transform's tensors to the Python API's
    Function. Before 2026-12-06 torch.func.jvp / jacfwd through it gave all-zero tangents
    without a word, torch.func.grad raised torch's "must override setup_context", and a dual
    tensor was refused. Each equals the public function's, which reverse mode checks."""
    g = torch.Generator().manual_seed(3)
    x, decay = torch.rand(2, 5, generator=g, dtype=torch.float64), torch.rand(2, 5, generator=g, dtype=torch.float64)
    t = torch.randn(2, 5, generator=g, dtype=torch.float64)

    def op(v, a=decay):
        return torch.ops.puffadv.linear_recurrence(v, a, None, reverse=True, time_axis=1)

    def public(v, a=decay):
        return puffadv.linear_recurrence(v, a, reverse=True, time_axis=1)

    def run(f):
        if transform == "dual":
            with fwAD.dual_level():
                return fwAD.unpack_dual(f(fwAD.make_dual(x, t))).tangent
        if transform == "jvp":
            return torch.func.jvp(f, (x,), (t,))[1]
        if transform == "grad of decay":
            return torch.func.grad(lambda a: (f(x, a) * t).sum())(decay)
        if transform == "grad":
            return torch.func.grad(lambda v: (f(v) * t).sum())(x)
        if transform == "vmap":
            return torch.func.vmap(f, in_dims=(0, 0))(x[:, None].expand(2, 3, 5), decay[:, None].expand(2, 3, 5))
        return getattr(torch.func, transform)(f)(x)

    wanted = run(public)
    assert wanted is not None and wanted.abs().sum() > 0
    torch.testing.assert_close(run(op), wanted, rtol=1e-12, atol=1e-12)
    if transform in ("jvp", "dual"):  # J t against reverse mode's J
        torch.testing.assert_close(wanted, torch.einsum("btcs,cs->bt", torch.func.jacrev(public)(x), t))


@pytest.mark.parametrize("surface", ["public", "operator"])
def test_the_puff_advantages_float_dones_tangent_is_refused(surface):
    """Float dones are numbers in the puff advantage's decays (reverse mode differentiates
    them since 2026-12-06): a tangent on them is refused by name, as gamma's is, where it was
    dropped (with the values' tangent) or hit a torch internal assert (alone)."""
    g = torch.Generator().manual_seed(13)
    v, r = (torch.randn(2, 5, generator=g, dtype=torch.float64) for _ in range(2))
    imp = torch.rand(2, 5, generator=g, dtype=torch.float64) + 0.5
    d = torch.tensor([[0, 0.5, 0, 1, 0.25], [0, 0, 0.3, 0, 0]], dtype=torch.float64)
    if surface == "public":
        def call(v, d):
            return puffadv.compute_puff_advantage(v, r, d, imp, gamma=0.95, gae_lambda=0.9, rho_clip=1.1,
                                                  c_clip=0.95)
    else:
        def call(v, d):
            return torch.ops.puffadv.puff_advantage(v, r, d, imp, 0.95, 0.9, 1.1, 0.95)
    t = torch.randn(2, 5, generator=g, dtype=torch.float64)
    for with_values in (True, False):
        with fwAD.dual_level(), pytest.raises(TypeError, match="jvp\\) of (torch.ops.puffadv.)?puff_advantage takes "
                                                               "tangents of its value arrays only.* but dones has one"):
            call(fwAD.make_dual(v, t) if with_values else v, fwAD.make_dual(d, t))
    with fwAD.dual_level():  # the values' tangent alone: the jvp, equal to central differences
        tangent = fwAD.unpack_dual(call(fwAD.make_dual(v, t), d)).tangent
    eps = 1e-6
    torch.testing.assert_close(tangent, (call(v + eps * t, d) - call(v - eps * t, d)) / (2 * eps), rtol=1e-6,
                               atol=1e-7)
