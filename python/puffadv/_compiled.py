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

from . import _eager, _frameworks, _outputs, _parameters
from ._arguments import Call, add_steps, layout
from ._shapes import required_time_axis
from ._estimators import (ESTIMATORS, INPUT_ROLES, OUTPUT_ROLES, PUFF_ADVANTAGE, SCALAR_ROLES, STEP_ROLES, SUM_ROLES,
                          Estimate)

_REDUCED = (torch.bfloat16, torch.float16)

# Defined with torch.library.Library rather than torch.library.custom_op: a
# custom_op that mutates arguments runs a Python ADInplaceOrView kernel whose
# argument handling costs ~60 us per call at these argument counts; these cost
# what a C++ operator does (~20 us per compiled call on the CI machine, the
# same as torch.ops.puffadv). Like the eager call (which writes through DLPack),
# they do not bump the outputs' version counters.
_library = torch.library.Library("puffadv_python", "DEF")
_FUSED = OUTPUT_ROLES[1:]
_MUTATED = dict(zip(OUTPUT_ROLES, "abcde"))  # each output's alias set in the schemas
_OUTPUT_SCHEMA = ", ".join(f"Tensor({_MUTATED[role]}!)? {role}" for role in _FUSED)
# Every role, in the core's order: the two every estimator reads are required. Issue 29's
# additions (V-trace's sample_mask and alpha) come last in the schema, after the stream, so
# that the earlier arguments keep their positions.
_APPENDED_INPUTS = ("sample_mask",)
_LEADING_INPUTS = tuple(role for role in INPUT_ROLES if role not in _APPENDED_INPUTS)
_INPUT_SCHEMA = ", ".join(f"Tensor{'' if role in ('rewards', 'terminated') else '?'} {role}"
                          for role in _LEADING_INPUTS)


def _define(schema: str, implementation) -> None:
    _library.define(schema)
    name = schema.split("(", 1)[0]
    _library.impl(name, implementation, "CompositeExplicitAutograd")  # CPU, CUDA, any backend
    # Outputs are written in place and nothing is returned: the fake kernel has
    # nothing to describe. The real call checks everything, as an eager one.
    torch.library.register_fake(f"puffadv_python::{name}", lambda *args: None, lib=_library)


_PUFF_SCALARS = ("gamma", "gae_lambda", "rho_clip", "c_clip")


def _puff_advantage(values, rewards, dones, importance, advantages, returns, abs_sums, sums,
                    square_sums, gamma, gae_lambda, rho_clip, c_clip, stream, *tensors):
    bound = dict(zip(_PUFF_SCALARS, (gamma, gae_lambda, rho_clip, c_clip)))
    bound.update(zip((f"{s}_tensor" for s in _PUFF_SCALARS), tensors))
    _eager.puff_advantage(values, rewards, dones, importance, advantages, _given_scalars(bound, _PUFF_SCALARS),
                          stream, returns=returns, abs_sums=abs_sums, sums=sums, square_sums=square_sums)


_SCALARS = ("gamma", "lam", "rho_clip", "c_clip", "rho_pg_clip", "alpha")
# A scalar given as a 0-d tensor travels as that tensor (its float slot holds 1.0): read at run
# time by the eager body, as an eager call reads it. Its value is data, which dynamo cannot
# hand to a `float` argument (a SymFloat there failed the trace under fullgraph=True).
_SCALAR_TENSORS = tuple(f"{s}_tensor" for s in _SCALARS)
_STANDARD_SCHEMA = (f"standard_estimate({_INPUT_SCHEMA}, Tensor(a!)? advantages, {_OUTPUT_SCHEMA}, str kind, "
                    f"{', '.join(f'float {s}' for s in _SCALARS[:5])}, int time_axis, int n, bool log_probs, "
                    "bool reset_at_start, int? stream, Tensor? sample_mask=None, float alpha=1.0, "
                    f"{', '.join(f'Tensor? {t}=None' for t in _SCALAR_TENSORS)}) -> ()")
_STANDARD_ARGUMENTS = (*_LEADING_INPUTS, *OUTPUT_ROLES, "kind", *_SCALARS[:5], "time_axis", "n", "log_probs",
                       "reset_at_start", "stream", *_APPENDED_INPUTS, "alpha", *_SCALAR_TENSORS)


def _given_scalars(bound: dict, names: tuple) -> tuple:
    """Each scalar as the caller gave it: its 0-d tensor where one came."""
    return tuple(bound[s] if bound.get(f"{s}_tensor") is None else bound[f"{s}_tensor"] for s in names)


def _scalar_tensors(values: tuple) -> tuple[tuple, tuple]:
    """(the float slots, the tensor slots) of a call's scalars: a 0-d torch tensor goes
    in its tensor slot (detached: no gradient reaches scalars here, as eagerly)."""
    tensors = tuple(v.detach() if isinstance(v, torch.Tensor) and v.ndim == 0 else None for v in values)
    return tuple(1.0 if t is not None else v for v, t in zip(values, tensors)), tensors


def _standard_estimate(*args, **kwargs):
    """The operator's body: the eager call of the estimator `kind` with every output given."""
    bound = {"sample_mask": None, "alpha": 1.0, **dict(zip(_STANDARD_ARGUMENTS, args)), **kwargs}
    estimator = ESTIMATORS[bound["kind"]]
    shape = layout(estimator, bound["log_probs"])
    call = Call({role: bound[role] for role, _ in shape.arguments}, shape.required,
                {role: False if bound[role] is None else bound[role] for role in OUTPUT_ROLES},
                dict(zip(SCALAR_ROLES, _given_scalars(bound, _SCALARS))), shape.names, shape.check_names,
                shape.scalar_names, bound["n"], bound["log_probs"], bound["reset_at_start"], bound["time_axis"],
                bound["stream"])
    steps = {role: bound[role] for role in STEP_ROLES.values() if bound[role] is not None}
    _eager.estimate(estimator, add_steps(call, steps, shape))


_define("puff_advantage(Tensor values, Tensor rewards, Tensor dones, Tensor importance, "
        f"Tensor(a!) advantages, {_OUTPUT_SCHEMA}, float gamma, float gae_lambda, float rho_clip, "
        "float c_clip, int? stream, "
        f"{', '.join(f'Tensor? {s}_tensor=None' for s in _PUFF_SCALARS)}) -> ()", _puff_advantage)
_define(_STANDARD_SCHEMA, _standard_estimate)
_puff_advantage_op = torch.ops.puffadv_python.puff_advantage.default
_standard_estimate_op = torch.ops.puffadv_python.standard_estimate.default

# A bad argument found while tracing: raising it there would reach the caller only as dynamo's
# Unsupported ("Observed exception") under fullgraph=True. It is put in the graph instead, as
# this operator, which raises the eager call's exception, type and message, when the compiled
# function runs. It returns the call's outputs and is marked as having a side effect, so that
# no graph drops it when they go unused.
_REFUSALS = {"TypeError": TypeError, "ValueError": ValueError}


def _refuse(like, error, message):
    raise _REFUSALS[error](message)


_library.define("refuse(Tensor like, str error, str message) -> Tensor")
_library.impl("refuse", _refuse, "CompositeExplicitAutograd")
torch.library.register_fake("puffadv_python::refuse",
                            lambda like, error, message: torch.empty(like.shape, dtype=_output_dtype(like),
                                                                     device=like.device), lib=_library)
torch.fx.node.has_side_effect(torch.ops.puffadv_python.refuse.default)


def refused_at_run_time(error: Exception, like, roles) -> dict | None:
    """The outputs of a call refused while tracing, from the refusing operator; None where no
    tensor argument can carry it (the error is raised while tracing then)."""
    # isinstance, not type(error).__name__: dynamo of torch 2.11 cannot pass the latter to an op
    kind = "TypeError" if isinstance(error, TypeError) else "ValueError" if isinstance(error, ValueError) else None
    if not isinstance(like, torch.Tensor) or kind is None:
        return None
    out = torch.ops.puffadv_python.refuse(like.detach(), kind, str(error))
    return {role: out for role in roles}


def puff_advantage(values, rewards, dones, importance, advantages, scalars, stream, fused):
    """compute_puff_advantage while dynamo traces: `fused` its four fused outputs' specs by role."""
    try:
        _require_tensors(zip(PUFF_ADVANTAGE.names().values(), (values, rewards, dones, importance, advantages)))
        _require_tensors(fused.items())
        scalars, tensors = _scalar_tensors(tuple(scalars))
        params = _parameters.real_parameters(scalars, PUFF_ADVANTAGE.scalar_names()[:4])  # gamma, gae_lambda, ...
        stream = _stream(stream)
    except (TypeError, ValueError) as error:
        refused = refused_at_run_time(error, values, ("advantages", *fused))
        if refused is None:
            raise
        if all(spec is None or spec is False for spec in fused.values()):
            return refused["advantages"]
        return Estimate(*(refused[role] for role in ("advantages", *fused)))
    out = advantages if advantages is not None else torch.empty(
        values.shape, dtype=_output_dtype(values), device=values.device)
    made = _allocate(values, values, -1, fused)
    _bump_versions(out, *made.values())
    _puff_advantage_op(*_detached((values, rewards, dones, importance)), out, *made.values(), *params,
                       stream, *tensors)
    if all(spec is None or spec is False for spec in fused.values()):
        return out
    return Estimate(out, *made.values())


def estimate(estimator, call: Call) -> dict:
    """_eager.estimate while dynamo traces (same arguments and result)."""
    try:
        _require_tensors(zip(call.check_names, (*call.arrays.values(), *call.outputs.values())))
        time_axis = required_time_axis(call.time_axis, estimator.function)
        scalars, tensors = _scalar_tensors(tuple(call.scalars.values()))
        scalars = _parameters.real_parameters(scalars, call.scalar_names)
        stream = _stream(call.stream)
        arrays, given, plan, time_axis = _eager.as_views("torch", call.arrays, _outputs.given(call.outputs),
                                                         time_axis, call.names)
    except (TypeError, ValueError) as error:
        asked = [role for role, spec in call.outputs.items() if spec is not None and spec is not False]
        refused = refused_at_run_time(error, call.arrays["rewards"], asked)
        if refused is None:
            raise
        return {role: refused.get(role) for role in call.outputs}
    rewards = arrays["rewards"]
    like = arrays.get("values")
    like = rewards if like is None else like
    specs = call.outputs
    # The GPU kernels of these kinds sum only beside the advantages: allocate them, hand back None.
    hidden = _eager.sums_without_advantages(estimator, specs) and rewards.device.type == "cuda"
    if hidden:
        specs = {**specs, "advantages": True}
    outputs = _allocate(rewards, like, time_axis, {role: given[role] if given[role] is not None else spec
                                                   for role, spec in specs.items()})
    _bump_versions(*outputs.values())
    _standard_estimate_op(*_detached(arrays.get(role) for role in _LEADING_INPUTS), *outputs.values(),
                          estimator.function, *scalars[:5], time_axis, call.n, call.log_probs, call.reset_at_start,
                          stream, *_detached(arrays.get(role) for role in _APPENDED_INPUTS),
                          scalars[5], *tensors)
    if plan is not None:  # in the caller's shapes (as _eager.estimate)
        outputs = {role: out if out is None else call.outputs[role] if specs[role] is not True else
                   out.reshape(plan.batch if role in SUM_ROLES else plan.shape) for role, out in outputs.items()}
    if hidden:
        outputs["advantages"] = None
    return outputs


def _bump_versions(*outputs) -> None:
    """The outputs' version counters bumped, as torch's own in-place ops do: dynamo traces this,
    AOTAutograd's trace then sees the write and refuses one into a tensor saved for backward
    earlier in the graph, as eager autograd does at backward; the compiled graph holds no trace
    of it (nothing runs per call). The operators' ADInplaceOrView kernel could do it too, at
    about 16 us per compiled call on the 2-core CI machine (2026-12-06). Before, the compiled
    backward read the new values: a wrong gradient (third audit, 2026-12-06)."""
    torch.autograd.graph.increment_version([o for o in outputs if o is not None])


def _output_dtype(values):
    """_outputs.output_dtype for torch: float32 for bfloat16/float16 values."""
    return torch.float32 if values.dtype in _REDUCED else values.dtype


def _allocate(rewards, values, time_axis, specs: dict) -> dict:
    """_outputs.allocate for torch: given outputs as they are, True ones new
    ([rows, horizon] like rewards; [B] sums in float64 for float64 values, else float32)."""
    outputs = {}
    for role, spec in specs.items():
        if spec is True:
            if role in SUM_ROLES:
                dtype = torch.float64 if values.dtype == torch.float64 else torch.float32
                shape = (_outputs.batch_size(rewards, time_axis),)
            else:
                dtype, shape = _output_dtype(values), rewards.shape
            spec = torch.empty(shape, dtype=dtype, device=values.device)
        outputs[role] = None if spec is False else spec
    return outputs


def _require_tensors(named):
    """Every array argument is a torch tensor (None, True, False: not an array here)."""
    for name, x in named:
        if x is not None and x is not True and x is not False and not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor when puffadv is called under "
                            f"torch.compile, got {_frameworks.describe(x)}")


def _detached(inputs):
    """Inputs without autograd history (a graph, when wanted, is _torch_autograd's, around this)."""
    return [None if x is None else x.detach() for x in inputs]


def _stream(stream):
    """An explicit stream must be an int handle under torch.compile: a stream
    object's handle would be read once, at trace time, and kept."""
    if stream is None or type(stream) is int:
        return stream
    raise TypeError(f"stream must be an int handle (or None: torch's current stream) when puffadv "
                    f"is called under torch.compile, got {_frameworks.describe(stream)}")
