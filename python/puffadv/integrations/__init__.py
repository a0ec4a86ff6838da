"""puffadv inside other trainers, one line each (docs/integrations.md).

Each submodule imports its trainer, which stays an optional dependency
(``pip install puffadv[sb3]`` and so on); importing one without its trainer
raises an ImportError that names the package to install:

- ``puffadv.integrations.sb3``: Stable-Baselines3 rollout buffers (``rollout_buffer_class=``) and ``patch()``;
- ``puffadv.integrations.cleanrl``: ``gae(...)`` in CleanRL's own variables;
- ``puffadv.integrations.torchrl``: drop-in ``GAE``, ``TDLambdaEstimator``, ``VTrace`` value estimators;
- ``puffadv.integrations.tianshou``: ``compute_episodic_return`` and ``patch()``;
- ``puffadv.integrations.skrl``: ``compute_gae`` and ``patch()``.

``calls`` counts, per trainer, the estimates that puffadv computed through these
modules (and ``fallbacks`` those handed back to the trainer's own code): a
training run can show that its advantages came from puffadv.
"""
from __future__ import annotations

from collections import Counter

calls: Counter = Counter()
fallbacks: Counter = Counter()
