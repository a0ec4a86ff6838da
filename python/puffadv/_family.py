"""The rest of the credit-assignment family (issue 20) in the Python API:
discounted returns, n-step returns, Retrace, Q(lambda), episodic sums and
eligibility traces. Each is a kind of the one core call that gae() makes; its
arguments, outputs and scalars are its entry in _estimators.py, and the rules
only Python applies (n, boundary, the probability pair) are in _arguments.py.
This module holds only their signatures and docstrings. docs/conventions.md
maps the peers' arguments."""
from __future__ import annotations

from typing import Any, Optional

from . import _route
from ._conventions import _Output
from ._estimators import (DISCOUNTED_RETURNS, ELIGIBILITY_TRACES, EPISODIC_CUMSUM, N_STEP_RETURNS, Q_LAMBDA,
                          RETRACE, Estimate)
from ._types import Array, PerStep, Real, Stream


def discounted_returns(rewards: Array, terminated: Optional[Array] = None, truncated: Optional[Array] = None, *,
                       episode_starts: Optional[Array] = None, last_episode_start: Optional[Array] = None,
                       last_value: Optional[Array] = None, bootstrap_values: Optional[Array] = None,
                       gamma: PerStep = 0.99, time_axis: Optional[int] = None, returns: _Output = True,
                       abs_sums: _Output = False, sums: _Output = False, square_sums: _Output = False,
                       stream: Optional[Stream] = None) -> Estimate:
    """Discounted returns (returns-to-go) with termination and an optional
    bootstrap, reading no values array (rlax's ``discounted_returns``, TorchRL's
    ``reward2go``, rl-triton's ``compute_discounted_returns``). For every row,
    backwards over time::

        B_t = last_value (or bootstrap_values[t]) at the row's last step;
              bootstrap_values[t] where truncated[t]; else 0
        G_t = rewards[t] + gamma (1 - terminated[t]) B_t + gamma (1 - done_t) G_{t+1}

    with ``done = terminated | truncated`` and ``G`` after the row's last step 0.
    Without any bootstrap (no ``last_value``, ``bootstrap_values`` or
    ``truncated``) B is 0: the plain discounted sum of each episode's rewards.
    Equal to :func:`td_lambda_returns` with lambda = 1 and values = 0.

    Arrays, dtypes, the required ``time_axis``, ``truncated``/bootstrap rules,
    ``episode_starts``/``last_episode_start`` and fused outputs as :func:`gae`;
    returns an :class:`Estimate` whose ``advantages`` is None, ``returns`` is G
    and the sums are over G.
    """
    # The arguments by name, spelled out: torch.compile (2.11) cannot trace locals().
    return _route.estimate(DISCOUNTED_RETURNS, {
        "rewards": rewards, "terminated": terminated, "truncated": truncated,
        "episode_starts": episode_starts, "last_episode_start": last_episode_start, "last_value": last_value,
        "bootstrap_values": bootstrap_values, "gamma": gamma, "time_axis": time_axis, "returns": returns,
        "abs_sums": abs_sums, "sums": sums, "square_sums": square_sums, "stream": stream,
    })


def n_step_returns(rewards: Array, values: Array, terminated: Optional[Array] = None,
                   truncated: Optional[Array] = None, *, n: int, episode_starts: Optional[Array] = None,
                   last_episode_start: Optional[Array] = None, last_value: Optional[Array] = None,
                   bootstrap_values: Optional[Array] = None, next_values: Optional[Array] = None,
                   gamma: PerStep = 0.99, lambda_: PerStep = 1.0, time_axis: Optional[int] = None,
                   returns: _Output = True, advantages: _Output = False, abs_sums: _Output = False,
                   sums: _Output = False, square_sums: _Output = False, stream: Optional[Stream] = None) -> Estimate:
    """n-step bootstrapped returns as rlax's ``n_step_bootstrapped_returns``
    defines them (scalar lambda), an episode's end cutting the window. With
    ``V'_t`` the bootstrap of :func:`gae` (values[t+1] inside the buffer, the
    bootstrap at truncations and after the last step)::

        W1_s = rewards[s] + gamma (1 - terminated[s]) V'_s
        Wj_s = rewards[s] + gamma (1 - terminated[s]) [(1 - lambda_) V'_s + lambda_ W(j-1)_{s+1}]
                   if not done_s and s + 1 < T,   else W1_s
        G_t  = Wn_t

    ``n = 1``: one-step TD targets; ``n >= T``: TD(lambda) returns
    (:func:`td_lambda_returns`); ``lambda_ = 1``: plain n-step returns
    ``r_t + gamma r_{t+1} + ... + gamma^(n-1) r_{t+n-1} + gamma^n V_{t+n}``.
    ``n`` is an int >= 1 (TypeError / ValueError otherwise). ``next_values`` (rlax's
    ``v_t``) gives ``V'_s`` at every step, as in :func:`gae`.

    Outputs: ``returns`` G (default) and ``advantages`` G - values; arguments
    otherwise as :func:`gae` (``time_axis`` required; ``episode_starts`` and
    ``last_episode_start`` for SB3's and CleanRL's flags). Returns an :class:`Estimate`.
    """
    # The arguments by name, spelled out: torch.compile (2.11) cannot trace locals().
    return _route.estimate(N_STEP_RETURNS, {
        "rewards": rewards, "values": values, "terminated": terminated, "truncated": truncated,
        "n": n, "episode_starts": episode_starts, "last_episode_start": last_episode_start,
        "last_value": last_value, "bootstrap_values": bootstrap_values, "next_values": next_values,
        "gamma": gamma, "lambda_": lambda_,
        "time_axis": time_axis, "returns": returns, "advantages": advantages, "abs_sums": abs_sums,
        "sums": sums, "square_sums": square_sums, "stream": stream,
    })


def retrace(rewards: Array, q_values: Array, next_values: Array, terminated: Array,
            truncated: Optional[Array] = None, *, target_probs: Optional[Array] = None,
            behaviour_probs: Optional[Array] = None, target_log_probs: Optional[Array] = None,
            behaviour_log_probs: Optional[Array] = None, gamma: PerStep = 0.99, lambda_: PerStep = 1.0,
            c_clip: Real = 1.0, time_axis: Optional[int] = None, returns: _Output = True,
            advantages: _Output = True, abs_sums: _Output = False, sums: _Output = False, square_sums: _Output = False,
            stream: Optional[Stream] = None) -> Estimate:
    """Retrace(lambda) targets on action values (Munos et al. 2016, "Safe and
    efficient off-policy reinforcement learning"; rlax's ``retrace``, rl-triton's
    ``compute_retrace``). ``q_values[t] = Q(s_t, a_t)`` of the taken action,
    ``next_values[t] = E_{a ~ pi} Q(s_{t+1}, a)`` of the step's next state (the
    final observation's where the step is truncated; read at every step),
    ``target_probs[t] = pi(a_t | s_t)`` and ``behaviour_probs[t] = mu(a_t | s_t)``.
    For every row, backwards over time::

        ratio_t = target_probs[t] / behaviour_probs[t]   (log-probs: exp(target - behaviour))
        c_t     = lambda_ min(c_clip, ratio_t)
        Delta_t = rewards[t] + gamma (1 - terminated[t]) next_values[t] - q_values[t]
                  + gamma (1 - done_t) c_{t+1} Delta_{t+1}

    with ``Delta`` after the row's last step 0: the trace of step t is the
    NEXT step's ratio (``target_probs[:, 0]`` is never read). Outputs:
    ``returns`` the Retrace targets ``Q_ret = q_values + Delta`` and
    ``advantages`` Delta; the sums are over Delta.

    Pass exactly one pair: ``target_probs`` and ``behaviour_probs``, or
    ``target_log_probs`` and ``behaviour_log_probs`` (a mix is a ValueError).
    No ``last_value``, ``bootstrap_values`` or ``importance``: ``next_values``
    is the bootstrap everywhere, so ``truncated`` only cuts the trace.
    Arguments otherwise as :func:`gae` (``time_axis`` required). Returns an :class:`Estimate`.
    """
    # The arguments by name, spelled out: torch.compile (2.11) cannot trace locals().
    return _route.estimate(RETRACE, {
        "rewards": rewards, "q_values": q_values, "next_values": next_values, "terminated": terminated,
        "truncated": truncated, "target_probs": target_probs, "behaviour_probs": behaviour_probs,
        "target_log_probs": target_log_probs, "behaviour_log_probs": behaviour_log_probs, "gamma": gamma,
        "lambda_": lambda_, "c_clip": c_clip, "time_axis": time_axis, "returns": returns,
        "advantages": advantages, "abs_sums": abs_sums, "sums": sums, "square_sums": square_sums,
        "stream": stream,
    })


def q_lambda(rewards: Array, q_values: Array, next_values: Array, terminated: Array,
             truncated: Optional[Array] = None, *, greedy: Optional[Array] = None, gamma: PerStep = 0.99,
             lambda_: PerStep = 0.9, time_axis: Optional[int] = None, returns: _Output = True,
             advantages: _Output = True, abs_sums: _Output = False, sums: _Output = False, square_sums: _Output = False,
             stream: Optional[Stream] = None) -> Estimate:
    """Q(lambda) returns as rlax's ``q_lambda`` defines them: Peng's without
    ``greedy``, Watkins' with it. ``q_values[t] = Q(s_t, a_t)``,
    ``next_values[t] = max_a Q(s_{t+1}, a)`` of the step's next state (the final
    observation's where truncated; read at every step), ``greedy[t]``: a flag,
    a_t is greedy (argmax_a Q(s_t, a)). For every row, backwards over time::

        lambda_t = lambda_                    (Peng)
                 = lambda_ greedy[t+1]        (Watkins: the trace goes on only through greedy actions)
        G_t = rewards[t] + gamma (1 - terminated[t]) [(1 - lambda_t) next_values[t] + lambda_t G_{t+1}]
                  if not done_t and t + 1 < T,
            = rewards[t] + gamma (1 - terminated[t]) next_values[t]   otherwise

    Outputs: ``returns`` G and ``advantages`` G - q_values (rlax's result);
    ``greedy[:, 0]`` is never read. No ``last_value``, ``bootstrap_values`` or
    ``importance``. Arguments otherwise as :func:`gae` (``time_axis`` required).
    Returns an :class:`Estimate`.
    """
    # The arguments by name, spelled out: torch.compile (2.11) cannot trace locals().
    return _route.estimate(Q_LAMBDA, {
        "rewards": rewards, "q_values": q_values, "next_values": next_values, "terminated": terminated,
        "truncated": truncated, "greedy": greedy, "gamma": gamma, "lambda_": lambda_, "time_axis": time_axis,
        "returns": returns, "advantages": advantages, "abs_sums": abs_sums, "sums": sums,
        "square_sums": square_sums, "stream": stream,
    })


def episodic_cumsum(inputs: Array, dones: Array, *, seed: Optional[Array] = None, boundary: str = "ends_at",
                    time_axis: Optional[int] = None, out: Optional[Array] = None,
                    stream: Optional[Stream] = None) -> Any:
    """Cumulative sums over time that restart at episode boundaries (a FORWARD
    scan; rl-triton's ``compute_episodic_prefix_sum``). For every row::

        reset_t = dones[t-1]   (boundary="ends_at": dones[t] ends an episode at t; dones[-1] = 0)
                = dones[t]     (boundary="starts_at": dones[t] starts one at t)
        C_t     = inputs[t] + (1 - reset_t) C_{t-1},    C_{-1} = seed (0 without a seed)

    ``seed`` is ``[B]``: a sum carried in from the previous buffer. Arrays and
    the required ``time_axis`` as :func:`gae` (``dones`` a flag array); ``out`` is written when given, else
    allocated (float32 for bfloat16/float16 inputs). Returns C.
    """
    # The arguments by name, spelled out: torch.compile (2.11) cannot trace locals().
    return _route.estimate(EPISODIC_CUMSUM, {
        "inputs": inputs, "dones": dones, "seed": seed, "boundary": boundary, "time_axis": time_axis,
        "out": out, "stream": stream,
    })


def eligibility_traces(inputs: Array, dones: Array, *, gamma: PerStep, lambda_: PerStep, seed: Optional[Array] = None,
                       time_axis: Optional[int] = None, out: Optional[Array] = None,
                    stream: Optional[Stream] = None) -> Any:
    """Accumulating eligibility traces, reset at episode ends (a FORWARD scan;
    rl-triton's ``compute_eligibility_traces``). For every row::

        e_t = inputs[t] + gamma lambda_ (1 - dones[t-1]) e_{t-1},    e_{-1} = seed (0 without one)

    (``dones[t]`` ends an episode at t, so the trace restarts at t + 1;
    ``dones[-1] = 0``). Otherwise as :func:`episodic_cumsum` (``time_axis`` required).
    Returns e.
    """
    # The arguments by name, spelled out: torch.compile (2.11) cannot trace locals().
    return _route.estimate(ELIGIBILITY_TRACES, {
        "inputs": inputs, "dones": dones, "gamma": gamma, "lambda_": lambda_, "seed": seed,
        "time_axis": time_axis, "out": out, "stream": stream,
    })
