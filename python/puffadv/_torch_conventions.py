"""Fake kernels of the estimator family's torch operators (torch.ops.puffadv.gae,
td_lambda_returns, vtrace, discounted_returns, n_step_returns, retrace, q_lambda,
episodic_cumsum, eligibility_traces; src/torch/conventions_ops.cpp), so that
torch.compile(fullgraph=True) traces them. They describe outputs only: the real
kernels run the core's checks. Registered by puffadv.torch after the op library
is loaded."""
from __future__ import annotations

import torch

from . import _torch_rules
from ._estimators import ESTIMATORS



def _typed_by(estimator) -> str:
    """The argument whose dtype an operator's outputs follow: the values (the rewards or
    inputs where a kind reads no values)."""
    names = estimator.names()
    return names.get("values", names["rewards"])


# Each operator: how many outputs it returns, and the argument whose dtype the outputs
# follow, from its estimator's description. Outputs are shaped like the first argument.
OPERATORS = {e.function: (len(e.torch_outputs), _typed_by(e)) for e in ESTIMATORS.values()}


def output_dtype(input_dtype):
    """Every functional op's output dtype: float32 arithmetic and output for
    bfloat16/float16 inputs, else the inputs' own (output_type in src/torch/ops.cpp)."""
    return torch.float32 if input_dtype in (torch.bfloat16, torch.float16) else input_dtype


def _fake(name: str):
    """The fake kernel of one operator, from its schema: outputs shaped like the
    first tensor, of the dtype OPERATORS names, once every tensor is on one device."""
    schema = getattr(torch.ops.puffadv, name).default._schema
    names = [a.name for a in schema.arguments]
    count, typed_by = OPERATORS[name]

    def fake(*args, **kwargs):
        bound = dict(zip(names, args), **kwargs)
        tensors = [(n, bound.get(n)) for n in names]
        _torch_rules.check_one_device(tensors)
        first, typed = bound[names[0]], bound[typed_by]
        outputs = tuple(torch.empty(first.shape, dtype=output_dtype(typed.dtype), device=first.device)
                        for _ in range(count))
        return outputs if count > 1 else outputs[0]

    fake.__name__ = f"_{name}_fake"
    return fake


def register(lib: torch.library.Library) -> None:
    for name in OPERATORS:
        torch.library.register_fake(f"puffadv::{name}", _fake(name), lib=lib)
