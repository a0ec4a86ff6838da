"""TorchRL's PPO on CartPole (a few thousand frames) with the drop-in GAE: it completes,
every batch's advantages come from puffadv (shifted=True: next values are the next
step's values), and each equals TorchRL's own GAE on the same real batch."""
from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs import GymEnv
from torchrl.modules import OneHotCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE as OwnGAE

from puffadv import integrations
from puffadv.integrations.torchrl import GAE


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_ppo_trains_cartpole_through_the_drop_in_gae():
    torch.manual_seed(0)
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    actor = ProbabilisticActor(
        TensorDictModule(nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2)), in_keys=["observation"],
                         out_keys=["logits"]),
        in_keys=["logits"], spec=env.action_spec, distribution_class=OneHotCategorical, return_log_prob=True)
    critic = ValueOperator(nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1)), in_keys=["observation"])
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=critic, shifted=True, average_gae=True)
    own = OwnGAE(gamma=0.99, lmbda=0.95, value_network=critic, shifted=True, average_gae=True)
    loss = ClipPPOLoss(actor, critic)
    optimizer = torch.optim.Adam(loss.parameters(), lr=1e-3)
    frames, per_batch = 2048, 256
    collector = Collector(env, actor, frames_per_batch=per_batch, total_frames=frames)
    before, back = integrations.calls["torchrl"], integrations.fallbacks["torchrl"]
    seen = 0
    for batch in collector:
        want = own(batch.clone())
        advantage(batch)
        for key in ("advantage", "value_target"):
            torch.testing.assert_close(batch[key], want[key], rtol=1e-5, atol=1e-5)
        for minibatch in batch.reshape(-1).split(128):
            losses = loss(minibatch)
            total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
            optimizer.zero_grad()
            total.backward()
            optimizer.step()
        seen += batch.numel()
    collector.shutdown()
    assert seen == frames
    assert integrations.calls["torchrl"] - before == frames // per_batch  # every batch through puffadv
    assert integrations.fallbacks["torchrl"] == back
