"""Autograd for every torch.ops.puffadv estimator operator (their Autograd-key kernels,
registered by puffadv.torch through _torch_kernels): a call that wants a graph records
one whose backward is _torch_autograd.gradients, as the public functions' is, and whose
jvp (forward mode: dual tensors, torch.func.jvp, jacfwd) is the op on the tangents
(_torch_forward_ad); every other eager call goes on to the kernels below, from Python only
once (_autograd_kernel)."""
from __future__ import annotations

import inspect
from typing import Callable, NamedTuple

import torch

from . import _torch_forward_ad
from ._estimators import ESTIMATORS, PUFF_ADVANTAGE, STEP_ROLES
from ._torch_autograd import Plan, _needed, gradients

_fwd_grad_enabled = torch.autograd.forward_ad._set_fwd_grad_enabled


def _op_roles(name: str) -> tuple:
    """(role of each schema argument or None, output roles) of one functional operator."""
    if name == "puff_advantage":
        estimator = PUFF_ADVANTAGE
        names = {"values": "values", "rewards": "rewards", "dones": "terminated", "importance": "importance"}
    else:
        estimator = ESTIMATORS[name]
        names = {n: role for log in (False, True) for role, n in estimator.names(log).items()}
    names.update({role: role for role in STEP_ROLES.values()})  # the schema's per-step gamma and lambda
    scalar = {n: role for role, (n, _) in estimator.scalars.items()}
    scalar.update({"gae_lambda": "lambda", "lambda_": "lambda"})
    return estimator, names, scalar


def _op_series(estimator, name: str) -> tuple:
    if name in ("episodic_cumsum", "eligibility_traces"):
        return ("advantages",)  # the sums are the kind's one series (returned as the op's only tensor)
    return tuple(estimator.torch_outputs)


class _OpInfo(NamedTuple):
    """One functional operator: the op, its schema's argument names, and their roles."""
    op: object
    arg_names: tuple
    roles: dict         # schema argument name -> the core's array role
    scalar_roles: dict  # schema argument name -> gamma / lambda / a clip
    estimator: object
    series: tuple       # the op's returned tensors as output roles


class _OpDifferentiable(torch.autograd.Function):
    """One operator call recording a graph: its own kernel forwards, _vjp backwards."""

    @staticmethod
    def forward(info, *args):
        # Grad and forward grad back on (Function.apply turned both off), as torch.func's own
        # custom_function_call does: below a transform's level the op goes on to the next
        # level's Autograd kernel, which must record that level's graph or tangent (and, below
        # every transform, plain autograd's), as it does for a native op. This level's Autograd
        # is excluded: this Function records it.
        with torch.enable_grad(), _fwd_grad_enabled(True), torch._C._AutoDispatchBelowAutograd():
            return info.op(*args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        info, bound = inputs[0], dict(zip(inputs[0].arg_names, inputs[1:]))
        given = [n for n, x in bound.items() if n in info.roles and isinstance(x, torch.Tensor)]
        scalars = {**{r: 1.0 for r in ("gamma", "lambda", "rho_clip", "c_clip", "rho_pg_clip")},
                   **{info.scalar_roles[n]: float(v) for n, v in bound.items() if n in info.scalar_roles}}
        ctx.plan = Plan(info.estimator.kind, tuple(info.roles[n] for n in given), (), info.series, scalars,
                        bound.get("time_axis", -1) in (0, -2), bound.get("n", 1),
                        bool(bound.get("log_probs", False)), bool(bound.get("reset_at_start", False)))
        ctx.positions = [info.arg_names.index(n) for n in given]
        ctx.count = len(info.arg_names)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*(bound[n] for n in given), *(output if isinstance(output, tuple) else (output,)))
        if torch.autograd.forward_ad._current_level >= 0:  # else no jvp can follow this call
            # The jvp reruns the op: its tensors (a flag or clip's too) and every other argument.
            ctx.info = info
            ctx.tensor_positions = [i for i, x in enumerate(inputs[1:]) if isinstance(x, torch.Tensor)]
            ctx.others = tuple(None if isinstance(x, torch.Tensor) else x for x in inputs[1:])
            ctx.save_for_forward(*(inputs[1 + i] for i in ctx.tensor_positions))

    @staticmethod
    def backward(ctx, *grads):
        plan, saved = ctx.plan, ctx.saved_tensors
        na = len(plan.array_roles)
        needed = _needed(plan.array_roles, [ctx.needs_input_grad[1 + p] for p in ctx.positions])
        result = gradients(plan, dict(zip(plan.array_roles, saved[:na])), {},
                           dict(zip(plan.produced, saved[na:])), dict(zip(plan.produced, grads)), needed)
        out = [None] * ctx.count
        for position, role in zip(ctx.positions, plan.array_roles):
            out[position] = result[role]
        return (None, *out)

    @staticmethod
    def jvp(ctx, _info, *tangents):
        info, args = ctx.info, list(ctx.others)
        for position, x in zip(ctx.tensor_positions, ctx.saved_tensors):
            args[position] = x
        given = _torch_forward_ad.linear_tangents(
            info.estimator.kind, {info.roles[n]: (args[i], tangents[i], n) for i, n in enumerate(info.arg_names)
                                  if n in info.roles and isinstance(args[i], torch.Tensor)},
            called="torch.ops." + info.op._schema.name.replace("::", "."))
        if given is None:
            return tuple(None for _ in info.series) if len(info.series) > 1 else None
        for i, n in enumerate(info.arg_names):
            if n in info.roles and info.roles[n] in given:
                args[i] = given[info.roles[n]]
        if _torch_forward_ad.needs_graph(*ctx.saved_tensors, *tangents):  # J t differentiated in reverse
            return _record(_OpDifferentiable, info, *args)
        with torch._C._AutoDispatchBelowAutograd():
            return info.op(*args)


# Function.apply binds its arguments to forward's signature on every call, and
# inspect.signature rebuilds that signature each time: computed once (_torch_autograd).
_OpDifferentiable.forward.__signature__ = inspect.signature(_OpDifferentiable.forward)


def _keys_between_autograd_and_backend_select() -> int:
    DispatchKey, after = torch._C.DispatchKey, torch._C._dispatch_keyset_full_after
    backend_select = torch._C.DispatchKeySet(DispatchKey.BackendSelect).raw_repr()
    return after(DispatchKey.ADInplaceOrView).raw_repr() & ~after(DispatchKey.BackendSelect).raw_repr() \
        & ~backend_select


# The dispatch keys below Autograd and above BackendSelect (Python, Functionalize, Conjugate,
# Negative, ZeroTensor, ... as this torch has them), as a raw bit mask: a call whose keyset
# has none of them may go from its Autograd kernel straight to its BackendSelect kernel.
KEYS_BETWEEN_AUTOGRAD_AND_BACKEND_SELECT = _keys_between_autograd_and_backend_select()


def _autograd_kernel(info: _OpInfo, backend_select: Callable):
    """The operator's Autograd key: a graph when grad mode is on and a tensor requires grad,
    the Function's jvp when a tensor carries a forward-mode tangent, else on to the kernels
    below (what the fallthrough it replaces did). `backend_select`: the op's BackendSelect
    kernel (op, keyset, *args, **kwargs), called here directly when no key lies between the
    two: one Python kernel per eager call instead of two."""
    from torch._library.utils import fill_defaults
    op, schema, redispatch = info.op, info.op._schema, info.op.redispatch
    # Every eager call of the op passes here: C-level checks keep it cheap.
    grad_enabled, any_requires_grad, below = (torch._C.is_grad_enabled, torch._C._any_requires_grad,
                                              torch._C._after_autograd_keyset)
    between = KEYS_BETWEEN_AUTOGRAD_AND_BACKEND_SELECT
    forward_ad = torch.autograd.forward_ad  # its level read inline: every eager call passes here

    def kernel(keyset, *args, **kwargs):
        if (grad_enabled() and any_requires_grad(*args, **kwargs)) or (
                forward_ad._current_level >= 0 and _torch_forward_ad.carries_tangent(*args, *kwargs.values())):
            args, _ = fill_defaults(schema, args, kwargs)
            # Below a torch.func transform's layer (which dispatched here with its tensors
            # unwrapped) this level's autograd records the graph, as for a native op:
            # Function.apply would hand it to the transforms again.
            return _record(_OpDifferentiable, info, *args)
        if keyset.raw_repr() & between:  # a fake, functional, negative or conjugate tensor: their keys first
            return redispatch(keyset & below, *args, **kwargs)
        return backend_select(op, keyset, *args, **kwargs)

    return kernel


def _record(function, *args):
    """autograd.Function.apply without its torch.func hand-off (custom_function_call)."""
    if not torch._C._are_functorch_transforms_active():
        return function.apply(*args)
    from torch._functorch.utils import enable_single_level_autograd_function
    with enable_single_level_autograd_function():
        return super(torch.autograd.Function, function).apply(*args)


def register(lib, names, backend_select: Callable) -> None:
    """The Autograd kernel of every functional operator in `names` (torch.ops.puffadv);
    `backend_select`: their BackendSelect kernel (_torch_kernels._run_kernel)."""
    for name in names:
        op = getattr(torch.ops.puffadv, name).default
        estimator, roles, scalar_roles = _op_roles(name)
        info = _OpInfo(op, tuple(a.name for a in op._schema.arguments), roles, scalar_roles, estimator,
                       _op_series(estimator, name))
        lib.impl(name, _autograd_kernel(info, backend_select), "Autograd", with_keyset=True)
