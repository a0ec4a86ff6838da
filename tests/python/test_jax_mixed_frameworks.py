"""Values of another framework where a call takes JAX ones, or torch ones, refused by name
(found by an audit, 2027-01): torch tensors given to puffadv.jax (torch's "Can't call numpy()
on Tensor that requires grad", or "Cannot interpret 'torch.float32' as a data type" for a
0-d scalar), a traced JAX scalar given to the NumPy-style API (a TypeError wrapping the whole
ConcretizationTypeError), and a NumPy decay array beside torch inputs ("decay must be a real
number")."""
from __future__ import annotations

import numpy as np
import pytest

from jax_cases import _x64, jax, jnp, pjax  # noqa: F401  (skips this module without jax)

import puffadv  # noqa: E402

torch = pytest.importorskip("torch")

B, T = 3, 5


def _data():
    rng = np.random.default_rng(4)
    floats = {k: rng.uniform(0.2, 1.0, (B, T)) for k in ("r", "v", "nv", "imp", "g")}
    floats["lv"] = rng.uniform(0.2, 1.0, B)
    terminated = rng.random((B, T)) < 0.2
    return floats, terminated


# function: (its arrays by name, in order, from _data; other arguments)
CALLS = {
    "gae": ((("rewards", "r"), ("values", "v"), ("terminated", None), ("last_value", "lv"), ("importance", "imp")),
            {"time_axis": -1}),
    "td_lambda_returns": ((("rewards", "r"), ("values", "v"), ("terminated", None), ("last_value", "lv")),
                          {"time_axis": -1}),
    "vtrace": ((("rewards", "r"), ("values", "v"), ("terminated", None), ("last_value", "lv"),
                ("importance", "imp")), {"time_axis": -1}),
    "discounted_returns": ((("rewards", "r"), ("terminated", None), ("last_value", "lv")), {"time_axis": -1}),
    "n_step_returns": ((("rewards", "r"), ("values", "v"), ("terminated", None), ("last_value", "lv")),
                       {"n": 2, "time_axis": -1}),
    "retrace": ((("rewards", "r"), ("q_values", "v"), ("next_values", "nv"), ("terminated", None),
                 ("target_probs", "imp"), ("behaviour_probs", "g")), {"time_axis": -1}),
    "q_lambda": ((("rewards", "r"), ("q_values", "v"), ("next_values", "nv"), ("terminated", None)),
                 {"time_axis": -1}),
    "episodic_cumsum": ((("inputs", "r"), ("dones", None), ("seed", "lv")), {"time_axis": -1}),
    "eligibility_traces": ((("inputs", "r"), ("dones", None), ("seed", "lv")),
                           {"gamma": 0.9, "lambda_": 0.8, "time_axis": -1}),
    "compute_puff_advantage": ((("values", "v"), ("rewards", "r"), ("dones", None), ("importance", "imp")), {}),
    "linear_recurrence": ((("inputs", "r"), ("decay", "g"), ("seed", "lv")), {"reverse": False, "time_axis": 1}),
}


def _arguments(function):
    floats, terminated = _data()
    arrays, extra = CALLS[function]
    return {name: (terminated if key is None else floats[key]) for name, key in arrays}, dict(extra)


@pytest.mark.parametrize("requires_grad", [True, False], ids=["requires-grad", "no-grad"])
@pytest.mark.parametrize("position", ["first", "last"])
@pytest.mark.parametrize("function", list(CALLS))
def test_a_torch_tensor_given_to_puffadv_jax_is_refused_by_name(function, position, requires_grad):
    arrays, extra = _arguments(function)
    name = list(arrays)[0 if position == "first" else -1]
    given = {k: jnp.asarray(x) for k, x in arrays.items()}
    given[name] = torch.tensor(arrays[name], requires_grad=requires_grad and arrays[name].dtype != bool)
    with _x64(), pytest.raises(TypeError) as error:
        getattr(pjax, function)(**given, **extra)
    assert str(error.value) == (f"{name} is a torch tensor, but puffadv.jax.{function} takes JAX or NumPy "
                                f"arrays; for torch tensors call puffadv.{function} (the same numbers, "
                                f"differentiable with torch autograd)")


SCALARS = [("gae", "gamma", 0.9), ("gae", "gae_lambda", 0.8), ("gae", "rho_clip", 0.9),
           ("vtrace", "alpha", 0.7), ("td_lambda_returns", "lambda_", 0.6), ("eligibility_traces", "gamma", 0.9),
           ("compute_puff_advantage", "gamma", 0.9), ("compute_puff_advantage", "c_clip", 0.5),
           ("linear_recurrence", "decay", 0.7)]


@pytest.mark.parametrize("function,name,number", SCALARS)
def test_a_0d_torch_scalar_is_its_number_unless_it_carries_a_derivative(function, name, number):
    """As the NumPy-style API reads it (_parameters.real_parameter): a number, except one
    that requires grad, which puffadv.jax would drop (refused, naming the torch function)."""
    arrays, extra = _arguments(function)
    arrays.pop(name, None)  # linear_recurrence's decay: the scalar here
    given = {k: jnp.asarray(x) for k, x in arrays.items()}
    call = getattr(pjax, function)
    with _x64():
        wanted = call(**given, **{**extra, name: number})
        with pytest.raises(TypeError) as error:
            call(**given, **{**extra, name: torch.tensor(number, dtype=torch.float64, requires_grad=True)})
        assert str(error.value).startswith(
            f"{name} is a 0-d torch tensor that requires grad, but puffadv.jax.{function} takes JAX or NumPy "
            f"values: it reads {name} as a number and cannot differentiate it. For its gradient call "
            f"puffadv.{function} with torch tensors"), str(error.value)
        for scalar, context in ((torch.tensor(number, dtype=torch.float64), None),
                                (torch.tensor(number, requires_grad=True), torch.no_grad)):
            if context is None:
                got = call(**given, **{**extra, name: scalar})
            else:
                with context():
                    got = call(**given, **{**extra, name: scalar})
            for a, b in zip(*((x,) if not isinstance(x, tuple) else x for x in (got, wanted))):
                assert (a is None and b is None) or np.allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
        with pytest.raises(TypeError, match=f"^{name} must be a real number, got a 0-d torch.Tensor of dtype "
                                            f"torch.bool"):
            call(**given, **{**extra, name: torch.tensor(True)})


NUMPY_STYLE = [("gae", "gamma"), ("gae", "rho_clip"), ("linear_recurrence", "decay"),
               ("compute_puff_advantage", "gamma")]


@pytest.mark.parametrize("arrays_of", ["numpy", "torch"])
@pytest.mark.parametrize("function,name", NUMPY_STYLE)
def test_numpy_style_api_given_a_traced_scalar_says_to_use_puffadv_jax(function, name, arrays_of):
    arrays, extra = _arguments(function)
    arrays.pop(name, None)  # linear_recurrence's decay: the scalar here
    if arrays_of == "torch":
        arrays = {k: torch.tensor(x, requires_grad=x.dtype != bool) for k, x in arrays.items()}

    def loss(scalar):
        getattr(puffadv, function)(**arrays, **{**extra, name: scalar})  # raises
        return scalar

    with pytest.raises(TypeError) as error:
        jax.grad(loss)(0.9)
    text = str(error.value)
    assert text.startswith(f"{name} is a JAX tracer (") and "this function reads concrete numbers" in text, text
    assert "call the function of the same name in puffadv.jax" in text
    assert "ConcretizationTypeError" not in text and "Abstract tracer" not in text


def test_torch_linear_recurrence_with_another_frameworks_decay_or_seed_names_both():
    """It said "decay must be a real number, got numpy.ndarray" (arrays are allowed)."""
    x = torch.rand(B, T, dtype=torch.float64, requires_grad=True)
    with pytest.raises(TypeError, match=r"^decay is a numpy array but inputs is a torch array; pass arrays of "
                                        r"one framework$"):
        puffadv.linear_recurrence(x, np.full((B, T), 0.5), reverse=False, time_axis=1)
    with pytest.raises(TypeError, match=r"^decay is a jax array but inputs is a torch array"):
        puffadv.linear_recurrence(x, jnp.full((B, T), 0.5, jnp.float32), reverse=False, time_axis=1)
    with pytest.raises(TypeError, match=r"^seed is a numpy array but inputs is a torch array"):
        puffadv.linear_recurrence(x, 0.5, seed=np.zeros(B), reverse=False, time_axis=1)
    with torch.no_grad():  # the path without autograd said so already
        with pytest.raises(TypeError, match=r"^decay is a numpy array but inputs is a torch array"):
            puffadv.linear_recurrence(x, np.full((B, T), 0.5), reverse=False, time_axis=1)
    y = puffadv.linear_recurrence(x, np.float64(0.5), reverse=False, time_axis=1)  # a 0-d one is a number
    assert y.requires_grad
