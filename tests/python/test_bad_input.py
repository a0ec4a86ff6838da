"""A catalogue of bad inputs to compute_puff_advantage (SPEC section 2): each
gets a TypeError or ValueError whose message names the argument, never a crash
or a result."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference
from reference import relative_error

R, H = 4, 6


def good():
    rng = np.random.default_rng(0)
    return {
        "values": rng.standard_normal((R, H)).astype(np.float32),
        "rewards": rng.standard_normal((R, H)).astype(np.float32),
        "dones": (rng.random((R, H)) < 0.2).astype(np.float32),
        "importance": rng.uniform(0.5, 1.5, (R, H)).astype(np.float32),
    }


def readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def call(**overrides):
    args = good()
    args.update(overrides)
    return puffadv.compute_puff_advantage(**args)


f32 = np.float32
CASES = [
    # (id, overrides, exception, fragments the message must contain)
    ("values-list", dict(values=[[1.0] * H] * R), TypeError, ["values", "must be an array", "list"]),
    ("rewards-none", dict(rewards=None), TypeError, ["rewards", "must be an array", "NoneType"]),
    ("dones-scalar", dict(dones=1.0), TypeError, ["dones", "must be an array"]),
    ("importance-str", dict(importance="x"), TypeError, ["importance", "must be an array"]),
    ("values-1d", dict(values=np.ones(H, f32)), ValueError, ["values", "2-D"]),
    ("rewards-3d", dict(rewards=np.ones((1, R, H), f32)), ValueError, ["rewards", "2-D", "3-D"]),
    ("dones-0d", dict(dones=np.array(1.0, f32)), ValueError, ["dones", "2-D", "0-D"]),
    ("rewards-short", dict(rewards=np.ones((R, H - 1), f32)), ValueError,
     ["rewards", f"[{R}, {H - 1}]", f"[{R}, {H}]", "shape"]),
    ("importance-rows", dict(importance=np.ones((R + 1, H), f32)), ValueError, ["importance", "shape"]),
    ("advantages-shape", dict(advantages=np.ones((R, H + 1), f32)), ValueError, ["advantages", "shape"]),
    ("values-int", dict(values=np.ones((R, H), np.int64)), TypeError, ["values", "int64"]),
    ("dones-int32", dict(dones=np.ones((R, H), np.int32)), TypeError, ["dones", "int32"]),
    ("values-complex", dict(values=np.ones((R, H), np.complex64)), TypeError, ["values", "complex"]),
    ("rewards-f64-mixed", dict(rewards=np.ones((R, H), np.float64)), TypeError,
     ["rewards", "float64", "float32", "dtype"]),
    ("advantages-f64-mixed", dict(advantages=np.ones((R, H), np.float64)), TypeError,
     ["advantages", "float64", "dtype"]),
    ("advantages-readonly", dict(advantages=readonly(np.ones((R, H), f32))), ValueError,
     ["advantages", "read-only"]),
    ("advantages-broadcast", dict(advantages=np.broadcast_to(np.zeros((1, H), f32), (R, H))),
     ValueError, ["advantages"]),
    ("gamma-nan", dict(gamma=float("nan")), ValueError, ["gamma", "nan"]),
    ("gamma-big", dict(gamma=1.5), ValueError, ["gamma", "[0, 1]"]),
    ("gamma-negative", dict(gamma=-0.1), ValueError, ["gamma"]),
    ("lambda-inf", dict(gae_lambda=float("inf")), ValueError, ["gae_lambda"]),
    ("lambda-big", dict(gae_lambda=1.01), ValueError, ["gae_lambda"]),
    ("rho-negative", dict(rho_clip=-1.0), ValueError, ["rho_clip", ">= 0"]),
    ("rho-nan", dict(rho_clip=float("nan")), ValueError, ["rho_clip"]),
    ("c-inf", dict(c_clip=float("inf")), ValueError, ["c_clip", "finite"]),
    ("c-negative", dict(c_clip=-0.5), ValueError, ["c_clip"]),
    ("gamma-str", dict(gamma="0.9"), TypeError, ["gamma", "real number", "str"]),
    ("c-none", dict(c_clip=None), TypeError, ["c_clip", "real number"]),
    ("lambda-list", dict(gae_lambda=[0.9]), TypeError, ["gae_lambda", "real number"]),
]


@pytest.mark.parametrize("overrides,error,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_named(overrides, error, fragments):
    with pytest.raises(error) as info:
        call(**overrides)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_output_aliasing_each_input_is_rejected():
    args = good()
    for name in ("values", "rewards", "dones", "importance"):
        with pytest.raises(ValueError, match=f"advantages overlaps {name}"):
            puffadv.compute_puff_advantage(**args, advantages=args[name])


def test_output_overlapping_part_of_an_input_is_rejected():
    buffer = np.random.default_rng(1).standard_normal((R, 2 * H)).astype(np.float32)
    args = good()
    args["values"] = buffer[:, :H]
    with pytest.raises(ValueError, match="advantages overlaps values"):
        puffadv.compute_puff_advantage(**args, advantages=buffer[:, H // 2: H // 2 + H])


def test_output_interleaved_with_an_input_is_rejected():
    # Distinct elements, but an overlapping memory range: rejected rather than guessed at.
    buffer = np.zeros((R, 2 * H), np.float32)
    args = good()
    args["values"] = buffer[:, ::2]
    with pytest.raises(ValueError, match="advantages overlaps values"):
        puffadv.compute_puff_advantage(**args, advantages=buffer[:, 1::2])


def test_inputs_may_share_memory():
    a = np.random.default_rng(2).standard_normal((R, H)).astype(np.float32)
    zeros = np.zeros_like(a)
    out = puffadv.compute_puff_advantage(a, a, zeros, a, gamma=0.9, gae_lambda=0.8, rho_clip=2.0)
    want = reference.puff_advantage(a, a, zeros, a, gamma=0.9, gae_lambda=0.8, rho_clip=2.0)
    assert relative_error(out, want) <= 1e-5


def test_input_that_is_read_only_is_fine():
    args = {k: readonly(v) for k, v in good().items()}
    out = puffadv.compute_puff_advantage(**args, gamma=0.9, gae_lambda=0.8)
    assert relative_error(out, reference.puff_advantage(**good(), gamma=0.9, gae_lambda=0.8)) <= 1e-5


def test_mixed_frameworks_are_rejected():
    torch = pytest.importorskip("torch")
    args = good()
    args["dones"] = torch.from_numpy(args["dones"])
    with pytest.raises(TypeError, match="dones is a torch array but values is a numpy array"):
        puffadv.compute_puff_advantage(**args)
    with pytest.raises(TypeError, match="advantages is a torch array"):
        puffadv.compute_puff_advantage(**good(), advantages=torch.zeros(R, H))


def test_output_is_not_touched_when_arguments_are_bad():
    out = np.full((R, H), 7.0, np.float32)
    with pytest.raises(ValueError):
        puffadv.compute_puff_advantage(**good(), advantages=out, gamma=2.0)
    assert (out == 7.0).all()


def _torch_devices():
    torch = pytest.importorskip("torch")
    has_gpu = torch.cuda.is_available() and puffadv.backend()["cuda"]["device_count"] > 0
    return torch, ["cpu"] + (["cuda"] if has_gpu else [])


@pytest.mark.parametrize("which", ["values", "dones", "advantages", "gae-rewards", "gae-returns"])
def test_negative_view_is_a_value_error(which):
    """torch's neg bit (e.g. the .imag of a conjugate view) is not in DLPack: the
    memory holds -x. Such a tensor is refused by name, never read as if it were x."""
    torch, devices = _torch_devices()
    for device in devices:
        args = {k: torch.from_numpy(v).to(device) for k, v in good().items()}
        neg = torch.randn(R, H, dtype=torch.complex64, device=device).conj().imag
        assert neg.is_neg()  # what this test is about
        out = torch.full((R, H), float("nan"), device=device)
        name = which.split("-")[-1]
        last_value = args["values"][:, 0].contiguous()
        with pytest.raises(ValueError, match=f"{name} is a negative view"):
            if which == "advantages":
                puffadv.compute_puff_advantage(**args, advantages=neg)
            elif which == "gae-rewards":
                puffadv.gae(neg, args["values"], args["dones"] > 0, last_value=last_value,
                            advantages=out, returns=False, time_axis=-1)
            elif which == "gae-returns":
                puffadv.gae(args["rewards"], args["values"], args["dones"] > 0,
                            last_value=last_value, advantages=out, returns=neg, time_axis=-1)
            else:
                args[which] = neg
                puffadv.compute_puff_advantage(**args, advantages=out)
        if which == "advantages":
            assert neg.is_neg()  # refused before anything was written through it
        else:
            assert torch.isnan(out).all()  # nothing written
        # The resolved tensor is an ordinary one and is read as it is.
        resolved = neg.resolve_neg()
        if which.startswith("gae"):
            plain = {k: v.cpu().numpy() for k, v in args.items()}
            result = puffadv.gae(resolved if which == "gae-rewards" else args["rewards"], args["values"],
                                 args["dones"] > 0, last_value=last_value, advantages=out, returns=False, time_axis=-1)
            want, _ = reference.standard_estimate(
                "gae", resolved.cpu().numpy() if which == "gae-rewards" else plain["rewards"], plain["values"],
                plain["dones"] > 0, last_value=plain["values"][:, 0])
            assert result.advantages is out
        else:
            target = which if which != "advantages" else "values"
            args[target] = resolved
            result = puffadv.compute_puff_advantage(**args, advantages=out)
            assert result is out
            want = reference.puff_advantage(*(args[k].cpu().numpy() for k in ("values", "rewards", "dones",
                                                                                 "importance")))
        assert relative_error(out.cpu().numpy(), want) <= 1e-5


# ---- arrays DLPack cannot carry (issue 15): each says what came and what would do ----

def _structured():
    return np.zeros((R, H), [("a", "f4"), ("b", "f4")])


NUMPY_KINDS = [
    # (id, array, fragments)
    ("big-endian", lambda: np.ones((R, H), ">f4"),
     ["has dtype >f4 in big-endian byte order", "expected the machine's native byte order",
      ".astype('float32')"]),
    ("big-endian-f8", lambda: np.ones((R, H), ">f8"), ["big-endian", ".astype('float64')"]),
    ("structured", _structured, ["(a structured dtype), which puffadv does not read"]),
    ("object", lambda: np.ones((R, H), object), ["has dtype object (Python objects)"]),
    ("datetime64", lambda: np.zeros((R, H), "M8[s]"), ["has dtype datetime64[s] (dates)"]),
    ("timedelta64", lambda: np.zeros((R, H), "m8[s]"), ["has dtype timedelta64[s] (time spans)"]),
    ("str", lambda: np.zeros((R, H), "U4"), ["has dtype <U4 (text)"]),
    ("bytes", lambda: np.zeros((R, H), "S4"), ["has dtype |S4 (byte strings)"]),
    ("raw-void", lambda: np.zeros((R, H), "V4"), ["has dtype |V4 (raw bytes)"]),
]
if np.dtype(np.longdouble).itemsize > 8:
    NUMPY_KINDS.append(("float128", lambda: np.ones((R, H), np.longdouble),
                        [f"has dtype {np.dtype(np.longdouble).name} (extended precision, not an IEEE type)"]))


@pytest.mark.parametrize("argument", ["values", "dones", "advantages"])
@pytest.mark.parametrize("make,fragments", [k[1:] for k in NUMPY_KINDS], ids=[k[0] for k in NUMPY_KINDS])
def test_numpy_dtypes_dlpack_cannot_carry(argument, make, fragments):
    # Found 2026-12-01: all of these were "must be an array ... got ndarray".
    with pytest.raises(TypeError) as info:
        call(**{argument: make()})
    message = str(info.value)
    assert message.startswith(f"{argument} has dtype"), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    if "does not read" in message:  # what this argument accepts, by its role
        expected = {"values": "expected float32, float64, bfloat16 or float16",
                    "dones": "expected bool, uint8 or the float inputs' dtype",
                    "advantages": "expected the float inputs' dtype"}[argument]
        assert expected in message
    assert isinstance(info.value.__cause__, BufferError)  # NumPy's own refusal, kept


def _torch_kinds():
    torch = pytest.importorskip("torch")
    dense = torch.from_numpy(good()["values"])
    return torch, {
        "sparse_coo": (lambda: dense.to_sparse(), "is a tensor with layout torch.sparse_coo; puffadv reads "
                                                  "dense tensors (layout torch.strided): pass {}.to_dense()"),
        "sparse_csr": (lambda: dense.to_sparse_csr(), "is a tensor with layout torch.sparse_csr"),
        "quantized": (lambda: torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8),
                      "is a quantized tensor (dtype torch.qint8); puffadv reads float tensors: "
                      "pass {}.dequantize()"),
        "meta": (lambda: dense.to("meta"), "is on the meta device, which holds no data; puffadv reads "
                                           "arrays in cpu, cuda or rocm memory"),
        # Issue 31: a strided nested tensor passed for dense (its layout reads torch.strided).
        "nested": (lambda: torch.nested.nested_tensor(list(dense.unbind(0))),
                   "is a nested tensor (layout torch.strided); puffadv reads dense [rows, horizon] tensors "
                   "(layout torch.strided): pad it first, e.g. {}.to_padded_tensor(0.0)"),
        "jagged": (lambda: torch.nested.nested_tensor(list(dense.unbind(0)), layout=torch.jagged),
                   "is a nested tensor (layout torch.jagged)"),
    }


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: sparse CSR is beta; quantization deprecated
@pytest.mark.parametrize("kind", ["sparse_coo", "sparse_csr", "quantized", "meta", "nested", "jagged"])
@pytest.mark.parametrize("argument", ["values", "importance", "advantages"])
def test_torch_tensors_dlpack_cannot_carry(kind, argument):
    # Found 2026-12-01: "must be an array ... got torch.Tensor", and for meta
    # tensors torch's "Unknown device type meta for Dlpack", naming no argument.
    torch, kinds = _torch_kinds()
    make, words = kinds[kind]
    args = {k: torch.from_numpy(v) for k, v in good().items()}
    args[argument] = make()
    with pytest.raises(TypeError) as info:
        puffadv.compute_puff_advantage(**args)
    assert str(info.value).startswith(f"{argument} " + words.format(argument)), str(info.value)


def test_gae_names_a_meta_tensor_too():
    torch = pytest.importorskip("torch")
    e = reference.random_episodes(np.random.default_rng(1), R, H, np.float32)
    t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in e.items()}
    with pytest.raises(TypeError, match="^terminated is on the meta device"):
        puffadv.gae(t["rewards"], t["values"], t["terminated"].to("meta"), last_value=t["last_value"], time_axis=-1)


def test_deleted_jax_array():
    # Found 2026-12-01: "must be an array ... got jaxlib._jax.ArrayImpl" (then a
    # TypeError about NoneType from __dlpack_device__).
    jnp = pytest.importorskip("jax.numpy")
    args = {k: jnp.asarray(v) for k, v in good().items()}
    args["rewards"].delete()
    with pytest.raises(TypeError, match=r"^rewards is a deleted JAX array \(.delete\(\) freed its buffer\); "
                                        r"pass a live array$"):
        puffadv.compute_puff_advantage(**args)


@pytest.mark.parametrize("argument", ["values", "dones", "advantages"])
def test_masked_array_is_refused(argument):
    # Found 2026-12-01: the mask was ignored (masked values flowed into the result)
    # and a plain ndarray came back. DLPack exports the data without the mask.
    data = good()
    masked = np.ma.masked_array(data[argument] if argument in data else np.zeros((R, H), np.float32),
                                mask=np.eye(R, H, dtype=bool))
    with pytest.raises(TypeError, match=f"^{argument} is a numpy.ma.MaskedArray; puffadv would read its "
                                        f"masked values as data and drop the mask"):
        call(**{argument: masked})
    e = reference.random_episodes(np.random.default_rng(1), R, H, np.float32)
    with pytest.raises(TypeError, match="^values is a numpy.ma.MaskedArray"):
        puffadv.gae(e["rewards"], np.ma.masked_array(e["values"]), e["terminated"], last_value=e["last_value"], time_axis=-1)
    # An ndarray subclass without a mask is read as the array it is.
    subclass = type("Subclass", (np.ndarray,), {})
    want = reference.puff_advantage(data["values"], data["rewards"], data["dones"], data["importance"])
    assert relative_error(np.asarray(call(values=data["values"].view(subclass))), want) <= 1e-5


# ---- stream ----

class _StreamObject:
    def __init__(self, **attributes):
        self.__dict__.update(attributes)


@pytest.mark.parametrize("stream,error,fragment", [
    # Found 2026-12-01: nanobind's "incompatible function arguments" dump for the first three,
    # and int()'s "invalid literal" (naming nothing) for the string.
    (-1, ValueError, "stream must be a handle in [0, 2**64), got -1"),
    (2**64, ValueError, "stream must be a handle in [0, 2**64), got 18446744073709551616"),
    (_StreamObject(ptr=-5), ValueError, "stream must be a handle in [0, 2**64), got -5"),
    (_StreamObject(cuda_stream="abc"), TypeError, "stream must be an int handle, a torch.cuda.Stream or a "
                                                  "cupy Stream (an object whose .cuda_stream or .ptr is an "
                                                  "int), got str"),
    (_StreamObject(cuda_stream=1.5), TypeError, "got float"),
    ("0", TypeError, "stream must be an int handle"),
    (1.0, TypeError, "stream must be an int handle"),
])
@pytest.mark.parametrize("function", ["puff", "puff-fused", "gae"])
def test_bad_stream_is_named(stream, error, fragment, function):
    args = good()
    with pytest.raises(error) as info:
        if function == "gae":
            puffadv.gae(args["rewards"], args["values"], args["dones"] > 0, last_value=args["values"][:, 0],
                        stream=stream, time_axis=-1)
        else:
            puffadv.compute_puff_advantage(**args, stream=stream, returns=function == "puff-fused" or None)
    assert fragment in str(info.value)


@pytest.mark.parametrize("stream", [0, np.uint64(2**64 - 1), _StreamObject(cuda_stream=0), _StreamObject(ptr=0)])
def test_good_stream_handles_are_accepted_on_the_cpu(stream):
    out = call(stream=stream)
    want = reference.puff_advantage(*good().values())
    assert relative_error(out, want) <= 1e-5


# ---- parameters that are arrays: one rule for every framework ----

def _zero_d(framework, value, dtype):
    if framework == "numpy":
        return np.array(value, dtype=dtype)
    torch = pytest.importorskip("torch")
    return torch.tensor(value, dtype=getattr(torch, dtype))


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("value,dtype,taken_as", [
    (0.5, "float32", 0.5), (0.25, "float64", 0.25), (1, "uint8", 1.0), (0, "int64", 0.0), (1, "int32", 1.0),
])
def test_zero_d_real_numbers_are_numbers(framework, value, dtype, taken_as):
    got = call(gamma=_zero_d(framework, value, dtype))
    want = reference.puff_advantage(*good().values(), gamma=taken_as)
    assert relative_error(got, want) <= 1e-5


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("value,dtype,shown", [
    # Found 2026-12-01: torch.tensor(True) was taken as 1.0 and a complex tensor
    # raised RuntimeError, while np.array(True) was a TypeError.
    (True, "bool", "bool"), (0.5 + 0.3j, "complex64", "complex64"), (0.5 + 0j, "complex128", "complex128"),
])
def test_zero_d_bool_and_complex_are_not_numbers(framework, value, dtype, shown):
    with pytest.raises(TypeError, match=f"gamma must be a real number, got a 0-d .* of dtype .*{shown}"):
        call(gamma=_zero_d(framework, value, dtype))


def test_zero_d_meta_tensor_is_not_a_number():
    # Found 2026-12-01: torch's RuntimeError "Tensor.item() cannot be called on meta tensors".
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="^rho_clip is a 0-d tensor on the meta device, which holds no value"):
        call(rho_clip=torch.tensor(0.5, device="meta"))



def test_ml_dtypes_bfloat16_numpy_array_is_not_called_accepted():
    """Found by issue 31's probe: "has dtype bfloat16 (raw bytes), which puffadv does not read;
    expected float32, float64, bfloat16 or float16" refused bfloat16 while listing it."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    args = good()
    args["values"] = args["values"].astype(ml_dtypes.bfloat16)
    with pytest.raises(TypeError) as info:
        puffadv.compute_puff_advantage(**args)
    assert str(info.value) == (
        "values is a NumPy array of ml_dtypes' bfloat16, which NumPy cannot export through DLPack; "
        "puffadv reads bfloat16 as torch, JAX or CuPy arrays (e.g. jax.numpy.asarray(values)), and NumPy "
        "arrays of float32, float64 or float16 (e.g. values.astype(numpy.float32))")
    args["values"] = good()["values"].astype(ml_dtypes.float8_e4m3fn)
    with pytest.raises(TypeError, match=r"^values has dtype float8_e4m3fn \(an ml_dtypes extension type\), "
                                        r"which puffadv does not read; expected float32"):
        puffadv.compute_puff_advantage(**args)
