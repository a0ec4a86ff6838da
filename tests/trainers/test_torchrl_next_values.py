"""TorchRL's estimators with an independent next_state_value (TorchRL's own tests draw
them so) through puffadv.integrations.torchrl: passed as puffadv's next_values=, so
the values AND the gradients (differentiable=True: state_value, next_state_value,
reward, the log-probabilities) equal TorchRL's own, in float64, and every call went
through puffadv (none fell back)."""
from __future__ import annotations

import pytest
import torch
import torchrl.objectives.value.functional as own
from torchrl.objectives.value import GAE as OwnGAE

from puffadv.integrations import torchrl as ours

from test_torchrl_functional import Through, draw

# Exact in float32 (the clips below too): TorchRL forms some factors in float32 even for float64 data.
GAMMA, LMBDA = 0.9375, 0.875


def _leaves(*tensors):
    return [t.detach().clone().double().requires_grad_(True) for t in tensors]


def _compare(call_ours, call_own, leaves, n_outputs):
    """Outputs and the gradients of a random weighting of them, through puffadv and TorchRL."""
    results = []
    weights = None
    for call in (call_ours, call_own):
        inputs = [x.detach().clone().requires_grad_(True) for x in leaves]
        outputs = call(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        outputs = outputs[:n_outputs]
        if weights is None:
            generator = torch.Generator().manual_seed(5)
            weights = [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in outputs]
        grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outputs, weights)), inputs,
                                    allow_unused=True)
        results.append(([o.detach() for o in outputs], [torch.zeros_like(x) if g is None else g
                                                         for x, g in zip(inputs, grads)]))
    (got, got_grads), (want, want_grads) = results
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("N, T", [((3,), 20), ((2, 3), 9)])
def test_gae_independent_next_values_values_and_gradients(N, T):
    done, terminated, reward, state_value, next_state_value = draw(N, T, dtype=torch.float64)
    leaves = _leaves(state_value, next_state_value, reward)
    with Through() as through:
        _compare(lambda v, nv, r: ours.vec_generalized_advantage_estimate(GAMMA, LMBDA, v, nv, r, done, terminated),
                 lambda v, nv, r: own.vec_generalized_advantage_estimate(GAMMA, LMBDA, v, nv, r, done, terminated),
                 leaves, 2)
    assert (through.puffadv, through.torchrl) == (1, 0)


@pytest.mark.parametrize("N, T", [((3,), 20), ((2, 3), 9)])
def test_td_lambda_independent_next_values_values_and_gradients(N, T):
    done, terminated, reward, _, next_state_value = draw(N, T, dtype=torch.float64)
    leaves = _leaves(next_state_value, reward)
    with Through() as through:
        _compare(lambda nv, r: ours.vec_td_lambda_return_estimate(GAMMA, LMBDA, nv, r, done, terminated),
                 lambda nv, r: own.vec_td_lambda_return_estimate(GAMMA, LMBDA, nv, r, done, terminated),
                 leaves, 1)
    assert (through.puffadv, through.torchrl) == (1, 0)


@pytest.mark.parametrize("N, T", [((3,), 20), ((2, 3), 9)])
def test_vtrace_independent_next_values_values_and_gradients(N, T):
    done, terminated, reward, state_value, next_state_value = draw(N, T, dtype=torch.float64)
    generator = torch.Generator().manual_seed(3)
    log_pi = torch.randn(reward.shape, dtype=torch.float64, generator=generator) * 0.3
    log_mu = torch.randn(reward.shape, dtype=torch.float64, generator=generator) * 0.3
    leaves = _leaves(log_pi, state_value, next_state_value, reward)
    with Through() as through:
        _compare(lambda lp, v, nv, r: ours.vtrace_advantage_estimate(GAMMA, lp, log_mu, v, nv, r, done, terminated,
                                                                     rho_thresh=1.25, c_thresh=0.875),
                 lambda lp, v, nv, r: own.vtrace_advantage_estimate(GAMMA, lp, log_mu, v, nv, r, done, terminated,
                                                                    rho_thresh=1.25, c_thresh=0.875),
                 leaves, 2)
    assert (through.puffadv, through.torchrl) == (1, 0)


def test_gae_class_differentiable_with_independent_next_state_value():
    """The drop-in GAE (differentiable=True, no value network) on a tensordict whose next
    state_value is its own leaf: the advantages and both gradients as TorchRL's GAE."""
    tensordict = pytest.importorskip("tensordict")
    done, terminated, reward, state_value, next_state_value = draw((4,), 8, dtype=torch.float64)
    grads = []
    for cls in (OwnGAE, ours.GAE):
        v, nv = _leaves(state_value, next_state_value)
        data = tensordict.TensorDict({"state_value": v, "next": {"state_value": nv, "reward": reward, "done": done,
                                                                  "terminated": terminated}}, batch_size=(4, 8))
        with Through() as through:
            out = cls(gamma=GAMMA, lmbda=LMBDA, value_network=None, differentiable=True)(data)
        out["advantage"].square().sum().backward()
        grads.append((out["advantage"].detach(), v.grad, nv.grad))
        if cls is ours.GAE:
            assert (through.puffadv, through.torchrl) == (1, 0)
    for g, w in zip(grads[1], grads[0]):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
