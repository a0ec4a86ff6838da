"""torch.ops.puffadv.gae / td_lambda_returns / vtrace: same numbers as the
Python API (itself checked against the float64 reference and the peers), the
core's errors, opcheck, and torch.compile(fullgraph=True) through the fakes."""
from __future__ import annotations

import numpy as np
import pytest

import reference as ref

torch = pytest.importorskip("torch")
import puffadv  # noqa: E402
import puffadv.torch  # noqa: E402,F401

ops = torch.ops.puffadv
pytestmark = pytest.mark.skipif(not hasattr(ops, "gae"), reason="op library built without the conventions")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and puffadv.backend()["cuda"]["device_count"] else [])


def sample(device, dtype=torch.float32, time_major=False):
    e = ref.random_episodes(np.random.default_rng(0), 9, 70, np.float32)
    t = lambda x, d=dtype: torch.from_numpy(np.ascontiguousarray(x.T if time_major and x.ndim == 2 else x)).to(d).to(device)
    return dict(rewards=t(e["rewards"]), values=t(e["values"]), terminated=t(e["terminated"], torch.bool),
                truncated=t(e["truncated"], torch.bool), bootstrap_values=t(e["bootstrap_values"]),
                importance=t(e["importance"]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_ops_match_the_python_api(device, time_major, dtype):
    s = sample(device, dtype, time_major)
    axis = 0 if time_major else -1
    args = (s["rewards"], s["values"], s["terminated"], s["truncated"], None, s["bootstrap_values"],
            s["importance"])
    kw = dict(truncated=s["truncated"], bootstrap_values=s["bootstrap_values"], importance=s["importance"],
              time_axis=axis)
    adv, ret = ops.gae(*args, 0.97, 0.9, 1.5, 0.8, axis)
    want = puffadv.gae(s["rewards"], s["values"], s["terminated"], gamma=0.97, gae_lambda=0.9, rho_clip=1.5,
                       c_clip=0.8, **{"time_axis": -1, **kw})
    assert adv.dtype == (torch.float32 if dtype == torch.bfloat16 else dtype)
    assert torch.equal(adv, want.advantages) and torch.equal(ret, want.returns)
    g = ops.td_lambda_returns(*args, 0.97, 0.9, 1.5, 0.8, axis)
    assert torch.equal(g, puffadv.td_lambda_returns(s["rewards"], s["values"], s["terminated"], gamma=0.97,
                                                    lambda_=0.9, rho_clip=1.5, c_clip=0.8, **{"time_axis": -1, **kw}).returns)
    vs, pg = ops.vtrace(*args, 0.97, 1.0, 1.5, 0.8, 1.2, axis)
    v = puffadv.vtrace(s["rewards"], s["values"], s["terminated"], gamma=0.97, rho_clip=1.5, c_clip=0.8,
                       rho_pg_clip=1.2, **{"time_axis": -1, **kw})
    assert torch.equal(vs, v.vs) and torch.equal(pg, v.pg_advantages)


def test_errors_are_the_cores():
    s = sample("cpu")
    with pytest.raises(ValueError, match="truncated needs bootstrap_values"):
        ops.gae(s["rewards"], s["values"], s["terminated"], s["truncated"], s["values"][:, 0], time_axis=-1)
    with pytest.raises(ValueError, match="time_axis must be 0 or -2"):
        ops.gae(s["rewards"], s["values"], s["terminated"], None, s["values"][:, 0], time_axis=3)
    with pytest.raises(TypeError, match="terminated has dtype"):
        ops.gae(s["rewards"], s["values"], s["terminated"].long(), None, s["values"][:, 0], time_axis=-1)
    bad = s["terminated"].clone()
    bad[2, 5] = True
    truncated = torch.zeros_like(bad)
    truncated[2, 5] = True
    # Flagged both: terminated (issue 33), no error: the call with truncated cleared there.
    got = ops.gae(s["rewards"], s["values"], bad, truncated, None, s["bootstrap_values"], time_axis=-1)
    want = ops.gae(s["rewards"], s["values"], bad, torch.zeros_like(bad), None, s["bootstrap_values"], time_axis=-1)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_opcheck_and_compile():
    s = sample("cpu")
    args = (s["rewards"], s["values"], s["terminated"], s["truncated"], None, s["bootstrap_values"],
            s["importance"], 0.97, 0.9, 1.5, 0.8, -1)
    torch.library.opcheck(ops.gae, args)
    torch.library.opcheck(ops.td_lambda_returns, args)
    torch.library.opcheck(ops.vtrace, args[:11] + (1.2, -1))

    def step(r, v, d, u, b):
        adv, ret = ops.gae(r, v, d, u, None, b, None, 0.99, 0.95, 1.0, 1.0, -1)
        return (adv - adv.mean()) / (adv.std() + 1e-8), ret

    compiled = torch.compile(step, fullgraph=True)
    got = compiled(s["rewards"], s["values"], s["terminated"], s["truncated"], s["bootstrap_values"])
    want = step(s["rewards"], s["values"], s["terminated"], s["truncated"], s["bootstrap_values"])
    assert torch.allclose(got[0], want[0]) and torch.equal(got[1], want[1])


def test_a_graph_when_values_require_grad():
    """Issue 30: the ops record their graph; none under torch.no_grad."""
    s = sample("cpu")
    values = s["values"].clone().requires_grad_(True)
    adv, ret = ops.gae(s["rewards"], values, s["terminated"], s["truncated"], None, s["bootstrap_values"], time_axis=-1)
    assert adv.requires_grad and ret.requires_grad
    vs, pg = ops.vtrace(s["rewards"], values, s["terminated"], s["truncated"], None, s["bootstrap_values"], time_axis=-1)
    assert vs.requires_grad and pg.requires_grad
    with torch.no_grad():
        vs, pg = ops.vtrace(s["rewards"], values, s["terminated"], s["truncated"], None, s["bootstrap_values"], time_axis=-1)
    assert not vs.requires_grad and not pg.requires_grad


@pytest.mark.parametrize("time_axis", [2**32, 2**63 - 1, 2**31, -2**31 - 1, -2**63, 3])
def test_time_axis_is_checked_before_narrowing(time_axis):
    """The schema's int is 64-bit: 2**32 must not be computed as 0, nor 2**63-1 as -1."""
    s = sample("cpu")
    for op in (ops.gae, ops.td_lambda_returns, ops.vtrace):
        with pytest.raises(ValueError, match=f"time_axis must be 0 or -2 .* got {time_axis}$"):
            op(s["rewards"], s["values"], s["terminated"], None, s["values"][:, 0], time_axis=time_axis)


def test_meta_tensor_among_cpu_tensors_is_a_mixed_device_error():
    """Meta outranks CPU in dispatch: such a call reaches the fake kernel, whose empty
    result would pass for an answer."""
    s = sample("cpu")
    args = dict(truncated=s["truncated"], bootstrap_values=s["bootstrap_values"], importance=s["importance"])
    for name in ("values", "terminated", "truncated", "bootstrap_values", "importance"):
        if name in args:
            call = dict(args, **{name: args[name].to("meta")})
            fixed = (s["rewards"], s["values"], s["terminated"])
        else:
            call = args
            fixed = tuple(s[n].to("meta") if n == name else s[n] for n in ("rewards", "values", "terminated"))
        for op in (ops.gae, ops.td_lambda_returns, ops.vtrace):
            with pytest.raises(ValueError, match=f"^{name} is on meta but rewards is on cpu; all arrays "
                                                 "must be on one device$"):
                op(*fixed, **call)
    with pytest.raises(ValueError, match="^values is on cpu but rewards is on meta"):
        ops.gae(s["rewards"].to("meta"), s["values"], s["terminated"], **{"time_axis": -1, **args})
    adv, ret = ops.gae(*(s[n].to("meta") for n in ("rewards", "values", "terminated")),
                       **{k: v.to("meta") for k, v in args.items()}, time_axis=-1)
    assert adv.device.type == ret.device.type == "meta"


def test_none_for_a_required_tensor_is_a_type_error_naming_it():
    s = sample("cpu")
    for k, name in enumerate(("rewards", "values", "terminated")):
        required = [s["rewards"], s["values"], s["terminated"]]
        required[k] = None
        with pytest.raises(TypeError, match=f"^{name} must be a tensor, got None$"):
            ops.gae(*required, None, s["values"][:, 0], time_axis=-1)
