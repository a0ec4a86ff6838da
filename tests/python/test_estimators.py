"""The estimators' descriptions (python/puffadv/_estimators.py) and the public API
they drive: every public function keeps its signature and docstring (pinned in
public_api.json, written from the API before the descriptions existed), and every
NumPy and JAX function's parameters are those its description names."""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

import puffadv
from puffadv import _estimators
from puffadv._estimators import ESTIMATORS, OUTPUT_ROLES, PUFF_ADVANTAGE

PINNED = json.loads((Path(__file__).with_name("public_api.json")).read_text())


def _public():
    modules = [puffadv]
    try:
        import puffadv.jax as pjax
        modules.append(pjax)
    except ImportError:
        pass
    for module in modules:
        for name in module.__all__:
            yield f"{module.__name__}.{name}", getattr(module, name)


def _described(obj) -> dict:
    if isinstance(obj, type):
        return {"fields": list(getattr(obj, "_fields", ())), "doc": inspect.getdoc(obj),
                "defaults": repr(getattr(obj, "_field_defaults", None))}
    return {"signature": str(inspect.signature(obj)), "doc": inspect.getdoc(obj)}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_public_signatures_and_docstrings_are_unchanged(name):
    public = dict(_public())
    if name.startswith("puffadv.jax.") and name not in public:
        pytest.skip("a build without JAX handlers")
    assert _described(public[name]) == PINNED[name]


def test_nothing_public_is_unpinned():
    assert set(dict(_public())) - {"puffadv.__version__"} <= set(PINNED)


def _parameters(function) -> dict:
    return dict(inspect.signature(function).parameters)


def _check_parameters(estimator, function, *, numpy: bool):
    parameters = _parameters(function)
    names = [a.name for a in estimator.arguments]
    assert [p for p in parameters if p in names] == names, "array arguments, in the signature's order"
    for argument in estimator.arguments:
        default = parameters[argument.name].default
        assert (default is inspect.Parameter.empty) == argument.required, argument.name
    for role, (name, default) in estimator.scalars.items():
        want = inspect.Parameter.empty if default is _estimators.NO_DEFAULT else default
        assert parameters[name].default == want, (role, name)
    assert parameters["time_axis"].default is None  # required (issue 33): None is "not passed", a TypeError
    assert ("n" in parameters) == estimator.window and ("boundary" in parameters) == estimator.boundary
    taken = {*names, *(name for name, _ in estimator.scalars.values()), "time_axis", "stream", "n", "boundary"}
    assert ("episode_starts" in parameters) == ("last_episode_start" in parameters) == estimator.episode_starts
    if estimator.episode_starts:
        taken |= {"episode_starts", "last_episode_start"}
    if numpy:
        taken |= set(estimator.outputs.values())
    assert set(parameters) <= taken, set(parameters) - taken


@pytest.mark.parametrize("function", sorted(ESTIMATORS))
def test_numpy_functions_take_what_their_description_names(function):
    _check_parameters(ESTIMATORS[function], getattr(puffadv, function), numpy=True)


@pytest.mark.parametrize("function", sorted(ESTIMATORS))
def test_jax_functions_take_what_their_description_names(function):
    pjax = pytest.importorskip("puffadv.jax")
    _check_parameters(ESTIMATORS[function], getattr(pjax, function), numpy=False)


def test_the_puff_advantage_takes_what_its_description_names():
    parameters = list(_parameters(puffadv.compute_puff_advantage))
    assert parameters[:4] == [a.name for a in PUFF_ADVANTAGE.arguments]
    assert set(PUFF_ADVANTAGE.outputs.values()) <= set(parameters)
    for name, default in PUFF_ADVANTAGE.scalars.values():
        assert _parameters(puffadv.compute_puff_advantage)[name].default == default


def test_descriptions_are_consistent():
    for estimator in (*ESTIMATORS.values(), PUFF_ADVANTAGE):
        roles = [a.role for a in estimator.arguments if not a.log_probs]
        assert len(roles) == len(set(roles)), estimator.function
        assert set(roles) <= set(_estimators.INPUT_ROLES)
        assert list(estimator.outputs) == [r for r in OUTPUT_ROLES if r in estimator.outputs]
        assert set(estimator.torch_outputs) <= set(OUTPUT_ROLES)
        assert {"rewards", "terminated"} <= set(roles)
        assert estimator.result in ("Estimate", "VTraceEstimate", "array")


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_numpy_functions_hand_on_every_argument_by_name(name, monkeypatch):
    """The public functions spell their arguments out (torch.compile cannot trace
    locals()): the dict they hand on names every parameter, each with its value."""
    from puffadv import _route
    function, seen = getattr(puffadv, name), {}
    monkeypatch.setattr(_route, "estimate", lambda estimator, arguments: seen.update(arguments))
    parameters = inspect.signature(function).parameters
    required = {n: object() for n, p in parameters.items() if p.default is inspect.Parameter.empty}
    function(**required)
    assert list(seen) == list(parameters)
    sentinels = {name: object() for name in parameters}
    seen.clear()
    function(**sentinels)
    assert all(seen[name] is value for name, value in sentinels.items())
