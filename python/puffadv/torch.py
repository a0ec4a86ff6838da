"""torch.ops.puffadv: the puff advantage as torch operators.

Importing this module loads puffadv's op library (C++ kernels on torch's
LibTorch Stable ABI, for every torch from the release named by
``puffadv.backend()["torch_ops"]["torch_floor"]`` on) and registers its Python
half (fakes, autograd, torch.compile; see _torch_kernels):

- ``torch.ops.puffadv.compute_puff_advantage(values, rewards, dones, importance,
  advantages, gamma, lambda, rho_clip, c_clip) -> ()`` writes ``advantages`` in
  place; it has PufferLib's schema, so PufferLib code switches by namespace.
- ``torch.ops.puffadv.puff_advantage(values, rewards, dones, importance, gamma,
  gae_lambda, rho_clip, c_clip) -> Tensor`` returns a new row-major tensor.

Both trace under torch.compile(fullgraph=True); there the in-place op becomes
the functional op plus a copy into ``advantages``. So do the estimator
family's functional ops (src/torch/conventions_ops.cpp, schemas there):
``gae``, ``td_lambda_returns``, ``vtrace``, ``discounted_returns``,
``n_step_returns``, ``retrace``, ``q_lambda``, ``episodic_cumsum`` and
``eligibility_traces``, with the Python API's arguments and numbers (retrace
takes one pair of probabilities with ``log_probs`` saying which kind;
episodic_cumsum's ``reset_at_start`` is ``boundary="starts_at"``).
Every functional op is differentiable (autograd, torch.func, torch.compile; the
gradients of every float tensor, docs/gradients.md); the in-place
``compute_puff_advantage`` records no graph, as PufferLib's own op (PufferLib's
trainer passes its live ratio there), and warns (ConstantInputWarning) when an input
requires grad: call ``puff_advantage`` (or ``puffadv.compute_puff_advantage``).
``linear_recurrence(inputs, decay, seed=None, *, reverse, time_axis) -> Tensor``
is the engine's scan itself (its backward is the same scan run the other way:
_recurrence_vjp.py).

CPU and CUDA (HIP under ROCm torch) tensors; on a GPU the work is queued on
torch's current stream with no host synchronisation, so it can be captured in a
CUDA graph. Errors are the core's: TypeError / ValueError naming the argument.
"""
from __future__ import annotations

import torch

from . import _torch_conventions, _torch_kernels, _torch_recurrence, _torch_status

_torch_status.load(torch)
_lib = torch.library.Library("puffadv", "IMPL")  # kept alive: its registrations live with it
_torch_kernels.register(_lib)
_torch_conventions.register(_lib)
_torch_recurrence.register(_lib)  # linear_recurrence: fake, BackendSelect and autograd

compute_puff_advantage = torch.ops.puffadv.compute_puff_advantage
puff_advantage = torch.ops.puffadv.puff_advantage

__all__ = ["compute_puff_advantage", "puff_advantage"]
