"""Forward-mode derivatives (torch.func.jvp, jacfwd, torch.autograd.forward_ad) of
puffadv's public functions on torch tensors: _torch_autograd._Differentiable.jvp.

With the flags, gamma, lambda, the clips and the importance ratios or probabilities held
where they are, every estimator's series (advantages, returns, vs, pg advantages, the
episodic sums) is linear in its remaining arrays (rewards, values, Q values, next values,
bootstrap values, last_value, seed) with no constant term: each is a scan of
delta_t = r_t + gamma V'_t - V_t (or of the inputs themselves) with decays that do not
depend on those arrays. So the tangent of each series is the same forward call run on the
tangents, and the row sums' tangents follow from the series' own: sums sum the tangent,
abs_sums sum sign(S) S', square_sums 2 S S' (sign(0) = 0, the backward's subgradient).

Tangents of gamma, lambda (numbers or per-step arrays), the importance ratios and the
probabilities enter the decays, where the map is not linear: such a call is refused with
a TypeError naming the argument (reverse mode differentiates them). Flags have no
derivative, as in the backward: their tangents are not read.
"""
from __future__ import annotations

import torch
from torch.autograd import forward_ad

from ._estimators import FLAG_ROLES, SUM_ROLES

# The arrays each series is linear in (roles; Q values travel as values, seed as last_value).
LINEAR_ROLES = frozenset({"rewards", "values", "next_values", "bootstrap_values", "last_value"})


def carries_tangent(*values) -> bool:
    """Whether a tensor among `values` is a dual tensor (forward_ad.make_dual, or torch.func.jvp's)
    with a tangent at the current level: such a call must go through the Function's jvp, which a
    call that only checks requires_grad would skip, dropping the tangent. A module global read
    when no dual level is open."""
    if forward_ad._current_level < 0:
        return False
    return any(isinstance(x, torch.Tensor) and forward_ad.unpack_dual(x).tangent is not None for x in values)


def _refuse(kind: str, name: str) -> None:
    raise TypeError(f"puffadv's forward-mode derivative (jvp) of {kind} takes tangents of its value arrays "
                    f"only (rewards, values, Q values, next values, bootstrap values, last_value, seed), but "
                    f"{name} has one: the result is not linear in {name}. Differentiate {name} in reverse "
                    f"mode (torch.autograd.grad, torch.func.vjp or jacrev), or make it a constant for the jvp")


def linear_tangents(kind: str, entries: dict):
    """The arrays a tangent call takes in the linear roles: each one's tangent, zeros where it
    has none (role -> array), or None where no linear role has a tangent. `entries`: role ->
    (the call's array, its tangent or None, the caller's name of it). A tangent in another
    role than a flag's is refused (TypeError)."""
    for role, (_, tangent, name) in entries.items():
        if tangent is not None and role not in LINEAR_ROLES and role not in FLAG_ROLES:
            _refuse(kind, name)
    if all(tangent is None for role, (_, tangent, _) in entries.items() if role in LINEAR_ROLES):
        return None
    return {role: torch.zeros_like(x) if tangent is None else tangent
            for role, (x, tangent, _) in entries.items() if role in LINEAR_ROLES}


def tangents(plan, arrays: dict, outputs: dict, array_tangents: dict, scalar_tangents: dict) -> tuple:
    """The tangent of each output in plan.produced's order (all None where no value array has
    a tangent). `arrays`/`outputs`: the call's inputs and outputs by role; `*_tangents`: by
    role, None where an input carries none. For the public functions (_torch_autograd)."""
    names = plan.names or {}
    for role, t in scalar_tangents.items():
        if t is not None:
            _refuse(plan.kind, names.get(role, role))
    linear = linear_tangents(plan.kind, {role: (x, array_tangents.get(role), names.get(role, role))
                                         for role, x in arrays.items()})
    if linear is None:
        return tuple(None for _ in plan.produced)
    sums = [role for role in plan.produced if role in SUM_ROLES]
    summed = plan.summed_series
    series = tuple(role for role in plan.produced if role not in SUM_ROLES)
    also = (summed,) if sums and summed not in series else ()
    made = plan.run({**arrays, **linear}, plan.scalars, also=also)
    result = {role: made[role] for role in series}
    if sums:  # sums: sum S'; abs_sums: sign(S) S'; square_sums: 2 S S' (S the series they sum)
        dot = made[summed]
        s = outputs[summed] if summed in outputs else plan.run(arrays, plan.scalars, also=also)[summed]
        local = {"sums": lambda: dot, "abs_sums": lambda: torch.sign(s) * dot, "square_sums": lambda: 2.0 * s * dot}
        for role in sums:
            result[role] = local[role]().sum(0 if plan.time_major else -1)
    return tuple(result[role] for role in plan.produced)
