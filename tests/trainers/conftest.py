"""Other trainers on puffadv (puffadv.integrations). These tests run in the
virtual environment of scripts/test.d/56-trainers.sh: the installed puffadv and
each trainer's pinned package. Each file compares a trainer's own estimator with
puffadv's on the same real rollout buffers, and trains CartPole a few thousand
steps through the one-line integration, counting the estimates that reached
puffadv (puffadv.integrations.calls)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

torch.set_num_threads(1)  # CI's 2 cores: the small networks gain nothing from more
os.environ.setdefault("RL_WARNINGS", "False")  # TorchRL's notes on tensordicts without a named time dim


@pytest.fixture
def rng():
    return np.random.default_rng(20261203)

