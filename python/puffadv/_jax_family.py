"""The estimator family in JAX (exported by :mod:`puffadv.jax`): GAE, TD(lambda)
returns, V-trace, discounted returns, n-step returns, Retrace, Q(lambda),
episodic cumulative sums and eligibility traces, each one ``kind`` of the XLA
FFI handler ``puffadv_standard_estimate_*`` (src/jax/ffi_conventions.cpp), as
they are kinds of one core call. Each function's arrays, scalars and result are
its entry in _estimators.py. Arguments are checked before lowering by the
core's own checks, on the arrays' shapes and dtypes (``_core.jax_check_standard``);
rows are computed independently, so the call is batch-sharded (_jax_sharding).
Imported by puffadv.jax (import that, not this module)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import _core, _jax_common, _vjp
from ._arguments import call_of, window
from ._eager import as_views
from ._episode_starts import with_terminated
from ._shapes import required_time_axis
from ._estimators import (DISCOUNTED_RETURNS, ELIGIBILITY_TRACES, EPISODIC_CUMSUM, ESTIMATORS, FLAG_ROLES, GAE,
                          N_STEP_RETURNS, Q_LAMBDA, RETRACE, TD_LAMBDA, VTRACE, Estimate, Estimator,
                          VTraceEstimate)
from ._jax_sharding import RowwiseCall, operands_alike, result_type

# Optional inputs by role, in the handler's order, with their bit in its `present` mask.
_OPTIONAL = (("values", 256), ("truncated", 1), ("last_value", 2), ("bootstrap_values", 4),
             ("importance", 8), ("next_values", 16), ("target_probs", 32), ("behaviour_probs", 64),
             ("greedy", 128), ("gamma_steps", 512), ("lambda_steps", 1024), ("sample_mask", 2048))
_OPERANDS = ("rewards", "terminated")  # the handler's two fixed operands, every kind's


def _per_shard(static, rewards, terminated, *optional):
    """The custom call on whatever block of rows XLA hands it: (returns[, advantages])."""
    kind, present, gamma, lam, rho_clip, c_clip, rho_pg_clip, alpha, n, log_probs, reset_at_start, outputs = static
    dtype = np.dtype(rewards.dtype)
    scalar = dtype.type  # float64 attributes under x64, so no digit of gamma is lost
    out = result_type(rewards, dtype)
    call = jax.ffi.ffi_call(f"puffadv_standard_estimate_{'f64' if dtype == np.float64 else 'f32'}",
                            (out,) * outputs, vmap_method="broadcast_all")
    return tuple(call(rewards, terminated, *optional, kind=np.int32(kind), present=np.int32(present),
                      gamma=scalar(gamma), lambda_=scalar(lam), rho_clip=scalar(rho_clip),
                      c_clip=scalar(c_clip), rho_pg_clip=scalar(rho_pg_clip), n=np.int64(n),
                      log_probs=np.bool_(log_probs), reset_at_start=np.bool_(reset_at_start),
                      alpha=scalar(alpha)))


_CALLS = {function: RowwiseCall(_per_shard, f"puffadv.jax.{function}") for function in ESTIMATORS}


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _estimate(static, layout, rewards, terminated, optional):
    """`layout`: (the public function, names of the arrays passed, how the time axis is named)."""
    function, names, time_axis_label = layout
    return _CALLS[function](static, (rewards, terminated, *optional), names, time_axis_label)


def _estimate_fwd(static, layout, rewards, terminated, optional):
    outputs = _estimate(static, layout, rewards, terminated, optional)
    return outputs, (rewards, terminated, optional, outputs)


def _estimate_bwd(static, layout, residuals, cotangents):
    """The VJP (_vjp, in jax.numpy) on the batch-major arrays the handler read: every
    float array's gradient; flags get zeros (read as booleans). The scalars are static."""
    rewards, terminated, optional, outputs = residuals
    _, present, gamma, lam, rho_clip, c_clip, rho_pg_clip, alpha, n, log_probs, reset_at_start, _ = static
    estimator = ESTIMATORS[layout[0]]
    roles = ("rewards", "terminated", *(role for role, bit in _OPTIONAL if present & bit))
    arrays = dict(zip(roles, (rewards, terminated, *optional)))
    series = ("advantages",) if estimator.result == "array" else ("returns", "advantages")[:len(outputs)]
    grads = _vjp.vjp(jnp, estimator.kind, {r: x for r, x in arrays.items() if r not in FLAG_ROLES},
                     {r: x != 0 for r, x in arrays.items() if r in FLAG_ROLES},
                     {"gamma": gamma, "lambda": lam, "rho_clip": rho_clip, "c_clip": c_clip,
                      "rho_pg_clip": rho_pg_clip, "alpha": alpha}, dict(zip(series, outputs)), dict(zip(series, cotangents)),
                     n=n, log_probs=log_probs, reset_at_start=reset_at_start)
    result = tuple(jnp.zeros_like(x) if role in FLAG_ROLES else grads[role].astype(x.dtype)
                   for role, x in arrays.items())
    return result[0], result[1], result[2:]


_estimate.defvjp(_estimate_fwd, _estimate_bwd)


def _estimate_alike(static, layout, rewards, terminated, optional):
    """_estimate on operands typed alike over shard_map's manual axes and Explicit mesh axes
    (_jax_sharding.operands_alike)."""
    rewards, terminated, *optional = operands_alike((rewards, terminated, *optional))
    return _estimate(static, layout, rewards, terminated, tuple(optional))


_estimate_jit = jax.jit(_estimate_alike, static_argnums=(0, 1))


def _call(estimator: Estimator, args: dict):
    """One call of the family from the public function's arguments by name: the
    handler's operands by role (the rewards and terminated roles first, then the
    required ones, then the optional ones given, in the signature's order)."""
    if estimator.episode_starts and (args["episode_starts"] is not None or args["last_episode_start"] is not None):
        args = with_terminated(estimator.function, args)
    args = _traced_scalars_per_step(estimator, args)
    # n is checked after the arrays and scalars here, as puffadv.jax always has.
    request = call_of(estimator, {"time_axis": None, "stream": None, **args, "n": 1,
                                  **{name: None for name in _absent_outputs(estimator, args)}})
    order = [*_OPERANDS, *(r for r in list(request.arrays)[:request.required] if r not in _OPERANDS),
             *list(request.arrays)[request.required:]]
    required = set(list(request.arrays)[:request.required])
    named = {role: (request.names[role], _jax_common._array(request.arrays[role], request.names[role],
                                                                      estimator.function))
             for role in order if request.arrays[role] is not None or role in required}
    time_axis = required_time_axis(args["time_axis"], estimator.function)
    views, _, plan, time_axis = as_views("jax", {role: x for role, (_, x) in named.items()}, {}, time_axis,
                                         {role: name for role, (name, _) in named.items()})
    named = {role: (name, views[role]) for role, (name, _) in named.items()}
    params = tuple(_jax_common._scalar(request.scalars[role], name, estimator.function) for role, name in
                   zip(request.scalars, request.scalar_names))
    n = window(args["n"]) if estimator.window else 1
    log_probs, reset_at_start = request.log_probs, request.reset_at_start
    advantages = "advantages" in estimator.outputs and estimator.result != "array"
    specs = {role: (*_jax_common._spec(x), name) for role, (name, x) in named.items()}
    _core.jax_check_standard(estimator.kind, specs, *params[:5], n, log_probs, reset_at_start, time_axis,
                             estimator.lambda_name, advantages, alpha=params[5])
    _jax_common._register()

    typed = named.get("values", named["rewards"])[1]  # the outputs' dtype (float32 for 16-bit floats)
    compute = _jax_common._compute_dtype(typed.dtype)
    time_major = time_axis in (0, -2)

    def prepare(role):  # batch-major [B, T] in the compute dtype; last_value is [B]
        x = named[role][1]
        x = _jax_common._as_flag(x, compute) if role in FLAG_ROLES else _jax_common._as_float(x, compute)
        return jnp.swapaxes(x, 0, 1) if time_major and x.ndim == 2 else x

    present_roles = [role for role, _ in _OPTIONAL if role in named]
    present = sum(bit for role, bit in _OPTIONAL if role in named)
    static = (estimator.code, present, *params, n, log_probs, reset_at_start, 2 if advantages else 1)
    names = tuple(named[role][0] for role in (*_OPERANDS, *present_roles))
    time_axis_label = f"axis {'0' if time_major else '-1'}, time_axis={time_axis}"
    outputs = _estimate_jit(static, (estimator.function, names, time_axis_label), prepare("rewards"),
                            prepare("terminated"), tuple(prepare(role) for role in present_roles))
    if time_major:
        outputs = tuple(jnp.swapaxes(x, 0, 1) for x in outputs)
    if plan is not None:  # in the caller's shape (_shapes)
        outputs = tuple(x.reshape(plan.shape) for x in outputs)
    returns, advantages = outputs[0], (outputs[1] if advantages else None)
    if estimator.result == "array":
        return returns
    return estimator.make_result({"advantages": advantages, "returns": returns, "abs_sums": None, "sums": None,
                                  "square_sums": None})


def _traced_scalars_per_step(estimator: Estimator, args: dict) -> dict:
    """A 0-d gamma or lambda traced under jit (not concrete, so no attribute of the call)
    as a per-step array: broadcast to the rewards' shape. Concrete ones stay scalars."""
    for role in ("gamma", "lambda"):
        name = estimator.scalars.get(role, (None,))[0]
        value = args.get(name)
        if isinstance(value, jax.core.Tracer) and getattr(value, "ndim", None) == 0:
            rewards = args[estimator.arguments[0].name]
            args = {**args, name: jnp.broadcast_to(value, jnp.shape(rewards))}
    return args


def _absent_outputs(estimator: Estimator, args: dict) -> tuple:
    """The NumPy functions' output arguments, which the JAX functions do not take."""
    return tuple(name for name in estimator.outputs.values() if name not in args)


_COMMON_DOC = """

    Arrays are JAX (or NumPy) arrays and ``time_axis`` is REQUIRED (a TypeError
    naming both layouts when it is missing): ``0`` for time-major ``[T, B]`` or
    ``[T, *B]``, ``-1`` for batch-major ``[B, T]`` or ``[*B, T]``, ``-2`` for
    ``[*B, T, 1]`` (XLA transposes and reshapes around the call; outputs come back
    in the rewards' shape); per-row arrays are ``[B]`` (or ``[*B]``, ``[B, 1]``,
    ``[1, B]``). ``episode_starts`` and ``last_episode_start`` (SB3's and
    CleanRL's flags, where the function takes them) as :func:`puffadv.gae`.
    Floats: float32, float64 (``jax_enable_x64``), bfloat16/float16 (computed in
    float32, float32 results); flags bool, uint8 or the float dtype; a step both
    terminated and truncated is terminated (Gymnasium's meaning). Shapes, dtypes
    and scalars are checked before lowering with the messages of the NumPy
    function. Scalars must be concrete (static under ``jit``), but for ``gamma`` and the lambda, which may also be
    arrays of the rewards' shape (per step) and, under ``jit``, traced (a traced 0-d one is broadcast
    to the rewards' shape). ``jax.vmap`` adds leading batch axes to one call.
    Under ``jit``, arrays sharded over the batch axis ``B`` (axis 0, or axis 1
    with ``time_axis=0``) stay sharded: no collective, outputs sharded alike.
    Differentiable (``jax.custom_vjp``): ``jax.grad``/``jax.vjp`` give the gradient of
    every float array (flags get zeros), per-step ``gamma`` and lambda arrays included; a
    traced 0-d ``gamma`` or lambda (``jax.grad`` by it, a meta-gradient) gets its
    gradient as the per-step array it is broadcast to. Python numbers are static (no
    gradient). Clips pass the gradient below the clip and none at or above it (leaky
    V-trace: ``1 - alpha`` of it above). ``jax.lax.stop_gradient`` is the
    caller's choice, as in rlax.
    On a GPU the GPU kernels run, on XLA's stream.
"""


def gae(rewards, values, terminated=None, truncated=None, *, episode_starts=None,
        last_episode_start=None, last_value=None, bootstrap_values=None,
        importance=None, next_values=None, gamma=0.99, gae_lambda=0.95, rho_clip=1.0, c_clip=1.0,
        time_axis=None) -> Estimate:
    """Generalised advantage estimation as TorchRL, SB3, CleanRL and rlax define it
    (same numbers as :func:`puffadv.gae`), as an XLA custom call. Pass exactly one of
    ``last_value`` (``[B]``) and ``bootstrap_values`` (rewards' shape); ``truncated``
    needs ``bootstrap_values``; or ``next_values`` (rewards' shape) alone, read at
    every step. Returns an :class:`Estimate` with ``advantages`` and
    ``returns`` (advantages + values)."""
    return _call(GAE, locals())


def td_lambda_returns(rewards, values, terminated=None, truncated=None, *, episode_starts=None,
                      last_episode_start=None, last_value=None,
                      bootstrap_values=None, importance=None, next_values=None, gamma=0.99, lambda_=0.95,
                      rho_clip=1.0, c_clip=1.0, time_axis=None) -> Estimate:
    """TD(lambda) returns as rlax's ``lambda_returns`` and TorchRL define them (same
    numbers as :func:`puffadv.td_lambda_returns`), as an XLA custom call. Returns an
    :class:`Estimate`: ``returns`` G and ``advantages`` G - values."""
    return _call(TD_LAMBDA, locals())


def vtrace(rewards, values, terminated=None, truncated=None, *, episode_starts=None,
           last_episode_start=None, last_value=None, bootstrap_values=None,
           importance=None, next_values=None, sample_mask=None, gamma=0.99, lambda_=1.0, rho_clip=1.0,
           c_clip=1.0, rho_pg_clip=1.0, alpha=1.0, time_axis=None) -> VTraceEstimate:
    """V-trace (IMPALA), same numbers as :func:`puffadv.vtrace` (``next_values``,
    ``sample_mask`` and leaky ``alpha`` included), as an XLA custom
    call. Returns a :class:`VTraceEstimate`: targets ``vs`` and the policy-gradient
    advantages ``pg_advantages``."""
    return _call(VTRACE, locals())


def discounted_returns(rewards, terminated=None, truncated=None, *, episode_starts=None,
                       last_episode_start=None, last_value=None, bootstrap_values=None,
                       gamma=0.99, time_axis=None) -> Estimate:
    """Returns-to-go ``G_t = r_t + gamma (1 - terminated_t) B_t + gamma (1 - done_t) G_{t+1}``
    (same numbers as :func:`puffadv.discounted_returns`), ``B_t`` the bootstrap at
    truncated steps and the last step (``last_value`` or ``bootstrap_values``; none
    at all: 0), as an XLA custom call. Reads no values. Returns an
    :class:`Estimate` with ``returns`` and ``advantages=None``."""
    return _call(DISCOUNTED_RETURNS, locals())


def n_step_returns(rewards, values, terminated=None, truncated=None, *, episode_starts=None,
                   last_episode_start=None, n, last_value=None,
                   bootstrap_values=None, next_values=None, gamma=0.99, lambda_=1.0, time_axis=None) -> Estimate:
    """rlax's n-step bootstrapped returns ``G^(n)`` (same numbers as
    :func:`puffadv.n_step_returns`): windows of ``n >= 1`` steps, cut where an
    episode ends, bootstrapped as :func:`gae` (``last_value`` or
    ``bootstrap_values``), with ``lambda_`` mixing in the bootstrap at each step
    of the window (1: plain n-step returns). ``n`` must be a concrete int.
    Returns an :class:`Estimate`: ``returns`` G^(n) and ``advantages`` G^(n) - values."""
    return _call(N_STEP_RETURNS, locals())


def retrace(rewards, q_values, next_values, terminated, truncated=None, *, target_probs=None,
            behaviour_probs=None, target_log_probs=None, behaviour_log_probs=None, gamma=0.99,
            lambda_=1.0, c_clip=1.0, time_axis=None) -> Estimate:
    """Retrace(lambda) on action values (same numbers as :func:`puffadv.retrace`):
    ``Delta_t = r_t + gamma (1 - terminated_t) next_values_t - q_values_t
    + gamma (1 - done_t) c_{t+1} Delta_{t+1}`` with ``c_t = lambda_ min(c_clip, pi_t / mu_t)``,
    ``next_values`` the expected next-state value ``E_pi Q(s_{t+1}, .)``, and exactly
    one pair of probabilities of the taken actions (or log-probabilities).
    Returns an :class:`Estimate`: ``returns`` Q_ret and ``advantages`` Q_ret - q_values."""
    return _call(RETRACE, locals())


def q_lambda(rewards, q_values, next_values, terminated, truncated=None, *, greedy=None, gamma=0.99,
             lambda_=0.9, time_axis=None) -> Estimate:
    """Q(lambda) as rlax defines it (same numbers as :func:`puffadv.q_lambda`): Peng's,
    or Watkins's with ``greedy`` flags (the trace is cut after a non-greedy action);
    ``next_values`` is ``max_a Q(s_{t+1}, a)``. Returns an :class:`Estimate`:
    ``returns`` G and ``advantages`` G - q_values."""
    return _call(Q_LAMBDA, locals())


def episodic_cumsum(inputs, dones, *, seed=None, boundary="ends_at", time_axis=None):
    """Cumulative sums over time that restart at episode boundaries (same numbers
    as :func:`puffadv.episodic_cumsum`): ``C_t = inputs_t + (1 - reset_t) C_{t-1}``,
    ``C_{-1} = seed`` (``[B]``, absent: 0). ``boundary="ends_at"``: ``dones[t]`` ends an
    episode, the sum restarts at ``t + 1``; ``"starts_at"``: it restarts at ``t``.
    Returns the sums, shaped like ``inputs``."""
    return _call(EPISODIC_CUMSUM, locals())


def eligibility_traces(inputs, dones, *, gamma, lambda_, seed=None, time_axis=None):
    """Eligibility traces ``e_t = inputs_t + gamma lambda_ (1 - dones_{t-1}) e_{t-1}``,
    ``e_{-1} = seed`` (``[B]``, absent: 0), as rl-triton defines them (same numbers as
    :func:`puffadv.eligibility_traces`). Returns the traces, shaped like ``inputs``."""
    return _call(ELIGIBILITY_TRACES, locals())


for _function in (gae, td_lambda_returns, vtrace, discounted_returns, n_step_returns, retrace, q_lambda,
                  episodic_cumsum, eligibility_traces):
    _function.__doc__ += _COMMON_DOC
