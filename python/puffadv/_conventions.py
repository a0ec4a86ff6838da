"""The standard advantage conventions (GAE, TD(lambda) returns, V-trace) as
TorchRL, Stable-Baselines3, CleanRL and rlax define them, with termination and
truncation kept apart, and the fused outputs they share with the puff advantage.
docs/conventions.md maps each library's arguments to these. Each function's
arguments, outputs and scalars are its entry in _estimators.py; its body hands
them over by name (_route)."""
from __future__ import annotations

from typing import Optional, Union

from . import _route
from ._estimators import GAE, TD_LAMBDA, VTRACE, Estimate, VTraceEstimate
from ._types import Array, PerStep, Real, Stream

__all__ = ["gae", "td_lambda_returns", "vtrace", "Estimate", "VTraceEstimate"]

_Output = Union[Array, bool, None]  # an output argument: True allocates, False skips, an array is written


def gae(rewards: Array, values: Array, terminated: Optional[Array] = None, truncated: Optional[Array] = None, *,
        episode_starts: Optional[Array] = None, last_episode_start: Optional[Array] = None,
        last_value: Optional[Array] = None, bootstrap_values: Optional[Array] = None,
        importance: Optional[Array] = None, next_values: Optional[Array] = None, gamma: PerStep = 0.99,
        gae_lambda: PerStep = 0.95, rho_clip: Real = 1.0, c_clip: Real = 1.0, time_axis: Optional[int] = None,
        advantages: _Output = True,
        returns: _Output = True, abs_sums: _Output = False, sums: _Output = False,
        square_sums: _Output = False, stream: Optional[Stream] = None) -> Estimate:
    """Generalised advantage estimation as TorchRL, SB3, CleanRL and rlax define it.

    ``rewards[t]``, ``terminated[t]`` and ``truncated[t]`` belong to the step that
    produced them (action at ``t``). For every row, backwards over time::

        V'_t    = values[t+1] inside the buffer; last_value (or bootstrap_values[t])
                  after the last step; bootstrap_values[t] where truncated[t]
        delta_t = rho_t * (rewards[t] + gamma * (1 - terminated[t]) * V'_t - values[t])
        A_t     = delta_t + gamma * gae_lambda * c_t * (1 - done_t) * A_{t+1}

    with ``done = terminated | truncated``, ``rho_t = min(importance[t], rho_clip)``,
    ``c_t = min(importance[t], c_clip)`` (both 1 without importance).
    ``gamma`` and ``gae_lambda`` are numbers, or arrays of the rewards' shape: per
    step, ``gamma[t]`` and ``gae_lambda[t]`` in place of gamma and gae_lambda at step
    ``t`` (rlax's ``discount_t``: pass it as gamma; arrays are used as given, not
    checked to lie in [0, 1]). So for every estimator of the family.

    ``time_axis`` is REQUIRED (no layout is guessed: a TypeError naming both when
    it is missing): ``0`` for time-major arrays ``[T, B]`` or ``[T, *B]`` (SB3,
    CleanRL, skrl), ``-1`` for batch-major ``[B, T]`` or ``[*B, T]`` (PufferLib),
    ``-2`` for ``[*B, T, 1]`` (TorchRL). Arrays are read through their strides,
    never copied: leading batch axes become rows where their strides allow it
    (a ValueError where they do not), and outputs come back in the rewards'
    shape, the row sums in it without the time axis. Floats are
    float32, float64, bfloat16 or float16 (one dtype, float32 arithmetic for the
    16-bit ones); flags bool, uint8 or that float dtype. ``last_value`` is ``[B]``
    (or ``[*B]``, ``[B, 1]``, ``[1, B]``);
    ``bootstrap_values`` has the rewards' shape and is read only at truncated
    steps and the last step. Pass exactly one of them; ``truncated`` needs
    ``bootstrap_values``. A step both terminated and truncated is terminated
    (Gymnasium's meaning: its bootstrap is never read).

    ``episode_starts`` instead of ``terminated``: SB3's and CleanRL's flags,
    ``episode_starts[t]`` set where observation ``t`` starts an episode (SB3's
    ``RolloutBuffer.episode_starts``, CleanRL's ``dones``). The flag at ``t + 1``
    ends step ``t``'s episode: ``terminated[t] = episode_starts[t + 1]``, and the
    last step's end is ``last_episode_start`` (``[B]``, required with it: SB3's
    ``dones`` argument of ``compute_returns_and_advantage``, CleanRL's
    ``next_done``). With ``truncated`` (its own step's flag), the ends it marks
    are truncations, the others terminations. The shifted flags are a new array
    (one copy of the flags; the other arrays are read in place).

    ``next_values`` (rewards' shape; TorchRL's ``next_state_value``, rlax's ``v_t``):
    V of each step's next observation, read at every step in place of ``V'_t``
    (never where terminated). With it ``last_value`` and ``bootstrap_values`` are
    refused and ``truncated`` only cuts the recursion (its bootstrap is
    ``next_values[t]``). It takes ``episode_starts`` too: the ends they mark cut it.

    Outputs (each True to allocate, False to skip, or an array to write into):
    ``advantages``, ``returns`` (advantages + values), and ``[B]`` row sums of the
    advantages ``abs_sums``, ``sums``, ``square_sums``. Allocated outputs have the
    rewards' shape, and the inputs' dtype, except float32 for bfloat16/float16
    inputs. Returns an :class:`Estimate`.
    """
    # The arguments by name, spelled out: torch.compile (2.11) cannot trace locals().
    return _route.estimate(GAE, {
        "rewards": rewards, "values": values, "terminated": terminated, "truncated": truncated,
        "episode_starts": episode_starts, "last_episode_start": last_episode_start,
        "last_value": last_value, "bootstrap_values": bootstrap_values, "importance": importance,
        "next_values": next_values, "gamma": gamma, "gae_lambda": gae_lambda, "rho_clip": rho_clip, "c_clip": c_clip,
        "time_axis": time_axis, "advantages": advantages, "returns": returns, "abs_sums": abs_sums,
        "sums": sums, "square_sums": square_sums, "stream": stream,
    })


def td_lambda_returns(rewards: Array, values: Array, terminated: Optional[Array] = None,
                      truncated: Optional[Array] = None, *, episode_starts: Optional[Array] = None,
                      last_episode_start: Optional[Array] = None, last_value: Optional[Array] = None,
                      bootstrap_values: Optional[Array] = None,
                      importance: Optional[Array] = None, next_values: Optional[Array] = None,
                      gamma: PerStep = 0.99, lambda_: PerStep = 0.95, rho_clip: Real = 1.0, c_clip: Real = 1.0,
                      time_axis: Optional[int] = None,
                      returns: _Output = True, advantages: _Output = False, abs_sums: _Output = False,
                      sums: _Output = False, square_sums: _Output = False,
                      stream: Optional[Stream] = None) -> Estimate:
    """TD(lambda) returns ``G_t = r_t + gamma (1 - terminated_t) [(1 - lambda) V'_t + lambda G_{t+1}]``,
    with ``G_{t+1}`` replaced by ``V'_t`` where an episode ends (TorchRL's
    ``td_lambda_return_estimate``, rlax's ``lambda_returns``). Equal to
    ``gae(...).returns``; with importance ratios, the lambda-V-trace targets.
    Arguments as :func:`gae` (``time_axis`` required; ``episode_starts`` and
    ``last_episode_start`` for SB3's and CleanRL's flags); ``advantages`` here are ``G - values``.
    With ``next_values`` the recursion above is scanned itself, ``V'_t = next_values[t]`` (not
    ``gae(...).returns``, which equals it only where ``next_values[t] == values[t+1]``), and takes
    no ``importance``."""
    # The arguments by name, spelled out: torch.compile (2.11) cannot trace locals().
    return _route.estimate(TD_LAMBDA, {
        "rewards": rewards, "values": values, "terminated": terminated, "truncated": truncated,
        "episode_starts": episode_starts, "last_episode_start": last_episode_start,
        "last_value": last_value, "bootstrap_values": bootstrap_values, "importance": importance,
        "next_values": next_values, "gamma": gamma, "lambda_": lambda_, "rho_clip": rho_clip, "c_clip": c_clip,
        "time_axis": time_axis, "returns": returns, "advantages": advantages, "abs_sums": abs_sums, "sums": sums,
        "square_sums": square_sums, "stream": stream,
    })


def vtrace(rewards: Array, values: Array, terminated: Optional[Array] = None, truncated: Optional[Array] = None,
           *, episode_starts: Optional[Array] = None, last_episode_start: Optional[Array] = None,
           last_value: Optional[Array] = None, bootstrap_values: Optional[Array] = None,
           importance: Optional[Array] = None, next_values: Optional[Array] = None,
           sample_mask: Optional[Array] = None, gamma: PerStep = 0.99, lambda_: PerStep = 1.0,
           rho_clip: Real = 1.0, c_clip: Real = 1.0, rho_pg_clip: Real = 1.0, alpha: Real = 1.0,
           time_axis: Optional[int] = None,
           vs: _Output = True, pg_advantages: _Output = True, abs_sums: _Output = False,
           sums: _Output = False, square_sums: _Output = False,
           stream: Optional[Stream] = None) -> VTraceEstimate:
    """V-trace (IMPALA): targets ``vs_t = V_t + A_t`` from the recurrence of
    :func:`gae` with ``c_t = min(importance[t], c_clip)`` and ``lambda_`` (1 in
    IMPALA), and the policy-gradient advantages::

        pg_t = min(importance[t], rho_pg_clip) * (rewards[t] + gamma (1 - terminated[t]) vs'_t - values[t])

    where ``vs'_t`` is ``vs_{t+1}`` inside an episode and the bootstrap ``V'_t``
    where it ends (truncation, last step). ``importance`` is the ratio pi/mu
    (``exp(log_pi - log_mu)``), 1 when omitted. The sums are over ``pg_t``.
    Returns a :class:`VTraceEstimate`; arguments otherwise as :func:`gae`
    (``time_axis`` required; ``episode_starts`` and ``last_episode_start`` for
    SB3's and CleanRL's flags).

    With ``next_values`` (as :func:`gae`), ``vs'_t`` is ``values[t+1] + A_{t+1}``
    inside an episode (rlax, TorchRL) and ``next_values[t]`` where it ends.
    ``sample_mask`` (flags, rlax's): a step not set is not learnable, ``A_t = A_{t+1}``
    (its error passes the later one through unchanged). ``alpha`` in [0, 1] gives
    leaky V-trace (rlax's ``leaky_vtrace``): every clipped ratio ``min(ratio, clip)``
    becomes ``alpha min(ratio, clip) + (1 - alpha) ratio``; 1 is V-trace."""
    # The arguments by name, spelled out: torch.compile (2.11) cannot trace locals().
    return _route.estimate(VTRACE, {
        "rewards": rewards, "values": values, "terminated": terminated, "truncated": truncated,
        "episode_starts": episode_starts, "last_episode_start": last_episode_start,
        "last_value": last_value, "bootstrap_values": bootstrap_values, "importance": importance,
        "next_values": next_values, "sample_mask": sample_mask, "gamma": gamma, "lambda_": lambda_,
        "rho_clip": rho_clip, "c_clip": c_clip, "rho_pg_clip": rho_pg_clip, "alpha": alpha, "time_axis": time_axis, "vs": vs, "pg_advantages": pg_advantages,
        "abs_sums": abs_sums, "sums": sums, "square_sums": square_sums, "stream": stream,
    })
