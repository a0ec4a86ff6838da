"""PufferLib's puff advantage in the public API (its description: _estimators.PUFF_ADVANTAGE)."""
from __future__ import annotations

from typing import Any, Literal, Optional, Union, overload

import numpy as np

from . import _eager, _engine, _frameworks, _outputs, _route
from ._estimators import PUFF_ADVANTAGE
from ._fallback import BackendUnavailableError
from ._types import Array, ArrayT, Real, Stream

_ndarray = np.ndarray
_KIND, _LAMBDA_NAME = PUFF_ADVANTAGE.kind, PUFF_ADVANTAGE.lambda_name


_Fused = Union[Array, bool, None]  # a fused output: True allocates, an array is written


@overload
def compute_puff_advantage(values: ArrayT, rewards: Array, dones: Array, importance: Array,
                           advantages: Optional[ArrayT] = None, gamma: Real = 0.99,
                           gae_lambda: Real = 0.95, rho_clip: Real = 1.0, c_clip: Real = 1.0, *,
                           stream: Optional[Stream] = None, returns: Literal[None, False] = None,
                           abs_sums: Literal[None, False] = None, sums: Literal[None, False] = None,
                           square_sums: Literal[None, False] = None) -> ArrayT: ...


@overload
def compute_puff_advantage(values: Array, rewards: Array, dones: Array, importance: Array,
                           advantages: Optional[Array] = None, gamma: Real = 0.99,
                           gae_lambda: Real = 0.95, rho_clip: Real = 1.0, c_clip: Real = 1.0, *,
                           stream: Optional[Stream] = None, returns: _Fused = None,
                           abs_sums: _Fused = None, sums: _Fused = None,
                           square_sums: _Fused = None) -> Any: ...  # an Estimate if any is asked for


def compute_puff_advantage(values, rewards, dones, importance, advantages=None,
                           gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0, *,
                           stream=None, returns=None, abs_sums=None, sums=None, square_sums=None):
    """PufferLib's puff advantage: GAE(gamma, lambda) with V-trace clipped importance weights.

    All arrays are ``[rows, horizon]`` (any strides) of one framework, dtype and
    device: NumPy, PyTorch, CuPy, JAX or any DLPack producer, float32 or float64.
    For every row, backwards from ``t = horizon - 2``::

        nnt   = 1 - dones[t+1]
        delta = min(importance[t], rho_clip) * (rewards[t+1] + gamma * values[t+1] * nnt - values[t])
        A     = delta + gamma * gae_lambda * min(importance[t], c_clip) * A * nnt

    and ``advantages[:, -1] = 0``. ``rewards[:, 0]`` and ``dones[:, 0]`` are never read.

    Returns the advantages in the caller's framework and on its device. If
    ``advantages`` is given it is written in place and returned. The GIL is
    released while computing; GPU work runs on the framework's current stream
    (or ``stream``, a handle or stream object) and never blocks the host.

    bfloat16/float16 inputs are computed in float32 and give a float32 output
    (or write into a given ``advantages`` of their own dtype); ``dones`` may be
    bool or uint8. Fused outputs, computed in the same pass (each True to
    allocate or an array to write into): ``returns`` (advantages + values) and
    the ``[rows]`` sums over time of the advantages ``abs_sums`` (sum |A|, for
    prioritised replay), ``sums`` and ``square_sums`` (for normalisation). When
    any is requested the result is a ``puffadv.Estimate`` instead of an array.

    On torch tensors it also runs inside ``torch.compile(fullgraph=True)``,
    computing exactly what the eager call computes (an explicit ``stream`` must
    then be an int handle).
    """
    if type(values) is _ndarray:
        # The common call, direct: NumPy arrays (ndarray itself), float scalars, no stream, no
        # fused output. Every check Python applies is then decided by these types alone, and
        # the core gets what _eager.puff_advantage would give it (issue 14 times this path).
        if (type(rewards) is _ndarray and type(dones) is _ndarray and type(importance) is _ndarray
                and stream is None and returns is None and abs_sums is None and sums is None
                and square_sums is None and type(gamma) is float and type(gae_lambda) is float
                and type(rho_clip) is float and type(c_clip) is float and _engine._ONE_ENTRY is not None):
            if advantages is None:
                advantages = _outputs.numpy_output_like(values)
            elif type(advantages) is not _ndarray:
                return _eager.puff_advantage(values, rewards, dones, importance, advantages,
                                             (gamma, gae_lambda, rho_clip, c_clip), stream)
            _engine._ONE_ENTRY(_KIND, {"values": values, "rewards": rewards, "terminated": dones,
                                       "importance": importance, "advantages": advantages},
                               gamma=gamma, lambda_=gae_lambda, rho_clip=rho_clip, c_clip=c_clip,
                               lambda_name=_LAMBDA_NAME)
            return advantages
    elif _frameworks.torch_compiling():
        if _route.needs_graph((values, rewards, dones, importance), (gamma, gae_lambda, rho_clip, c_clip),
                              (advantages, returns, abs_sums, sums, square_sums)):
            from . import _torch_autograd
            return _torch_autograd.puff_advantage(values, rewards, dones, importance, advantages,
                                                  (gamma, gae_lambda, rho_clip, c_clip), stream,
                                                  {"returns": returns, "abs_sums": abs_sums, "sums": sums,
                                                   "square_sums": square_sums})
        from . import _compiled
        return _compiled.puff_advantage(values, rewards, dones, importance, advantages,
                                        (gamma, gae_lambda, rho_clip, c_clip), stream,
                                        {"returns": returns, "abs_sums": abs_sums, "sums": sums,
                                         "square_sums": square_sums})
    elif type(values) is _engine.host_tensor:
        # The same for host tensors (plain torch.Tensor, no neg bit, CPU) written into a given
        # advantages that torch lets us write: what _engine.run does for them, inline.
        tensor = _engine.host_tensor
        if (type(rewards) is tensor and type(dones) is tensor and type(importance) is tensor
                and type(advantages) is tensor and stream is None and returns is None and abs_sums is None
                and sums is None and square_sums is None and type(gamma) is float and type(gae_lambda) is float
                and type(rho_clip) is float and type(c_clip) is float and not values.is_cuda
                and not _frameworks.torch_dual_level_open() and not _frameworks.torch_func_active()
                and not (values.is_neg() or rewards.is_neg() or dones.is_neg() or importance.is_neg()
                         or advantages.is_neg() or advantages.requires_grad or advantages.is_inference()
                         or values.requires_grad or rewards.requires_grad or importance.requires_grad
                         or dones.requires_grad)):  # float dones get their gradient too
            try:
                _engine._ONE_ENTRY(_KIND, {"values": values, "rewards": rewards, "terminated": dones,
                                           "importance": importance, "advantages": advantages},
                                   gamma=gamma, lambda_=gae_lambda, rho_clip=rho_clip, c_clip=c_clip,
                                   lambda_name=_LAMBDA_NAME)
            except BackendUnavailableError:
                pass  # nothing was written: the general path below falls back to the host
            else:
                _engine._torch_rules.mark_written(advantages)
                return advantages
    if _route.needs_graph((values, rewards, dones, importance), (gamma, gae_lambda, rho_clip, c_clip),
                          (advantages, returns, abs_sums, sums, square_sums)):
        from . import _torch_autograd
        return _torch_autograd.puff_advantage(values, rewards, dones, importance, advantages,
                                              (gamma, gae_lambda, rho_clip, c_clip), stream,
                                              {"returns": returns, "abs_sums": abs_sums, "sums": sums,
                                               "square_sums": square_sums})
    if returns is None and abs_sums is None and sums is None and square_sums is None:  # positionally: cheaper
        return _eager.puff_advantage(values, rewards, dones, importance, advantages,
                                     (gamma, gae_lambda, rho_clip, c_clip), stream)
    return _eager.puff_advantage(values, rewards, dones, importance, advantages, (gamma, gae_lambda, rho_clip, c_clip),
                                 stream, returns, abs_sums, sums, square_sums)
