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

import torch

from . import _api, _conventions, _frameworks

_REDUCED = (torch.bfloat16, torch.float16)

# Defined with torch.library.Library rather than torch.library.custom_op: a
# custom_op that mutates arguments runs a Python ADInplaceOrView kernel whose
# argument handling costs ~60 us per call at these argument counts; these cost
# what a C++ operator does (~20 us per compiled call on the CI machine, the
# same as torch.ops.puffadv). Like the eager call (which writes through DLPack),
# they do not bump the outputs' version counters.
_library = torch.library.Library("puffadv_python", "DEF")
_OUTPUT_SCHEMA = "Tensor(b!)? returns, Tensor(c!)? abs_sums, Tensor(d!)? sums, Tensor(e!)? square_sums"


def _define(schema: str, implementation) -> None:
    _library.define(schema)
    name = schema.split("(", 1)[0]
    _library.impl(name, implementation, "CompositeExplicitAutograd")  # CPU, CUDA, any backend
    # Outputs are written in place and nothing is returned: the fake kernel has
    # nothing to describe. The real call checks everything, as an eager one.
    torch.library.register_fake(f"puffadv_python::{name}", lambda *args: None, lib=_library)


def _puff_advantage(values, rewards, dones, importance, advantages, returns, abs_sums, sums,
                    square_sums, gamma, gae_lambda, rho_clip, c_clip, stream):
    _api.compute_puff_advantage(values, rewards, dones, importance, advantages, gamma, gae_lambda,
                                rho_clip, c_clip, stream=stream, returns=returns,
                                abs_sums=abs_sums, sums=sums, square_sums=square_sums)


def _standard_estimate(rewards, values, terminated, truncated, last_value, bootstrap_values,
                       importance, next_values, target_probs, behaviour_probs, greedy, advantages, returns,
                       abs_sums, sums, square_sums, kind, gamma, lam, rho_clip, c_clip, rho_pg_clip,
                       time_axis, n, log_probs, reset_at_start, stream):
    kind = _conventions._KINDS[kind]
    inputs = (rewards, values, terminated, truncated, last_value, bootstrap_values, importance)
    if kind.family:
        inputs += (next_values, target_probs, behaviour_probs, greedy)
    outputs = (advantages, returns, abs_sums, sums, square_sums)
    _conventions._estimate(kind, inputs, tuple(False if x is None else x for x in outputs),
                           (gamma, lam, rho_clip, c_clip, rho_pg_clip), time_axis, stream,
                           (n, log_probs, reset_at_start) if kind.family else None)


_define("puff_advantage(Tensor values, Tensor rewards, Tensor dones, Tensor importance, "
        f"Tensor(a!) advantages, {_OUTPUT_SCHEMA}, float gamma, float gae_lambda, float rho_clip, "
        "float c_clip, int? stream) -> ()", _puff_advantage)
_define("standard_estimate(Tensor rewards, Tensor? values, Tensor terminated, Tensor? truncated, "
        "Tensor? last_value, Tensor? bootstrap_values, Tensor? importance, Tensor? next_values, "
        "Tensor? target_probs, Tensor? behaviour_probs, Tensor? greedy, Tensor(a!)? advantages, "
        f"{_OUTPUT_SCHEMA}, str kind, float gamma, float lam, float rho_clip, float c_clip, "
        "float rho_pg_clip, int time_axis, int n, bool log_probs, bool reset_at_start, int? stream) -> ()",
        _standard_estimate)
_puff_advantage_op = torch.ops.puffadv_python.puff_advantage.default
_standard_estimate_op = torch.ops.puffadv_python.standard_estimate.default


def compute_puff_advantage(values, rewards, dones, importance, advantages, gamma, gae_lambda,
                           rho_clip, c_clip, *, stream, returns, abs_sums, sums, square_sums):
    """puffadv.compute_puff_advantage while dynamo traces (same arguments and result)."""
    _require_tensors(zip(_api._ARRAY_NAMES, (values, rewards, dones, importance, advantages)))
    specs = (returns, abs_sums, sums, square_sums)
    _require_tensors(zip(_conventions._STANDARD_NAMES[8:], specs))
    params = _frameworks.real_parameters((gamma, gae_lambda, rho_clip, c_clip), _api._PARAMETER_NAMES)
    out = advantages if advantages is not None else torch.empty(
        values.shape, dtype=_output_dtype(values), device=values.device)
    fused = _allocate(values, values, -1, (False, *specs))[1:]
    _puff_advantage_op(*_detached((values, rewards, dones, importance)), out, *fused, *params,
                       _stream(stream))
    if all(spec is None or spec is False for spec in specs):
        return out
    return _conventions.Estimate(out, *fused)


def estimate(kind, inputs, specs, scalars, time_axis, stream, options):
    """_conventions._estimate while dynamo traces (same arguments and result)."""
    _require_tensors(zip(kind.check_names, (*(inputs[i] for i in kind.order or range(len(inputs))), *specs)))
    time_axis = _conventions._check_time_axis(time_axis)
    scalars = _frameworks.real_parameters(scalars, kind.scalar_names)
    like = inputs[0] if inputs[1] is None else inputs[1]
    # The GPU kernels of these kinds sum only beside the advantages: allocate them, hand back None.
    hidden = _conventions._sums_without_advantages(kind, specs) and inputs[0].device.type == "cuda"
    if hidden:
        specs = (True, *specs[1:])
    outputs = _allocate(inputs[0], like, time_axis, specs)
    inputs = (*inputs, None, None, None, None)[:11]
    _standard_estimate_op(*_detached(inputs), *outputs, kind.label, *scalars, time_axis,
                          *(options or (1, False, False)), _stream(stream))
    return [None, *outputs[1:]] if hidden else outputs


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
