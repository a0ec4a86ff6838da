"""The per-call fast paths give what the general path gives: torch tensors read
through DLPack's C exchange API, through to_dlpack capsules (torch without the
API) and through __dlpack__ (subclasses); parameters that are not plain floats;
arrays of several types of one framework; a torch-function mode."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference as ref
from puffadv import _frameworks

PARAMS = (0.97, 0.9, 1.5, 0.8)


def results(call, arrays):
    """Every array a call returns or writes, as NumPy copies."""
    out = call(arrays)
    values = out if isinstance(out, tuple) else (out,)
    return [None if v is None else v.detach().cpu().numpy().copy() for v in values]


def calls():
    """(name, call) over torch tensors: puff given/allocated/fused, the conventions."""
    return {
        "puff given": lambda a: puffadv.compute_puff_advantage(*a[:4], a[4], *PARAMS),
        "puff allocated": lambda a: puffadv.compute_puff_advantage(*a[:4], None, *PARAMS),
        "puff fused": lambda a: puffadv.compute_puff_advantage(*a[:4], a[4], *PARAMS, returns=True,
                                                               sums=True),
        "gae": lambda a: puffadv.gae(a[1], a[0], a[2] > 0, last_value=a[0][:, 0], importance=a[3],
                                     abs_sums=True, time_axis=-1),
        "vtrace": lambda a: puffadv.vtrace(a[1], a[0], a[2] > 0, last_value=a[0][:, 0],
                                           importance=a[3], pg_advantages=a[4], time_axis=-1),
    }


@pytest.mark.parametrize("name", list(calls()))
def test_torch_import_paths_agree(name, rng, monkeypatch):
    torch = pytest.importorskip("torch")
    arrays = ref.random_puff_inputs(rng, 7, 19)
    out = np.full((7, 19), np.nan, np.float32)

    def tensors(kind):
        t = [torch.from_numpy(a.copy()) for a in (*arrays, out)]
        t[1] = torch.from_numpy(np.asfortranarray(arrays[1]))  # a strided input too
        if kind == "requires grad":
            t[:4] = [x.requires_grad_() for x in t[:4]]
        elif kind == "subclass":
            t = [torch.nn.Parameter(x, requires_grad=k < 4) for k, x in enumerate(t)]
        return t

    call = calls()[name]
    torch_functions = _frameworks._torch()
    assert torch_functions.exchange_api == hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    expected = results(call, tensors("plain"))  # the C exchange API where torch has it
    for kind in ("plain", "requires grad", "subclass"):
        for exchange in (True, False):  # False: to_dlpack capsules
            monkeypatch.setattr(torch_functions, "exchange_api", exchange and torch_functions.exchange_api)
            got = results(call, tensors(kind))
            for g, e in zip(got, expected):
                np.testing.assert_array_equal(g, e, err_msg=f"{name}, {kind}, exchange={exchange}")
    assert np.isfinite(expected[0]).all()
    if name == "puff given":
        assert ref.relative_error(expected[0], ref.puff_advantage(*arrays, *PARAMS)) <= 1e-5


def test_results_carry_the_graph_of_inputs_that_require_grad():
    """Issue 30: never detached (test_gradients.py checks the gradients)."""
    torch = pytest.importorskip("torch")
    arrays = [torch.nn.Parameter(torch.rand(3, 6)) for _ in range(4)]
    assert puffadv.compute_puff_advantage(*arrays).requires_grad
    assert all(x.requires_grad for x in puffadv.gae(arrays[1], arrays[0], arrays[2] > 0.5,
                                                     last_value=arrays[0][:, 0], time_axis=-1)[:2])
    with torch.no_grad():
        assert not puffadv.compute_puff_advantage(*arrays).requires_grad


def test_parameters_that_are_not_plain_floats(rng):
    arrays = ref.random_puff_inputs(rng, 4, 9)
    want = puffadv.compute_puff_advantage(*arrays, None, 1.0, 0.5, 2.0, 1.0)
    for gamma, lam in ((1, np.float32(0.5)), (np.float64(1.0), 0.5), (np.array(1.0), np.int64(0) + 0.5)):
        got = puffadv.compute_puff_advantage(*arrays, None, gamma, lam, 2, np.float16(1.0))
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match="gamma must be a real number, got bool"):
        puffadv.compute_puff_advantage(*arrays, None, True)
    with pytest.raises(TypeError, match="time_axis must be an int"):
        puffadv.gae(arrays[1], arrays[0], arrays[2] > 0, last_value=arrays[0][:, 0], time_axis=True)


def test_arrays_of_several_types_of_one_framework(rng, tmp_path):
    values, rewards, dones, importance = ref.random_puff_inputs(rng, 5, 8)
    mapped = np.lib.format.open_memmap(tmp_path / "rewards.npy", mode="w+", dtype=np.float32, shape=(5, 8))
    mapped[...] = rewards
    want = puffadv.compute_puff_advantage(values, rewards, dones, importance, None, *PARAMS)
    got = puffadv.compute_puff_advantage(values, mapped, dones, importance, None, *PARAMS)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError, match="importance must be an array"):
        puffadv.compute_puff_advantage(values, mapped, dones, importance.tolist())


def test_under_a_torch_function_mode(rng):
    torch = pytest.importorskip("torch")
    arrays = [torch.from_numpy(a) for a in ref.random_puff_inputs(rng, 4, 9)]
    want = puffadv.compute_puff_advantage(*arrays, None, *PARAMS)
    with torch.device("cpu"):  # a TorchFunctionMode
        got = puffadv.compute_puff_advantage(*arrays, None, *PARAMS)
    assert torch.equal(got, want)


# torch's rules for in-place writes hold on the Python API as on the operators
# (test_torch_ops.py): a version bump after the write, refusals before it.
def _python_api_writes(out, torch):
    """(label, call writing `out`) for each public function and output slot."""
    g = torch.Generator().manual_seed(7)
    v, r, i = (torch.rand(out.shape, generator=g) for _ in range(3))
    d = torch.rand(out.shape, generator=g) < 0.1
    lv = v[:, 0].contiguous()
    return [
        ("puff", lambda: puffadv.compute_puff_advantage(v, r, d.float(), i, out, *PARAMS)),
        ("puff fused returns", lambda: puffadv.compute_puff_advantage(
            v, r, d.float(), i, None, *PARAMS, returns=out)),
        ("gae advantages", lambda: puffadv.gae(r, v, d, last_value=lv, advantages=out, time_axis=-1)),
        ("td returns", lambda: puffadv.td_lambda_returns(r, v, d, last_value=lv, returns=out, time_axis=-1)),
        ("vtrace vs", lambda: puffadv.vtrace(r, v, d, last_value=lv, importance=i, vs=out, time_axis=-1)),
    ]


def test_python_api_write_bumps_the_torch_version_counter():
    torch = pytest.importorskip("torch")
    for k in range(5):
        out = torch.zeros(5, 9)
        weight = torch.ones_like(out, requires_grad=True)
        loss = (weight * out).sum()  # saves out for the gradient of weight
        label, call = _python_api_writes(out, torch)[k]
        before = out._version
        call()
        assert out._version > before, label
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


@pytest.mark.parametrize("k", range(5))
def test_python_api_refuses_leaf_requiring_grad_and_leaves_it_unwritten(k):
    torch = pytest.importorskip("torch")
    out = torch.zeros(5, 9, requires_grad=True)
    label, call = _python_api_writes(out, torch)[k]
    name = label.split()[-1] if " " in label else "advantages"
    with pytest.raises(RuntimeError, match=f"^a leaf Variable that requires grad .*: {name}"):
        call()
    assert not out.detach().any(), label
    with torch.no_grad():  # allowed there, as torch allows its own in-place ops
        call()
    assert out.detach().abs().sum() > 0, label


def test_python_api_refuses_inference_tensor_outside_inference_mode():
    torch = pytest.importorskip("torch")
    with torch.inference_mode():
        out = torch.full((5, 9), float("nan"))
    label, call = _python_api_writes(out, torch)[0]
    with pytest.raises(RuntimeError, match="^Inplace update to inference tensor outside InferenceMode"):
        call()
    assert torch.isnan(out).all()
    with torch.inference_mode():
        call()
    assert not torch.isnan(out).any()


@pytest.mark.parametrize("kind", ["gae", "retrace", "q_lambda"])
def test_standard_estimate_binding_reads_every_array_by_its_role(rng, kind):
    """_core.standard_estimate, the family's binding before the one entry, equals the public
    function: its arrays listed in role order had put the outputs in the slots of the roles
    added since (gae refused its advantages as a decay)."""
    from puffadv import _core
    e = ref.random_off_policy(rng, 5, 17)
    e["terminated"][:, 0] = e["terminated"][:, -1] = True
    series = [np.full((5, 17), np.nan, np.float32) for _ in range(2)]
    sums = [np.full(5, np.nan, np.float32) for _ in range(3)]
    flags = (e["terminated"], e["truncated"])
    every_output = dict(abs_sums=True, sums=True, square_sums=True, time_axis=-1)
    if kind == "gae":
        _core.standard_estimate(e["rewards"], e["values"], *flags, None, e["bootstrap_values"], e["importance"],
                                *series, *sums, "gae", 0.9, 0.8, 1.2, 0.9, 1.0, -1, "gae_lambda")
        want = puffadv.gae(e["rewards"], e["values"], *flags, bootstrap_values=e["bootstrap_values"],
                           importance=e["importance"], gamma=0.9, gae_lambda=0.8, rho_clip=1.2, c_clip=0.9,
                           **every_output)
    elif kind == "retrace":
        _core.standard_estimate(e["rewards"], e["q_values"], *flags, None, None, None, *series, *sums, "retrace",
                                0.9, 0.8, 1.0, 0.9, 1.0, -1, "lambda_", next_values=e["next_values"],
                                target_probs=e["target_probs"], behaviour_probs=e["behaviour_probs"])
        want = puffadv.retrace(e["rewards"], e["q_values"], e["next_values"], *flags, target_probs=e["target_probs"],
                               behaviour_probs=e["behaviour_probs"], gamma=0.9, lambda_=0.8, c_clip=0.9,
                               advantages=True, **every_output)
    else:
        _core.standard_estimate(e["rewards"], e["q_values"], *flags, None, None, None, *series, *sums, "q_lambda",
                                0.9, 0.8, 1.0, 1.0, 1.0, -1, "lambda_", next_values=e["next_values"],
                                greedy=e["greedy"])
        want = puffadv.q_lambda(e["rewards"], e["q_values"], e["next_values"], *flags, greedy=e["greedy"],
                                gamma=0.9, lambda_=0.8, advantages=True, **every_output)
    got = dict(zip(("advantages", "returns", "abs_sums", "sums", "square_sums"), (*series, *sums)))
    for role, x in got.items():
        np.testing.assert_array_equal(x, getattr(want, role), err_msg=f"{kind} {role}")
    assert np.isfinite(series[0]).all()
