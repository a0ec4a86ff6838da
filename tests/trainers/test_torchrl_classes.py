"""TorchRL's value-estimator classes (test/objectives/test_values.py's class-level cases:
value networks, shifted and unshifted, NaN next observations at episode ends, shifted
budgets with truncations, average_gae, differentiable, custom keys, V-trace with an
actor) through puffadv.integrations.torchrl's drop-in GAE / TDLambdaEstimator / VTrace,
against TorchRL's own classes on the same tensordicts; and a PPO run on CartPole
through the drop-in GAE."""
from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.objectives.value import GAE as OwnGAE
from torchrl.objectives.value import TDLambdaEstimator as OwnTDLambda
from torchrl.objectives.value import VTrace as OwnVTrace

from puffadv import integrations
from puffadv.integrations import torchrl as ours

pytestmark = pytest.mark.filterwarnings("ignore::puffadv.FallbackWarning")
PAIRS = [(OwnGAE, ours.GAE, {"gamma": 0.9, "lmbda": 0.95}),
         (OwnTDLambda, ours.TDLambdaEstimator, {"gamma": 0.9, "lmbda": 0.95})]


def rollout(B=4, T=8, obs_dim=3, resets=(), terminal=False, dtype=torch.float32, seed=0):
    """A rollout-shaped tensordict: next obs = the following obs except after the given resets."""
    g = torch.Generator().manual_seed(seed)
    all_obs = torch.randn(B, T + 1, obs_dim, generator=g, dtype=dtype)
    obs, next_obs = all_obs[:, :T].clone(), all_obs[:, 1:].clone()
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    for t in resets:
        done[:, t] = True
        next_obs[:, t] = torch.randn(B, obs_dim, generator=g, dtype=dtype)
    done[:, -1] = True
    terminated = done.clone() if terminal else torch.zeros_like(done)
    return TensorDict({"observation": obs, "next": {"observation": next_obs, "done": done, "terminated": terminated,
                                                    "reward": torch.randn(B, T, 1, generator=g, dtype=dtype)}},
                      [B, T])


def value_net(obs_dim=3, dtype=torch.float32):
    torch.manual_seed(0)
    return TensorDictModule(nn.Linear(obs_dim, 1, dtype=dtype), in_keys=["observation"], out_keys=["state_value"])


def counted(function):
    calls, fallbacks = integrations.calls["torchrl"], integrations.fallbacks["torchrl"]
    out = function()
    return out, integrations.calls["torchrl"] - calls, integrations.fallbacks["torchrl"] - fallbacks


def assert_same(got, want, keys=("advantage", "value_target")):
    for key in keys:
        torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("own_cls,our_cls,kwargs", PAIRS)
@pytest.mark.parametrize("shifted", [False, True])
@pytest.mark.parametrize("resets", [(), (2,), (1, 3)])
@pytest.mark.parametrize("terminal", [False, True])
def test_value_network_estimates(own_cls, our_cls, kwargs, shifted, resets, terminal):
    td, net = rollout(resets=resets, terminal=terminal), value_net()
    want = own_cls(**kwargs, value_network=net, shifted=shifted)(td.clone())
    got, through, back = counted(lambda: our_cls(**kwargs, value_network=net, shifted=shifted)(td.clone()))
    assert_same(got, want)
    assert through + back >= 1
    if shifted or own_cls is OwnTDLambda:  # next values: the next step's values, or TD(lambda)
        assert through >= 1 and back == 0


@pytest.mark.parametrize("own_cls,our_cls,kwargs", PAIRS)
@pytest.mark.parametrize("shifted", [False, True])
def test_nan_next_obs_at_done_is_safe(own_cls, our_cls, kwargs, shifted):
    td = rollout(B=2, T=5, terminal=True)
    td["next", "observation"][:, :-1] = td["observation"][:, 1:]
    td["next", "observation"][:, -1] = float("nan")
    net = value_net()
    got = our_cls(**kwargs, value_network=net, shifted=shifted)(td.clone())
    assert torch.isfinite(got["advantage"]).all() and torch.isfinite(got["value_target"]).all()
    assert_same(got, own_cls(**kwargs, value_network=net, shifted=shifted)(td.clone()))
    torch.testing.assert_close(got["value_target"][..., -1, :], td["next", "reward"][..., -1, :])


@pytest.mark.parametrize("shifted_budget", [1, 2])
@pytest.mark.parametrize("resets", [(2,), (1, 3)])
def test_gae_shifted_budget_with_truncations(shifted_budget, resets):
    td, net = rollout(B=2, T=6, resets=resets, dtype=torch.float64), value_net(dtype=torch.float64)
    kwargs = dict(gamma=0.9, lmbda=0.95, value_network=net, shifted=True, shifted_budget=shifted_budget)
    want = OwnGAE(**kwargs)(td.clone())
    got, through, back = counted(lambda: ours.GAE(**kwargs)(td.clone()))
    assert through == 1 and back == 0
    assert_same(got, want)
    assert got["shifted_valid"].equal(want["shifted_valid"])


@pytest.mark.parametrize("vectorized", [False, True])
def test_gae_average_gae_and_custom_keys(vectorized):
    td, net = rollout(resets=(3,)), value_net()
    results = []
    for cls in (OwnGAE, ours.GAE):
        estimator = cls(gamma=0.95, lmbda=0.9, value_network=net, shifted=True, average_gae=True,
                        vectorized=vectorized)
        estimator.set_keys(advantage="my_advantage", value_target="my_target")
        results.append(estimator(td.clone()))
    assert_same(results[1], results[0], keys=("my_advantage", "my_target"))
    valid = results[1]["shifted_valid"].unsqueeze(-1)
    torch.testing.assert_close(results[1]["my_advantage"][valid].mean(), torch.zeros(()), atol=1e-5, rtol=0)


def test_gae_differentiable_keeps_torchrls_gradients():
    td = rollout(resets=(2,))
    values = torch.randn(4, 8, 1)
    next_values = torch.cat((values[:, 1:], torch.randn(4, 1, 1)), 1)
    grads = []
    for cls in (OwnGAE, ours.GAE):
        leaf = values.clone().requires_grad_(True)
        data = td.clone()
        data["state_value"], data["next", "state_value"] = leaf, next_values
        out, through, back = counted(lambda: cls(gamma=0.9, lmbda=0.95, value_network=None,
                                                 differentiable=True)(data))
        out["advantage"].sum().backward()
        grads.append(leaf.grad)
    # computed by puffadv (next_values=, differentiable), not handed back to TorchRL
    assert (through, back) == (1, 0)
    torch.testing.assert_close(grads[1], grads[0])


def test_gae_time_dim_zero_without_value_network():
    td = rollout(B=3, T=7, resets=(2,))
    net = value_net()
    td = net(td)
    td["next"] = net(td["next"])
    td["next", "state_value"][:, :-1] = td["state_value"][:, 1:]  # the next step's values
    td_time_major = td.transpose(0, 1)
    kwargs = dict(gamma=0.9, lmbda=0.8, value_network=None, time_dim=0)
    want = OwnGAE(**kwargs)(td_time_major.clone())
    got, through, back = counted(lambda: ours.GAE(**kwargs)(td_time_major.clone()))
    assert through == 1 and back == 0
    assert_same(got, want)


@pytest.mark.parametrize("rho_thresh,c_thresh", [(1.0, 1.0), (0.8, 1.2)])
def test_vtrace_class_with_an_actor(rho_thresh, c_thresh):
    from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential
    from torchrl.modules import NormalParamExtractor, TanhNormal

    td, net = rollout(resets=(3,)), value_net()
    torch.manual_seed(1)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Sequential(nn.Linear(3, 2), NormalParamExtractor()), in_keys=["observation"],
                         out_keys=["loc", "scale"]),
        ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal,
                                      return_log_prob=True))
    with torch.no_grad():
        td = actor(td)
    td["action_log_prob"] = td["action_log_prob"] + 0.3 * torch.randn_like(td["action_log_prob"])
    kwargs = dict(gamma=0.9, actor_network=actor, value_network=net, rho_thresh=rho_thresh, c_thresh=c_thresh,
                  shifted=True)
    want = OwnVTrace(**kwargs)(td.clone())
    got, through, back = counted(lambda: ours.VTrace(**kwargs)(td.clone()))
    assert through == 1 and back == 0
    assert_same(got, want)
