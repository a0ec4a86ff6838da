"""puffadv as a DLPack consumer (issue 15): every field of a capsule is checked
before it is read, a producer's refusal names the argument, and a producer
that lies only harmlessly (NULL strides, a byte_offset, an old __dlpack__
without keywords) gives the float64 reference's answer."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference
from dlpack_producers import IS_COPIED, READ_ONLY, LyingProducer, make_capsule
from reference import relative_error

R, H = 4, 6
PARAMS = dict(gamma=0.9, gae_lambda=0.8, rho_clip=1.5, c_clip=1.2)


def inputs(dtype=np.float32):
    return reference.random_puff_inputs(np.random.default_rng(7), R, H, dtype)


def call_with(values, out=None):
    """values (a producer) with honest producers for the other arrays, into `out`
    (a producer; by default an honest one over NaNs). Returns out's array."""
    v, r, d, i = inputs()
    honest = [LyingProducer(a) for a in (r, d, i)]
    out = LyingProducer(np.full((R, H), np.nan, np.float32)) if out is None else out
    assert puffadv.compute_puff_advantage(values, *honest, out, **PARAMS) is out
    return out.array


def expect(error, *fragments, values=None, out=None, **lies):
    with pytest.raises(error) as info:
        call_with(values if values is not None else LyingProducer(inputs()[0], **lies), out)
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in {str(info.value)!r}"
    return info.value


# ---- capsules whose fields are wrong: refused before anything is read ----

@pytest.mark.parametrize("versioned", [False, True])
def test_null_shape_is_a_value_error(versioned):
    # Found 2026-12-01: ndim 2 with a NULL shape pointer crashed the process.
    name = b"dltensor_versioned" if versioned else b"dltensor"
    expect(ValueError, "values has ndim 2 but no shape", "NULL shape pointer", shape=None, name=name)


@pytest.mark.parametrize("ndim", [-1, 65, 1 << 30])
def test_impossible_ndim_is_a_value_error(ndim):
    expect(ValueError, f"values has ndim {ndim} in its DLPack tensor", "expected a 2-D array", ndim=ndim)


def test_three_dimensions_go_to_the_core_check():
    a = np.zeros((1, R, H), np.float32)
    expect(ValueError, "values must be a 2-D [rows, horizon] array, got a 3-D array",
           values=LyingProducer(a))


def test_null_data_is_a_value_error():
    expect(ValueError, "values has no data", f"for {R * H} elements", data=None)


def test_null_data_of_an_empty_array_is_fine():
    empty = [np.zeros((0, H), np.float32) for _ in range(4)]
    out = np.zeros((0, H), np.float32)
    producer = LyingProducer(out)
    got = puffadv.compute_puff_advantage(LyingProducer(empty[0], data=None),
                                         *(LyingProducer(a) for a in empty[1:]), producer)
    assert got is producer


def test_negative_extent_is_a_value_error():
    expect(ValueError, "values has a negative extent -4 in dimension 0", shape=[-4, H])


@pytest.mark.parametrize("shape,strides", [([1 << 62, 8], [8, 1]), ([4, 6], [1 << 62, 1]),
                                           ([4, 6], [-(1 << 62), 1])])
def test_sizes_beyond_64_bits_are_a_value_error(shape, strides):
    expect(ValueError, "values has a shape or strides beyond 64-bit sizes", shape=shape, strides=strides)


@pytest.mark.parametrize("lanes", [2, 4])
def test_vector_lanes_are_a_type_error(lanes):
    # Found 2026-12-01: a lanes=2 float32 capsule "has dtype float32 ... expected float32".
    error = expect(TypeError, f"values has dtype float32x{lanes} ({lanes} lanes per element)", lanes=lanes)
    assert "has dtype float32," not in str(error)


def test_unknown_device_type_is_a_type_error():
    expect(TypeError, "values lives on DLPack device type 7", device_type=7)


def test_future_major_version_is_not_read():
    expect(TypeError, "values came as a DLPack 2.1 capsule; puffadv reads DLPack 1.x",
           name=b"dltensor_versioned", major=2)


def test_byte_offset_is_honoured():
    v, r, d, i = inputs()
    padded = np.concatenate([np.full(5, np.nan, np.float32), v.ravel()])  # v starts 20 bytes in
    producer = LyingProducer(padded, shape=[R, H], strides=[H, 1], ndim=2, byte_offset=20)
    got = call_with(producer)
    assert relative_error(got, reference.puff_advantage(v, r, d, i, **PARAMS)) <= 1e-5


def test_misaligned_byte_offset_is_a_value_error():
    padded = np.zeros(R * H + 1, np.float32)
    expect(ValueError, "values is not aligned to its 4-byte float32 elements",
           values=LyingProducer(padded, shape=[R, H], strides=[H, 1], ndim=2, byte_offset=2))


def test_byte_offset_that_wraps_is_a_value_error():
    expect(ValueError, "values has a byte_offset", "wraps around the address space", byte_offset=2**64 - 8)


def test_null_strides_mean_row_major():
    v, r, d, i = inputs()
    got = call_with(LyingProducer(v, strides=None))
    assert relative_error(got, reference.puff_advantage(v, r, d, i, **PARAMS)) <= 1e-5


# ---- capsules that are not DLPack tensors ----

def test_capsule_of_another_kind_is_a_type_error():
    keep = []
    other = make_capsule(inputs()[0], keep, name=b"not_a_tensor")
    expect(TypeError, "values.__dlpack__() returned a capsule named 'not_a_tensor', not a DLPack tensor "
                      "('dltensor' or 'dltensor_versioned')", values=LyingProducer(inputs()[0], returns=other))
    # Capsules themselves reach the core only from puffadv's own code (torch tensors on
    # another GPU); the public functions take arrays.
    with pytest.raises(TypeError, match="values must be an array .*, got PyCapsule"):
        puffadv.compute_puff_advantage(other, *inputs()[1:])
    v, r, d, i = inputs()
    with pytest.raises(TypeError, match="values is a capsule named 'not_a_tensor', not a DLPack tensor"):
        puffadv._core.puff_advantage(other, r, d, i, np.zeros((R, H), np.float32), 0.9, 0.8, 1.5, 1.2)


def test_capsule_used_twice_is_a_type_error():
    keep = []
    capsule = make_capsule(inputs()[0], keep)
    out = np.zeros((R, H), np.float32)
    v, r, d, i = inputs()
    puffadv._core.puff_advantage(capsule, r, d, i, out, 0.9, 0.8, 1.5, 1.2)
    with pytest.raises(TypeError, match="values is a capsule named 'used_dltensor': a DLPack tensor that "
                                        "was already consumed"):
        puffadv._core.puff_advantage(capsule, r, d, i, out, 0.9, 0.8, 1.5, 1.2)
    assert relative_error(out, reference.puff_advantage(v, r, d, i, **PARAMS)) <= 1e-5


@pytest.mark.parametrize("returned", [5, "dltensor", b"x"])
def test_dlpack_returning_no_capsule_is_a_type_error(returned):
    expect(TypeError, f"values.__dlpack__() returned {type(returned).__name__}, not a DLPack capsule",
           values=LyingProducer(inputs()[0], returns=returned))


@pytest.mark.parametrize("lie", [dict(shape=None), dict(returns=5), dict(lanes=2)])
def test_allocating_beside_a_lying_producer_checks_it_first(lie):
    """The output is allocated from what the core read of the producer, not by
    NumPy, which would read a NULL shape pointer."""
    r, d, i = (LyingProducer(a) for a in inputs()[1:])
    with pytest.raises((TypeError, ValueError), match="^values[ .]"):
        puffadv.compute_puff_advantage(LyingProducer(inputs()[0], **lie), r, d, i)
    with pytest.raises((TypeError, ValueError), match="^rewards[ .]"):
        puffadv.gae(LyingProducer(inputs()[0], **lie), r, d, last_value=LyingProducer(np.zeros(R, np.float32)), time_axis=-1)


# ---- flags ----

def test_read_only_flag_refuses_an_output_not_an_input():
    v, r, d, i = inputs()
    ro = LyingProducer(np.zeros((R, H), np.float32), name=b"dltensor_versioned", flags=READ_ONLY)
    expect(ValueError, "advantages is read-only", out=ro)
    got = call_with(LyingProducer(v, name=b"dltensor_versioned", flags=READ_ONLY))
    assert relative_error(got, reference.puff_advantage(v, r, d, i, **PARAMS)) <= 1e-5


def test_copied_flag_refuses_an_output_not_an_input():
    v, r, d, i = inputs()
    target = np.full((R, H), np.nan, np.float32)
    copy = LyingProducer(target, name=b"dltensor_versioned", flags=IS_COPIED)
    expect(ValueError, "advantages was exported as a copy", "would not reach it", out=copy)
    assert np.isnan(target).all()
    got = call_with(LyingProducer(v, name=b"dltensor_versioned", flags=IS_COPIED), LyingProducer(target))
    assert got is target
    assert relative_error(target, reference.puff_advantage(v, r, d, i, **PARAMS)) <= 1e-5


# ---- producers that refuse, or lie about their device ----

class Refusing(LyingProducer):
    def __dlpack__(self, **kwargs):
        raise BufferError("this producer cannot export")


def test_refusal_names_the_argument_and_keeps_the_cause():
    error = expect(TypeError, "values (test_dlpack.Refusing) cannot be read through DLPack: its "
                              "__dlpack__() raised BufferError: this producer cannot export",
                   values=Refusing(inputs()[0]), out=LyingProducer(np.zeros((R, H), np.float32)))
    assert isinstance(error.__cause__, BufferError)


class Old(LyingProducer):
    """A producer from before DLPack 1.0: __dlpack__ takes no keywords."""

    def __dlpack__(self, stream=None):
        return make_capsule(self.array, self.keep)


def test_producer_without_max_version_is_read():
    v, r, d, i = inputs()
    got = call_with(Old(v))
    assert relative_error(got, reference.puff_advantage(v, r, d, i, **PARAMS)) <= 1e-5


class DeviceRaises(LyingProducer):
    def __dlpack_device__(self):
        raise RuntimeError("no idea")


@pytest.mark.parametrize("device", ["junk", (1,), (1.0, 0), (True, 0), None])
def test_dlpack_device_that_returns_junk_is_a_type_error(device):
    expect(TypeError, "values (dlpack_producers.LyingProducer): its __dlpack_device__() returned",
           "expected a (device_type, device_id) pair of ints", values=LyingProducer(inputs()[0], device=device))


def test_dlpack_device_that_raises_is_a_type_error():
    error = expect(TypeError, "values (test_dlpack.DeviceRaises): its __dlpack_device__() raised "
                              "RuntimeError: no idea", values=DeviceRaises(inputs()[0]))
    assert isinstance(error.__cause__, RuntimeError)


# ---- plain producers: no .shape, no .dtype ----

class Bare:
    """Only the two DLPack methods, nothing else."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bare_producer_gets_allocated_outputs_from_gae(dtype):
    # Found 2026-12-01: puffadv.gae(...) with allocated outputs raised AttributeError (.dtype).
    e = reference.random_episodes(np.random.default_rng(3), R, H, dtype)
    out = puffadv.gae(Bare(e["rewards"]), Bare(e["values"]), Bare(e["terminated"]),
                      last_value=Bare(e["last_value"]), gamma=0.9, gae_lambda=0.8, sums=True, time_axis=-1)
    want_adv, want_ret = reference.standard_estimate("gae", e["rewards"], e["values"], e["terminated"],
                                                     last_value=e["last_value"], gamma=0.9, lam=0.8)
    assert out.advantages.dtype == dtype and out.returns.dtype == dtype
    assert relative_error(out.advantages, want_adv) <= reference.TOLERANCE[np.dtype(dtype)]
    assert relative_error(out.returns, want_ret) <= reference.TOLERANCE[np.dtype(dtype)]
    assert relative_error(out.sums, want_adv.sum(1)) <= 1e-5


def test_bare_producer_gets_fused_puff_outputs():
    v, r, d, i = inputs(np.float64)
    out = puffadv.compute_puff_advantage(*(Bare(a) for a in (v, r, d, i)), returns=True, abs_sums=True,
                                         **PARAMS)
    want = reference.puff_advantage(v, r, d, i, **PARAMS)
    assert relative_error(out.advantages, want) <= 1e-12
    assert relative_error(out.returns, want + v) <= 1e-12
    assert relative_error(out.abs_sums, np.abs(want).sum(1)) <= 1e-12
