"""torch.ops.puffadv: the puff advantage as torch operators.

Importing this module loads puffadv's op library and registers its fake
kernels, so both operators work under torch.compile(fullgraph=True):

- ``torch.ops.puffadv.compute_puff_advantage(values, rewards, dones, importance,
  advantages, gamma, lambda, rho_clip, c_clip) -> ()`` writes ``advantages`` in
  place; it has PufferLib's schema, so PufferLib code switches by namespace.
- ``torch.ops.puffadv.puff_advantage(values, rewards, dones, importance, gamma,
  gae_lambda, rho_clip, c_clip) -> Tensor`` returns a new row-major tensor.

CPU and CUDA (HIP under ROCm torch) tensors; on a GPU the work is queued on
torch's current stream with no host synchronisation, so it can be captured in a
CUDA graph. Errors are the core's: TypeError / ValueError naming the argument.
"""
from __future__ import annotations

import torch

from . import _torch_status

_torch_status.load(torch)

compute_puff_advantage = torch.ops.puffadv.compute_puff_advantage
puff_advantage = torch.ops.puffadv.puff_advantage


# Fake kernels describe outputs only; the real kernels run the core's checks,
# so a bad call traced by torch.compile fails with the same message when it runs.
@torch.library.register_fake("puffadv::compute_puff_advantage")
def _compute_puff_advantage_fake(values, rewards, dones, importance, advantages,
                                 gamma, lambda_, rho_clip, c_clip):
    return None


@torch.library.register_fake("puffadv::puff_advantage")
def _puff_advantage_fake(values, rewards, dones, importance, gamma, gae_lambda, rho_clip, c_clip):
    return torch.empty(values.shape, dtype=values.dtype, device=values.device)


__all__ = ["compute_puff_advantage", "puff_advantage"]
