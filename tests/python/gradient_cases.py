"""Differentiable calls of every estimator, shared by the gradient tests: float64
random episodes (ends at the first and last steps, truncations), each call with the
arguments it differentiates (every float array, gamma and lambda as tensors)."""
from __future__ import annotations

import numpy as np
import torch

from reference import random_off_policy

# function -> (array arguments differentiated, flags and fixed arguments, scalars differentiated, outputs)
_VALUE_OUTPUTS = {"advantages": True, "returns": True, "abs_sums": True, "sums": True, "square_sums": True}
_VTRACE_OUTPUTS = {"vs": True, "pg_advantages": True, "abs_sums": True, "sums": True, "square_sums": True}
CASES = {
    "gae": (("rewards", "values", "bootstrap_values", "importance"), ("terminated", "truncated"),
            {"rho_clip": 1.2, "c_clip": 0.9}, ("gamma", "gae_lambda"), _VALUE_OUTPUTS),
    "gae_last_value": (("rewards", "values", "last_value"), ("terminated",), {}, ("gamma", "gae_lambda"),
                       {"advantages": True, "returns": True}),
    "td_lambda_returns": (("rewards", "values", "bootstrap_values", "importance"), ("terminated", "truncated"),
                          {}, ("gamma", "lambda_"), _VALUE_OUTPUTS),
    "td_lambda_returns_last_value": (("rewards", "values", "last_value", "importance"), ("terminated",), {},
                                     ("gamma", "lambda_"), {"returns": True, "advantages": True}),
    "vtrace": (("rewards", "values", "bootstrap_values", "importance"), ("terminated", "truncated"),
               {"rho_clip": 1.5, "c_clip": 1.1, "rho_pg_clip": 1.3}, ("gamma", "lambda_"),
               {"vs": True, "pg_advantages": True, "abs_sums": True, "sums": True, "square_sums": True}),
    "vtrace_last_value": (("rewards", "values", "last_value", "importance"), ("terminated",), {},
                          ("gamma", "lambda_"), {"vs": True, "pg_advantages": True}),
    # next_values (issue 29): V'_t at every step; TD(lambda)'s takes no importance with it.
    "gae_next_values": (("rewards", "values", "next_values", "importance"), ("terminated", "truncated"),
                        {"rho_clip": 1.2, "c_clip": 0.9}, ("gamma", "gae_lambda"), _VALUE_OUTPUTS),
    "td_lambda_returns_next_values": (("rewards", "values", "next_values"), ("terminated", "truncated"), {},
                                      ("gamma", "lambda_"), _VALUE_OUTPUTS),
    "vtrace_next_values": (("rewards", "values", "next_values", "importance"), ("terminated", "truncated"),
                           {"rho_clip": 1.5, "c_clip": 1.1, "rho_pg_clip": 1.3}, ("gamma", "lambda_"),
                           {"vs": True, "pg_advantages": True, "abs_sums": True, "sums": True, "square_sums": True}),
    "discounted_returns": (("rewards", "bootstrap_values"), ("terminated", "truncated"), {}, ("gamma",),
                           {"returns": True, "abs_sums": True, "sums": True, "square_sums": True}),
    "discounted_returns_last_value": (("rewards", "last_value"), ("terminated",), {}, ("gamma",),
                                      {"returns": True}),
    "n_step_returns": (("rewards", "values", "bootstrap_values"), ("terminated", "truncated"), {"n": 3},
                       ("gamma", "lambda_"), _VALUE_OUTPUTS),
    "n_step_returns_long": (("rewards", "values", "last_value"), ("terminated",), {"n": 50},
                            ("gamma", "lambda_"), {"returns": True, "advantages": True}),
    "retrace": (("rewards", "q_values", "next_values", "target_probs", "behaviour_probs"),
                ("terminated", "truncated"), {"c_clip": 0.8}, ("gamma", "lambda_"), _VALUE_OUTPUTS),
    "retrace_log_probs": (("rewards", "q_values", "next_values", "target_log_probs", "behaviour_log_probs"),
                          ("terminated", "truncated"), {}, ("gamma", "lambda_"),
                          {"advantages": True, "returns": True}),
    "q_lambda": (("rewards", "q_values", "next_values"), ("terminated", "truncated", "greedy"), {},
                 ("gamma", "lambda_"), _VALUE_OUTPUTS),
    "q_lambda_peng": (("rewards", "q_values", "next_values"), ("terminated",), {}, ("gamma", "lambda_"),
                      {"advantages": True, "returns": True}),
    "episodic_cumsum": (("inputs", "seed"), ("dones",), {}, (), {}),
    "episodic_cumsum_starts_at": (("inputs", "seed"), ("dones",), {"boundary": "starts_at"}, (), {}),
    "eligibility_traces": (("inputs", "seed"), ("dones",), {}, ("gamma", "lambda_"), {}),
    "compute_puff_advantage": (("values", "rewards", "importance"), ("dones",), {"rho_clip": 1.4, "c_clip": 1.0},
                               ("gamma", "gae_lambda"),
                               {"returns": True, "abs_sums": True, "sums": True, "square_sums": True}),
    # Issue 29's forms: per-step gamma_t and lambda_t differentiated as arrays, n-step
    # returns' next_values, V-trace's sample_mask and leaky alpha.
    "gae_per_step": (("rewards", "values", "bootstrap_values", "importance", "gamma", "gae_lambda"),
                     ("terminated", "truncated"), {"rho_clip": 1.2, "c_clip": 0.9}, (), _VALUE_OUTPUTS),
    "td_lambda_returns_per_step": (("rewards", "values", "last_value", "gamma", "lambda_"), ("terminated",), {}, (),
                                   _VALUE_OUTPUTS),
    "td_lambda_returns_next_values_per_step": (("rewards", "values", "next_values", "gamma", "lambda_"),
                                               ("terminated", "truncated"), {}, (), _VALUE_OUTPUTS),
    "vtrace_per_step": (("rewards", "values", "bootstrap_values", "importance", "gamma", "lambda_"),
                        ("terminated", "truncated"), {"rho_clip": 1.5, "c_clip": 1.1, "rho_pg_clip": 1.3}, (),
                        _VTRACE_OUTPUTS),
    "discounted_returns_per_step": (("rewards", "bootstrap_values", "gamma"), ("terminated", "truncated"), {}, (),
                                    {"returns": True, "sums": True}),
    "n_step_returns_per_step": (("rewards", "values", "bootstrap_values", "gamma", "lambda_"),
                                ("terminated", "truncated"), {"n": 3}, (), _VALUE_OUTPUTS),
    "n_step_returns_next_values": (("rewards", "values", "next_values"), ("terminated", "truncated"), {"n": 3},
                                   ("gamma", "lambda_"), _VALUE_OUTPUTS),
    "n_step_returns_next_values_per_step": (("rewards", "values", "next_values", "gamma", "lambda_"),
                                            ("terminated", "truncated"), {"n": 4}, (),
                                            {"returns": True, "advantages": True}),
    "retrace_per_step": (("rewards", "q_values", "next_values", "target_probs", "behaviour_probs", "gamma",
                          "lambda_"), ("terminated", "truncated"), {"c_clip": 0.8}, (), _VALUE_OUTPUTS),
    "q_lambda_per_step": (("rewards", "q_values", "next_values", "gamma", "lambda_"),
                          ("terminated", "truncated", "greedy"), {}, (), _VALUE_OUTPUTS),
    "eligibility_traces_per_step": (("inputs", "seed", "gamma", "lambda_"), ("dones",), {}, (), {}),
    "vtrace_sample_mask": (("rewards", "values", "next_values", "importance"),
                           ("terminated", "truncated", "sample_mask"),
                           {"rho_clip": 1.5, "c_clip": 1.1, "rho_pg_clip": 1.3}, ("gamma", "lambda_"),
                           _VTRACE_OUTPUTS),
    "gae_next_values_per_step": (("rewards", "values", "next_values", "importance", "gamma", "gae_lambda"),
                                 ("terminated", "truncated"), {"rho_clip": 1.2, "c_clip": 0.9}, (),
                                 _VALUE_OUTPUTS),
    "vtrace_sample_mask_per_step": (("rewards", "values", "next_values", "importance", "gamma", "lambda_"),
                                    ("terminated", "truncated", "sample_mask"),
                                    {"rho_clip": 1.5, "c_clip": 0.7, "rho_pg_clip": 1.3, "alpha": 0.6}, (),
                                    _VTRACE_OUTPUTS),
    "vtrace_leaky": (("rewards", "values", "bootstrap_values", "importance"),
                     ("terminated", "truncated", "sample_mask"),
                     {"rho_clip": 1.5, "c_clip": 0.7, "rho_pg_clip": 1.3, "alpha": 0.6}, ("gamma", "lambda_"),
                     _VTRACE_OUTPUTS),
}
#: The value arrays, by the public names: every series is linear in them with the flags, gamma,
#: lambda and the ratios held (the forward-mode tests; Q values travel as values, seed as last_value).
VALUE_ARRAYS = frozenset({"rewards", "values", "q_values", "next_values", "bootstrap_values", "last_value",
                          "inputs", "seed"})
#: The cases whose gamma and lambda are per-step arrays.
PER_STEP = tuple(case for case, (arrays, *_) in CASES.items() if "gamma" in arrays)
SCALARS = {"gamma": 0.9, "gae_lambda": 0.8, "lambda_": 0.7}


_SUFFIXES = ("_last_value", "_long", "_log_probs", "_peng", "_starts_at", "_next_values", "_per_step",
             "_sample_mask", "_leaky")


def function_of(case: str) -> str:
    while case.endswith(_SUFFIXES):
        case = case[: -len(next(s for s in _SUFFIXES if case.endswith(s)))]
    return case


def episode_arrays(seed: int, rows: int = 3, horizon: int = 6) -> dict:
    """Every array any case reads, batch-major float64 (flags bool), by argument name."""
    e = random_off_policy(np.random.default_rng(seed), rows, horizon, np.float64)
    e["next_values"] = np.where(e["terminated"], np.nan, e["next_values"])  # never read: NaN must stay out
    e.update(q_values=e["q_values"], inputs=e["rewards"], seed=e["last_value"], dones=e["terminated"])
    steps = np.random.default_rng(seed + 1000)  # its own stream: the arrays above stay as they were
    e["gamma"] = steps.uniform(0.5, 1.0, e["rewards"].shape)
    e["gae_lambda"] = e["lambda_"] = steps.uniform(0.3, 1.0, e["rewards"].shape)
    e["sample_mask"] = steps.random(e["rewards"].shape) > 0.3
    e["sample_mask"][0, 0] = e["sample_mask"][1, -1] = False
    return e


def layout(x: torch.Tensor, time_major: bool, strided: bool) -> torch.Tensor:
    """x [B, T] as the call passes it: time-major views are transposes; strided ones every
    other column of a wider buffer (the copy keeps the leaf differentiable)."""
    if x.ndim == 2 and time_major:
        x = x.t()
    if strided and x.ndim == 2:
        wide = torch.zeros(x.shape[0], 2 * x.shape[1], dtype=x.dtype, device=x.device)
        wide[:, ::2] = x.detach()
        x = wide[:, ::2]
    return x


def make_call(case: str, seed: int = 0, time_major: bool = False, strided: bool = False, device: str = "cpu",
              rows: int = 3, horizon: int = 6):
    """(function(*differentiated) -> outputs without None, differentiated leaves, their names).
    On another `device` the arrays are the CPU call's, moved; gamma and lambda stay 0-d
    tensors there too."""
    import puffadv
    arrays, flags, fixed, scalars, outputs = CASES[case]
    data = episode_arrays(seed, rows, horizon)
    if case == "compute_puff_advantage":
        data["dones"] = data["terminated"].astype(np.float64)
    leaves = [layout(torch.tensor(data[name], device=device), time_major, strided).requires_grad_()
              for name in arrays]
    leaves += [torch.tensor(SCALARS[name], dtype=torch.float64, device=device, requires_grad=True)
               for name in scalars]
    const = {name: layout(torch.tensor(data[name], device=device), time_major, strided) for name in flags}
    function = getattr(puffadv, function_of(case))
    names = (*arrays, *scalars)

    def call(*values):
        kwargs = {**const, **fixed, **outputs, **dict(zip(names, values))}
        if case != "compute_puff_advantage":
            kwargs["time_axis"] = 0 if time_major else -1
        result = function(**kwargs)
        return tuple(x for x in (result if isinstance(result, tuple) else (result,)) if x is not None)

    return call, leaves, names
