"""The autograd plumbing every differentiable puffadv operator shares, in torch and JAX.

An operator's gradient is written ONCE, as a vector-Jacobian product over an array
namespace (`ops`, below), and plugged into both frameworks here:

    vjp(ops, primals: dict, outputs: tuple, cotangents: tuple, needs: dict) -> dict

- ``primals``: the operator's arguments by schema name (tensors/arrays, None where an
  optional one is absent, and its non-array arguments: bools, ints, floats);
- ``outputs``: its results, in the schema's order; ``cotangents``: their gradients
  (a zero array where torch passes None);
- ``needs``: name -> whether that argument's gradient is wanted (torch's
  needs_input_grad; JAX asks for all of them);
- returns name -> gradient (the argument's shape and dtype) or None, for the
  differentiable array arguments; anything missing is None.

Arrays reach the vjp in the caller's layout; ``ops.batch_major(x, time_axis)`` gives the
[B, T] view (a transpose for time-major data) and ``ops.restore`` undoes it.
``ops.scan(inputs, decay, seed, reverse)`` is linear_recurrence on [B, T] arrays, through
the engine (torch.ops.puffadv.linear_recurrence, puffadv.jax's FFI call), itself
differentiable, so double backward works through the same plumbing.

torch: :func:`register_torch` (torch.library.register_autograd on the op: autograd and
torch.compile; setup_context saves every tensor argument and output) and
:func:`torch_function` (a torch.autograd.Function over the op, which torch.func's
transforms can run: the Python API's path). JAX: :func:`jax_vjp` turns a primal function
and the same vjp into a jax.custom_vjp function. No module of puffadv imports torch or jax through this one
until a register function runs.
"""
from __future__ import annotations

from typing import Callable


class TorchOps:
    """The array namespace of a vjp on torch tensors. `scan_function`: linear_recurrence's
    autograd.Function once puffadv.torch registered it (_torch_recurrence.py), so that a
    backward's scan is differentiable and batchable under torch.func too; else the op."""

    scan_function = None

    def __init__(self):
        import torch
        self.xp = torch

    def batch_major(self, x, time_axis: int):
        return x.transpose(0, 1) if x is not None and x.ndim == 2 and time_axis in (0, -2) else x

    restore = batch_major

    def scan(self, inputs, decay, seed, reverse: bool):
        if self.scan_function is not None:
            return self.scan_function.apply(inputs, decay, seed, reverse, 1)
        return self.xp.ops.puffadv.linear_recurrence(inputs, decay, seed, reverse=reverse, time_axis=1)

    def concat(self, parts):
        return self.xp.cat(parts, dim=-1)

    def cast(self, x, like):
        return x if x is None or x.dtype == like.dtype else x.to(like.dtype)

    def zeros(self, like):
        return self.xp.zeros_like(like)


class JaxOps:
    """The array namespace of a vjp on JAX arrays; `scan` is the caller's engine call."""

    def __init__(self, scan: Callable):
        import jax.numpy as jnp
        self.xp = jnp
        self.scan = scan

    def batch_major(self, x, time_axis: int):
        return self.xp.swapaxes(x, 0, 1) if x is not None and x.ndim == 2 and time_axis in (0, -2) else x

    restore = batch_major

    def concat(self, parts):
        return self.xp.concatenate(parts, axis=-1)

    def cast(self, x, like):
        return x if x is None or x.dtype == like.dtype else x.astype(like.dtype)

    def zeros(self, like):
        return self.xp.zeros_like(like)


class _TorchSchema:
    """An op's arguments as its autograd sees them: every argument's name in schema order
    (keyword-only ones last, as torch lists them) and which are tensors (never keyword-only:
    register_autograd refuses those)."""

    def __init__(self, op_name: str):
        import torch
        schema = getattr(torch.ops.puffadv, op_name).default._schema
        tensor_type = torch._C.TensorType.get()
        self.op = getattr(torch.ops.puffadv, op_name).default
        self.names = [a.name for a in schema.arguments]
        self.positional = [a.name for a in schema.arguments if not a.kwarg_only]
        self.tensors = [i for i, a in enumerate(schema.arguments) if not a.kwarg_only and
                        (a.type == tensor_type or getattr(a.type, "getElementType", lambda: None)() == tensor_type)]

    def save(self, ctx, arguments: dict, output, forward: bool = False) -> None:
        """What the backward needs: every tensor argument and output (saved tensors), the rest by
        name; `forward`: the same for a jvp too."""
        outputs = output if isinstance(output, tuple) else (output,)
        tensors = (*(arguments.get(self.names[i]) for i in self.tensors), *outputs)
        ctx.save_for_backward(*tensors)
        if forward:
            ctx.save_for_forward(*tensors)
        ctx.others = {name: value for name, value in arguments.items()
                      if name not in {self.names[i] for i in self.tensors}}

    def tangents(self, ctx, jvp: Callable, tangents):
        """The output's tangent by `jvp`, from the saved context and the arguments' tangents
        (by position, None where an argument has none)."""
        saved = ctx.saved_tensors
        primals = dict(ctx.others)
        primals.update({self.names[i]: saved[k] for k, i in enumerate(self.tensors)})
        given = {self.names[i]: tangents[i] for i in self.tensors if i < len(tangents)}
        return jvp(TorchOps(), primals, saved[len(self.tensors):], given)

    def gradients(self, ctx, vjp: Callable, cotangents, wanted) -> dict:
        """name -> gradient, from the saved context; `wanted` is needs_input_grad by position."""
        import torch
        saved = ctx.saved_tensors
        primals = dict(ctx.others)
        primals.update({self.names[i]: saved[k] for k, i in enumerate(self.tensors)})
        outputs = saved[len(self.tensors):]
        cotangents = tuple(torch.zeros_like(o) if g is None else g for g, o in zip(cotangents, outputs))
        needs = {self.names[i]: i < len(wanted) and bool(wanted[i]) for i in self.tensors}
        grads = vjp(TorchOps(), primals, outputs, cotangents, needs)
        return {name: grads.get(name) if needs.get(name) else None for name in self.names}


def register_torch(lib, op_name: str, vjp: Callable) -> None:
    """Autograd for torch.ops.puffadv.<op_name> from `vjp` (see the module's docstring): plain
    autograd and torch.compile. (torch.func's transforms cannot run a custom op's autograd in
    this torch: they take :func:`torch_function`'s, through the Python API, to which the op's
    call hands their tensors: _torch_recurrence.)"""
    import torch
    schema = _TorchSchema(op_name)

    def setup_context(ctx, inputs, output, keyword_only_inputs=None):
        # An optional argument left out of the call is absent from `inputs`: None, its default.
        schema.save(ctx, {**dict(zip(schema.positional, inputs)), **(keyword_only_inputs or {})}, output)

    def backward(ctx, *cotangents):
        wanted = ctx.needs_input_grad
        grads = schema.gradients(ctx, vjp, cotangents, wanted)
        return tuple(grads[name] for name in schema.positional[:len(wanted)])

    torch.library.register_autograd(f"puffadv::{op_name}", backward, setup_context=setup_context, lib=lib)


def torch_function(op_name: str, vjp: Callable, vmap: Callable = None, jvp: Callable = None):
    """A torch.autograd.Function over torch.ops.puffadv.<op_name> differentiated by `vjp`, for
    torch.func (grad, vjp, jacrev) as well as autograd and torch.compile: ``apply(*arguments)``
    takes every schema argument by position (keyword-only ones last). `vmap`: its vmap
    staticmethod ``vmap(info, in_dims, *arguments) -> (output, out_dims)``; without one,
    torch.func.vmap raises torch's error naming the missing rule. `jvp`: its forward-mode
    derivative ``jvp(ops, primals, outputs, tangents: name -> tensor or None) -> tangent``
    (forward_ad, torch.func.jvp, jacfwd); without one, torch refuses forward mode."""
    import torch
    schema = _TorchSchema(op_name)
    keywords = schema.names[len(schema.positional):]

    def forward(*arguments):
        positional = arguments[:len(schema.positional)]
        return schema.op(*positional, **dict(zip(keywords, arguments[len(schema.positional):])))

    def setup_context(ctx, inputs, output):
        schema.save(ctx, dict(zip(schema.names, inputs)), output,
                    forward=jvp is not None and torch.autograd.forward_ad._current_level >= 0)

    def backward(ctx, *cotangents):
        grads = schema.gradients(ctx, vjp, cotangents, ctx.needs_input_grad)
        return tuple(grads[name] for name in schema.names)

    members = {"forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
               "backward": staticmethod(backward)}
    if vmap is not None:
        members["vmap"] = staticmethod(vmap)
    if jvp is not None:
        members["jvp"] = staticmethod(lambda ctx, *tangents: schema.tangents(ctx, jvp, tangents))
    return type(f"{op_name}_function", (torch.autograd.Function,), members)


def jax_vjp(primal: Callable, vjp: Callable, ops_of: Callable, static_names: tuple, array_names: tuple):
    """A jax.custom_vjp function ``f(static, *arrays)`` computing ``primal(static, *arrays)``
    (one output array), differentiated by `vjp`. ``static`` is a hashable tuple of the
    non-array arguments named by `static_names`; the arrays (None for an absent optional
    one) are named by `array_names`; ``ops_of(static)`` gives the JaxOps for the backward."""
    import functools

    import jax

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def f(static, *arrays):
        return primal(static, *arrays)

    def forward(static, *arrays):
        # Through f, not primal: differentiating this rule again (a second order) then meets
        # f's own rule, where primal alone (an FFI call) has no derivative.
        y = f(static, *arrays)
        return y, (arrays, y)

    def backward(static, saved, cotangent):
        arrays, y = saved
        primals = {**dict(zip(static_names, static)), **dict(zip(array_names, arrays))}
        needs = {name: x is not None for name, x in zip(array_names, arrays)}
        grads = vjp(ops_of(static), primals, (y,), (cotangent,), needs)
        return tuple(None if x is None else grads.get(name, ops_of(static).zeros(x))
                     for name, x in zip(array_names, arrays))

    f.defvjp(forward, backward)
    return f
