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
from puffadv._torch_kernels import ConstantInputWarning  # noqa: E402

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



FLOAT_ARGUMENTS = [(name, a.name) for name in OPERATORS for a in getattr(ops, name).default._schema.arguments
                   if isinstance(a.type, torch.FloatType)]
WAYS = {"gamma": "gamma_steps", "gae_lambda": "lambda_steps", "lambda_": "lambda_steps"}


def _expected_way(name, argument):
    """The differentiable way each refusal names."""
    if argument not in WAYS and argument != "lambda":
        return "puffadv differentiates gamma and lambda only: pass it as a number or detach it"
    if name in ("puff_advantage", "compute_puff_advantage"):
        return "call puffadv.compute_puff_advantage, which differentiates a 0-d gamma and lambda, or detach it"
    return (f"pass it as {WAYS[argument]}= (a per-step tensor, which the op differentiates), or call "
            f"puffadv.{name} (which differentiates a 0-d {argument}), or detach it")


@pytest.mark.parametrize("carrier", ["requires_grad", "dual", "torch.func.grad"])
@pytest.mark.parametrize("name,argument", FLOAT_ARGUMENTS)
def test_a_float_argument_refuses_a_tensor_whose_derivative_torch_would_drop(name, argument, carrier):
    """torch converts a 0-d tensor given for a float argument to a number: a requires-grad one
    with only its own warning, a dual one without a word (the gradient or tangent silently 0).
    The functional ops refuse it naming the argument and the differentiable way; PufferLib's
    schema op (no graph, as PufferLib's own) warns and reads it as a constant, except a
    torch.func tensor, which no number stands for."""
    kwargs = valid_call(name)
    number = kwargs.get(argument, 0.9)
    words = {"requires_grad": "requires grad: torch's conversion to a number would drop its derivative",
             "dual": "carries a forward-mode tangent: torch's conversion to a number would drop it",
             "torch.func.grad": "is a torch.func transform's tensor (grad, jvp, vmap), which no number can "
                                "stand for"}[carrier]
    lost = f"{argument} of torch.ops.puffadv.{name} is a float, but the tensor given {words}"
    constant = name == "compute_puff_advantage" and carrier != "torch.func.grad"

    def run(x):
        return call(name, {**kwargs, argument: x})

    def attempt():
        x = torch.tensor(number, dtype=torch.float64)
        if carrier == "requires_grad":
            return run(x.requires_grad_())
        if carrier == "dual":
            with torch.autograd.forward_ad.dual_level():
                return run(torch.autograd.forward_ad.make_dual(x, torch.ones_like(x)))
        return torch.func.grad(lambda y: sum(o.sum() for o in (run(y) or ()) if o is not None))(x)

    if constant:
        with pytest.warns(ConstantInputWarning) as caught:
            attempt()
        ours = [w for w in caught if w.category is ConstantInputWarning]
        assert len(ours) == 1
        assert str(ours[0].message) == (f"{lost}, and this op (PufferLib's schema) records none: {argument} is "
                                        "read as a constant. For a differentiable puff advantage call "
                                        "puffadv.compute_puff_advantage")
        return
    with pytest.raises(TypeError) as raised:
        attempt()
    assert str(raised.value) == f"{lost}; {_expected_way(name, argument)}"


def _outputs(name, kwargs):
    """The op's outputs as a tuple (PufferLib's schema op: the advantages it writes)."""
    result = call(name, kwargs)
    if name == "compute_puff_advantage":
        return (kwargs["advantages"].clone(),)
    return (result,) if isinstance(result, torch.Tensor) else tuple(result)


@pytest.mark.parametrize("name,argument", FLOAT_ARGUMENTS)
def test_a_float_argument_takes_a_tensor_without_a_derivative_as_its_number(name, argument):
    """A 0-d tensor that carries nothing (a trainer's config on the GPU, say) is read as torch
    reads it, equal to the number, without a warning."""
    kwargs = valid_call(name)
    number = kwargs.get(argument, 0.7 if "clip" not in argument else 1.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        as_number = _outputs(name, {**kwargs, argument: number})
        as_tensor = _outputs(name, {**kwargs, argument: torch.tensor(number, dtype=torch.float64)})
    assert len(as_number) == len(as_tensor) > 0
    for a, b in zip(as_number, as_tensor):
        assert (a is None and b is None) or torch.equal(a, b)


@pytest.mark.parametrize("name,argument", FLOAT_ARGUMENTS)
def test_a_float_argument_given_by_position_is_checked_as_a_named_one(name, argument):
    """Every argument up to this one by position, as PufferLib passes them."""
    kwargs = valid_call(name)
    schema = getattr(ops, name).default._schema.arguments
    names = [a.name for a in schema]
    position = names.index(argument)
    args = [kwargs[a.name] if a.name in kwargs else a.default_value if a.has_default_value() else None
            for a in schema[:position]] + [torch.tensor(0.9, requires_grad=True)]
    rest = {k: v for k, v in kwargs.items() if k not in names[:position + 1]}
    if name == "compute_puff_advantage":
        with pytest.warns(ConstantInputWarning, match=f"^{argument} of torch.ops.puffadv.{name} is a float"):
            ops.compute_puff_advantage(*args, **rest)
    else:
        with pytest.raises(TypeError, match=f"^{argument} of torch.ops.puffadv.{name} is a float"):
            getattr(ops, name)(*args, **rest)


def test_a_float_argument_takes_a_requires_grad_tensor_where_no_graph_is_recorded():
    """Under no_grad, inference_mode or inside a user's autograd.Function.forward (whose
    inputs keep requires_grad) the op records nothing, as its own autograd does: a learned
    gamma read there is its number. functionalize's wrapper converts too."""
    kwargs = valid_call("gae")
    gamma = torch.nn.Parameter(torch.tensor(0.9, dtype=torch.float64))
    wanted = ops.gae(**{**kwargs, "gamma": 0.9})
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(ops.gae(**{**kwargs, "gamma": gamma}), wanted))
    with torch.inference_mode():
        assert all(torch.equal(a, b) for a, b in zip(ops.gae(**{**kwargs, "gamma": gamma}), wanted))

    class UsersFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, g):
            return ops.gae(**{**kwargs, "gamma": g})[0]

        @staticmethod
        def backward(ctx, grad):
            return grad.sum()

    assert torch.equal(UsersFunction.apply(gamma), wanted[0])
    functional = torch.func.functionalize(lambda g: ops.gae(**{**kwargs, "gamma": g})[0])
    assert torch.equal(functional(torch.tensor(0.9, dtype=torch.float64)), wanted[0])


def test_the_overload_is_checked_as_the_packet_is():
    kwargs = valid_call("td_lambda_returns")
    with pytest.raises(TypeError, match="^gamma of torch.ops.puffadv.td_lambda_returns is a float"):
        ops.td_lambda_returns.default(**{**kwargs, "gamma": torch.tensor(0.9, requires_grad=True)})


def test_pufferlibs_op_warns_for_each_float_and_refuses_a_torch_func_one():
    """Its warning names the argument at the caller's line, for each one; a torch.func tensor
    after a warned one is still refused (no number stands for it)."""
    kwargs = valid_call("compute_puff_advantage")
    with pytest.warns(ConstantInputWarning) as caught:
        ops.compute_puff_advantage(**{**kwargs, "gamma": torch.tensor(0.9, requires_grad=True),
                                      "rho_clip": torch.tensor(1.0, requires_grad=True)})
    ours = [w for w in caught if w.category is ConstantInputWarning]
    assert [str(w.message).split(" ")[0] for w in ours] == ["gamma", "rho_clip"]
    assert all(w.filename == __file__ for w in ours), [w.filename for w in ours]
    gamma = torch.tensor(0.9, requires_grad=True)  # made outside the transform: not its tensor
    with pytest.raises(TypeError, match="^lambda of torch.ops.puffadv.compute_puff_advantage is a float, but the "
                                        "tensor given is a torch.func transform's tensor"), \
            pytest.warns(ConstantInputWarning, match="^gamma of torch.ops.puffadv.compute_puff_advantage"):
        torch.func.grad(lambda lam: ops.compute_puff_advantage(**{**kwargs, "gamma": gamma, "lambda": lam}) or lam)(
            torch.tensor(0.9))


@pytest.mark.parametrize("how", ["torch.func.grad", "torch.compile"])
def test_pufferlibs_op_warns_where_its_kernel_cannot_see_the_derivative(how):
    """PufferLib's schema op reads its inputs as constants and says so; under torch.func.grad
    (its kernel sees the unwrapped tensor) and torch.compile (fake tensors, no kernel run) it
    said nothing, and torch.func.grad returned zeros (found 2026-12-06)."""
    kwargs = valid_call("compute_puff_advantage")
    values = kwargs.pop("values").double()
    kwargs = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
              for k, v in kwargs.items()}

    names = [a.name for a in ops.compute_puff_advantage.default._schema.arguments]

    def run(v):  # by position, as PufferLib calls it (its "lambda" cannot be a keyword in traced code)
        out = torch.zeros_like(v)
        given = {**kwargs, "values": v, "advantages": out}
        ops.compute_puff_advantage(*(given[n] for n in names))
        return out.sum()

    with pytest.warns(ConstantInputWarning, match="^values (is a torch.func transform's tensor|requires grad), but "
                                                  "torch.ops.puffadv.compute_puff_advantage") as caught:
        if how == "torch.func.grad":
            torch.func.grad(run)(values)
        else:
            torch._dynamo.reset()
            torch.compile(run, fullgraph=True)(values.clone().requires_grad_())
    if how == "torch.func.grad":  # under torch.compile dynamo's frames call the op
        assert any(w.filename == __file__ for w in caught if w.category is ConstantInputWarning)
