"""Fake kernels of torch.ops.puffadv.gae / td_lambda_returns / vtrace
(src/torch/conventions_ops.cpp), so that torch.compile(fullgraph=True) traces
them. They describe outputs only: the real kernels run the core's checks.
Imported by puffadv.torch after the op library is loaded."""
from __future__ import annotations

import torch


def _output(rewards, values):
    """Shaped like rewards; float32 for bfloat16/float16 inputs (float32 arithmetic)."""
    dtype = torch.float32 if values.dtype in (torch.bfloat16, torch.float16) else values.dtype
    return torch.empty(rewards.shape, dtype=dtype, device=rewards.device)


def register():
    if not hasattr(torch.ops.puffadv, "gae"):  # an op library built before the conventions
        return

    @torch.library.register_fake("puffadv::gae")
    def _gae_fake(rewards, values, terminated, truncated=None, last_value=None, bootstrap_values=None,
                  importance=None, gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0, time_axis=-1):
        return _output(rewards, values), _output(rewards, values)

    @torch.library.register_fake("puffadv::td_lambda_returns")
    def _td_lambda_fake(rewards, values, terminated, truncated=None, last_value=None, bootstrap_values=None,
                        importance=None, gamma=0.99, lambda_=0.95, rho_clip=1.0, c_clip=1.0, time_axis=-1):
        return _output(rewards, values)

    @torch.library.register_fake("puffadv::vtrace")
    def _vtrace_fake(rewards, values, terminated, truncated=None, last_value=None, bootstrap_values=None,
                     importance=None, gamma=0.99, lambda_=1.0, rho_clip=1.0, c_clip=1.0, rho_pg_clip=1.0,
                     time_axis=-1):
        return _output(rewards, values), _output(rewards, values)
