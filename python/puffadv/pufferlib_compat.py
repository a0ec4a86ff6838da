"""``torch.ops.pufferlib.compute_puff_advantage`` backed by puffadv.

PufferLib's trainer calls ``torch.ops.pufferlib.compute_puff_advantage``, which
its own C++/CUDA extension normally registers. ``import puffadv.pufferlib_compat``
registers the same operator (same schema, same in-place semantics) on top of
puffadv's, so the trainer runs unchanged without building that extension.

If PufferLib's extension has already registered the operator, it is left alone.
Import PufferLib's extension first when both are present: registering the
operator twice is an error in torch.
"""
from __future__ import annotations

import torch

from . import torch as _puffadv_ops  # loads torch.ops.puffadv

SCHEMA = ("compute_puff_advantage(Tensor(a!) values, Tensor(b!) rewards, Tensor(c!) dones, "
          "Tensor(d!) importance, Tensor(e!) advantages, float gamma, float lambda, "
          "float rho_clip, float c_clip) -> ()")


def _already_registered() -> bool:
    return hasattr(torch.ops.pufferlib, "compute_puff_advantage")


registered_here = not _already_registered()
"""True when this module registered the operator, False when PufferLib's own extension had."""

if registered_here:
    _lib = torch.library.Library("pufferlib", "FRAGMENT")
    _lib.define(SCHEMA)
    # Composite: autograd, torch.compile and every device see puffadv's operator underneath.
    _lib.impl("compute_puff_advantage", _puffadv_ops.compute_puff_advantage.default,
              "CompositeImplicitAutograd")
