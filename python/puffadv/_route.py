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


def estimate(estimator: Estimator, args: dict):
    """A family estimator's public result from its function's arguments by name."""
    if estimator.episode_starts and (args["episode_starts"] is not None or args["last_episode_start"] is not None):
        args = _episode_starts.with_terminated(estimator.function, args)
    result = _DIRECT[estimator.function](args)
    if result is not MISSED:
        return result
    call = call_of(estimator, args)
    if type(next(iter(call.arrays.values()))) is not np.ndarray and _frameworks.torch_compiling():
        from . import _compiled
        return estimator.make_result(_compiled.estimate(estimator, call))
    return estimator.make_result(_eager.estimate(estimator, call))
