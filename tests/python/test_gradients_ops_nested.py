"""torch.func transforms nested over the torch.ops.puffadv operators: each level records its
own graph or tangent, as for a native op. Before 2026-12-06 the op's Function ran its kernel
with grad and forward grad off, so only the innermost level saw the call: hessian, grad of
grad, jvp of grad came back zero or partial, and grad_and_value's result was detached from an
input that requires grad outside the transform. References: eager double backward (which
was right) of the same call."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("puffadv.torch")

from gradient_cases import CASES, VALUE_ARRAYS  # noqa: E402
from test_gradients_ops import op_call  # noqa: E402


def _loss(call, weights):
    """A loss with a second derivative in every argument: the outputs' weighted squares."""
    return lambda *a: sum(((o * w) ** 2).sum() for o, w in zip(call(*a), weights))


def _setup(case, seed):
    call, leaves = op_call(case, seed=seed, rows=2, horizon=5)
    g = torch.Generator().manual_seed(seed)
    weights = [torch.rand(o.shape, generator=g, dtype=o.dtype) + 0.5 for o in call(*leaves)]
    return _loss(call, weights), [x.detach() for x in leaves]


def _eager_hvp(loss, leaves, k, tangent):
    """d/dx_k <grad_k L, tangent>: eager double backward (reference), every argument's (None
    where none reaches it; all None where the call never reads x_k: its gradient is a constant)."""
    xs = [x.clone().requires_grad_() for x in leaves]
    (g,) = torch.autograd.grad(loss(*xs), xs[k], create_graph=True, materialize_grads=True)
    if not g.requires_grad:
        return [None] * len(xs)
    return torch.autograd.grad((g * tangent).sum(), xs, allow_unused=True)


def _nonzero(*tensors):
    assert any(t.abs().max() > 1e-3 for t in tensors), "a reference of zeros proves nothing"


@pytest.mark.parametrize("case", sorted(CASES))
def test_grad_of_grad_equals_double_backward(case):
    loss, leaves = _setup(case, seed=11)
    g = torch.Generator().manual_seed(12)
    for k in range(len(leaves)):
        tangent = torch.randn(leaves[k].shape, generator=g, dtype=leaves[k].dtype)

        def inner(*a):
            return (torch.func.grad(loss, argnums=k)(*a) * tangent).sum()

        got = torch.func.grad(inner, argnums=tuple(range(len(leaves))))(*leaves)
        want = _eager_hvp(loss, leaves, k, tangent)
        if k == 0:
            _nonzero(*(w for w in want if w is not None))
        for x, w in zip(got, want):
            torch.testing.assert_close(x, torch.zeros_like(x) if w is None else w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", sorted(CASES))
def test_hessian_in_the_value_arrays(case):
    """jacfwd over jacrev (torch.func.hessian): the forward level's jvp, the reverse level's
    backward, in the arrays the forward mode takes (the value arrays)."""
    loss, leaves = _setup(case, seed=13)
    arrays = CASES[case][0]
    g = torch.Generator().manual_seed(14)
    for k, name in enumerate(arrays):
        if name not in VALUE_ARRAYS:
            continue

        def of_k(x):
            return loss(*leaves[:k], x, *leaves[k + 1:])

        hessian = torch.func.hessian(of_k)(leaves[k])
        tangent = torch.randn(leaves[k].shape, generator=g, dtype=leaves[k].dtype)
        want = _eager_hvp(loss, leaves, k, tangent)[k]
        if want is None:  # unread (TD(lambda)'s values beside next_values): L is linear in it
            want = torch.zeros_like(tangent)
        elif k == 0:
            _nonzero(want)
        n = tangent.ndim
        got = (hessian * tangent).sum(tuple(range(-n, 0)))
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
        # jvp of grad: forward over reverse, one tangent
        _, got = torch.func.jvp(torch.func.grad(of_k), (leaves[k],), (tangent,))
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", ["gae", "vtrace", "discounted_returns_per_step", "compute_puff_advantage",
                                  "eligibility_traces_per_step"])
def test_a_tangent_the_jvp_cannot_take_is_refused_under_hessian(case):
    """The reverse level differentiates gamma, lambda and the ratios; a forward level over it
    (hessian) takes tangents of the value arrays only: the others are refused by name."""
    loss, leaves = _setup(case, seed=15)
    arrays = CASES[case][0]
    for k, name in enumerate(arrays):
        if name in VALUE_ARRAYS:
            continue
        with pytest.raises(TypeError, match="jvp\\) of torch.ops.puffadv.[a-z_]+ takes tangents of its value "
                                            "arrays only"):
            torch.func.hessian(lambda x: loss(*leaves[:k], x, *leaves[k + 1:]))(leaves[k])


@pytest.mark.parametrize("case", ["gae", "retrace", "n_step_returns", "episodic_cumsum", "compute_puff_advantage"])
def test_a_transform_keeps_the_graph_of_inputs_that_require_grad_outside_it(case):
    """grad_and_value and jvp inside plain autograd: their results stay on the graph of the
    leaves that require grad, whose backward then equals eager double backward."""
    loss, leaves = _setup(case, seed=16)
    xs = [x.clone().requires_grad_() for x in leaves]
    grads, value = torch.func.grad_and_value(loss, argnums=tuple(range(len(xs))))(*xs)
    assert value.requires_grad and all(g.requires_grad for g in grads)
    torch.testing.assert_close(value, loss(*leaves))
    g = torch.Generator().manual_seed(17)
    tangent = torch.randn(xs[0].shape, generator=g, dtype=xs[0].dtype)
    got = torch.autograd.grad((grads[0] * tangent).sum(), xs, allow_unused=True)
    want = _eager_hvp(loss, leaves, 0, tangent)
    _nonzero(*(w for w in want if w is not None))
    for x, w in zip(got, want):
        if w is None:
            assert x is None or x.abs().max() == 0
        else:
            torch.testing.assert_close(x, w, rtol=1e-10, atol=1e-10)
    primal, _ = torch.func.jvp(lambda x: loss(x, *xs[1:]), (xs[0],), (tangent,))
    assert primal.requires_grad
    (got,) = torch.autograd.grad(primal, xs[0])
    (want,) = torch.autograd.grad(loss(*xs), xs[0])
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
