"""A public call's arguments by role, from its estimator's description
(_estimators.py), and the rules that only Python applies (the window length n,
episodic_cumsum's boundary, retrace's probability pair; time_axis: _shapes);
shared by the NumPy/DLPack functions and puffadv.jax. The core checks the rest."""
from __future__ import annotations

import numbers
from typing import NamedTuple

from . import _frameworks
from ._estimators import OUTPUT_ROLES, SCALAR_ROLES, STEP_ROLES, Estimator


class Call(NamedTuple):
    """One call of an estimator, by role. `arrays`: role -> array or None, the required
    ones first (how many: `required`), in the signature's order; `outputs`: role ->
    True (allocate), False or None (skip) or an array (write), every output role;
    `scalars`: role -> the value passed (1.0 for a scalar the estimator does not take);
    `names`: role -> the caller's name, for messages."""
    arrays: dict
    required: int
    outputs: dict
    scalars: dict
    names: dict
    check_names: tuple  # the caller's names of `arrays` then `outputs`, in order
    scalar_names: tuple  # the caller's names of `scalars`, in order
    n: int
    log_probs: bool
    reset_at_start: bool
    time_axis: object   # as passed (_shapes.required_time_axis checks it)
    stream: object
    reverse: bool = False  # linear_recurrence: y_t from y_{t+1}


def window(n) -> int:
    """n as the core's int64. Beyond int64 every row is shorter than the window,
    which gives the same returns as the largest int64 (TD(lambda) returns)."""
    if type(n) is not int:
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"n must be an int (the window length, >= 1), got {_frameworks.describe(n)}")
        n = int(n)
    return max(min(n, 2**63 - 1), -2**63)  # the core refuses n < 1, naming it


_BOUNDARIES = ("ends_at", "starts_at")


def probability_pair(target_probs, behaviour_probs, target_log_probs, behaviour_log_probs):
    """retrace's (log_probs, target, behaviour) from its four optional arguments:
    one pair or the other, never a mix (shared by puffadv.jax.retrace). A missing
    half of the plain pair is the core's error, as every missing array is."""
    logs = target_log_probs is not None or behaviour_log_probs is not None
    if logs and (target_probs is not None or behaviour_probs is not None):
        raise ValueError("pass either target_probs and behaviour_probs or target_log_probs and "
                         "behaviour_log_probs, not a mix of the two")
    if logs and (target_log_probs is None or behaviour_log_probs is None):
        missing = "target_log_probs" if target_log_probs is None else "behaviour_log_probs"
        raise ValueError(f"{missing} must be given with "
                         f"{'behaviour_log_probs' if target_log_probs is None else 'target_log_probs'}; "
                         f"the trace needs both log-probabilities of the taken actions")
    return (True, target_log_probs, behaviour_log_probs) if logs else (False, target_probs, behaviour_probs)


def reset_at_start(boundary) -> bool:
    """episodic_cumsum's boundary as the core's reset_at_start (shared by puffadv.jax)."""
    if not isinstance(boundary, str) and boundary is not None:
        # `in` would compare element-wise: a 0-d string array passed it, as a numpy.bool
        raise TypeError(f"boundary must be a str, 'ends_at' or 'starts_at', got {_frameworks.describe(boundary)}")
    if boundary not in _BOUNDARIES:
        raise ValueError(f"boundary must be 'ends_at' (dones[t] ends an episode at t) or 'starts_at' "
                         f"(dones[t] starts one at t), got {boundary!r}")
    return boundary == "starts_at"


class Layout(NamedTuple):
    """What every call of one estimator (and probability kind) shares, decided once."""
    arguments: tuple   # (role, the caller's name), required first, in the signature's order
    required: int
    outputs: tuple     # (role, the caller's name or None where the estimator makes no such output)
    scalars: tuple     # (role, the caller's name or None where the estimator does not take it)
    names: dict
    check_names: tuple
    scalar_names: tuple


_layouts: dict = {}


def layout(estimator: Estimator, log_probs: bool = False) -> Layout:
    key = (estimator.function, log_probs)
    found = _layouts.get(key)
    if found is None:
        names = estimator.names(log_probs)
        kept = [a for a in estimator.arguments if names.get(a.role) == a.name]
        ordered = [a for a in kept if a.required] + [a for a in kept if not a.required]
        arguments = tuple((a.role, a.name) for a in ordered)
        outputs = tuple((role, estimator.outputs.get(role)) for role in OUTPUT_ROLES)
        scalars = tuple((role, estimator.scalars[role][0] if role in estimator.scalars else None)
                        for role in SCALAR_ROLES)
        check_names = (*(name for _, name in arguments), *(name or role for role, name in outputs))
        found = _layouts[key] = Layout(arguments, sum(a.required for a in kept), outputs, scalars,
                                       names, check_names, estimator.scalar_names())
    return found


def call_of(estimator: Estimator, args: dict) -> Call:
    """The Call of a public function from its arguments by name (its locals()), after the
    rules only Python applies (in the order the functions have always applied them)."""
    log_probs = False
    if "target_log_probs" in args:
        log_probs = probability_pair(args["target_probs"], args["behaviour_probs"], args["target_log_probs"],
                                     args["behaviour_log_probs"])[0]
    n = window(args["n"]) if estimator.window else 1
    reset = reset_at_start(args["boundary"]) if estimator.boundary else False
    shape = layout(estimator, log_probs)
    outputs = {role: False if name is None else args[name] for role, name in shape.outputs}
    if estimator.result == "array" and outputs["advantages"] is None:
        outputs["advantages"] = True  # `out=None`: allocate it
    call = Call({role: args[name] for role, name in shape.arguments}, shape.required, outputs,
                {role: 1.0 if name is None else args[name] for role, name in shape.scalars}, shape.names,
                shape.check_names, shape.scalar_names, n, log_probs, reset, args["time_axis"], args["stream"],
                bool(args["reverse"]) if estimator.direction else False)
    return with_steps(call, shape)


def is_per_step(value) -> bool:
    """A gamma or lambda given per step: an array of one or more dimensions (a 0-d array,
    like a Python number, is a scalar; anything else is left to the scalar's checks)."""
    return not isinstance(value, numbers.Real) and getattr(value, "ndim", 0) not in (0, None)


def read_on_device(value, rewards) -> bool:
    """A gamma or lambda that is a 0-d torch tensor on the GPU that holds the rewards, of
    their dtype: read there, as a per-step array (steps_on_device). float() of it would
    wait for the GPU, a synchronisation that CUDA-graph capture refuses, in every
    meta-gradient step that keeps gamma on the GPU."""
    # ndim first: a str or a number never reaches framework_of (which dynamo cannot trace for them).
    if type(value) is float or getattr(value, "ndim", None) != 0 or _frameworks.framework_of(value) != "torch":
        return False
    return (_frameworks.framework_of(rewards) == "torch" and value.device == rewards.device
            and value.device.type != "cpu" and not value.is_meta and value.dtype == rewards.dtype)


def steps_on_device(value, rewards):
    """A 0-d GPU tensor as a per-step array: a fresh array in the rewards' layout, filled on
    the device (one copy, recorded by autograd). Not a 0-strided view: the GPU kernels read
    per-step arrays at speed only in the rewards' layout (a 0-strided one sends the whole
    call to the generic, scalar-access kernels: src/gpu/call_layout.cuh)."""
    import torch
    return torch.empty_like(rewards).copy_(value.expand(rewards.shape))


def with_steps(call: Call, shape: "Layout") -> Call:
    """`call` with its gamma and lambda arrays (is_per_step) moved from the scalars to the
    input roles of STEP_ROLES, a 0-d GPU tensor (read_on_device) made one (steps_on_device);
    the scalar is then 1.0 (not read). Unchanged when both are numbers, the common case."""
    scalars = call.scalars
    rewards = call.arrays.get("rewards")
    on_device = {role for role, name in shape.scalars[:2]
                 if name is not None and read_on_device(scalars[role], rewards)}
    if not (on_device or is_per_step(scalars["gamma"]) or is_per_step(scalars["lambda"])):
        return call
    steps = {STEP_ROLES[role]: steps_on_device(scalars[role], rewards) if role in on_device else scalars[role]
             for role, name in shape.scalars[:2]  # gamma, lambda
             if name is not None and (role in on_device or is_per_step(scalars[role]))}
    scalars = {role: 1.0 if STEP_ROLES.get(role) in steps else value for role, value in scalars.items()}
    return add_steps(call._replace(scalars=scalars), steps, shape)


def add_steps(call: Call, steps: dict, shape: "Layout") -> Call:
    """`call` with the per-step arrays `steps` (STEP_ROLES' role -> array) among its inputs,
    each named as the caller names its scalar (gamma, gae_lambda, lambda_, ...)."""
    if not steps:
        return call
    caller = {STEP_ROLES[role]: name for role, name in shape.scalars[:2]}
    arrays, names = {**call.arrays, **steps}, {**call.names, **{role: caller[role] for role in steps}}
    count = len(call.arrays)
    check_names = (*call.check_names[:count], *(caller[role] for role in steps), *call.check_names[count:])
    return call._replace(arrays=arrays, names=names, check_names=check_names)
