"""Issue 29's forms against the float64 references in reference.py: next_values for
gae, td_lambda_returns, vtrace and n_step_returns; V-trace's sample_mask and leaky
alpha. Both time layouts, strided views, float32/float64 (16-bit through torch),
flags of every dtype, NaN kept where it belongs, every new argument's errors
named, and the torch (eager and compiled) and JAX (jit, vmap) surfaces."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference as ref

GAMMA, LAM = 0.97, 0.9
ROWS, HORIZON = 7, 45


def _episodes(rng, dtype=np.float32):
    e = ref.random_episodes(rng, ROWS, HORIZON, dtype)
    e["next_values"] = rng.standard_normal((ROWS, HORIZON)).astype(dtype)
    e["next_values"][e["terminated"]] = np.nan  # never read where terminated
    e["sample_mask"] = rng.random((ROWS, HORIZON)) > 0.3
    e["sample_mask"][0, -1] = e["sample_mask"][1, 0] = False
    return e


def _case(kind, e, **extra):
    """(function, positional arrays, keywords, the reference's (advantages, returns))."""
    arrays = [e["rewards"], e["values"], e["terminated"], e["truncated"]]
    nv = e["next_values"]
    if kind == "n_step":
        n = extra.pop("n")
        want = ref.n_step_with_next_values(e["rewards"], e["terminated"], e["truncated"], nv, n, GAMMA, LAM)
        return puffadv.n_step_returns, arrays, dict(next_values=nv, n=n, gamma=GAMMA, lambda_=LAM,
                                                    advantages=True), (want - e["values"], want)
    kw = dict(next_values=nv, gamma=GAMMA, **extra)
    kw["gae_lambda" if kind == "gae" else "lambda_"] = LAM
    rkw = {k: v for k, v in extra.items() if k in ("importance", "sample_mask", "alpha", "rho_clip", "c_clip",
                                                    "rho_pg_clip")}
    want = ref.with_next_values(kind, e["rewards"], e["values"], e["terminated"], e["truncated"], nv, gamma=GAMMA,
                                lam=LAM, **rkw)
    function = {"gae": puffadv.gae, "td_lambda": puffadv.td_lambda_returns, "vtrace": puffadv.vtrace}[kind]
    if kind == "td_lambda":
        kw["advantages"] = True
    return function, arrays, kw, want


def _outputs(kind, out):
    return (out.pg_advantages, out.vs) if kind == "vtrace" else (out.advantages, out.returns)


CASES = [("gae", {}), ("td_lambda", {}), ("vtrace", {}), ("n_step", dict(n=1)), ("n_step", dict(n=4)),
         ("n_step", dict(n=70)), ("n_step", dict(n=HORIZON + 3)),
         ("gae", "importance"), ("vtrace", "importance"), ("vtrace", "mask"), ("vtrace", "leaky"),
         ("vtrace", "leaky+mask")]


def _extra(e, spec):
    if spec == {} or isinstance(spec, dict):
        return dict(spec)
    extra = dict(importance=e["importance"], rho_clip=1.3, c_clip=0.9)
    if "mask" in spec:
        extra["sample_mask"] = e["sample_mask"]
    if "leaky" in spec:
        extra["alpha"] = 0.6
    if spec == "mask":
        del extra["importance"], extra["rho_clip"], extra["c_clip"]
        extra["sample_mask"] = e["sample_mask"]
    return extra


@pytest.mark.parametrize("kind,spec", CASES, ids=[f"{k}-{s}" for k, s in CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["batch_major", "time_major", "strided"])
def test_matches_the_float64_reference(kind, spec, dtype, layout, rng, target):
    e = _episodes(rng, dtype)
    function, arrays, kw, (want_adv, want_ret) = _case(kind, e, **_extra(e, spec))
    arrays = [target.put(a) for a in arrays]
    kw = {k: target.put(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    if layout == "time_major":  # [T, B] memory viewed with time_axis=0
        arrays = [a.T for a in arrays]
        kw = {k: v.T if hasattr(v, "ndim") and v.ndim == 2 else v for k, v in kw.items()}
    elif layout == "strided":  # every other column of a wider buffer
        wide = lambda a: target.put(np.repeat(target.get(a), 2, axis=1))[:, ::2]
        arrays = [wide(a) for a in arrays]
        kw = {k: wide(v) if hasattr(v, "ndim") and v.ndim == 2 else v for k, v in kw.items()}
    time_axis = 0 if layout == "time_major" else -1
    got_adv, got_ret = _outputs(kind, function(*arrays, time_axis=time_axis, **kw))
    got_adv, got_ret = target.get(got_adv), target.get(got_ret)
    if layout == "time_major":
        got_adv, got_ret = got_adv.T, got_ret.T
    tol = 1e-12 if dtype == np.float64 else 2e-5
    assert ref.relative_error(got_ret, want_ret) <= tol
    assert ref.relative_error(got_adv, want_adv) <= tol


def test_next_values_is_never_read_where_terminated_and_a_nan_stays_in_its_row(rng):
    e = _episodes(rng, np.float64)
    assert np.isnan(e["next_values"][e["terminated"]]).all() and e["terminated"].any()
    for kind in ("gae", "td_lambda", "vtrace"):
        function, arrays, kw, _ = _case(kind, e)
        adv, ret = _outputs(kind, function(*arrays, **kw, time_axis=-1))
        assert np.isfinite(adv).all() and np.isfinite(ret).all(), kind
    poisoned = e["next_values"].copy()
    poisoned[2, 10] = np.nan
    e["terminated"][2, 10] = e["truncated"][2, 10] = False
    out = puffadv.gae(e["rewards"], e["values"], e["terminated"], e["truncated"], next_values=poisoned,
                      gamma=GAMMA, gae_lambda=LAM, time_axis=-1)
    bad = ~np.isfinite(out.advantages)
    assert bad[2, 10] and not bad[np.arange(ROWS) != 2].any() and not bad[2, 11:].any()


def test_sample_mask_holds_the_later_error_and_alpha_one_is_vtrace(rng):
    e = _episodes(rng, np.float64)
    e["next_values"] = np.nan_to_num(e["next_values"])
    base = dict(importance=e["importance"], next_values=e["next_values"], gamma=GAMMA, lambda_=LAM, rho_clip=1.2)
    args = (e["rewards"], e["values"], e["terminated"], e["truncated"])
    plain = puffadv.vtrace(*args, **{"time_axis": -1, **base})
    assert np.array_equal(puffadv.vtrace(*args, alpha=1.0, **{"time_axis": -1, **base}).vs, plain.vs)
    masked = puffadv.vtrace(*args, sample_mask=e["sample_mask"], **{"time_axis": -1, **base})
    a = masked.vs - e["values"]
    off = ~e["sample_mask"][:, :-1]
    np.testing.assert_allclose(a[:, :-1][off], a[:, 1:][off], rtol=0, atol=1e-12)
    assert (masked.vs - e["values"])[0, -1] == 0.0  # masked last step: the scan's seed
    # A masked step's NaN reward or ratio goes nowhere (rlax would carry 0 * NaN).
    r = e["rewards"].copy()
    r[~e["sample_mask"]] = np.nan
    out = puffadv.vtrace(r, *args[1:], sample_mask=e["sample_mask"], **{"time_axis": -1, **base})
    assert np.isfinite(out.vs).all()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_precision_inputs_compute_in_float32(dtype, rng):
    torch = pytest.importorskip("torch")
    e = _episodes(rng, np.float32)
    low = {k: torch.from_numpy(np.ascontiguousarray(e[k])).to(getattr(torch, dtype)).float().numpy()
           for k in ("rewards", "values", "next_values", "importance")}
    as_low = lambda k: torch.from_numpy(np.ascontiguousarray(e[k])).to(getattr(torch, dtype))
    flags = {k: torch.from_numpy(e[k]) for k in ("terminated", "truncated", "sample_mask")}
    out = puffadv.vtrace(as_low("rewards"), as_low("values"), flags["terminated"], flags["truncated"],
                         next_values=as_low("next_values"), importance=as_low("importance"),
                         sample_mask=flags["sample_mask"].T.contiguous().T, alpha=0.5, gamma=GAMMA, lambda_=LAM, time_axis=-1)
    want_pg, want_vs = ref.with_next_values("vtrace", low["rewards"], low["values"], e["terminated"],
                                            e["truncated"], low["next_values"], low["importance"], GAMMA, LAM,
                                            sample_mask=e["sample_mask"], alpha=0.5)
    assert out.vs.dtype == torch.float32
    assert ref.relative_error(out.vs.numpy(), want_vs) <= 2e-5
    assert ref.relative_error(out.pg_advantages.numpy(), want_pg) <= 2e-5


def test_new_arguments_are_named_in_errors(rng):
    e = _episodes(rng, np.float32)
    r, v, term, trunc, nv = e["rewards"], e["values"], e["terminated"], e["truncated"], e["next_values"]
    with pytest.raises(ValueError, match=r"^gae takes no last_value with next_values \(next_values is its "
                                         r"bootstrap at every step\)$"):
        puffadv.gae(r, v, term, next_values=nv, last_value=v[:, 0], time_axis=-1)
    with pytest.raises(ValueError, match="^vtrace takes no bootstrap_values with next_values"):
        puffadv.vtrace(r, v, term, trunc, next_values=nv, bootstrap_values=nv, time_axis=-1)
    with pytest.raises(ValueError, match="^n_step_returns takes no last_value with next_values"):
        puffadv.n_step_returns(r, v, term, n=3, next_values=nv, last_value=v[:, 0], time_axis=-1)
    with pytest.raises(ValueError, match=r"^td_lambda takes no importance with next_values \(it then scans"):
        puffadv.td_lambda_returns(r, v, term, next_values=nv, importance=e["importance"], time_axis=-1)
    with pytest.raises(ValueError, match="^next_values has shape"):
        puffadv.gae(r, v, term, next_values=nv[:, :-1], time_axis=-1)
    with pytest.raises(TypeError, match="^next_values"):
        puffadv.gae(r, v, term, next_values=np.nan_to_num(nv).astype(np.int32), time_axis=-1)
    with pytest.raises(TypeError, match="^next_values"):
        puffadv.gae(r, v, term, next_values=nv.astype(np.float64), time_axis=-1)
    with pytest.raises(ValueError, match=r"^sample_mask has shape"):
        puffadv.vtrace(r, v, term, next_values=nv, sample_mask=e["sample_mask"][:-1], time_axis=-1)
    with pytest.raises(TypeError, match=r"^sample_mask"):
        puffadv.vtrace(r, v, term, next_values=nv, sample_mask=e["sample_mask"].astype(np.int64), time_axis=-1)
    with pytest.raises(ValueError, match=r"^alpha must be finite and in \[0, 1\], got 1.5$"):
        puffadv.vtrace(r, v, term, next_values=nv, alpha=1.5, time_axis=-1)
    with pytest.raises(ValueError, match=r"^alpha must be finite and in \[0, 1\], got nan$"):
        puffadv.vtrace(r, v, term, next_values=nv, alpha=float("nan"), time_axis=-1)
    with pytest.raises(TypeError, match="^alpha"):
        puffadv.vtrace(r, v, term, next_values=nv, alpha="0.5", time_axis=-1)
    # A step both terminated and truncated is terminated with next_values too (issue 33).
    both = trunc.copy()
    both[3, 5] = term[3, 5] = True
    cleared = both & ~term
    np.testing.assert_array_equal(puffadv.gae(r, v, term, both, next_values=nv, time_axis=-1).advantages,
                                  puffadv.gae(r, v, term, cleared, next_values=nv, time_axis=-1).advantages)


def test_torch_eager_and_compiled(rng):
    torch = pytest.importorskip("torch")
    e = _episodes(rng, np.float32)
    t = {k: torch.from_numpy(np.ascontiguousarray(x)) for k, x in e.items()}
    want_pg, want_vs = ref.with_next_values("vtrace", e["rewards"], e["values"], e["terminated"], e["truncated"],
                                            e["next_values"], e["importance"], GAMMA, LAM,
                                            sample_mask=e["sample_mask"], alpha=0.7)

    def call(rewards, values, terminated, truncated, next_values, importance, sample_mask):
        return puffadv.vtrace(rewards, values, terminated, truncated, next_values=next_values,
                              importance=importance, sample_mask=sample_mask, alpha=0.7, gamma=GAMMA, lambda_=LAM, time_axis=-1)

    names = ("rewards", "values", "terminated", "truncated", "next_values", "importance", "sample_mask")
    for fn in (call, torch.compile(call, fullgraph=True)):
        out = fn(*(t[k] for k in names))
        assert ref.relative_error(out.vs.numpy(), want_vs) <= 2e-5
        assert ref.relative_error(out.pg_advantages.numpy(), want_pg) <= 2e-5


def test_jax_jit_and_vmap(rng):
    pjax = pytest.importorskip("puffadv.jax")
    jax = pytest.importorskip("jax")
    e = _episodes(rng, np.float32)
    args = (e["rewards"], e["values"], e["terminated"], e["truncated"])
    want_pg, want_vs = ref.with_next_values("vtrace", *args, e["next_values"], e["importance"], GAMMA, LAM,
                                            sample_mask=e["sample_mask"], alpha=0.7)
    fn = jax.jit(lambda r, v, d, u, nv, w, m: pjax.vtrace(r, v, d, u, next_values=nv, importance=w, sample_mask=m,
                                                          alpha=0.7, gamma=GAMMA, lambda_=LAM, time_axis=-1))
    out = fn(*args, e["next_values"], e["importance"], e["sample_mask"])
    assert ref.relative_error(np.asarray(out.vs), want_vs) <= 2e-5
    assert ref.relative_error(np.asarray(out.pg_advantages), want_pg) <= 2e-5
    stacked = [np.stack([x, x]) for x in (*args, e["next_values"])]
    td = jax.vmap(lambda r, v, d, u, nv: pjax.td_lambda_returns(r, v, d, u, next_values=nv, gamma=GAMMA,
                                                                lambda_=LAM, time_axis=-1).returns)(*stacked)
    want = ref.with_next_values("td_lambda", *args, e["next_values"], gamma=GAMMA, lam=LAM)[1]
    assert ref.relative_error(np.asarray(td)[1], want) <= 2e-5
    with pytest.raises(ValueError, match="^gae takes no last_value with next_values"):
        pjax.gae(*args[:3], next_values=e["next_values"], last_value=e["values"][:, 0], time_axis=-1)


def test_torch_ops_take_the_appended_arguments(rng):
    torch = pytest.importorskip("torch")
    pytest.importorskip("puffadv.torch")
    if not hasattr(torch.ops.puffadv, "gae"):
        pytest.skip("a build without the torch operators")
    e = _episodes(rng, np.float32)
    t = {k: torch.from_numpy(np.ascontiguousarray(x)) for k, x in e.items()}
    args = (t["rewards"], t["values"], t["terminated"], t["truncated"])
    nv = t["next_values"]
    ops = torch.ops.puffadv
    want = ref.with_next_values("gae", e["rewards"], e["values"], e["terminated"], e["truncated"], e["next_values"],
                                gamma=GAMMA, lam=LAM)
    adv, ret = ops.gae(*args, gamma=GAMMA, gae_lambda=LAM, next_values=nv, time_axis=-1)
    assert ref.relative_error(adv.numpy(), want[0]) <= 2e-5 and ref.relative_error(ret.numpy(), want[1]) <= 2e-5
    want = ref.with_next_values("td_lambda", e["rewards"], e["values"], e["terminated"], e["truncated"],
                                e["next_values"], gamma=GAMMA, lam=LAM)
    assert ref.relative_error(ops.td_lambda_returns(*args, gamma=GAMMA, lambda_=LAM, next_values=nv, time_axis=-1).numpy(),
                              want[1]) <= 2e-5
    want = ref.n_step_with_next_values(e["rewards"], e["terminated"], e["truncated"], e["next_values"], 3, GAMMA, LAM)
    assert ref.relative_error(ops.n_step_returns(*args, n=3, gamma=GAMMA, lambda_=LAM, next_values=nv,
                                                  time_axis=-1).numpy(),
                              want) <= 2e-5
    want_pg, want_vs = ref.with_next_values("vtrace", e["rewards"], e["values"], e["terminated"], e["truncated"],
                                            e["next_values"], e["importance"], GAMMA, LAM,
                                            sample_mask=e["sample_mask"], alpha=0.7)

    def call(*arrays):
        return ops.vtrace(*arrays[:4], importance=arrays[4], gamma=GAMMA, lambda_=LAM, next_values=arrays[5],
                          sample_mask=arrays[6], alpha=0.7, time_axis=-1)

    for fn in (call, torch.compile(call, fullgraph=True)):
        vs, pg = fn(*args, t["importance"], nv, t["sample_mask"])
        assert ref.relative_error(vs.numpy(), want_vs) <= 2e-5
        assert ref.relative_error(pg.numpy(), want_pg) <= 2e-5
    with pytest.raises(ValueError, match="^gae takes no last_value with next_values"):
        ops.gae(*args[:3], last_value=t["values"][:, 0].contiguous(), next_values=nv, time_axis=-1)
