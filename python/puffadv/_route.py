"""Where a family estimator's public call goes: the common call (NumPy arrays, float
scalars, no stream) straight to the core (_direct), any other to the eager path
(_eager), or, while torch.compile traces the caller, the traced one (_compiled,
imported only then: it imports torch). compute_puff_advantage decides the same itself
(_api.py), one call frame less on the path that issue 14's overhead bars time."""
from __future__ import annotations

import numpy as np

from . import _eager, _episode_starts, _frameworks
from ._arguments import call_of
from ._direct import MISSED, direct
from ._estimators import ESTIMATORS, Estimator

_DIRECT = {function: direct(estimator) for function, estimator in ESTIMATORS.items()}


def _scalar_or_output_requires_grad(items) -> bool:
    """A scalar or given output (numbers, None and the sums' True / False among them) is a tensor
    that requires grad. A given output counts: written by copy_ in the graph (also while dynamo
    traces: the traced operator's write into it left its history, a wrong gradient)."""
    for x in items:
        if (x is not None and x is not True and x is not False and x.__class__ is not float
                and not isinstance(x, (int, float))  # a SymFloat too while dynamo traces (dynamic=True),
                and getattr(x, "requires_grad", False) is True):  # where hasattr of one is refused
            return True
    return False


def needs_graph(arrays, scalars, outputs=()) -> bool:
    """An argument requires grad (a torch tensor) and torch's grad mode is on, carries a
    forward-mode tangent, or a torch.func transform runs (_torch_autograd.wanted says which):
    the call goes through _torch_autograd, which records its graph or computes the tangents
    (never a silently detached result). A given output that requires
    grad counts too: written by copy_ there, it follows torch's in-place rules.
    A call that mixes in anything but torch tensors goes on to the eager path, whose
    checks refuse it by name."""
    for x in arrays:  # plain loops, not any(...): every call that misses the direct path pays
        if x is not None and getattr(x, "requires_grad", False) is True:
            break
    else:
        if not (_scalar_or_output_requires_grad(scalars) or _scalar_or_output_requires_grad(outputs)
                or _frameworks.torch_dual_level_open()  # else a tangent may need the jvp
                or _frameworks.torch_func_active()):  # else a transform's wrapped tensor, unread
            return False
    from . import _torch_autograd
    # A given output carrying a tangent too: written through the Function, its tangent is the
    # result's (copy_), not the one it held.
    given = [o for o in outputs if o is not None and o is not True and o is not False]
    return _torch_autograd.wanted(*arrays, *scalars, *given) and _torch_autograd.all_tensors(arrays, outputs)


def estimate(estimator: Estimator, args: dict):
    """A family estimator's public result from its function's arguments by name."""
    if estimator.episode_starts and (args["episode_starts"] is not None or args["last_episode_start"] is not None):
        args = _episode_starts.with_terminated(estimator.function, args)
    result = _DIRECT[estimator.function](args)
    if result is not MISSED:
        return result
    call = call_of(estimator, args)
    if type(next(iter(call.arrays.values()))) is not np.ndarray and needs_graph(call.arrays.values(),
                                                                               call.scalars.values(),
                                                                               call.outputs.values()):
        from . import _torch_autograd
        return estimator.make_result(_torch_autograd.estimate(estimator, call))
    if type(next(iter(call.arrays.values()))) is not np.ndarray and _frameworks.torch_compiling():
        from . import _compiled
        return estimator.make_result(_compiled.estimate(estimator, call))
    return estimator.make_result(_eager.estimate(estimator, call))
