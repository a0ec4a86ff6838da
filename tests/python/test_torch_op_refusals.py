"""torch.ops.puffadv with what its C++ kernels never see (issue 31): None for a
required tensor, sparse, quantized and nested tensors, and arguments torch's
schema parser refuses (`n=2.5`, `n=2**70`). Each is a TypeError or ValueError
naming the argument, in the Python API's words, on every operator; never the
dispatcher's NotImplementedError or a RuntimeError."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import reference

torch = pytest.importorskip("torch")
import puffadv  # noqa: E402
import puffadv.torch  # noqa: E402,F401

ops = torch.ops.puffadv
B, T = 3, 5
FLAGS = ("terminated", "dones", "truncated", "greedy")
PER_ROW = ("last_value", "seed")
SCALARS = {"gamma": 0.9, "lambda": 0.9, "rho_clip": 1.0, "c_clip": 1.0}  # the puff ops' positional floats
OPERATORS = [name for name in ("compute_puff_advantage", "puff_advantage", "gae", "td_lambda_returns", "vtrace",
                               "discounted_returns", "n_step_returns", "retrace", "q_lambda", "episodic_cumsum",
                               "eligibility_traces", "linear_recurrence") if hasattr(ops, name)]


def tensor_arguments(name):
    """(argument name, optional) of each tensor argument of the operator's schema, in order."""
    found = []
    for a in getattr(ops, name).default._schema.arguments:
        kind = a.type
        optional = isinstance(kind, torch.OptionalType)
        if isinstance(kind.getElementType() if optional else kind, torch.TensorType):
            found.append((a.name, optional))
    return found


def valid_call(name, seed=0):
    """A valid call of the operator: kwargs for every required argument (and a last_value
    where the schema takes one), fresh random tensors."""
    g = torch.Generator().manual_seed(seed)
    kwargs = {}
    for a in getattr(ops, name).default._schema.arguments:
        kind, arg = a.type, a.name
        optional = isinstance(kind, torch.OptionalType)
        is_tensor = isinstance(kind.getElementType() if optional else kind, torch.TensorType)
        if is_tensor and (not optional or arg in ("last_value", "target_probs", "behaviour_probs")):
            if arg in FLAGS:
                kwargs[arg] = torch.rand(B, T, generator=g) < 0.2
            elif arg in PER_ROW:
                kwargs[arg] = torch.rand(B, generator=g)
            else:
                kwargs[arg] = torch.rand(B, T, generator=g) + 0.5
        elif arg == "time_axis":
            kwargs[arg] = -1  # required at run time (issue 33): [B, T] here
        elif not is_tensor and not a.has_default_value():
            kwargs[arg] = SCALARS.get(arg, 0.9) if str(kind) == "float" else {"int": -1, "bool": False}[str(kind)]
    return kwargs


def call(name, kwargs):
    return getattr(ops, name)(**kwargs)


@pytest.mark.parametrize("name", OPERATORS)
def test_the_valid_calls_here_run(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # compute_puff_advantage: no graph for inputs needing none
        call(name, valid_call(name))


@pytest.mark.parametrize("name", OPERATORS)
def test_none_for_any_required_tensor_names_it(name):
    required = [arg for arg, optional in tensor_arguments(name) if not optional]
    for arg in required:
        kwargs = valid_call(name)
        kwargs[arg] = None
        with pytest.raises(TypeError, match=f"^{arg} must be a tensor, got None$"):
            call(name, kwargs)
    # No tensor at all: was the dispatcher's "There were no tensor arguments" NotImplementedError.
    kwargs = {**valid_call(name), **{arg: None for arg in required}}
    with pytest.raises(TypeError, match=f"^{required[0]} must be a tensor, got None$"):
        call(name, kwargs)


def _exotic(kind, dense):
    if kind == "sparse_coo":
        return dense.to_sparse(), "is a tensor with layout torch.sparse_coo; puffadv reads dense tensors"
    if kind == "sparse_csr":
        return dense.to_sparse_csr(), "is a tensor with layout torch.sparse_csr"
    if kind == "quantized":
        return (torch.quantize_per_tensor(dense.float(), 0.1, 0, torch.qint8),
                "is a quantized tensor (dtype torch.qint8); puffadv reads float tensors")
    if kind == "nested":
        return torch.nested.nested_tensor(list(dense.unbind(0))), "is a nested tensor (layout torch.strided)"
    return (torch.nested.nested_tensor(list(dense.unbind(0)), layout=torch.jagged),
            "is a nested tensor (layout torch.jagged)")


KINDS = ["sparse_coo", "sparse_csr", "quantized", "nested", "jagged"]


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: sparse CSR is beta; quantization deprecated
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", OPERATORS)
def test_tensors_the_kernels_cannot_read_are_named(name, kind):
    """Was the dispatcher's NotImplementedError ("Could not run 'puffadv::gae' with arguments
    from the 'SparseCPU' backend"); now the Python API's TypeError, for the first argument and
    for a later one, with or without grad."""
    arguments = [arg for arg, optional in tensor_arguments(name) if not optional]
    for arg in (arguments[0], arguments[-1]):
        kwargs = valid_call(name)
        dense = kwargs[arg]
        if kind == "quantized" and dense.dtype == torch.bool:
            continue  # no quantized bool
        kwargs[arg], words = _exotic(kind, dense)
        with pytest.raises(TypeError) as error:
            call(name, kwargs)
        assert str(error.value).startswith(f"{arg} {words}"), str(error.value)
        if kind != "quantized" and dense.is_floating_point() and arg != "advantages":  # (an output: torch's rule)
            kwargs[arg] = kwargs[arg].requires_grad_()  # through the autograd kernel first
            with pytest.raises(TypeError, match=f"^{arg} is a "):
                call(name, kwargs)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kind", ["sparse_coo", "quantized"])
def test_same_words_as_the_python_api(kind):
    kwargs = valid_call("gae")
    kwargs["values"], _ = _exotic(kind, kwargs["values"])
    with pytest.raises(TypeError) as op:
        ops.gae(**kwargs)
    with pytest.raises(TypeError) as api:
        puffadv.gae(kwargs["rewards"], kwargs["values"], kwargs["terminated"], last_value=kwargs["last_value"],
                    time_axis=-1)
    assert str(op.value) == str(api.value)


@pytest.mark.skipif(not hasattr(ops, "n_step_returns"), reason="op library built without the family")
@pytest.mark.parametrize("n,error,words", [
    (2.5, TypeError, "n must be an int, got float 2.5"),
    ("3", TypeError, "n must be an int, got str '3'"),
    (2**70, ValueError, "n must be an int within int64 (from -2**63 to 2**63 - 1), got 1180591620717411303424"),
    (2**63, ValueError, "n must be an int within int64 (from -2**63 to 2**63 - 1), got 9223372036854775808"),
    (0, ValueError, "n must be >= 1 (the number of steps in each return's window), got 0"),
])
def test_n_the_schema_cannot_read_is_named(n, error, words):
    """Found by issue 31's probe: torch's schema parser raised RuntimeError ("Expected a value of
    type 'int' for argument 'n' but instead found type 'int'" for 2**70)."""
    kwargs = valid_call("n_step_returns")
    for op in (ops.n_step_returns, ops.n_step_returns.default):
        with pytest.raises(error) as raised:
            op(**kwargs, n=n)
        assert str(raised.value) == words


def test_time_axis_the_schema_cannot_read_and_floats_keep_torchs_error():
    kwargs = valid_call("gae")
    with pytest.raises(ValueError, match=r"^time_axis must be an int within int64 .*, got 1180591620717411303424$"):
        ops.gae(**{**kwargs, "time_axis": 2**70})
    with pytest.raises(TypeError, match=r"^time_axis must be an int, got float 0.0$"):
        ops.gae(**{**kwargs, "time_axis": 0.0})
    with pytest.raises(RuntimeError, match="argument 'gamma'"):  # torch's words name it (test_torch_ops.py)
        ops.gae(**kwargs, gamma="x")


@pytest.mark.skipif(not hasattr(ops, "episodic_cumsum"), reason="op library built without the family")
def test_time_axis_names_the_kinds_own_argument_and_shapes_are_the_callers():
    x, d = torch.rand(6, 4), torch.rand(6, 4) < 0.2
    with pytest.raises(ValueError, match=r"for the 2-D inputs, got 2$"):
        ops.episodic_cumsum(x, d, time_axis=2)
    with pytest.raises(ValueError, match=r"^dones has shape \[5, 4\] but inputs has shape \[6, 4\]; "):
        ops.episodic_cumsum(x, d[:5], time_axis=0)


def test_torch_func_transforms_say_to_use_the_operators():
    """Found by issue 31's probe: under torch.func.vmap the Python API gave "inputs (torch.Tensor)
    cannot be read through DLPack: ... Cannot access data pointer of Tensor that doesn't have
    storage"; torch.ops.puffadv runs under torch.func (vmap through torch's batching fallback)."""
    e = reference.random_episodes(np.random.default_rng(2), B, T, np.float32)
    x, d = torch.from_numpy(e["rewards"]), torch.from_numpy(e["terminated"])
    with pytest.raises(TypeError) as info:
        torch.func.vmap(lambda row: puffadv.episodic_cumsum(row[None], d[:1], time_axis=-1))(x)
    assert str(info.value).startswith("inputs is a tensor inside a torch.func transform (vmap, grad, jacrev, "
                                      "...), whose data the puffadv functions cannot read; call the operator "
                                      "torch.ops.puffadv.<name> instead"), str(info.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: no batching rule, the slow fallback
        batched = torch.func.vmap(lambda row: torch.ops.puffadv.episodic_cumsum(row[None], d[:1],
                                                                                   time_axis=-1))(x)
    assert torch.equal(batched[:, 0], torch.ops.puffadv.episodic_cumsum(x, d[:1].expand_as(d), time_axis=-1))

