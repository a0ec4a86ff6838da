"""The public functions as torch.compile sees them.

Dynamo cannot trace the eager path (DLPack capsules, enum device types, the
per-type caches), so while it traces, the public functions come here instead.
Each allocates the outputs it was asked for with torch ops (traced like any
other) and calls one of two torch custom operators defined below, which mutate
those outputs in place. At run time an operator's body is the eager public
function with every output given: the same checks, messages, kernels, streams
and fallback as an eager call, so compiled results equal eager ones bit for bit.

These operators need no compiled torch extension (unlike torch.ops.puffadv,
which needs puffadv built against the torch in use): anything that can call
puffadv on torch tensors eagerly can compile it. Imported only under
torch.compile (so only with torch present).
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _api, _conventions, _frameworks

_OUTPUTS = ("advantages", "returns", "abs_sums", "sums", "square_sums")
_REDUCED = (torch.bfloat16, torch.float16)


@torch.library.custom_op("puffadv_python::puff_advantage", mutates_args=_OUTPUTS)
def _puff_advantage_op(values: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor,
                       importance: torch.Tensor, advantages: torch.Tensor,
                       returns: Optional[torch.Tensor], abs_sums: Optional[torch.Tensor],
                       sums: Optional[torch.Tensor], square_sums: Optional[torch.Tensor],
                       gamma: float, gae_lambda: float, rho_clip: float, c_clip: float,
                       stream: Optional[int]) -> None:
    _api.compute_puff_advantage(values, rewards, dones, importance, advantages, gamma, gae_lambda,
                                rho_clip, c_clip, stream=stream, returns=returns,
                                abs_sums=abs_sums, sums=sums, square_sums=square_sums)


@_puff_advantage_op.register_fake
def _(*args) -> None:  # writes its outputs only; the real call checks everything
    return None


@torch.library.custom_op("puffadv_python::standard_estimate", mutates_args=_OUTPUTS)
def _standard_estimate_op(rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor,
                          truncated: Optional[torch.Tensor], last_value: Optional[torch.Tensor],
                          bootstrap_values: Optional[torch.Tensor], importance: Optional[torch.Tensor],
                          advantages: Optional[torch.Tensor], returns: Optional[torch.Tensor],
                          abs_sums: Optional[torch.Tensor], sums: Optional[torch.Tensor],
                          square_sums: Optional[torch.Tensor], kind: str, lambda_name: str,
                          gamma: float, lam: float, rho_clip: float, c_clip: float, rho_pg_clip: float,
                          time_axis: int, stream: Optional[int]) -> None:
    outputs = (advantages, returns, abs_sums, sums, square_sums)
    _conventions._estimate(kind, lambda_name,
                           (rewards, values, terminated, truncated, last_value, bootstrap_values, importance),
                           tuple(False if x is None else x for x in outputs),
                           (gamma, lam, rho_clip, c_clip, rho_pg_clip), time_axis, stream)


@_standard_estimate_op.register_fake
def _(*args) -> None:
    return None


def compute_puff_advantage(values, rewards, dones, importance, advantages, gamma, gae_lambda,
                           rho_clip, c_clip, *, stream, returns, abs_sums, sums, square_sums):
    """puffadv.compute_puff_advantage while dynamo traces (same arguments and result)."""
    _require_tensors(zip(_api._ARRAY_NAMES, (values, rewards, dones, importance, advantages)))
    specs = (returns, abs_sums, sums, square_sums)
    _require_tensors(zip(_OUTPUTS[1:], specs))
    params = _frameworks.real_parameters((gamma, gae_lambda, rho_clip, c_clip), _api._PARAMETER_NAMES)
    out = advantages if advantages is not None else torch.empty(
        values.shape, dtype=_output_dtype(values), device=values.device)
    fused = _allocate(values, values, -1, (False, *specs))[1:]
    _puff_advantage_op(*_detached((values, rewards, dones, importance)), out, *fused, *params,
                       _stream(stream))
    if all(spec is None or spec is False for spec in specs):
        return out
    return _conventions.Estimate(out, *fused)


def estimate(kind, lambda_name, inputs, specs, scalars, time_axis, stream):
    """_conventions._estimate while dynamo traces (same arguments and result)."""
    _require_tensors(zip(_conventions._STANDARD_NAMES, (*inputs, *specs)))
    time_axis = _conventions._check_time_axis(time_axis)
    scalars = _frameworks.real_parameters(scalars, _conventions._SCALAR_NAMES[lambda_name])
    outputs = _allocate(inputs[0], inputs[1], time_axis, specs)
    _standard_estimate_op(*_detached(inputs), *outputs, kind, lambda_name, *scalars, time_axis,
                          _stream(stream))
    return outputs


def _output_dtype(values):
    """_conventions._output_dtype for torch: float32 for bfloat16/float16 values."""
    return torch.float32 if values.dtype in _REDUCED else values.dtype


def _allocate(rewards, values, time_axis, specs):
    """_conventions._allocate for torch: given outputs as they are, True ones new
    ([rows, horizon] like rewards; [B] sums in float64 for float64 values, else float32)."""
    outputs = []
    for k, spec in enumerate(specs):
        if spec is True:
            if _conventions._SUMS[k]:
                dtype = torch.float64 if values.dtype == torch.float64 else torch.float32
                shape = (_conventions._batch_size(rewards, time_axis),)
            else:
                dtype, shape = _output_dtype(values), rewards.shape
            spec = torch.empty(shape, dtype=dtype, device=values.device)
        outputs.append(None if spec is False else spec)
    return outputs


def _require_tensors(named):
    """Every array argument is a torch tensor (None, True, False: not an array here)."""
    for name, x in named:
        if x is not None and x is not True and x is not False and not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor when puffadv is called under "
                            f"torch.compile, got {_frameworks.describe(x)}")


def _detached(inputs):
    """Inputs without autograd history (advantages are targets, as in an eager call)."""
    return [None if x is None else x.detach() for x in inputs]


def _stream(stream):
    """An explicit stream must be an int handle under torch.compile: a stream
    object's handle would be read once, at trace time, and kept."""
    if stream is None or type(stream) is int:
        return stream
    raise TypeError(f"stream must be an int handle (or None: torch's current stream) when puffadv "
                    f"is called under torch.compile, got {_frameworks.describe(stream)}")
