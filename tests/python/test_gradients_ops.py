"""Gradients of every torch.ops.puffadv operator (issue 30): gradcheck in float64 for
every tensor argument and both time layouts, torch.func (grad, vjp, jacrev; vmap
a clear error), torch.compile(fullgraph=True) forward and backward, opcheck,
and the same gradients as the public functions."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("puffadv.torch")

from gradient_cases import CASES, SCALARS, episode_arrays, function_of, layout, make_call  # noqa: E402

# Public argument names that the operators spell otherwise (per-step gamma and lambda are
# their own schema arguments: the cases pass them as arrays under the scalars' names).
_OP_NAMES = {"target_log_probs": "target_probs", "behaviour_log_probs": "behaviour_probs",
             "gamma": "gamma_steps", "gae_lambda": "lambda_steps", "lambda_": "lambda_steps"}


def op_call(case: str, seed: int = 0, time_major: bool = False, device: str = "cpu", rows: int = 3,
            horizon: int = 6):
    """(op(*differentiated), the differentiated leaves) for one case's operator."""
    arrays, flags, fixed, scalars, _ = CASES[case]
    data = episode_arrays(seed, rows, horizon)
    if case == "compute_puff_advantage":
        data["dones"] = data["terminated"].astype(np.float64)
    name = "puff_advantage" if case == "compute_puff_advantage" else function_of(case)
    op = getattr(torch.ops.puffadv, name)
    leaves = [layout(torch.tensor(data[a], device=device), time_major, False).requires_grad_() for a in arrays]
    const = {f: layout(torch.tensor(data[f], device=device), time_major, False) for f in flags}
    kwargs = {**const, **{k: v for k, v in fixed.items() if k != "boundary"}, **{s: SCALARS[s] for s in scalars}}
    if fixed.get("boundary") == "starts_at":
        kwargs["reset_at_start"] = True
    if case.endswith("log_probs"):
        kwargs["log_probs"] = True
    if name != "puff_advantage":
        kwargs["time_axis"] = 0 if time_major else -1
    if name == "eligibility_traces" and "gamma" in arrays:  # its schema's required floats, unread beside the arrays
        kwargs.update(gamma=0.5, lambda_=0.5)

    def call(*values):
        result = op(**kwargs, **{_OP_NAMES.get(a, a): v for a, v in zip(arrays, values)})
        return result if isinstance(result, tuple) else (result,)

    return call, leaves


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("time_major", [False, True])
def test_gradcheck(case, time_major):
    call, leaves = op_call(case, seed=1, time_major=time_major)
    assert torch.autograd.gradcheck(call, tuple(leaves), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_gradients_as_the_public_function(case):
    call, leaves = op_call(case, seed=2)
    public, public_leaves, _ = make_call(case, seed=2)
    n = len(leaves)
    ours = [o for o in call(*leaves)]
    theirs = [o for o in public(*public_leaves) if o.ndim == 2]
    weights = [torch.rand_like(o) for o in ours]
    # the op's outputs are the public result's series, possibly in another order: match by value
    pairs = [(o, next(t for t in theirs if torch.allclose(o.detach(), t.detach(), rtol=1e-13, atol=1e-13))) for o in ours]
    got = torch.autograd.grad(sum((o * w).sum() for (o, _), w in zip(pairs, weights)), leaves)
    want = torch.autograd.grad(sum((t * w).sum() for (_, t), w in zip(pairs, weights)), public_leaves[:n])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_torch_func_grad_vjp_jacrev():
    call, (r, v, lv) = op_call("gae_last_value", seed=3)
    (expected,) = torch.autograd.grad(call(r, v, lv)[0].sum(), v)
    torch.testing.assert_close(torch.func.grad(lambda v: call(r.detach(), v, lv.detach())[0].sum())(v.detach()),
                               expected)
    out, vjp = torch.func.vjp(lambda v: call(r.detach(), v, lv.detach())[0], v.detach())
    torch.testing.assert_close(vjp(torch.ones_like(out))[0], expected)
    jac = torch.func.jacrev(lambda v: call(r.detach(), v, lv.detach())[0])(v.detach())
    torch.testing.assert_close(jac.sum((0, 1)), expected)


def test_vmap_works():
    """torch.func.vmap runs the op once per slice (torch's fallback for an op without a
    batching rule), gradients included."""
    call, (r, v, lv) = op_call("gae_last_value", seed=4)
    r, lv = r.detach(), lv.detach()
    stacked = torch.stack([v.detach(), 2 * v.detach()])
    got = torch.func.vmap(lambda v: call(r, v, lv)[0])(stacked)
    for k in range(2):
        torch.testing.assert_close(got[k], call(r, stacked[k], lv)[0])
    grads = torch.func.vmap(torch.func.grad(lambda v: call(r, v, lv)[0].square().sum()))(stacked)
    for k in range(2):
        torch.testing.assert_close(grads[k], torch.func.grad(lambda v: call(r, v, lv)[0].square().sum())(stacked[k]))


def test_compile_fullgraph_forward_and_backward():
    call, leaves = op_call("vtrace", seed=5)
    compiled = torch.compile(lambda *a: sum(o.square().sum() for o in call(*a)), fullgraph=True)
    got = torch.autograd.grad(compiled(*leaves), leaves)
    want = torch.autograd.grad(sum(o.square().sum() for o in call(*leaves)), leaves)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_double_backward():
    call, leaves = op_call("retrace", seed=6)
    assert torch.autograd.gradgradcheck(call, tuple(leaves), eps=1e-6, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("case", ["gae", "compute_puff_advantage", "episodic_cumsum", "retrace_log_probs"])
def test_opcheck(case):
    _, leaves = op_call(case, seed=7)
    name = "puff_advantage" if case == "compute_puff_advantage" else function_of(case)
    torch.library.opcheck(getattr(torch.ops.puffadv, name), (), _op_kwargs(case, leaves),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor"))


def _op_kwargs(case, leaves):
    arrays, flags, fixed, scalars, _ = CASES[case]
    data = episode_arrays(7)
    if case == "compute_puff_advantage":
        data["dones"] = data["terminated"].astype(np.float64)
    kwargs = {f: torch.tensor(data[f]) for f in flags}
    kwargs.update({_OP_NAMES.get(a, a): x for a, x in zip(arrays, leaves)})
    kwargs.update({s: SCALARS[s] for s in scalars})
    kwargs.update({k: v for k, v in fixed.items() if k != "boundary"})
    if case.endswith("log_probs"):
        kwargs["log_probs"] = True
    if case != "compute_puff_advantage":
        kwargs["time_axis"] = -1  # op_call's leaves are batch-major [B, T]
    return kwargs


def test_every_float_tensor_argument_of_every_op_is_gradchecked():
    """No operator argument escapes the gradchecks above: each float Tensor of each
    functional op's schema is differentiated by some case (flags are boolean)."""
    from puffadv import _torch_kernels
    covered = {}
    for case, (arrays, *_) in CASES.items():
        name = "puff_advantage" if case == "compute_puff_advantage" else function_of(case)
        covered.setdefault(name, set()).update(_OP_NAMES.get(a, a) for a in arrays)
    flags = {"terminated", "truncated", "dones", "greedy", "sample_mask"}
    for name in _torch_kernels._FUNCTIONAL:
        schema = getattr(torch.ops.puffadv, name).default._schema
        tensors = {a.name for a in schema.arguments if "Tensor" in str(a.type)} - flags
        assert tensors <= covered.get(name, set()), (name, tensors - covered.get(name, set()))
