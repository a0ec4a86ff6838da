"""Hypothesis fuzzing of the public Python API (issue 7).

Each example builds a whole call: every array gets its own dtype, framework and
memory layout (contiguous, column-major, stepped, negative, zero and huge
strides, self-overlapping, misaligned, read-only), some arguments are not arrays
at all or arrays DLPack cannot carry (NumPy byte orders and dtype kinds, torch
sparse, quantized and meta tensors), outputs may alias inputs, and the scalars
range over good values, bad values and non-numbers. A third fuzz hands puffadv
DLPack producers that lie in their capsules (dlpack_producers.py). The one rule checked: the call returns the float64
reference's answer (tests/python/reference.py), writing nothing outside the
output, or raises TypeError/ValueError, the class the faults in the call imply,
with a message naming the argument at fault. Never a crash, never another
exception, never a silently wrong number.

PUFFADV_FUZZ_EXAMPLES (default 300) and PUFFADV_FUZZ_DEADLINE_MS (default 2000)
tune the run; PUFFADV_FUZZ_REPORT=path writes a JSON tally of cases by kind
and outcome, the numbers in docs/reliability.md.
"""
from __future__ import annotations

import atexit
import collections
import fractions
import json
import os
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from numpy.lib.stride_tricks import as_strided

import puffadv
import reference
from dlpack_producers import IS_COPIED, READ_ONLY, LyingProducer
from reference import relative_error

try:
    import torch
except ImportError:  # the fuzz runs NumPy-only without torch
    torch = None

EXAMPLES = int(os.environ.get("PUFFADV_FUZZ_EXAMPLES", "300"))
DEADLINE = timedelta(milliseconds=int(os.environ.get("PUFFADV_FUZZ_DEADLINE_MS", "2000")))
FUZZ = settings(max_examples=EXAMPLES, deadline=DEADLINE,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ARRAY_NAMES = ("values", "rewards", "dones", "importance")
PARAM_NAMES = ("gamma", "gae_lambda", "rho_clip", "c_clip")
# Relative error against the float64 reference, by output dtype (16-bit outputs: their rounding).
TOLERANCE = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.5e-2}
FINITE_MAX = {"float16": 6.5e4, "bfloat16": 3e38, "float32": 3e38, "float64": 1e308}
HUGE = 1 << 18  # elements: a row or time stride far beyond the array's own extent

# --- tally for docs/reliability.md ---------------------------------------------

TALLY: collections.Counter = collections.Counter()


def _write_tally():
    path = os.environ.get("PUFFADV_FUZZ_REPORT")
    if path and TALLY:
        with open(path, "w") as f:
            json.dump(dict(sorted(TALLY.items())), f, indent=1)


atexit.register(_write_tally)


def tally(function, faults, outcome):
    kinds = sorted({kind for _, kind, _ in faults})
    kind = "valid call" if not kinds else kinds[0] if len(kinds) == 1 else "several faults at once"
    TALLY[f"{function} | {kind} | {outcome}"] += 1
    TALLY[f"{function} | all cases | {outcome}"] += 1


# --- memory layouts ------------------------------------------------------------

# (kind, row stride, col stride) in elements; signs and offsets are drawn separately.
def stride_options(rows, cols):
    options = [("row-major", cols, 1), ("row-major-padded", cols + 3, 1),
               ("col-major", 1, rows), ("col-major-padded", 1, rows + 2),
               ("stepped", 2 * cols + 1, 2), ("time-major-stepped", 3, 3 * rows + 1),
               ("zero-row-stride", 0, 1), ("zero-col-stride", cols, 0), ("zero-strides", 0, 0),
               ("interleaved", 1, 2)]  # distinct only when rows <= 2: overlapping elements
    if rows <= 4:
        options.append(("huge-row-stride", HUGE + 7, 1))
    if cols <= 8:
        options.append(("huge-col-stride", 1, HUGE + 5))
    return options


SHARED_ELEMENTS = ("zero-row-stride", "zero-col-stride", "zero-strides", "interleaved")


@st.composite
def layouts(draw, rows, cols, output=False, fault=None):
    """A layout. Inputs may share elements and be read-only; a valid output may not.
    fault: 'misaligned', 'read-only' or 'shared' makes the layout itself the fault."""
    options = stride_options(rows, cols)
    if output and fault != "shared":
        options = [o for o in options if o[0] not in SHARED_ELEMENTS]
    elif fault == "shared":
        options = [o for o in options if o[0] in SHARED_ELEMENTS]
    kind, rs, cs = draw(st.sampled_from(options))
    if draw(st.booleans()):
        rs, kind = -rs, kind + "/neg-rows"
    if draw(st.booleans()):
        cs, kind = -cs, kind + "/neg-cols"
    misaligned = draw(st.sampled_from([1, 2, 3, 4])) if fault == "misaligned" else 0  # bytes
    read_only = fault == "read-only" or (not output and draw(st.sampled_from([False] * 5 + [True])))
    return dict(kind=kind, rs=rs, cs=cs, misaligned=misaligned, read_only=read_only)


def element_offsets(rows, cols, rs, cs):
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return (r * rs + c * cs).ravel()


def carve(rows, cols, dtype, layout, fill):
    """A [rows, cols] numpy view with `layout` into a fresh buffer filled with `fill`.
    Returns (view, base, offset) where base is the 1-D buffer the view lives in."""
    rs, cs = layout["rs"], layout["cs"]
    itemsize = np.dtype(dtype).itemsize
    lo = min(0, (rows - 1) * rs) + min(0, (cols - 1) * cs) if rows and cols else 0
    hi = max(0, (rows - 1) * rs) + max(0, (cols - 1) * cs) if rows and cols else 0
    n = hi - lo + 3  # a spare element at each end catches writes just outside
    skew = layout["misaligned"] % itemsize if itemsize > 1 else 0
    raw = np.empty(n * itemsize + itemsize, np.uint8)
    base = raw[skew: skew + n * itemsize].view(dtype)
    base[...] = fill
    offset = 1 - lo
    view = as_strided(base[offset:], shape=(rows, cols), strides=(rs * itemsize, cs * itemsize))
    if layout["read_only"]:
        view.flags.writeable = False
    return view, base, offset


def to_torch(view, base, offset, layout):
    """The same memory as a torch tensor, where torch can express it (no negative
    strides, no misalignment, no read-only flag); None otherwise."""
    if torch is None or layout["rs"] < 0 or layout["cs"] < 0 or layout["misaligned"] % base.itemsize:
        return None
    if layout["read_only"] or base.dtype not in (np.float32, np.float64, np.int64, np.uint8):
        return None
    return torch.from_numpy(base).as_strided(view.shape, (layout["rs"], layout["cs"]), offset)


# --- scalars -------------------------------------------------------------------

GOOD_UNIT = [0.0, 1.0, 0.5, 0.9, 0.99, 0.95, 1, 0, np.float32(0.9), np.float64(0.8),
             fractions.Fraction(1, 3)]
GOOD_CLIP = [0.0, 0.5, 1.0, 2.0, 5.0, 1e30, 3, np.float32(1.5)]
NOT_FINITE = [float("nan"), float("inf"), float("-inf")]
NOT_NUMBERS = [None, "0.9", True, 1j, [0.9], b"1", np.array([0.9]), np.array("0.9"), object()]


@st.composite
def parameters(draw, bad=()):
    """(name -> value, faults): the scalars named in `bad` out of range, non-finite or
    not numbers; the others good."""
    params, faults = {}, []
    for name in PARAM_NAMES:
        unit = name in ("gamma", "gae_lambda")
        choice = draw(st.sampled_from(["range", "nonfinite", "huge-int", "type"])) if name in bad else "good"
        if choice == "good":
            value = draw(st.sampled_from(GOOD_UNIT if unit else GOOD_CLIP + GOOD_UNIT))
            if draw(st.sampled_from([False, False, True])):  # and some 0-d arrays
                value = np.array(float(value))
        elif choice == "range":
            value = draw(st.sampled_from([-0.1, -1e-30, 1.0000001, 2.0] if unit else [-0.5, -1e-30, -3]))
            faults.append((name, "parameter out of range", ValueError))
        elif choice == "nonfinite":
            value = draw(st.sampled_from(NOT_FINITE))
            faults.append((name, "parameter not finite", ValueError))
        elif choice == "huge-int":
            value = 10 ** 400
            faults.append((name, "parameter int beyond float", ValueError))
        else:
            value = NOT_NUMBERS[draw(st.integers(0, len(NOT_NUMBERS) - 1))]
            faults.append((name, "parameter not a real number", TypeError))
        params[name] = value
    return params, faults


# --- a whole call --------------------------------------------------------------

FLOATS = [np.float32, np.float64]
MAIN_DTYPES = FLOATS + [np.float16, "bfloat16"]  # bfloat16: torch only
OTHER_DTYPES = [np.float16, np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.complex64]
REDUCED = ("float16", "bfloat16")


def dtype_name(d) -> str:
    return d if isinstance(d, str) else np.dtype(d).name


def dtype_accepted(name, a_dtype, main) -> bool:
    """The dtype rules: one float dtype for the float inputs; dones also bool or
    uint8; the output that dtype, or float32 for 16-bit inputs."""
    a, m = dtype_name(a_dtype), dtype_name(main)
    if name == "dones":
        return a in (m, "bool", "uint8")
    if name == "advantages":
        return a == m or (m in REDUCED and a == "float32")
    return a == m
NOT_ARRAYS = [None, 1.0, "values", [[1.0, 2.0]], (1, 2), {"a": 1}]


def random_data(rng, name, shape, dtype, scale):
    if name == "dones":
        data = (rng.random(shape) < 0.25).astype(np.float64)
        if rng.random() < 0.2:
            data = rng.random(shape)  # fractional "dones" are just numbers to the formula
    elif name == "importance":
        data = rng.uniform(0.0, 3.0, shape)
        data[rng.random(shape) < 0.1] = 1.0
    else:
        data = rng.standard_normal(shape) * scale
    if np.dtype(dtype).kind == "b":
        return data > 0.5
    return data.astype(dtype)


ARRAY_FAULTS = ["dtype", "shape", "ndim", "not-array", "framework", "exotic"]


# Arrays DLPack cannot carry (issue 15): NumPy dtype kinds and byte orders, torch
# layouts and devices. Each is a TypeError naming the argument.
def _numpy_exotic(kind, rows, cols, main):
    if kind == "byte order":
        native = np.dtype(main if main != "bfloat16" else np.float32)
        return np.ones((rows, cols), native.newbyteorder(">" if native.isnative else "<"))
    spelled = {"structured": [("a", "f4"), ("b", "f4")], "object": object, "datetime64": "M8[s]",
               "timedelta64": "m8[s]", "str": "U4", "bytes": "S4", "raw bytes": "V4",
               "extended float": np.longdouble}[kind]
    return np.zeros((rows, cols), spelled)


NUMPY_EXOTIC = ["byte order", "structured", "object", "datetime64", "timedelta64", "str", "bytes", "raw bytes"]
if np.dtype(np.longdouble).itemsize > 8:
    NUMPY_EXOTIC.append("extended float")
TORCH_EXOTIC = ["sparse_coo", "sparse_csr", "quantized", "meta", "nested"]


def _torch_exotic(kind, rows, cols):
    dense = torch.ones(rows, cols)
    if kind == "sparse_coo":
        return dense.to_sparse()
    if kind == "sparse_csr":
        return dense.to_sparse_csr()
    if kind == "quantized":
        return torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8)
    if kind == "nested":  # issue 31: a strided nested tensor, whose layout reads torch.strided
        return torch.nested.nested_tensor(list(dense.unbind(0)) or [torch.ones(cols)])
    return dense.to("meta")
INPUT_LAYOUT_FAULTS = ["misaligned"]
OUTPUT_LAYOUT_FAULTS = ["misaligned", "read-only", "shared", "alias"]


@st.composite
def calls(draw):
    """One call: half are valid, the rest carry one fault (mostly) or several."""
    rows = draw(st.sampled_from([0, 1, 2, 3, 5, 8, 9, 17]))
    cols = draw(st.sampled_from([0, 1, 2, 3, 4, 7, 16, 33]))
    framework = draw(st.sampled_from(["numpy"] * 3 + (["torch"] if torch is not None else [])))
    dtype = draw(st.sampled_from(MAIN_DTYPES if framework == "torch" else MAIN_DTYPES[:3]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1.0, 1e-3, 1e3]))
    give_output = draw(st.sampled_from([True, True, False]))
    names = ARRAY_NAMES + (("advantages",) if give_output else ())

    slots = [(n, "array") for n in names] + [(n, "layout") for n in names] + [(n, "param") for n in PARAM_NAMES]
    slots += [("advantages", "layout")] * 4 if give_output else []  # the output has the most ways to be wrong
    n_faults = draw(st.sampled_from([0] * 6 + [1] * 4 + [2, 3]))
    targets = set(draw(st.lists(st.sampled_from(slots), min_size=n_faults, max_size=n_faults)))

    faults = []  # (argument, kind, exception class)
    maybe = []  # allowed either way: a ValueError or the right answer
    arrays, keep = {}, {}
    for name in names:
        is_output = name == "advantages"
        fault = draw(st.sampled_from(ARRAY_FAULTS)) if (name, "array") in targets else None
        layout_fault = None
        if (name, "layout") in targets:
            layout_fault = draw(st.sampled_from(OUTPUT_LAYOUT_FAULTS if is_output else INPUT_LAYOUT_FAULTS))
        a_dtype, a_rows, a_cols, ndim = dtype, rows, cols, 2
        if fault == "dtype":
            a_dtype = draw(st.sampled_from(OTHER_DTYPES))
            if not dtype_accepted(name, a_dtype, dtype):
                kind = "dtype mismatch" if a_dtype in MAIN_DTYPES else "dtype not a float"
                faults.append((name, kind, TypeError))
        elif fault == "shape":
            a_rows, a_cols = draw(st.sampled_from([(rows + 1, cols), (rows, cols + 1), (rows + 2, cols + 3)]))
            faults.append((name, "shape mismatch", ValueError))
        elif fault == "ndim":
            ndim = draw(st.sampled_from([0, 1, 3]))
            faults.append((name, f"{ndim}-D array", ValueError))
        elif fault == "not-array":
            # advantages=None is no fault: it asks puffadv to allocate the output
            arrays[name] = draw(st.sampled_from(NOT_ARRAYS[1:] if is_output else NOT_ARRAYS))
            faults.append((name, "not an array", TypeError))
            continue
        elif fault == "exotic":
            if framework == "torch":
                kind = draw(st.sampled_from(TORCH_EXOTIC))
                arrays[name] = _torch_exotic(kind, a_rows, a_cols)
                faults.append((name, f"torch {kind} tensor", TypeError))
            else:
                kind = draw(st.sampled_from(NUMPY_EXOTIC))
                arrays[name] = _numpy_exotic(kind, a_rows, a_cols, dtype)
                faults.append((name, f"NumPy {kind} dtype", TypeError))
            continue

        alias = layout_fault == "alias"
        layout = draw(layouts(a_rows, a_cols, output=is_output, fault=None if alias else layout_fault))
        bf16 = a_dtype == "bfloat16"  # made in torch from a float32 view
        if bf16:
            a_dtype = np.float32
        fill = np.nan if is_output and np.dtype(a_dtype).kind in "fc" else 0
        view, base, offset = carve(a_rows, a_cols, a_dtype, layout, fill)
        if not is_output:  # write through a writable twin: the view itself may be read-only
            twin = as_strided(base[offset:], shape=view.shape, strides=view.strides)
            twin[...] = random_data(rng, name, view.shape, a_dtype, scale)
        if ndim != 2:
            dense = np.ascontiguousarray(view)
            view = {0: np.array(1.5, a_dtype), 1: dense.ravel(), 3: dense[None]}[ndim]
            base, offset, layout = None, 0, dict(layout, kind=f"{ndim}-D")

        obj = view
        use_torch = framework == "torch"
        if fault == "framework":
            if torch is None:
                arrays[name] = view.tolist()
                faults.append((name, "not an array", TypeError))
                continue
            use_torch = not use_torch
            faults.append((name, "mixed frameworks", TypeError))
        if use_torch:
            obj = to_torch(view, base, offset, layout) if base is not None else None
            grad = not is_output and view.dtype in FLOATS and draw(st.sampled_from([False] * 5 + [True]))
            if obj is None or grad or bf16:  # a layout torch cannot express, autograd or bf16: a copy
                obj = torch.from_numpy(np.array(view))
                base, offset, layout = None, 0, dict(layout, kind="torch-copy")
                if bf16:
                    obj = obj.bfloat16()
                    if is_output:
                        obj.fill_(float("nan"))
                if grad:
                    obj.requires_grad_()
        elif bf16:  # no bfloat16 in NumPy: this array is not what it should be
            faults.append((name, "dtype mismatch", TypeError))
        arrays[name] = obj
        keep[name] = (view, base, offset, layout)

        if layout_fault == "read-only" and base is not None:  # a read-only output, even when empty
            faults.append((name, "read-only output", ValueError))
        if base is None or not view.size or fault == "shape":
            continue
        if layout_fault == "misaligned" and layout["misaligned"] % np.dtype(a_dtype).itemsize:
            faults.append((name, "misaligned data", ValueError))
        if layout_fault == "shared":
            offsets = element_offsets(a_rows, a_cols, layout["rs"], layout["cs"])
            if len(np.unique(offsets)) != len(offsets):
                faults.append((name, "output with overlapping elements", ValueError))
        if alias:  # the output is one of the inputs, or a view of the same memory
            victims = [n for n in ARRAY_NAMES if n in keep and keep[n][1] is not None
                       and keep[n][0].shape == view.shape and keep[n][1].dtype == base.dtype
                       and keep[n][0].size and not keep[n][3]["read_only"]
                       and type(arrays[n]) is type(obj)]
            if victims:
                victim = draw(st.sampled_from(victims))
                keep[name] = keep[victim]
                arrays[name] = arrays[victim]
                if keep[victim][3]["misaligned"] % base.itemsize:
                    faults.append((name, "misaligned data", ValueError))
                faults.append((name, "output aliases an input", ValueError))

    # An output over distinct elements whose memory range meets an input's: the core
    # compares ranges, so a ValueError here is allowed, not required.
    out = keep.get("advantages")
    if out is not None and out[1] is not None and out[0].size:
        r, c = out[0].shape
        (s_stride, s_count), (b_stride, _) = sorted([(abs(out[3]["rs"]), r), (abs(out[3]["cs"]), c)])
        if s_stride and b_stride < s_stride * (s_count - 1) + 1:
            maybe.append("advantages-interleaved")

    params, param_faults = draw(parameters(bad=[n for n, k in targets if k == "param"]))
    faults += param_faults
    return dict(rows=rows, cols=cols, dtype=dtype, framework=framework, arrays=arrays, keep=keep,
                params=params, faults=faults, maybe=maybe, give_output=give_output)


def as_numpy(x):
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach()
        return (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    return np.asarray(x)


def dtype_of(x) -> str:
    return str(x.dtype).rsplit(".", 1)[-1]


def check_success(case, result):
    arrays, keep = case["arrays"], case["keep"]
    inputs = [np.asarray(as_numpy(arrays[n]), dtype=np.float64) for n in ARRAY_NAMES]
    params = {k: float(v) for k, v in case["params"].items()}
    if case["give_output"]:
        assert result is arrays["advantages"]
    else:
        assert type(result) is type(arrays["values"])
    out_dtype = dtype_of(result)
    main = dtype_name(case["dtype"])
    if not case["give_output"]:
        assert out_dtype == ("float32" if main in REDUCED else main)
    out = as_numpy(result).astype(np.float64)
    assert out.shape == (case["rows"], case["cols"])
    ref = reference.puff_advantage(*inputs, **params)
    # A 16-bit output holds what fits: beyond its range the answer is inf, never NaN.
    fits = np.abs(ref) < FINITE_MAX[out_dtype] / 2
    assert not np.isnan(out).any(), "finite inputs gave NaN"
    assert np.isfinite(out[fits]).all(), "finite inputs gave a non-finite output"
    assert relative_error(np.where(fits, out, 0), np.where(fits, ref, 0)) <= TOLERANCE[out_dtype]
    if case["cols"]:
        assert (out[:, -1] == 0).all()
    if case["give_output"] and keep["advantages"][1] is not None:
        view, base, offset, layout = keep["advantages"]
        untouched = base.copy()
        as_strided(untouched[offset:], shape=view.shape, strides=view.strides)[...] = np.nan
        assert np.isnan(untouched).all(), "a write landed outside the output view"


@FUZZ
@given(calls())
@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: sparse CSR is beta; quantization deprecated
def test_fuzz_compute_puff_advantage(case):
    arrays = case["arrays"]
    before = {n: np.array(as_numpy(arrays[n])) for n in ARRAY_NAMES
              if n in case["keep"] and n not in ("advantages",)}
    classes = {cls for _, _, cls in case["faults"]}
    try:
        result = puffadv.compute_puff_advantage(**arrays, **case["params"])
    except (TypeError, ValueError) as error:
        if not classes:
            if "advantages-interleaved" in case["maybe"] and isinstance(error, ValueError) \
                    and "advantages" in str(error):
                kind = "interleaved output (conservative check)"
            else:
                raise AssertionError(f"a valid call raised {type(error).__name__}: {error}")
            tally("compute_puff_advantage", [("", kind, None)], type(error).__name__)
            return
        assert type(error) in classes, f"raised {type(error).__name__} for faults {case['faults']}: {error}"
        culprits = {name for name, _, cls in case["faults"] if cls is type(error)}
        assert any(name in str(error) for name in culprits), f"message names none of {culprits}: {error}"
        tally("compute_puff_advantage", case["faults"], type(error).__name__)
        return
    assert not classes, f"no error for faults {case['faults']}"
    check_success(case, result)
    for name, copy in before.items():  # inputs are read, never written
        np.testing.assert_array_equal(as_numpy(arrays[name]), copy)
    tally("compute_puff_advantage", [], "right answer")
    for name, (view, base, _, layout) in case["keep"].items():  # what the right answers covered
        TALLY[f"layout of a valid call's array | {layout['kind']}"] += 1
    dtypes = "/".join(sorted({dtype_of(a) for a in arrays.values()}))
    TALLY[f"valid call | {case['framework']} | dtypes {dtypes}"] += 1


# --- the standard conventions: gae, td_lambda_returns, vtrace --------------------

CONVENTIONS = {  # function, its lambda's name, its two [B, T] outputs (reference order)
    "gae": (puffadv.gae, "gae_lambda", ("advantages", "returns")),
    "td_lambda": (puffadv.td_lambda_returns, "lambda_", ("advantages", "returns")),
    "vtrace": (puffadv.vtrace, "lambda_", ("pg_advantages", "vs")),
}
CONVENTION_FAULTS = ["dtype", "shape", "ndim", "not-array", "framework", "param", "time_axis",
                     "truncated-without-bootstrap", "both-bootstraps",
                     "no-bootstrap", "last_value-shape", "nothing-requested", "alias", "read-only-output",
                     "misaligned"]
SUMS = ("abs_sums", "sums", "square_sums")


def episode_arrays(rng, rows, cols):
    if rows and cols:
        return reference.random_episodes(rng, rows, cols, np.float64)
    z = np.zeros((rows, cols))
    return dict(rewards=z, values=z, terminated=z > 0, truncated=z > 0, bootstrap_values=z,
                last_value=np.zeros(rows), importance=z + 1)


@st.composite
def convention_calls(draw, kind):
    function, lambda_name, out_names = CONVENTIONS[kind]
    rows = draw(st.sampled_from([0, 1, 2, 3, 5, 8, 17]))
    cols = draw(st.sampled_from([0, 1, 2, 3, 7, 16, 33]))
    framework = draw(st.sampled_from(["numpy"] * 3 + (["torch"] if torch is not None else [])))
    dtype = draw(st.sampled_from(MAIN_DTYPES if framework == "torch" else MAIN_DTYPES[:3]))
    time_major = draw(st.booleans())
    time_axis = draw(st.sampled_from([0, -2])) if time_major else draw(st.sampled_from([-1, 1]))
    mode = draw(st.sampled_from(["last_value", "bootstrap", "bootstrap-only"]))
    with_importance = draw(st.booleans())
    fault = draw(st.sampled_from([None] * len(CONVENTION_FAULTS) + CONVENTION_FAULTS))
    if fault in ("terminated-and-truncated",) and (not rows or not cols):
        fault = None
    ep = episode_arrays(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), rows, cols)
    faults = []

    names = ["rewards", "values", "terminated"]
    if mode == "bootstrap":
        names += ["truncated", "bootstrap_values"]
    elif mode == "bootstrap-only":
        names += ["bootstrap_values"]
    if with_importance:
        names += ["importance"]
    flag_dtype = draw(st.sampled_from([np.bool_, np.uint8, dtype]))
    victim = draw(st.sampled_from(names))

    kwargs, logical, keep = {}, {}, {}
    for name in names:
        is_flag = name in ("terminated", "truncated")
        a_dtype = flag_dtype if is_flag else dtype
        a_rows, a_cols, ndim = rows, cols, 2
        if name == victim and fault == "dtype":
            a_dtype = draw(st.sampled_from([np.int32, np.complex64] + [d for d in MAIN_DTYPES[:3] if d != dtype]))
            if not (is_flag and a_dtype in (np.bool_, np.uint8, dtype)):
                faults.append((name, "dtype", TypeError))
        elif name == victim and fault == "shape":
            a_rows += 1
            faults.append((name, "shape mismatch", ValueError))
        elif name == victim and fault == "ndim":
            ndim = draw(st.sampled_from([1, 3]))
            faults.append((name, f"{ndim}-D array", ValueError))
        elif name == victim and fault == "not-array":
            kwargs[name] = draw(st.sampled_from(NOT_ARRAYS[1:]))
            faults.append((name, "not an array", TypeError))
            continue
        # Flags in distinct elements: a shared one could be set both ways.
        layout = draw(layouts(a_rows, a_cols, output=is_flag))
        if name == victim and fault == "misaligned":
            layout["misaligned"] = draw(st.sampled_from([1, 2, 3]))
        bf16 = a_dtype == "bfloat16"
        view, base, offset = carve(a_rows, a_cols, np.float32 if bf16 else a_dtype, layout, 0)
        data = np.zeros((a_rows, a_cols))
        data[:rows, :cols] = ep[name]
        as_strided(base[offset:], shape=view.shape, strides=view.strides)[...] = data.astype(view.dtype)
        logical[name] = np.array(view).real.astype(np.float64)  # complex: a dtype fault anyway
        obj = view if ndim == 2 else np.ascontiguousarray(view).ravel() if ndim == 1 else np.ascontiguousarray(view)[None]
        if time_major and ndim == 2:
            obj = obj.T
        if framework == "torch" or (name == victim and fault == "framework"):
            if name == victim and fault == "framework" and framework == "torch":
                pass  # NumPy among torch tensors
            else:
                obj = torch.from_numpy(np.array(obj))
                if bf16:
                    obj = obj.bfloat16()
                    logical[name] = np.array(torch.from_numpy(np.array(view)).bfloat16().float().numpy(), np.float64)
            if name == victim and fault == "framework":
                faults.append((name, "mixed frameworks", TypeError))
        elif bf16:
            faults.append((name, "dtype", TypeError))
        if isinstance(obj, np.ndarray) and ndim == 2 and view.size and layout["misaligned"] % view.itemsize:
            faults.append((name, "misaligned data", ValueError))  # copies (torch, reshapes) are aligned
        kwargs[name] = obj
        keep[name] = (view, base, offset, layout)

    if mode == "last_value" or fault == "both-bootstraps":
        lv = np.array(ep["last_value"], dtype=np.float32 if dtype == "bfloat16" else dtype)
        if fault == "last_value-shape":
            lv = np.append(lv, np.zeros(1, lv.dtype))
            faults.append(("last_value", "last_value shape", ValueError))
        logical["last_value"] = np.asarray(lv[:rows], np.float64)
        kwargs["last_value"] = torch.from_numpy(lv).to(torch.bfloat16 if dtype == "bfloat16" else
                                                        torch.from_numpy(lv).dtype) if framework == "torch" else lv
        if dtype == "bfloat16":
            logical["last_value"] = kwargs["last_value"][:rows].float().numpy().astype(np.float64)
    if fault == "both-bootstraps":
        faults.append(("last_value", "both bootstraps", ValueError))
        if "bootstrap_values" not in kwargs:
            faults = [f for f in faults if f[1] != "both bootstraps"]
    if fault == "no-bootstrap":
        kwargs.pop("last_value", None), kwargs.pop("bootstrap_values", None), kwargs.pop("truncated", None)
        faults.append(("last_value", "no bootstrap", ValueError))
    if fault == "truncated-without-bootstrap" and "truncated" in kwargs:
        kwargs.pop("bootstrap_values")
        if "last_value" not in kwargs:
            lv = ep["last_value"].astype(np.float32 if dtype == "bfloat16" else dtype)
            kwargs["last_value"] = torch.from_numpy(lv).to(kwargs["rewards"].dtype) if framework == "torch" \
                and isinstance(kwargs["rewards"], torch.Tensor) else lv
        faults.append(("truncated", "truncated without bootstrap", ValueError))

    # Outputs: each allocated, skipped or given.
    out_dtype = np.float32 if dtype_name(dtype) in REDUCED else dtype
    requests = {}
    for name in out_names:
        choice = draw(st.sampled_from(["allocate", "skip", "give"]))
        if choice == "give":
            layout = draw(layouts(rows, cols, output=True))
            view, base, offset = carve(rows, cols, out_dtype, layout, np.nan)
            obj = view.T if time_major else view
            if framework == "torch":
                obj = to_torch(view, base, offset, layout)
                if obj is None:
                    view = base = None
                    obj = torch.full((rows, cols), float("nan"), dtype=torch.from_numpy(np.zeros(1, out_dtype)).dtype)
                obj = obj.T if time_major else obj
            requests[name] = obj
            keep[name] = (view, base, offset, layout)
        else:
            requests[name] = choice == "allocate"
    for name in SUMS:
        requests[name] = draw(st.sampled_from([False, False, True]))
    if fault == "nothing-requested":
        requests = {name: False for name in requests}
        faults.append(("advantages", "nothing requested", ValueError))
    elif not any(v is not False for v in requests.values()):
        requests[out_names[1]] = True
    if fault == "alias":
        source = draw(st.sampled_from([n for n in ("rewards", "values") if n in keep]))
        if keep[source][0].size and dtype_name(keep[source][0].dtype) == dtype_name(out_dtype) \
                and dtype != "bfloat16" and isinstance(kwargs[source], np.ndarray) and "shape" != fault:
            requests[out_names[0]] = kwargs[source]
            faults.append((out_names[0], "output aliases an input", ValueError))
    if fault == "read-only-output" and framework == "numpy" and rows * cols:
        ro = np.zeros((cols, rows) if time_major else (rows, cols), out_dtype)
        ro.flags.writeable = False
        requests[out_names[1]] = ro
        faults.append((out_names[1], "read-only output", ValueError))

    params = dict(gamma=draw(st.sampled_from([0.0, 0.9, 0.99, 1.0])),
                  rho_clip=draw(st.sampled_from([0.0, 1.0, 2.0])), c_clip=draw(st.sampled_from([0.0, 1.0, 5.0])))
    params[lambda_name] = draw(st.sampled_from([0.0, 0.95, 1.0]))
    if kind == "vtrace":
        params["rho_pg_clip"] = draw(st.sampled_from([0.0, 1.0, 3.0]))
    if fault == "param":
        name = draw(st.sampled_from(sorted(params)))
        params[name] = draw(st.sampled_from([-0.5, float("nan"), float("inf"), 1.5 if name in ("gamma", lambda_name) else -1.0,
                                             "0.9", None]))
        faults.append((name, "parameter", TypeError if params[name] in ("0.9", None) else ValueError))
    if fault == "time_axis":
        time_axis = draw(st.sampled_from([2, -3, "0", 1.0, None]))
        faults.append(("time_axis", "time_axis", ValueError if isinstance(time_axis, int) else TypeError))
    return dict(kind=kind, rows=rows, cols=cols, dtype=dtype, out_dtype=out_dtype, framework=framework,
                time_major=time_major, time_axis=time_axis, kwargs=kwargs, requests=requests, params=params,
                logical=logical, keep=keep, faults=faults, fault=fault)


def check_convention_result(case, result):
    kind = case["kind"]
    _, lambda_name, out_names = CONVENTIONS[kind]
    lg, params = case["logical"], dict(case["params"])
    lam = params.pop(lambda_name)
    ref = reference.standard_estimate(
        kind, lg["rewards"], lg["values"], lg["terminated"] > 0,
        lg["truncated"] > 0 if "truncated" in case["kwargs"] else None,
        last_value=lg.get("last_value") if "last_value" in case["kwargs"] else None,
        bootstrap_values=lg.get("bootstrap_values") if "bootstrap_values" in case["kwargs"] else None,
        importance=lg.get("importance"), lam=lam, **params)
    tolerance = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.5e-2}
    for name, expected in zip(out_names, ref):
        request, got = case["requests"][name], getattr(result, name)
        if request is False:
            assert got is None, f"{name} was not requested"
            continue
        if request is not True:
            assert got is request, f"{name} was given but another array came back"
        got_np = as_numpy(got).astype(np.float64)
        if case["time_major"]:
            got_np = got_np.T
        assert got_np.shape == (case["rows"], case["cols"])
        assert relative_error(got_np, expected) <= tolerance[dtype_of(got)], name
        keep = case["keep"].get(name)
        if request is not True and keep is not None and keep[1] is not None:
            view, base, offset, _ = keep
            untouched = base.copy()
            as_strided(untouched[offset:], shape=view.shape, strides=view.strides)[...] = np.nan
            assert np.isnan(untouched).all(), f"a write landed outside the {name} view"
    for name, reduce in zip(SUMS, (np.abs, lambda a: a, np.square)):
        got = getattr(result, name)
        if not case["requests"][name]:
            assert got is None
            continue
        expected = reduce(ref[0]).sum(axis=1)
        assert as_numpy(got).shape == (case["rows"],)
        scale = max(float(np.abs(reduce(ref[0])).sum()), 1.0)
        assert np.abs(as_numpy(got).astype(np.float64) - expected).sum() <= 1e-4 * scale, name


@pytest.mark.parametrize("kind", list(CONVENTIONS))  # hundreds of cases for each function
@FUZZ
@given(data=st.data())
def test_fuzz_conventions(kind, data):
    case = data.draw(convention_calls(kind))
    function = CONVENTIONS[case["kind"]][0]
    label = {"gae": "gae", "td_lambda": "td_lambda_returns", "vtrace": "vtrace"}[case["kind"]]
    classes = {cls for _, _, cls in case["faults"]}
    try:
        result = function(**case["kwargs"], time_axis=case["time_axis"], **case["requests"], **case["params"])
    except (TypeError, ValueError) as error:
        assert classes, f"a valid call raised {type(error).__name__}: {error}"
        assert type(error) in classes, f"raised {type(error).__name__} for faults {case['faults']}: {error}"
        tally(label, case["faults"], type(error).__name__)
        return
    assert not classes, f"no error for faults {case['faults']}"
    check_convention_result(case, result)
    tally(label, [], "right answer")
    given_outputs = sum(not isinstance(v, bool) for v in case["requests"].values())
    TALLY[f"valid call | {label} | {case['framework']} {dtype_name(case['dtype'])} | "
          f"{'time-major' if case['time_major'] else 'batch-major'} | {given_outputs} outputs given"] += 1


# --- the estimator family (issue 20) ---------------------------------------------
#
# Each kind: its function, the arrays it always takes, the sets of optional
# arrays a valid call may add (one drawn per case), its outputs and its scalars
# with good values. The arrays' layouts, dtypes and frameworks and the faults are
# drawn as above; the reference is reference.py's.

FAMILY = {
    "discounted_returns": (puffadv.discounted_returns, ("rewards", "terminated"),
                           [(), ("last_value",), ("truncated", "bootstrap_values"), ("bootstrap_values",)],
                           ("returns",), dict(gamma=[0.0, 0.9, 1.0])),
    "n_step_returns": (puffadv.n_step_returns, ("rewards", "values", "terminated"),
                       [("last_value",), ("truncated", "bootstrap_values"), ("bootstrap_values",)],
                       ("advantages", "returns"), dict(gamma=[0.0, 0.9, 1.0], lambda_=[0.0, 0.8, 1.0],
                                                       n=[1, 2, 5, 40, np.int32(3)])),
    "retrace": (puffadv.retrace, ("rewards", "q_values", "next_values", "terminated"),
                [("target_probs", "behaviour_probs"), ("target_log_probs", "behaviour_log_probs"),
                 ("truncated", "target_probs", "behaviour_probs")],
                ("advantages", "returns"), dict(gamma=[0.0, 0.9, 1.0], lambda_=[0.0, 0.9, 1.0], c_clip=[0.0, 1.0, 2.0])),
    "q_lambda": (puffadv.q_lambda, ("rewards", "q_values", "next_values", "terminated"),
                 [(), ("greedy",), ("truncated",), ("truncated", "greedy")],
                 ("advantages", "returns"), dict(gamma=[0.0, 0.9, 1.0], lambda_=[0.0, 0.9, 1.0])),
    "episodic_cumsum": (puffadv.episodic_cumsum, ("inputs", "dones"), [(), ("seed",)], ("out",),
                        dict(boundary=["ends_at", "starts_at"])),
    "eligibility_traces": (puffadv.eligibility_traces, ("inputs", "dones"), [(), ("seed",)], ("out",),
                           dict(gamma=[0.0, 0.9, 1.0], lambda_=[0.0, 0.5, 1.0])),
}
FAMILY_FLAGS = ("terminated", "truncated", "dones", "greedy")
FAMILY_FAULTS = ["dtype", "shape", "ndim", "not-array", "framework", "param", "time_axis", "misaligned", "alias"]
# Faults of one kind: what only its own arguments can get wrong.
KIND_FAULTS = {"n_step_returns": [("n", 0, ValueError), ("n", 1.5, TypeError), ("n", True, TypeError)],
               "episodic_cumsum": [("boundary", "ends", ValueError), ("boundary", np.array("ends_at"), TypeError),
                                   ("boundary", b"ends_at", TypeError)],
               "retrace": [("target_log_probs", "mix", ValueError), ("behaviour_probs", "half pair", ValueError)]}


# The core's names for arguments the caller calls otherwise (test_family_errors.py's strict
# xfails OUT_NAMED_ADVANTAGES and LOG_PROBS_NAMED_PROBS record them as defects).
CORE_NAMES = {"out": ("advantages",), "target_log_probs": ("target_probs",),
              "behaviour_log_probs": ("behaviour_probs",)}


def family_data(rng, rows, cols):
    """Every array any kind reads, under the caller's names (float64; flags bool)."""
    e = reference.random_off_policy(rng, max(rows, 1), max(cols, 1), np.float64)
    e = {k: v[:rows, :cols] if v.ndim == 2 else v[:rows] for k, v in e.items()}
    # Layouts that share elements make a never-read next value read: keep it at the
    # others' scale (1e3 against returns near 1 exceeds float32's 1e-5 in Q(lambda)'s
    # delta form, which rounds gamma * next_values before (1 - lambda) cancels it).
    e["next_values"] = np.where(e["terminated"], rng.standard_normal(e["terminated"].shape), e["next_values"])
    e.update(inputs=e["rewards"], dones=e["terminated"] | e["truncated"], seed=e["last_value"])
    return e


@st.composite
def family_calls(draw, kind):
    function, required, choices, out_names, good = FAMILY[kind]
    rows, cols = draw(st.sampled_from([0, 1, 2, 5, 17])), draw(st.sampled_from([0, 1, 2, 7, 33]))
    framework = draw(st.sampled_from(["numpy"] * 3 + (["torch"] if torch is not None else [])))
    dtype = draw(st.sampled_from(MAIN_DTYPES if framework == "torch" else MAIN_DTYPES[:3]))
    time_major = draw(st.booleans())
    time_axis = draw(st.sampled_from([0, -2] if time_major else [-1, 1]))
    names = [*required, *draw(st.sampled_from(choices))]
    fault = draw(st.sampled_from([None] * 6 + FAMILY_FAULTS + ["kind"] * (kind in KIND_FAULTS)))
    ep = family_data(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), rows, cols)
    flag_dtype = draw(st.sampled_from([np.bool_, np.uint8, dtype]))
    series = [n for n in names if n not in ("last_value", "seed")]
    victim = draw(st.sampled_from(series))
    kwargs, logical, keep, faults = {}, {}, {}, []
    torch_dtype = lambda d: torch.bfloat16 if d == "bfloat16" else torch.from_numpy(np.zeros(1, d)).dtype
    for name in names:
        is_flag, a_dtype, a_rows, ndim = name in FAMILY_FLAGS, dtype, rows, 2
        a_dtype = flag_dtype if is_flag else dtype
        if name in ("last_value", "seed"):  # [B]: contiguous, in the call's float dtype
            host = ep[name].astype(np.float32 if dtype == "bfloat16" else dtype)
            kwargs[name] = torch.from_numpy(host).to(torch_dtype(dtype)) if framework == "torch" else host
            logical[name] = as_numpy(kwargs[name]).astype(np.float64)
            continue
        if name == victim and fault == "dtype":
            a_dtype = draw(st.sampled_from([np.int32, np.complex64] + [d for d in FLOATS if d != dtype]))
            # Another float dtype is a mismatch only beside an array of the call's float dtype.
            if a_dtype in FLOATS and not is_flag and flag_dtype in (np.bool_, np.uint8) and \
                    not [n for n in names if n != name and n not in FAMILY_FLAGS]:
                a_dtype = np.int32
            faults.append((name, "dtype", TypeError))
        elif name == victim and fault == "shape":
            a_rows += 1
            faults.append((name, "shape mismatch", ValueError))
        elif name == victim and fault == "ndim":
            ndim = draw(st.sampled_from([1, 3]))
            faults.append((name, f"{ndim}-D array", ValueError))
        elif name == victim and fault == "not-array":
            kwargs[name] = draw(st.sampled_from(NOT_ARRAYS[1:]))
            faults.append((name, "not an array", TypeError))
            continue
        layout = draw(layouts(a_rows, cols, output=is_flag))
        if name == victim and fault == "misaligned":
            layout["misaligned"] = draw(st.sampled_from([1, 2, 3]))
        bf16 = a_dtype == "bfloat16"
        view, base, offset = carve(a_rows, cols, np.float32 if bf16 else a_dtype, layout, 0)
        data = np.zeros((a_rows, cols))
        data[:rows] = ep[name]
        as_strided(base[offset:], shape=view.shape, strides=view.strides)[...] = data.astype(view.dtype)
        logical[name] = np.array(view).real.astype(np.float64)
        obj = view if ndim == 2 else np.ascontiguousarray(view).ravel() if ndim == 1 else np.ascontiguousarray(view)[None]
        if time_major and ndim == 2:
            obj = obj.T
        if framework == "torch" and not (name == victim and fault == "framework"):
            obj = torch.from_numpy(np.array(obj))
            if bf16:
                obj = obj.bfloat16()
                logical[name] = np.array(torch.from_numpy(np.array(view)).bfloat16().float().numpy(), np.float64)
        elif bf16:
            faults.append((name, "dtype", TypeError))
        if name == victim and fault == "framework":
            faults.append((name, "mixed frameworks", TypeError))
            if framework == "numpy":
                obj = torch.from_numpy(np.array(obj)) if torch is not None else [[0.0]]
        if isinstance(obj, np.ndarray) and ndim == 2 and view.size and layout["misaligned"] % view.itemsize:
            faults.append((name, "misaligned data", ValueError))
        kwargs[name], keep[name] = obj, (view, base, offset, layout)

    out_dtype = np.float32 if dtype_name(dtype) in REDUCED else dtype
    requests = {}
    for name in out_names:
        if draw(st.booleans()):
            layout = draw(layouts(rows, cols, output=True))
            view, base, offset = carve(rows, cols, out_dtype, layout, np.nan)
            obj = view.T if time_major else view
            if framework == "torch":
                obj = to_torch(view, base, offset, layout)
                if obj is None:
                    view = base = None
                    obj = torch.full((rows, cols), float("nan"), dtype=torch_dtype(out_dtype))
                obj = obj.T if time_major else obj
            requests[name], keep[name] = obj, (view, base, offset, layout)
        elif name != "out":
            requests[name] = True
    if fault == "alias" and isinstance(kwargs.get(series[0]), np.ndarray) and keep[series[0]][0].size \
            and dtype_name(kwargs[series[0]].dtype) == dtype_name(out_dtype):
        requests[out_names[-1]] = kwargs[series[0]]
        faults.append((out_names[-1], "output aliases an input", ValueError))

    params = {name: draw(st.sampled_from(values)) for name, values in good.items()}
    if fault == "param" and "gamma" in params:
        name = draw(st.sampled_from(sorted(n for n in params if n != "n")))
        params[name] = draw(st.sampled_from([-0.5, float("nan"), 1.5 if name in ("gamma", "lambda_") else -1.0, "0.9"]))
        faults.append((name, "parameter", TypeError if params[name] == "0.9" else ValueError))
    if fault == "time_axis":
        time_axis = draw(st.sampled_from([2, -3, "0", None]))
        faults.append(("time_axis", "time_axis", ValueError if isinstance(time_axis, int) else TypeError))
    if fault == "kind":
        name, value, error = draw(st.sampled_from(KIND_FAULTS[kind]))
        if name in params:
            params[name] = value
        elif value == "mix" and "target_log_probs" in kwargs:
            kwargs["target_probs"] = kwargs["target_log_probs"]
        elif value == "half pair" and "behaviour_probs" in kwargs:
            del kwargs["behaviour_probs"]
        else:
            error = None
        if error is not None:
            faults.append((name, f"{kind} argument", error))
    # A fault in the first array is told as the others' disagreeing with it.
    named = not (fault in ("framework", "dtype", "shape") and victim == series[0])
    return dict(kind=kind, rows=rows, cols=cols, framework=framework, dtype=dtype, time_major=time_major,
                time_axis=time_axis, kwargs=kwargs, requests=requests, params=params, logical=logical, keep=keep,
                faults=faults, named=named)


def family_reference(case) -> dict:
    """{output: float64 [B, T]} from what the arrays hold (reference.py)."""
    kind, lg, p = case["kind"], case["logical"], case["params"]
    flag = lambda name: lg[name] > 0 if name in lg else None
    if kind == "discounted_returns":
        return dict(returns=reference.discounted_returns(lg["rewards"], flag("terminated"), flag("truncated"),
                                                         lg.get("last_value"), lg.get("bootstrap_values"), p["gamma"]))
    if kind == "n_step_returns":
        g = reference.n_step_returns(lg["rewards"], lg["values"], flag("terminated"), flag("truncated"),
                                     lg.get("last_value"), lg.get("bootstrap_values"), int(p["n"]), p["gamma"],
                                     p["lambda_"])
        return dict(returns=g, advantages=g - lg["values"])
    if kind == "retrace":
        logs = "target_log_probs" in lg
        adv, g = reference.retrace(lg["rewards"], lg["q_values"], lg["next_values"], flag("terminated"),
                                   flag("truncated"), lg["target_log_probs" if logs else "target_probs"],
                                   lg["behaviour_log_probs" if logs else "behaviour_probs"], logs, p["gamma"],
                                   p["lambda_"], p["c_clip"])
        return dict(returns=g, advantages=adv)
    if kind == "q_lambda":
        adv, g = reference.q_lambda(lg["rewards"], lg["q_values"], lg["next_values"], flag("terminated"),
                                    flag("truncated"), flag("greedy"), p["gamma"], p["lambda_"])
        return dict(returns=g, advantages=adv)
    decay = 1.0 if kind == "episodic_cumsum" else p["gamma"] * p["lambda_"]
    return dict(out=reference.episodic_sum(lg["inputs"], flag("dones"), lg.get("seed"), decay,
                                           p.get("boundary") == "starts_at"))


def family_error(case, got, expected) -> float:
    """relative_error, except that Retrace's returns are Q + Delta (and its
    advantages Q_ret - Q): their float rounding is that of |q_values|, which may
    dwarf the result (gamma = 0: Q_ret = r). Measured against the larger scale."""
    q = case["logical"].get("q_values")
    if case["kind"] != "retrace" or q is None:
        return relative_error(got, expected)
    scale = max(np.linalg.norm(expected), np.linalg.norm(np.asarray(q, np.float64)))
    return float(np.linalg.norm(got - expected) / (scale if scale > 0 else 1.0))


@pytest.mark.parametrize("kind", list(FAMILY))
@FUZZ
@given(data=st.data())
def test_fuzz_family(kind, data):
    case = data.draw(family_calls(kind))
    classes = {cls for _, _, cls in case["faults"]}
    try:
        result = FAMILY[kind][0](**case["kwargs"], time_axis=case["time_axis"], **case["requests"], **case["params"])
    except (TypeError, ValueError) as error:
        assert classes, f"a valid call raised {type(error).__name__}: {error}"
        assert type(error) in classes, f"raised {type(error).__name__} for faults {case['faults']}: {error}"
        named = {n for name, _, _ in case["faults"] for n in (name, *CORE_NAMES.get(name, ()))}
        assert not case["named"] or any(name in str(error) for name in named), \
            f"{error} names none of {case['faults']}"
        tally(kind, case["faults"], type(error).__name__)
        return
    assert not classes, f"no error for faults {case['faults']}"
    for name, expected in family_reference(case).items():
        got = result if name == "out" else getattr(result, name)
        request = case["requests"].get(name, True)
        if request is not True:
            assert got is request, f"{name} was given but another array came back"
        got_np = as_numpy(got).astype(np.float64)
        got_np = got_np.T if case["time_major"] else got_np
        assert got_np.shape == (case["rows"], case["cols"]), name
        assert family_error(case, got_np, expected) <= TOLERANCE[dtype_of(got)], name
        keep = case["keep"].get(name)
        if request is not True and keep is not None and keep[1] is not None:
            view, base, offset, _ = keep
            untouched = base.copy()
            as_strided(untouched[offset:], shape=view.shape, strides=view.strides)[...] = np.nan
            assert np.isnan(untouched).all(), f"a write landed outside the {name} view"
    tally(kind, [], "right answer")


# --- lying DLPack producers (issue 15) -------------------------------------------
#
# Every array is a DLPack producer over NumPy memory (dlpack_producers.py); some
# lie in their capsule. A lie puffadv must catch is a TypeError or ValueError
# naming the argument; a harmless one (NULL strides over row-major data, a
# byte_offset, flags on an input, a producer without max_version) gives the
# reference's answer.

def _lies(rows, cols, is_output, itemsize):
    """(label, LyingProducer keywords, exception class or None) for one array."""
    empty = rows * cols == 0
    lies = [
        ("NULL shape", dict(shape=None), ValueError),
        ("NULL data", dict(data=None), None if empty else ValueError),
        ("ndim -1", dict(ndim=-1), ValueError),
        ("ndim 99", dict(ndim=99), ValueError),
        ("negative extent", dict(shape=[-1, cols]), ValueError),
        ("2 lanes", dict(lanes=2), TypeError),
        ("int code", dict(code=0), TypeError),
        ("foreign capsule name", dict(name=b"not_a_tensor"), TypeError),
        ("no capsule returned", dict(returns=7), TypeError),
        ("unknown device type", dict(device_type=7), TypeError),
        ("junk __dlpack_device__", dict(device="junk"), TypeError),
        ("DLPack 2.x", dict(name=b"dltensor_versioned", major=2), TypeError),
        ("read-only flag", dict(name=b"dltensor_versioned", flags=READ_ONLY), ValueError if is_output else None),
        ("is-copied flag", dict(name=b"dltensor_versioned", flags=IS_COPIED), ValueError if is_output else None),
        ("versioned, honest", dict(name=b"dltensor_versioned"), None),
        ("NULL strides, row-major", dict(strides=None), None),
        ("byte_offset", "offset", None),
        ("misaligned byte_offset", "misaligned", None if empty or itemsize == 1 else ValueError),
        ("sizes beyond 64 bits", dict(shape=[1 << 62, 8], strides=[8, 1]), ValueError),
    ]
    return lies


def _producer(array, lie):
    """A LyingProducer telling `lie` about `array`, and the NumPy view of the memory
    it describes (where it describes `array` rightly)."""
    rows, cols = array.shape
    if lie == "offset":  # the data 3 elements into a padded buffer, reached through byte_offset
        padded = np.concatenate([np.zeros(3, array.dtype), np.ascontiguousarray(array).ravel()])
        return LyingProducer(padded, ndim=2, shape=[rows, cols], strides=[cols, 1],
                             byte_offset=3 * array.itemsize), padded[3:].reshape(rows, cols)
    if lie == "misaligned":  # 1 byte in: a right answer only when there is nothing to read
        padded = np.zeros(array.size + 1, array.dtype)
        return LyingProducer(padded, ndim=2, shape=[rows, cols], strides=[cols, 1],
                             byte_offset=1), np.empty((rows, cols), array.dtype)
    producer = LyingProducer(np.ascontiguousarray(array), **lie)
    return producer, producer.array


@st.composite
def producer_calls(draw):
    rows = draw(st.sampled_from([0, 1, 2, 5, 9]))
    cols = draw(st.sampled_from([0, 1, 3, 8, 17]))
    dtype = draw(st.sampled_from(FLOATS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = {n: random_data(rng, n, (rows, cols), dtype, 1.0) for n in ARRAY_NAMES}
    give_output = draw(st.booleans())
    names = ARRAY_NAMES + (("advantages",) if give_output else ())
    n_liars = draw(st.sampled_from([0, 1, 1, 1, 2]))
    liars = set(draw(st.lists(st.sampled_from(names), min_size=n_liars, max_size=n_liars)))
    itemsize = np.dtype(dtype).itemsize
    arrays, faults, labels, out = {}, [], [], None
    for name in names:
        is_output = name == "advantages"
        array = np.full((rows, cols), np.nan, dtype) if is_output else data[name]
        if name in liars:
            label, lie, error = draw(st.sampled_from(_lies(rows, cols, is_output, itemsize)))
            arrays[name], view = _producer(array, lie)
            labels.append(label)
            if error is not None:
                faults.append((name, f"lying producer: {label}", error))
            if is_output:
                out = view
        else:
            arrays[name] = LyingProducer(np.ascontiguousarray(array))
            if is_output:
                out = arrays[name].array
    return dict(arrays=arrays, data=data, faults=faults, labels=labels, out=out, dtype=dtype,
                give_output=give_output, rows=rows, cols=cols)


@FUZZ
@given(producer_calls())
def test_fuzz_lying_producers(case):
    classes = {cls for _, _, cls in case["faults"]}
    params = dict(gamma=0.9, gae_lambda=0.8, rho_clip=1.5, c_clip=1.2)
    try:
        result = puffadv.compute_puff_advantage(**case["arrays"], **params)
    except (TypeError, ValueError) as error:
        assert classes, f"harmless lies {case['labels']} raised {type(error).__name__}: {error}"
        assert type(error) in classes, f"raised {type(error).__name__} for {case['faults']}: {error}"
        culprits = {name for name, _, cls in case["faults"] if cls is type(error)}
        assert any(str(error).startswith(name) for name in culprits), f"names none of {culprits}: {error}"
        tally("lying producers", case["faults"], type(error).__name__)
        return
    assert not classes, f"no error for {case['faults']}"
    want = reference.puff_advantage(*(case["data"][n] for n in ARRAY_NAMES), **params)
    got = case["out"] if case["give_output"] else np.asarray(result)
    if case["give_output"]:
        assert result is case["arrays"]["advantages"]
    assert got.shape == (case["rows"], case["cols"])
    assert relative_error(got, want) <= TOLERANCE[np.dtype(case["dtype"]).name]
    tally("lying producers", [("", f"harmless: {', '.join(sorted(set(case['labels']))) or 'none'}", None)],
          "right answer")


# --- regressions found while fuzzing (each one a plain test) ---------------------

def _good(rows=4, cols=6, dtype=np.float32, seed=0):
    return reference.random_puff_inputs(np.random.default_rng(seed), rows, cols, dtype)


@pytest.mark.parametrize("argument", ["values", "importance", "advantages"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_misaligned_array_is_a_value_error(argument, dtype):
    # Found 2026-11-30: a float view at an odd byte offset of a uint8 buffer reached
    # the kernel (UBSan: load of misaligned address); on a GPU it would fault.
    arrays = dict(zip(ARRAY_NAMES, _good(dtype=dtype)))
    raw = np.zeros(4 * 6 * np.dtype(dtype).itemsize + 1, np.uint8)
    skewed = raw[1:].view(dtype).reshape(4, 6)
    if argument != "advantages":
        skewed[...] = arrays[argument]
    arrays[argument] = skewed
    with pytest.raises(ValueError, match=f"{argument} is not aligned"):
        puffadv.compute_puff_advantage(**arrays)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0, 0)])
def test_empty_output_given_explicitly(shape):
    # Found 2026-11-30 (fixed the same day in 4976dcc): numpy 2 gives empty arrays
    # zero strides, and the empty output was called self-overlapping.
    arrays = [np.zeros(shape, np.float32) for _ in range(4)]
    out = np.zeros(shape, np.float32)
    assert puffadv.compute_puff_advantage(*arrays, out) is out


@pytest.mark.parametrize("name", PARAM_NAMES)
def test_integer_beyond_float_range_is_a_value_error(name):
    # Found 2026-11-30: gamma=10**400 raised OverflowError from float().
    with pytest.raises(ValueError, match=name):
        puffadv.compute_puff_advantage(*_good(), **{name: 10 ** 400})


@pytest.mark.parametrize("value", [np.array("0.9"), np.array(True)])
def test_zero_d_string_or_bool_array_is_not_a_number(value):
    # Found 2026-11-30: np.array("0.9") was accepted as 0.9 while "0.9" is a TypeError.
    with pytest.raises(TypeError, match="gamma"):
        puffadv.compute_puff_advantage(*_good(), gamma=value)


def test_bare_dlpack_producer_without_shape():
    # Found 2026-11-30: an object with only __dlpack__/__dlpack_device__ and no
    # .shape raised AttributeError when puffadv allocated the output.
    inputs = _good()

    class Producer:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    out = puffadv.compute_puff_advantage(*[Producer(a) for a in inputs])
    assert relative_error(np.asarray(out), reference.puff_advantage(*inputs)) <= 1e-5
