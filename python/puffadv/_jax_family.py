"""The estimator family in JAX (exported by :mod:`puffadv.jax`): GAE, TD(lambda)
returns, V-trace, discounted returns, n-step returns, Retrace, Q(lambda),
episodic cumulative sums and eligibility traces, each one ``kind`` of the XLA
FFI handler ``puffadv_standard_estimate_*`` (src/jax/ffi_conventions.cpp), as
they are kinds of one core call. Arguments are checked before lowering by the
core's own checks, on the arrays' shapes and dtypes (``_core.jax_check_standard``);
rows are computed independently, so the call is batch-sharded (_jax_sharding).
Imported by puffadv.jax once its helpers exist (import that, not this module)."""
from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from . import _core
from . import jax as _pjax  # the shared helpers and registration, read at call time
from ._conventions import Estimate, VTraceEstimate
from ._family import _window, probability_pair, reset_at_start
from ._jax_sharding import RowwiseCall, result_type

# The core's estimator values (the handler's `kind` attribute).
_KINDS = {"gae": 0, "td_lambda": 1, "vtrace": 2, "discounted_returns": 3, "retrace": 4, "q_lambda": 5,
          "n_step_returns": 6, "episodic_sum": 7}
# Optional inputs by role, in the handler's order, with their bit in its `present` mask.
_OPTIONAL = (("values", 256), ("truncated", 1), ("last_value", 2), ("bootstrap_values", 4),
             ("importance", 8), ("next_values", 16), ("target_probs", 32), ("behaviour_probs", 64),
             ("greedy", 128))
_FLAG_ROLES = ("terminated", "truncated", "greedy")  # read as flags: non-zero means set
# Roles that are required whenever a function takes them (None is then a TypeError naming them).
_REQUIRED_ROLES = ("rewards", "terminated", "values", "next_values")


def _per_shard(static, rewards, terminated, *optional):
    """The custom call on whatever block of rows XLA hands it: (returns[, advantages])."""
    kind, present, gamma, lam, rho_clip, c_clip, rho_pg_clip, n, log_probs, reset_at_start, outputs = static
    dtype = np.dtype(rewards.dtype)
    scalar = dtype.type  # float64 attributes under x64, so no digit of gamma is lost
    out = result_type(rewards, dtype)
    call = jax.ffi.ffi_call(f"puffadv_standard_estimate_{'f64' if dtype == np.float64 else 'f32'}",
                            (out,) * outputs, vmap_method="broadcast_all")
    return tuple(call(rewards, terminated, *optional, kind=np.int32(kind), present=np.int32(present),
                      gamma=scalar(gamma), lambda_=scalar(lam), rho_clip=scalar(rho_clip),
                      c_clip=scalar(c_clip), rho_pg_clip=scalar(rho_pg_clip), n=np.int64(n),
                      log_probs=np.bool_(log_probs), reset_at_start=np.bool_(reset_at_start)))


_CALLS = {function: RowwiseCall(_per_shard, f"puffadv.jax.{function}")
          for function in ("gae", "td_lambda_returns", "vtrace", "discounted_returns", "n_step_returns",
                           "retrace", "q_lambda", "episodic_cumsum", "eligibility_traces")}


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _estimate(static, layout, rewards, terminated, optional):
    """`layout`: (the public function, names of the arrays passed, how the time axis is named)."""
    function, names, time_axis_label = layout
    return _CALLS[function](static, (rewards, terminated, *optional), names, time_axis_label)


@_estimate.defjvp
def _estimate_jvp(static, layout, primals, tangents):
    raise ValueError(_pjax._not_differentiable(layout[0]))


_estimate_jit = jax.jit(_estimate, static_argnums=(0, 1))


def _time_axis(time_axis) -> int:
    if isinstance(time_axis, bool) or not isinstance(time_axis, numbers.Integral):
        raise TypeError(f"time_axis must be an int (0: time-major [T, B], 1: batch-major [B, T]), "
                        f"got {type(time_axis).__name__}")
    return int(time_axis)


def _call(function, kind, arrays, *, gamma, lam=1.0, lambda_name="lambda_", rho_clip=1.0, c_clip=1.0,
          rho_pg_clip=1.0, n=1, log_probs=False, reset_at_start=False, time_axis=-1, advantages=True):
    """One call of the family. `arrays`: role -> (the caller's name, array or None).
    Returns (returns, advantages or None), shaped like the rewards role."""
    named = {role: (name, _pjax._array(x, name)) for role, (name, x) in arrays.items()
             if x is not None or role in _REQUIRED_ROLES}
    time_axis = _time_axis(time_axis)
    params = tuple(_pjax._scalar(p, name) for p, name in (
        (gamma, "gamma"), (lam, lambda_name), (rho_clip, "rho_clip"), (c_clip, "c_clip"),
        (rho_pg_clip, "rho_pg_clip")))
    n = _window(n)
    specs = {role: (*_pjax._spec(x), name) for role, (name, x) in named.items()}
    _core.jax_check_standard(kind, specs, *params, n, bool(log_probs), bool(reset_at_start), time_axis,
                             lambda_name, advantages)
    _pjax._register()

    typed = named.get("values", named["rewards"])[1]  # the outputs' dtype (float32 for 16-bit floats)
    compute = _pjax._compute_dtype(typed.dtype)
    time_major = time_axis in (0, -2)

    def prepare(role):  # batch-major [B, T] in the compute dtype; last_value is [B]
        x = named[role][1]
        x = _pjax._as_flag(x, compute) if role in _FLAG_ROLES else _pjax._as_float(x, compute)
        return jnp.swapaxes(x, 0, 1) if time_major and x.ndim == 2 else x

    present_roles = [role for role, _ in _OPTIONAL if role in named]
    present = sum(bit for role, bit in _OPTIONAL if role in named)
    static = (_KINDS[kind], present, *params, n, bool(log_probs), bool(reset_at_start), 2 if advantages else 1)
    names = tuple(named[role][0] for role in ("rewards", "terminated", *present_roles))
    time_axis_label = f"axis {'0' if time_major else '-1'}, time_axis={time_axis}"
    outputs = _estimate_jit(static, (function, names, time_axis_label), prepare("rewards"),
                            prepare("terminated"), tuple(prepare(role) for role in present_roles))
    if time_major:
        outputs = tuple(jnp.swapaxes(x, 0, 1) for x in outputs)
    return outputs[0], (outputs[1] if advantages else None)


def _bootstrap_roles(truncated, last_value, bootstrap_values):
    return {"truncated": ("truncated", truncated), "last_value": ("last_value", last_value),
            "bootstrap_values": ("bootstrap_values", bootstrap_values)}


_COMMON_DOC = """

    Arrays are 2-D JAX (or NumPy) arrays, ``[B, T]`` with ``time_axis=-1`` (default)
    or ``[T, B]`` with ``time_axis=0`` (XLA transposes those around the call);
    per-row arrays are ``[B]``. Floats: float32, float64 (``jax_enable_x64``),
    bfloat16/float16 (computed in float32, float32 results); flags bool, uint8 or
    the float dtype. Shapes, dtypes and scalars are checked before lowering with
    the messages of the NumPy function; a step both terminated and truncated
    depends on the data and fails when the call runs. Scalars must be concrete
    (static under ``jit``). ``jax.vmap`` adds leading batch axes to one call.
    Under ``jit``, arrays sharded over the batch axis ``B`` (axis 0, or axis 1
    with ``time_axis=0``) stay sharded: no collective, outputs sharded alike.
    Not differentiable: ``jax.grad`` through an input raises ``ValueError``.
    On a GPU the GPU kernels run, on XLA's stream; there a step both terminated
    and truncated gives NaN in its row instead of an error (the host never waits
    for the GPU to check the data).
"""


def _value_roles(values, truncated, last_value, bootstrap_values, importance):
    return {"values": ("values", values), **_bootstrap_roles(truncated, last_value, bootstrap_values),
            "importance": ("importance", importance)}


def gae(rewards, values, terminated, truncated=None, *, last_value=None, bootstrap_values=None,
        importance=None, gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0,
        time_axis=-1) -> Estimate:
    """Generalised advantage estimation as TorchRL, SB3, CleanRL and rlax define it
    (same numbers as :func:`puffadv.gae`), as an XLA custom call. Pass exactly one of
    ``last_value`` (``[B]``) and ``bootstrap_values`` (rewards' shape); ``truncated``
    needs ``bootstrap_values``. Returns an :class:`Estimate` with ``advantages`` and
    ``returns`` (advantages + values)."""
    returns, advantages = _call(
        "gae", "gae", {"rewards": ("rewards", rewards), "terminated": ("terminated", terminated),
                       **_value_roles(values, truncated, last_value, bootstrap_values, importance)},
        gamma=gamma, lam=gae_lambda, lambda_name="gae_lambda", rho_clip=rho_clip, c_clip=c_clip,
        time_axis=time_axis)
    return Estimate(advantages, returns)


def td_lambda_returns(rewards, values, terminated, truncated=None, *, last_value=None,
                      bootstrap_values=None, importance=None, gamma=0.99, lambda_=0.95, rho_clip=1.0,
                      c_clip=1.0, time_axis=-1) -> Estimate:
    """TD(lambda) returns as rlax's ``lambda_returns`` and TorchRL define them (same
    numbers as :func:`puffadv.td_lambda_returns`), as an XLA custom call. Returns an
    :class:`Estimate`: ``returns`` G and ``advantages`` G - values."""
    returns, advantages = _call(
        "td_lambda_returns", "td_lambda",
        {"rewards": ("rewards", rewards), "terminated": ("terminated", terminated),
         **_value_roles(values, truncated, last_value, bootstrap_values, importance)},
        gamma=gamma, lam=lambda_, rho_clip=rho_clip, c_clip=c_clip, time_axis=time_axis)
    return Estimate(advantages, returns)


def vtrace(rewards, values, terminated, truncated=None, *, last_value=None, bootstrap_values=None,
           importance=None, gamma=0.99, lambda_=1.0, rho_clip=1.0, c_clip=1.0, rho_pg_clip=1.0,
           time_axis=-1) -> VTraceEstimate:
    """V-trace (IMPALA), same numbers as :func:`puffadv.vtrace`, as an XLA custom
    call. Returns a :class:`VTraceEstimate`: targets ``vs`` and the policy-gradient
    advantages ``pg_advantages``."""
    vs, pg_advantages = _call(
        "vtrace", "vtrace", {"rewards": ("rewards", rewards), "terminated": ("terminated", terminated),
                             **_value_roles(values, truncated, last_value, bootstrap_values, importance)},
        gamma=gamma, lam=lambda_, rho_clip=rho_clip, c_clip=c_clip, rho_pg_clip=rho_pg_clip,
        time_axis=time_axis)
    return VTraceEstimate(vs, pg_advantages)


def discounted_returns(rewards, terminated, truncated=None, *, last_value=None, bootstrap_values=None,
                       gamma=0.99, time_axis=-1) -> Estimate:
    """Returns-to-go ``G_t = r_t + gamma (1 - terminated_t) B_t + gamma (1 - done_t) G_{t+1}``
    (same numbers as :func:`puffadv.discounted_returns`), ``B_t`` the bootstrap at
    truncated steps and the last step (``last_value`` or ``bootstrap_values``; none
    at all: 0), as an XLA custom call. Reads no values. Returns an
    :class:`Estimate` with ``returns`` and ``advantages=None``."""
    returns, _ = _call(
        "discounted_returns", "discounted_returns",
        {"rewards": ("rewards", rewards), "terminated": ("terminated", terminated),
         **_bootstrap_roles(truncated, last_value, bootstrap_values)},
        gamma=gamma, time_axis=time_axis, advantages=False)
    return Estimate(None, returns)


def n_step_returns(rewards, values, terminated, truncated=None, *, n, last_value=None,
                   bootstrap_values=None, gamma=0.99, lambda_=1.0, time_axis=-1) -> Estimate:
    """rlax's n-step bootstrapped returns ``G^(n)`` (same numbers as
    :func:`puffadv.n_step_returns`): windows of ``n >= 1`` steps, cut where an
    episode ends, bootstrapped as :func:`gae` (``last_value`` or
    ``bootstrap_values``), with ``lambda_`` mixing in the bootstrap at each step
    of the window (1: plain n-step returns). ``n`` must be a concrete int.
    Returns an :class:`Estimate`: ``returns`` G^(n) and ``advantages`` G^(n) - values."""
    returns, advantages = _call(
        "n_step_returns", "n_step_returns",
        {"rewards": ("rewards", rewards), "terminated": ("terminated", terminated),
         **_value_roles(values, truncated, last_value, bootstrap_values, None)},
        gamma=gamma, lam=lambda_, n=n, time_axis=time_axis)
    return Estimate(advantages, returns)


def retrace(rewards, q_values, next_values, terminated, truncated=None, *, target_probs=None,
            behaviour_probs=None, target_log_probs=None, behaviour_log_probs=None, gamma=0.99,
            lambda_=1.0, c_clip=1.0, time_axis=-1) -> Estimate:
    """Retrace(lambda) on action values (same numbers as :func:`puffadv.retrace`):
    ``Delta_t = r_t + gamma (1 - terminated_t) next_values_t - q_values_t
    + gamma (1 - done_t) c_{t+1} Delta_{t+1}`` with ``c_t = lambda_ min(c_clip, pi_t / mu_t)``,
    ``next_values`` the expected next-state value ``E_pi Q(s_{t+1}, .)``, and exactly
    one pair of probabilities of the taken actions (or log-probabilities).
    Returns an :class:`Estimate`: ``returns`` Q_ret and ``advantages`` Q_ret - q_values."""
    log_probs, target, behaviour = probability_pair(target_probs, behaviour_probs, target_log_probs,
                                                    behaviour_log_probs)
    prefix = "target_log_probs" if log_probs else "target_probs"
    returns, advantages = _call(
        "retrace", "retrace",
        {"rewards": ("rewards", rewards), "terminated": ("terminated", terminated),
         "values": ("q_values", q_values), "next_values": ("next_values", next_values),
         "truncated": ("truncated", truncated), "target_probs": (prefix, target),
         "behaviour_probs": (prefix.replace("target", "behaviour"), behaviour)},
        gamma=gamma, lam=lambda_, c_clip=c_clip, log_probs=log_probs, time_axis=time_axis)
    return Estimate(advantages, returns)


def q_lambda(rewards, q_values, next_values, terminated, truncated=None, *, greedy=None, gamma=0.99,
             lambda_=0.9, time_axis=-1) -> Estimate:
    """Q(lambda) as rlax defines it (same numbers as :func:`puffadv.q_lambda`): Peng's,
    or Watkins's with ``greedy`` flags (the trace is cut after a non-greedy action);
    ``next_values`` is ``max_a Q(s_{t+1}, a)``. Returns an :class:`Estimate`:
    ``returns`` G and ``advantages`` G - q_values."""
    returns, advantages = _call(
        "q_lambda", "q_lambda",
        {"rewards": ("rewards", rewards), "terminated": ("terminated", terminated),
         "values": ("q_values", q_values), "next_values": ("next_values", next_values),
         "truncated": ("truncated", truncated), "greedy": ("greedy", greedy)},
        gamma=gamma, lam=lambda_, time_axis=time_axis)
    return Estimate(advantages, returns)


def _episodic_roles(inputs, dones, seed):
    return {"rewards": ("inputs", inputs), "terminated": ("dones", dones), "last_value": ("seed", seed)}


def episodic_cumsum(inputs, dones, *, seed=None, boundary="ends_at", time_axis=-1):
    """Cumulative sums over time that restart at episode boundaries (same numbers
    as :func:`puffadv.episodic_cumsum`): ``C_t = inputs_t + (1 - reset_t) C_{t-1}``,
    ``C_{-1} = seed`` (``[B]``, absent: 0). ``boundary="ends_at"``: ``dones[t]`` ends an
    episode, the sum restarts at ``t + 1``; ``"starts_at"``: it restarts at ``t``.
    Returns the sums, shaped like ``inputs``."""
    sums, _ = _call("episodic_cumsum", "episodic_sum", _episodic_roles(inputs, dones, seed), gamma=1.0,
                    lam=1.0, reset_at_start=reset_at_start(boundary), time_axis=time_axis, advantages=False)
    return sums


def eligibility_traces(inputs, dones, *, gamma, lambda_, seed=None, time_axis=-1):
    """Eligibility traces ``e_t = inputs_t + gamma lambda_ (1 - dones_{t-1}) e_{t-1}``,
    ``e_{-1} = seed`` (``[B]``, absent: 0), as rl-triton defines them (same numbers as
    :func:`puffadv.eligibility_traces`). Returns the traces, shaped like ``inputs``."""
    traces, _ = _call("eligibility_traces", "episodic_sum", _episodic_roles(inputs, dones, seed),
                      gamma=gamma, lam=lambda_, time_axis=time_axis, advantages=False)
    return traces


for _function in (gae, td_lambda_returns, vtrace, discounted_returns, n_step_returns, retrace, q_lambda,
                  episodic_cumsum, eligibility_traces):
    _function.__doc__ += _COMMON_DOC
