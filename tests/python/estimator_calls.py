"""One call of each estimator on random episodes, every output asked for: the
arguments, requests and named outputs that the layout tests (test_layouts.py,
test_interleaved_rows.py) compare between layouts."""
from __future__ import annotations

import numpy as np

from puffadv._estimators import ESTIMATORS


def call_arguments(function, e):
    """(positional arrays, keyword arrays, scalars) of one call of `function` on [B, T] episodes `e`."""
    dones = np.maximum(e["terminated"], e["truncated"])
    value_kw = dict(bootstrap_values=e["bootstrap_values"])
    return {
        "gae": ([e["rewards"], e["values"], e["terminated"], e["truncated"]],
                dict(value_kw, importance=e["importance"]), {}),
        "td_lambda_returns": ([e["rewards"], e["values"], e["terminated"], e["truncated"]], value_kw, {}),
        "vtrace": ([e["rewards"], e["values"], e["terminated"], e["truncated"]],
                   dict(value_kw, importance=e["importance"]), {}),
        "discounted_returns": ([e["rewards"], e["terminated"]], dict(last_value=e["last_value"]), {}),
        "n_step_returns": ([e["rewards"], e["values"], e["terminated"], e["truncated"]], value_kw, dict(n=3)),
        "retrace": ([e["rewards"], e["q_values"], e["next_values"], e["terminated"], e["truncated"]],
                    dict(target_probs=e["target_probs"], behaviour_probs=e["behaviour_probs"]), {}),
        "q_lambda": ([e["rewards"], e["q_values"], e["next_values"], e["terminated"], e["truncated"]],
                     dict(greedy=e["greedy"]), {}),
        "episodic_cumsum": ([e["rewards"], dones], dict(seed=e["last_value"]), {}),
        "eligibility_traces": ([e["rewards"], dones], dict(seed=e["last_value"]), dict(gamma=0.9, lambda_=0.8)),
    }[function]


def named_outputs(result) -> dict:
    """An estimator's result as {name: array} (None left out)."""
    if not isinstance(result, tuple):
        return {"out": result}
    return {name: x for name, x in result._asdict().items() if x is not None}


def every_output_requested(function) -> dict:
    """Every output of `function` asked for (the single-array ones have none to ask)."""
    estimator = ESTIMATORS[function]
    return {} if estimator.result == "array" else {name: True for name in estimator.outputs.values()
                                                   if not name.endswith("sums")}
