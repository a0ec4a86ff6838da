"""Every estimator, described once: its array arguments by name and role, which
are required (the others it does not take are refused), its outputs, its
scalars with their defaults, lambda's spelling, and the result it returns.

The NumPy/DLPack functions (_conventions.py, _family.py, _api.py), the torch
operators' Python side (_compiled.py, _torch_conventions.py) and the JAX
functions (_jax_family.py) are driven by these entries; the public functions'
signatures repeat them for type checkers, and tests/python/test_estimators.py
holds every signature to its entry. A role is the core's name of an argument
(`_core.estimate` takes its arrays keyed by role); a name is the caller's.
This module imports nothing of puffadv: every layer reads it.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional


class Estimate(NamedTuple):
    """What gae(), td_lambda_returns() and compute_puff_advantage(..., fused) return.
    Outputs that were not requested are None."""
    advantages: Any
    returns: Any
    abs_sums: Any = None     #: [B]: sum over time of |advantages| (prioritised replay)
    sums: Any = None         #: [B]: sum over time of advantages
    square_sums: Any = None  #: [B]: sum over time of advantages**2


class VTraceEstimate(NamedTuple):
    """What vtrace() returns: the value targets vs and IMPALA's policy-gradient
    advantages; the sums are over the pg advantages. Unrequested outputs are None."""
    vs: Any
    pg_advantages: Any
    abs_sums: Any = None
    sums: Any = None
    square_sums: Any = None


# The core's roles, in the order of its argument table (and of the torch.compile operator).
INPUT_ROLES = ("rewards", "values", "terminated", "truncated", "last_value", "bootstrap_values", "importance",
               "next_values", "target_probs", "behaviour_probs", "greedy", "gamma_steps", "lambda_steps",
               "sample_mask")
OUTPUT_ROLES = ("advantages", "returns", "abs_sums", "sums", "square_sums")
SUM_ROLES = frozenset({"abs_sums", "sums", "square_sums"})  # [B] row sums; the others are [rows, horizon]
SCALAR_ROLES = ("gamma", "lambda", "rho_clip", "c_clip", "rho_pg_clip", "alpha")  # a scalar not taken is 1.0
FLAG_ROLES = frozenset({"terminated", "truncated", "greedy", "sample_mask"})  # read as flags: non-zero means set
NO_DEFAULT = None  # a scalar the caller must pass (eligibility_traces' gamma and lambda_)
# gamma and lambda given as arrays of the rewards' shape (per step) travel as these input roles.
STEP_ROLES = {"gamma": "gamma_steps", "lambda": "lambda_steps"}


class Argument(NamedTuple):
    """One array argument: the caller's name, the core's role, and whether it must be an
    array (an optional one may be None). `log_probs`: one of retrace's log-probability pair,
    which fills the role of its plain twin and sets the core's log_probs."""
    name: str
    role: str
    required: bool
    log_probs: bool = False


class Estimator(NamedTuple):
    """One public estimator (puffadv.<function>, puffadv.jax.<function>,
    torch.ops.puffadv.<function>) as one kind of the core's one call."""
    function: str      # the public name
    kind: str          # the core's estimator (_core.estimate's kind)
    code: int          # the core's estimator value (include/puffadv/conventions.hpp; the JAX handler's `kind`)
    arguments: tuple   # Argument per array argument, in the signature's order; roles not listed are refused
    outputs: dict      # output role -> the caller's name, in OUTPUT_ROLES order; roles not listed: never made
    scalars: dict      # scalar role -> (the caller's name, default or NO_DEFAULT); roles not listed are 1.0
    lambda_name: str   # lambda as the core's messages spell it
    result: str        # "Estimate", "VTraceEstimate" or "array" (the first output, alone)
    torch_outputs: tuple = ()  # output roles torch.ops.puffadv.<function> returns (its schema: src/torch)
    window: bool = False       # takes `n`, the window length (n_step_returns)
    boundary: bool = False     # takes `boundary`, the core's reset_at_start (episodic_cumsum)
    episode_starts: bool = False  # takes SB3's/CleanRL's episode_starts for terminated (_episode_starts)
    direction: bool = False    # takes `reverse`, the core's direction (linear_recurrence)

    def names(self, log_probs: bool = False) -> dict:
        """role -> the caller's name of every array argument and output (the log-probability
        pair's names when `log_probs`)."""
        named = {a.role: a.name for a in self.arguments if a.log_probs == log_probs or a.role not in
                 {b.role for b in self.arguments if b.log_probs}}
        return {**named, **self.outputs}

    def scalar_names(self) -> tuple:
        """The caller's names of the six scalars, in SCALAR_ROLES order (lambda as lambda_name)."""
        return tuple(self.scalars.get(role, (self.lambda_name if role == "lambda" else role,))[0]
                     for role in SCALAR_ROLES)

    def make_result(self, outputs: dict):
        """The public result from the outputs by role (None: not asked for)."""
        if self.result == "array":
            return outputs[next(iter(self.outputs))]
        series = (outputs["returns"], outputs["advantages"]) if self.result == "VTraceEstimate" else \
            (outputs["advantages"], outputs["returns"])
        kind = VTraceEstimate if self.result == "VTraceEstimate" else Estimate
        return kind(*series, outputs["abs_sums"], outputs["sums"], outputs["square_sums"])


def _required(*names: str, roles: Optional[dict] = None) -> tuple:
    return tuple(Argument(n, (roles or {}).get(n, n), True) for n in names)


def _optional(*names: str, roles: Optional[dict] = None) -> tuple:
    return tuple(Argument(n, (roles or {}).get(n, n), False) for n in names)


_STANDARD_OUTPUTS = {role: role for role in OUTPUT_ROLES}
_BOOTSTRAP = _optional("truncated", "last_value", "bootstrap_values")
# terminated may come as episode_starts instead (issue 33): optional to the signature, required by the core.
# next_values (issue 29): V(s_{t+1}) at every step, in place of the bootstrap pair.
_VALUE_ARGUMENTS = (*_required("rewards", "values"), *_optional("terminated"), *_BOOTSTRAP,
                    *_optional("importance", "next_values"))
_CLIPS = {"rho_clip": ("rho_clip", 1.0), "c_clip": ("c_clip", 1.0)}
_ACTION_VALUES = _required("rewards", "q_values", "next_values", "terminated", roles={"q_values": "values"})
_EPISODIC = (*_required("inputs", "dones", roles={"inputs": "rewards", "dones": "terminated"}),
             *_optional("seed", roles={"seed": "last_value"}))
_EPISODIC_OUTPUT = {"advantages": "out"}

GAE = Estimator(
    "gae", "gae", 0, _VALUE_ARGUMENTS, _STANDARD_OUTPUTS,
    {"gamma": ("gamma", 0.99), "lambda": ("gae_lambda", 0.95), **_CLIPS}, "gae_lambda", "Estimate",
    torch_outputs=("advantages", "returns"), episode_starts=True)
TD_LAMBDA = Estimator(
    "td_lambda_returns", "td_lambda", 1, _VALUE_ARGUMENTS, _STANDARD_OUTPUTS,
    {"gamma": ("gamma", 0.99), "lambda": ("lambda_", 0.95), **_CLIPS}, "lambda_", "Estimate",
    torch_outputs=("returns",), episode_starts=True)
VTRACE = Estimator(
    "vtrace", "vtrace", 2, (*_VALUE_ARGUMENTS, *_optional("sample_mask")),
    {"advantages": "pg_advantages", "returns": "vs", "abs_sums": "abs_sums", "sums": "sums",
     "square_sums": "square_sums"},
    {"gamma": ("gamma", 0.99), "lambda": ("lambda_", 1.0), **_CLIPS, "rho_pg_clip": ("rho_pg_clip", 1.0),
     "alpha": ("alpha", 1.0)},
    "lambda_", "VTraceEstimate", torch_outputs=("returns", "advantages"), episode_starts=True)
DISCOUNTED_RETURNS = Estimator(
    "discounted_returns", "discounted_returns", 3, (*_required("rewards"), *_optional("terminated"), *_BOOTSTRAP),
    {role: role for role in OUTPUT_ROLES[1:]}, {"gamma": ("gamma", 0.99)}, "lambda_", "Estimate",
    torch_outputs=("returns",), episode_starts=True)
N_STEP_RETURNS = Estimator(
    "n_step_returns", "n_step_returns", 6,
    (*_required("rewards", "values"), *_optional("terminated"), *_BOOTSTRAP, *_optional("next_values")),
    _STANDARD_OUTPUTS, {"gamma": ("gamma", 0.99), "lambda": ("lambda_", 1.0)}, "lambda_", "Estimate",
    torch_outputs=("returns",), window=True, episode_starts=True)
RETRACE = Estimator(
    "retrace", "retrace", 4,
    (*_ACTION_VALUES, *_optional("truncated", "target_probs", "behaviour_probs"),
     Argument("target_log_probs", "target_probs", False, log_probs=True),
     Argument("behaviour_log_probs", "behaviour_probs", False, log_probs=True)),
    _STANDARD_OUTPUTS, {"gamma": ("gamma", 0.99), "lambda": ("lambda_", 1.0), "c_clip": ("c_clip", 1.0)},
    "lambda_", "Estimate", torch_outputs=("returns", "advantages"))
Q_LAMBDA = Estimator(
    "q_lambda", "q_lambda", 5, (*_ACTION_VALUES, *_optional("truncated", "greedy")), _STANDARD_OUTPUTS,
    {"gamma": ("gamma", 0.99), "lambda": ("lambda_", 0.9)}, "lambda_", "Estimate",
    torch_outputs=("returns", "advantages"))
EPISODIC_CUMSUM = Estimator(
    "episodic_cumsum", "episodic_sum", 7, _EPISODIC, _EPISODIC_OUTPUT, {}, "lambda_", "array",
    torch_outputs=("returns",), boundary=True)
ELIGIBILITY_TRACES = Estimator(
    "eligibility_traces", "episodic_sum", 7, _EPISODIC, _EPISODIC_OUTPUT,
    {"gamma": ("gamma", NO_DEFAULT), "lambda": ("lambda_", NO_DEFAULT)}, "lambda_", "array",
    torch_outputs=("returns",))

# PufferLib's puff advantage: `dones` in the role of terminated, with PufferLib's index
# convention (rewards[t+1], dones[t+1] belong to step t); its own driver in _eager.py.
PUFF_ADVANTAGE = Estimator(
    "compute_puff_advantage", "puff_advantage", 8,
    _required("values", "rewards", "dones", "importance", roles={"dones": "terminated"}),
    _STANDARD_OUTPUTS, {"gamma": ("gamma", 0.99), "lambda": ("gae_lambda", 0.95), **_CLIPS}, "gae_lambda",
    "array", torch_outputs=("advantages",))

#: The estimator family by public name (the puff advantage apart: its arguments are PufferLib's).
ESTIMATORS = {e.function: e for e in (GAE, TD_LAMBDA, VTRACE, DISCOUNTED_RETURNS, N_STEP_RETURNS, RETRACE,
                                      Q_LAMBDA, EPISODIC_CUMSUM, ELIGIBILITY_TRACES)}

# The engine's scan itself (puffadv.linear_recurrence, _recurrence.py): y_t = inputs_t + decay_t
# y_{t-1} (reverse: y_{t+1}), the y outside the row `seed`; its own driver (decay may be a scalar).
LINEAR_RECURRENCE = Estimator(
    "linear_recurrence", "linear_recurrence", 9,
    (*_required("inputs", "decay", roles={"inputs": "rewards"}), *_optional("seed", roles={"seed": "last_value"})),
    _EPISODIC_OUTPUT, {}, "lambda_", "array", torch_outputs=("returns",), direction=True)
