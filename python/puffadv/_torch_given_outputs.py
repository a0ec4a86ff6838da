"""Outputs the caller gives (`advantages=`, `returns=`, ...) to a public function recording a
graph (_torch_autograd). The Function computes into tensors of its own, and the given ones
are written by copy_ (deliver), so torch's in-place autograd rules apply to them; the core
never sees them, so they are checked first: torch's in-place rules by name, then the eager
call's own checks (a meta or sparse tensor, another device, a wrong dtype or shape, memory an
input shares), as the eager call refuses them."""
from __future__ import annotations

import torch

from . import _frameworks, _torch_rules


def _given(specs: dict) -> dict:
    return {role: spec for role, spec in specs.items() if isinstance(spec, torch.Tensor)}


def check(specs: dict, names: dict, eager_check) -> None:
    """Checks the outputs given among `specs` (role -> spec; names: role -> the caller's name),
    before anything is computed. `eager_check(readable)`: the eager call with check_only, its
    tensors passed through `readable` (dict -> dict): under a torch.func transform, the tensors
    the transform wraps (the eager check reads memory, which a wrapper has none of), read with
    the transforms disabled (an operation under them would wrap its result again)."""
    given = _given(specs)
    if not given:
        return
    _torch_rules.check_all_writable(given, names, recorded=True)  # by name: torch's copy_ names none
    with torch._C._DisableFuncTorch():
        eager_check(_readable)


def _readable(tensors: dict) -> dict:
    result = {}
    for role, x in tensors.items():
        if isinstance(x, torch.Tensor):
            while torch._C._functorch.is_functorch_wrapped_tensor(x):
                x = torch._C._functorch.get_unwrapped(x)
            x = x.detach()
        result[role] = x
    return result


def refused_while_tracing(specs: dict, names: dict, like) -> dict | None:
    """While dynamo traces, the eager check cannot read the fake tensors, and the traced
    operators record no graph: a call given an output is refused by name, never written
    unchecked. Its outputs by role then (they raise when the compiled function runs, with the
    eager type: dynamo's fullgraph reports an exception raised while tracing as its own); None
    where no output is given or dynamo is not tracing."""
    given = [names.get(role, role) for role in _given(specs)]
    if not given or not _frameworks.torch_compiling():
        return None
    from . import _compiled
    error = TypeError(f"{', '.join(given)} given as output under torch.compile while puffadv records a graph "
                      f"(an input or a given output requires grad): leave {given[0]}= out and use the returned "
                      "tensors, or call under torch.no_grad()")
    asked = [role for role, spec in specs.items() if spec is not None and spec is not False]
    refused = _compiled.refused_at_run_time(error, like, asked)
    return {role: refused.get(role) for role in specs}


def deliver(specs: dict, made: dict) -> dict:
    """The outputs by role as the caller asked: new ones as made; a given one (checked before
    the forward) written by copy_, so torch's in-place autograd rules apply to it, and returned."""
    result = {}
    for role, spec in specs.items():
        if isinstance(spec, torch.Tensor):
            result[role] = spec.copy_(made[role])
        else:
            result[role] = made.get(role) if spec is True else None
    return result
