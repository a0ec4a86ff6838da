"""gamma and lambda given as 0-d tensors on the rewards' GPU are read there, as per-step
arrays made on the device (_arguments.read_on_device, steps_on_device), never through
float(), which would synchronise with the GPU. This runs that conversion on the CPU, by
letting read_on_device take CPU tensors: every estimator that takes gamma gives the
outputs and gradients of the same call with numbers, and gamma's and lambda's gradients
equal the per-step arrays' summed; the conversion is counted, so the test fails if it
is not taken. On a GPU, tests/python/test_gradients_gpu.py runs the real path under
torch.cuda.set_sync_debug_mode("error") and in a CUDA graph."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
puffadv = pytest.importorskip("puffadv")

from puffadv import _arguments  # noqa: E402

from gradient_cases import episode_arrays  # noqa: E402

# function -> (its lambda's name or None, differentiated arrays, other arguments by name)
CALLS = {
    "gae": ("gae_lambda", ("rewards", "values", "last_value"), {"terminated": "terminated"}),
    "td_lambda_returns": ("lambda_", ("rewards", "values", "bootstrap_values"),
                          {"terminated": "terminated", "truncated": "truncated", "advantages": True}),
    "vtrace": ("lambda_", ("rewards", "values", "last_value"), {"terminated": "terminated", "importance": "importance"}),
    "discounted_returns": (None, ("rewards", "last_value"), {"terminated": "terminated"}),
    "n_step_returns": ("lambda_", ("rewards", "values", "last_value"), {"terminated": "terminated", "n": 3}),
    "retrace": ("lambda_", ("rewards", "q_values", "next_values"),
                {"terminated": "terminated", "target_probs": "target_probs", "behaviour_probs": "behaviour_probs"}),
    "q_lambda": ("lambda_", ("rewards", "q_values", "next_values"), {"terminated": "terminated"}),
    "eligibility_traces": ("lambda_", ("inputs", "seed"), {"dones": "dones"}),
}


@pytest.fixture
def conversions(monkeypatch):
    """read_on_device taking CPU tensors too; the conversions made, counted."""
    made = []
    real = _arguments.steps_on_device

    def counted(value, rewards):
        made.append(value)
        return real(value, rewards)

    monkeypatch.setattr(_arguments, "read_on_device",
                        lambda value, rewards: isinstance(value, torch.Tensor) and value.ndim == 0
                        and isinstance(rewards, torch.Tensor) and value.dtype == rewards.dtype)
    monkeypatch.setattr(_arguments, "steps_on_device", counted)
    return made


def _run(function, leaves, scalars, time_major):
    lambda_name, arrays, extra = CALLS[function]
    e = _episode()
    fixed = {k: (e[v] if isinstance(v, str) else v) for k, v in extra.items()}
    if time_major:
        fixed = {k: v.t() if isinstance(v, torch.Tensor) and v.ndim == 2 else v for k, v in fixed.items()}
    result = getattr(puffadv, function)(**dict(zip(arrays, leaves)), **fixed, **scalars,
                                        time_axis=0 if time_major else -1)
    return [o for o in (result if isinstance(result, tuple) else (result,)) if o is not None]


def _episode():
    e = {k: torch.tensor(v) for k, v in episode_arrays(5, 4, 9).items()}
    e["terminated"][0, 0] = e["terminated"][1, -1] = True  # episode ends at the first and last steps
    e["dones"] = e["terminated"]
    return e


@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("function", sorted(CALLS))
def test_a_0d_gamma_read_as_steps_equals_numbers(function, requires_grad, time_major, conversions):
    lambda_name, arrays, _ = CALLS[function]
    e = _episode()

    def leaves():
        return [(e[name].t() if time_major and e[name].ndim == 2 else e[name]).clone().requires_grad_()
                for name in arrays]

    numbers = {"gamma": 0.93, **({lambda_name: 0.7} if lambda_name else {})}
    tensors = {k: torch.tensor(v, dtype=torch.float64, requires_grad=requires_grad) for k, v in numbers.items()}
    ours, theirs = leaves(), leaves()
    got = _run(function, ours, tensors, time_major)
    assert len(conversions) == len(tensors), "gamma / lambda were not read as per-step arrays"
    expected = _run(function, theirs, numbers, time_major)
    weights = [torch.randn(o.shape, dtype=o.dtype, generator=torch.Generator().manual_seed(i))
               for i, o in enumerate(got)]
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    wanted = ours + (list(tensors.values()) if requires_grad else [])
    grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(got, weights)), wanted)
    expected_grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(expected, weights)), theirs)
    for a, b in zip(grads, expected_grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    if requires_grad:  # against per-step arrays of the same numbers, their gradients summed
        like = ours[0].detach()
        steps = {k: torch.full_like(like, v, requires_grad=True) for k, v in numbers.items()}
        per_step = _run(function, leaves(), steps, time_major)
        step_grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(per_step, weights)),
                                         list(steps.values()))
        for a, b in zip(grads[len(ours):], step_grads):
            assert a.shape == ()
            torch.testing.assert_close(a, b.sum(), rtol=1e-10, atol=1e-10)
