"""Fake kernels of torch.ops.puffadv.gae / td_lambda_returns / vtrace
(src/torch/conventions_ops.cpp), so that torch.compile(fullgraph=True) traces
them. They describe outputs only: the real kernels run the core's checks.
Registered by puffadv.torch after the op library is loaded."""
from __future__ import annotations

import torch

from . import _torch_rules

_NAMES = ("rewards", "values", "terminated", "truncated", "last_value", "bootstrap_values", "importance")


def output_dtype(input_dtype):
    """Every functional op's output dtype: float32 arithmetic and output for
    bfloat16/float16 inputs, else the inputs' own (output_type in src/torch/ops.cpp)."""
    return torch.float32 if input_dtype in (torch.bfloat16, torch.float16) else input_dtype


def _output(rewards, values, *optional):
    """Shaped like rewards, of output_dtype, once every tensor is on one device."""
    _torch_rules.check_one_device(zip(_NAMES, (rewards, values, *optional)))
    return torch.empty(rewards.shape, dtype=output_dtype(values.dtype), device=rewards.device)


def register(lib: torch.library.Library) -> None:
    @torch.library.register_fake("puffadv::gae", lib=lib)
    def _gae_fake(rewards, values, terminated, truncated=None, last_value=None, bootstrap_values=None,
                  importance=None, gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0, time_axis=-1):
        out = _output(rewards, values, terminated, truncated, last_value, bootstrap_values, importance)
        return out, torch.empty_like(out)

    @torch.library.register_fake("puffadv::td_lambda_returns", lib=lib)
    def _td_lambda_fake(rewards, values, terminated, truncated=None, last_value=None, bootstrap_values=None,
                        importance=None, gamma=0.99, lambda_=0.95, rho_clip=1.0, c_clip=1.0, time_axis=-1):
        return _output(rewards, values, terminated, truncated, last_value, bootstrap_values, importance)

    @torch.library.register_fake("puffadv::vtrace", lib=lib)
    def _vtrace_fake(rewards, values, terminated, truncated=None, last_value=None, bootstrap_values=None,
                     importance=None, gamma=0.99, lambda_=1.0, rho_clip=1.0, c_clip=1.0, rho_pg_clip=1.0,
                     time_axis=-1):
        out = _output(rewards, values, terminated, truncated, last_value, bootstrap_values, importance)
        return out, torch.empty_like(out)
