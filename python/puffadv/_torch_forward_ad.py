"""Forward-mode derivatives of puffadv's estimators on torch tensors: the jvp of the public
functions' Function (_torch_autograd._WithTangents: torch.autograd.forward_ad's dual tensors)
and of the operators' (_torch_op_autograd._OpDifferentiable: dual tensors, torch.func.jvp and
jacfwd).

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
a TypeError naming the argument (reverse mode differentiates them), as is one of the puff
advantage's float dones (numbers in its decays). Flags have no derivative, as in the
backward: their tangents are not read.
"""
from __future__ import annotations

import torch
from torch.autograd import forward_ad

from . import _frameworks
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


TRANSFORMED = "is a torch.func transform's tensor"


def derivative_carried(x: torch.Tensor) -> str | None:
    """What derivative a tensor carries that reading it as a number would drop, in the words
    of a message about it: "requires grad" (where grad mode is on: under no_grad, inference
    mode or a Function's forward nothing is recorded), "carries a forward-mode tangent", or
    TRANSFORMED (a torch.func transform's, not functionalize's, which converts); None: none."""
    # (Not while dynamo traces, which cannot call the check: the Python API refuses a transform
    # under torch.compile by name, _torch_tracing.UNTRACED_TRANSFORM.)
    if not _frameworks.torch_compiling() and torch._C._functorch.is_functorch_wrapped_tensor(x) \
            and not torch._is_functional_tensor(x):
        return TRANSFORMED
    if x.requires_grad and torch.is_grad_enabled():
        return "requires grad"
    if carries_tangent(x):
        return "carries a forward-mode tangent"
    return None


def refuse(kind: str, name: str) -> None:
    """The TypeError for a tangent the jvp cannot take (`name`: the caller's name of it)."""
    raise TypeError(f"puffadv's forward-mode derivative (jvp) of {kind} takes tangents of its value arrays "
                    f"only (rewards, values, Q values, next values, bootstrap values, last_value, seed), but "
                    f"{name} has one: the result is not linear in {name}. Differentiate {name} in reverse "
                    f"mode (torch.autograd.grad, torch.func.vjp or jacrev), or make it a constant for the jvp")


def linear_tangents(kind: str, entries: dict, called: str | None = None):
    """The arrays a tangent call takes in the linear roles: each one's tangent, zeros where it
    has none (role -> array), or None where no linear role has a tangent. `entries`: role ->
    (the call's array, its tangent or None, the caller's name of it). A tangent in another
    role than a flag's is refused (TypeError; `called`: the function's name there, else `kind`)."""
    for role, (x, tangent, name) in entries.items():
        # The puff advantage's float dones are numbers in its decays (gamma (1 - dones_{t+1})),
        # not flags: the result is not linear in them either.
        flag = role in FLAG_ROLES and not (kind == "puff_advantage" and x.is_floating_point())
        if tangent is not None and role not in LINEAR_ROLES and not flag:
            refuse(called or kind, name)
    if all(tangent is None for role, (_, tangent, _) in entries.items() if role in LINEAR_ROLES):
        return None
    return {role: torch.zeros_like(x) if tangent is None else tangent
            for role, (x, tangent, _) in entries.items() if role in LINEAR_ROLES}


def needs_graph(*tensors) -> bool:
    """Whether a tangent must itself be differentiable: grad mode on and a tangent, an array or
    a tensor gamma / lambda of the call requires grad (the map J of J t depends on gamma,
    lambda and the ratios; J t on t). The jvp then computes through the recording path."""
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in tensors)


def tangents(plan, arrays: dict, outputs: dict, array_tangents: dict, scalar_tangents: dict, run) -> tuple:
    """The tangent of each output in plan.produced's order (all None where no value array has
    a tangent), for the public functions (_torch_autograd). `arrays`/`outputs`: the call's
    inputs and outputs by role; `*_tangents`: by role, None where an input carries none;
    `run(arrays by role) -> outputs by role`: the call on other arrays (every series and row
    sum of plan.produced; the row sums' tangents are made here from the series')."""
    names = plan.names or {}
    for role, t in scalar_tangents.items():
        if t is not None:
            refuse(plan.kind, names.get(role, role))
    linear = linear_tangents(plan.kind, {role: (x, array_tangents.get(role), names.get(role, role))
                                         for role, x in arrays.items()})
    if linear is None:
        return tuple(None for _ in plan.produced)
    made = run({**arrays, **linear})
    result = {role: made[role] for role in plan.produced if role not in SUM_ROLES}
    sums = [role for role in plan.produced if role in SUM_ROLES]
    if sums:  # sums: sum S'; abs_sums: sign(S) S'; square_sums: 2 S S' (S the series they sum:
        # the advantages (V-trace's pg ones), or the returns of discounted returns, which have none)
        summed = "advantages" if "advantages" in result else "returns"
        dot, s = made[summed], outputs[summed]
        local = {"sums": lambda: dot, "abs_sums": lambda: torch.sign(s) * dot, "square_sums": lambda: 2.0 * s * dot}
        for role in sums:
            result[role] = local[role]().sum(0 if plan.time_major else -1)
    return tuple(result[role] for role in plan.produced)
