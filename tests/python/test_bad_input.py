"""A catalogue of bad inputs to compute_puff_advantage (SPEC section 2): each
gets a TypeError or ValueError whose message names the argument, never a crash
or a result."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv

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
    out = puffadv.compute_puff_advantage(a, a, np.zeros_like(a), a)
    assert np.isfinite(out).all()


def test_input_that_is_read_only_is_fine():
    args = {k: readonly(v) for k, v in good().items()}
    out = puffadv.compute_puff_advantage(**args)
    assert np.isfinite(out).all()


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
        with pytest.raises(ValueError, match=f"{name} is a negative view"):
            if which == "advantages":
                puffadv.compute_puff_advantage(**args, advantages=neg)
            elif which == "gae-rewards":
                puffadv.gae(neg, args["values"], args["dones"] > 0, last_value=args["values"][:, 0])
            elif which == "gae-returns":
                puffadv.gae(args["rewards"], args["values"], args["dones"] > 0,
                            last_value=args["values"][:, 0], advantages=out, returns=neg)
            else:
                args[which] = neg
                puffadv.compute_puff_advantage(**args, advantages=out)
        assert torch.isnan(out).all()  # nothing written
        # The resolved tensor is an ordinary one and is read as it is.
        args[name if name in args else "values"] = neg.resolve_neg()
        puffadv.compute_puff_advantage(**args)
