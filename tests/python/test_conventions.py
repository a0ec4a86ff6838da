"""GAE / TD(lambda) / V-trace (SPEC section 6), fused outputs and reduced
precision, against the float64 references in reference.py."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference as ref

GAMMA, LAM, RHO, C, RHO_PG = 0.97, 0.9, 1.5, 0.8, 1.2
KINDS = ("gae", "td_lambda", "vtrace")


def run(kind, rewards, values, terminated, truncated=None, **kw):
    """One estimator with every output requested; returns (advantages, returns, sums triple)."""
    sums = dict(abs_sums=True, sums=True, square_sums=True)
    if kind == "gae":
        out = puffadv.gae(rewards, values, terminated, truncated, **sums, **{"time_axis": -1, **kw})
        return out.advantages, out.returns, out[2:]
    if kind == "td_lambda":
        kw["lambda_"] = kw.pop("gae_lambda", LAM)
        out = puffadv.td_lambda_returns(rewards, values, terminated, truncated, advantages=True, **sums, **{"time_axis": -1, **kw})
        return out.advantages, out.returns, out[2:]
    kw["lambda_"] = kw.pop("gae_lambda", LAM)
    out = puffadv.vtrace(rewards, values, terminated, truncated, **sums, **{"time_axis": -1, **kw})
    return out.pg_advantages, out.vs, out[2:]


def expected(kind, e, bootstrap, importance, gamma=GAMMA, lam=LAM):
    """Reference (advantages, returns) for the episodes `e` with the given bootstrap."""
    trunc = e["truncated"] if bootstrap == "bootstrap_values" else None
    term = e["terminated"] if trunc is not None else e["terminated"] | e["truncated"]
    return ref.standard_estimate(kind, e["rewards"], e["values"], term, trunc,
                                 e["last_value"] if bootstrap == "last_value" else None,
                                 e["bootstrap_values"] if bootstrap == "bootstrap_values" else None,
                                 e["importance"] if importance else None, gamma, lam, RHO, C, RHO_PG)


def check_sums(sums, adv, tol, get=lambda x: np.asarray(x.cpu() if hasattr(x, "cpu") else x)):
    for got, want in zip(sums, (np.abs(adv).sum(1), adv.sum(1), (adv * adv).sum(1))):
        assert ref.relative_error(get(got), want) <= tol


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bootstrap", ["last_value", "bootstrap_values"])
@pytest.mark.parametrize("importance", [False, True])
@pytest.mark.parametrize("time_axis", [-1, 0])
def test_matches_reference(target, rng, kind, dtype, bootstrap, importance, time_axis):
    rows, horizon = int(rng.integers(1, 20)), int(rng.integers(1, 700))
    e = ref.random_episodes(rng, rows, horizon, dtype)
    want_adv, want_ret = expected(kind, e, bootstrap, importance)
    # Time-major data is passed as a [T, B] array; nothing is transposed back.
    lay = (lambda x: x) if time_axis == -1 else (lambda x: np.ascontiguousarray(x.T))
    trunc = e["truncated"] if bootstrap == "bootstrap_values" else None
    term = e["terminated"] if trunc is not None else e["terminated"] | e["truncated"]
    kw = dict(gamma=GAMMA, gae_lambda=LAM, rho_clip=RHO, c_clip=C, time_axis=time_axis)
    if kind == "vtrace":
        kw["rho_pg_clip"] = RHO_PG
    kw[bootstrap] = target.put(e[bootstrap] if bootstrap == "last_value" else lay(e[bootstrap]))
    if importance:
        kw["importance"] = target.put(lay(e["importance"]))
    adv, ret, sums = run(kind, target.put(lay(e["rewards"])), target.put(lay(e["values"])),
                         target.put(lay(term)), None if trunc is None else target.put(lay(trunc)), **kw)
    back = (lambda x: target.get(x)) if time_axis == -1 else (lambda x: target.get(x).T)
    tol = ref.TOLERANCE[np.dtype(dtype)]
    assert back(adv).dtype == dtype
    assert ref.relative_error(back(adv), want_adv) <= tol
    assert ref.relative_error(back(ret), want_ret) <= tol
    check_sums(sums, want_adv, tol * 10, target.get)


def test_td_lambda_matches_its_own_recursion(rng):
    e = ref.random_episodes(rng, 7, 257, np.float64)
    out = puffadv.td_lambda_returns(e["rewards"], e["values"], e["terminated"], e["truncated"],
                                    bootstrap_values=e["bootstrap_values"], gamma=GAMMA, lambda_=LAM, time_axis=-1)
    want = ref.td_lambda_return(e["rewards"], e["values"], e["terminated"], e["truncated"], None,
                                e["bootstrap_values"], GAMMA, LAM)
    assert ref.relative_error(out.returns, want) <= 1e-12
    assert out.advantages is None


@pytest.mark.parametrize("flag_dtype", [bool, np.uint8, np.float32])
def test_flag_dtypes_and_strided_views(rng, flag_dtype):
    """bool/uint8/float flags and sliced views (every layout path) agree with the reference."""
    e = ref.random_episodes(rng, 24, 90, np.float32)
    want_adv, want_ret = expected("gae", e, "bootstrap_values", True)
    wide = lambda x: np.repeat(np.repeat(x, 2, axis=0), 3, axis=1)  # sliced back below
    view = lambda x: wide(x)[::2, ::3]
    out = puffadv.gae(view(e["rewards"]), view(e["values"]), view(e["terminated"].astype(flag_dtype)),
                      view(e["truncated"].astype(flag_dtype)), bootstrap_values=view(e["bootstrap_values"]),
                      importance=view(e["importance"]), gamma=GAMMA, gae_lambda=LAM, rho_clip=RHO, c_clip=C, time_axis=-1)
    assert ref.relative_error(out.advantages, want_adv) <= 1e-5
    assert ref.relative_error(out.returns, want_ret) <= 1e-5


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flag_dtype", [bool, np.float32])
@pytest.mark.parametrize("time_axis", [-1, 0])
def test_many_rows_in_blocks_tiles_and_threads(rng, kind, flag_dtype, time_axis):
    """Enough rows for several row blocks (time-major), tiles and both threads,
    rows and steps that are no multiple of a vector (padded remainders)."""
    rows, horizon = 603, int(rng.choice([8, 45]))
    e = ref.random_episodes(rng, rows, horizon, np.float32)
    want_adv, want_ret = expected(kind, e, "bootstrap_values", True)
    lay = (lambda x: x) if time_axis == -1 else (lambda x: np.ascontiguousarray(x.T))
    kw = dict(gamma=GAMMA, gae_lambda=LAM, rho_clip=RHO, c_clip=C, time_axis=time_axis)
    if kind == "vtrace":
        kw["rho_pg_clip"] = RHO_PG
    adv, ret, sums = run(kind, lay(e["rewards"]), lay(e["values"]), lay(e["terminated"].astype(flag_dtype)),
                         lay(e["truncated"].astype(flag_dtype)), bootstrap_values=lay(e["bootstrap_values"]),
                         importance=lay(e["importance"]), **kw)
    back = (lambda x: x) if time_axis == -1 else (lambda x: x.T)
    assert ref.relative_error(back(adv), want_adv) <= 1e-5
    assert ref.relative_error(back(ret), want_ret) <= 1e-5
    check_sums(sums, want_adv, 1e-4)


@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("flag_dtype", [bool, np.float32])
def test_steps_both_terminated_and_truncated_are_terminated(time_axis, flag_dtype):
    """Gymnasium's meaning (issue 33), in every kernel and thread: equal to the call
    with those steps terminated alone; their bootstrap (NaN here) is never read."""
    e = ref.random_episodes(np.random.default_rng(1), 603, 45, np.float32)
    term, trunc = e["terminated"].copy(), e["truncated"].copy()
    boot = e["bootstrap_values"].copy()
    for row, t in [(590, 3), (301, 40), (301, 17), (412, 0)]:
        term[row, t] = trunc[row, t] = True
        boot[row, t] = np.nan
    lay = (lambda x: x) if time_axis == -1 else (lambda x: np.ascontiguousarray(x.T))
    run = lambda u: puffadv.gae(lay(e["rewards"]), lay(e["values"]), lay(term.astype(flag_dtype)),
                                lay(u.astype(flag_dtype)), bootstrap_values=lay(boot), sums=True,
                                time_axis=time_axis)
    got, want = run(trunc), run(trunc & ~term)
    assert np.isfinite(got.advantages).all()
    for a, b in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(a, b)
    adv, _ = ref.standard_estimate("gae", e["rewards"], e["values"], term, trunc & ~term, None,
                                   np.nan_to_num(e["bootstrap_values"]), gamma=0.99, lam=0.95)
    assert ref.relative_error(got.advantages if time_axis == -1 else got.advantages.T, adv) <= 1e-5


def _by_step(rewards, values, terminated, last_value, importance, lam):
    """GAE / V-trace in float64 without truncations, all rows at once (one NumPy step per
    time step): (A, A + V, IMPALA's pg advantages) for [B, T] arrays."""
    r, v, imp = (np.asarray(x, np.float64) for x in (rewards, values, importance))
    discount = GAMMA * (1.0 - np.asarray(terminated, np.float64))
    nv = np.concatenate([v[:, 1:], np.asarray(last_value, np.float64)[:, None]], axis=1)
    adv, pg, a = np.zeros_like(r), np.zeros_like(r), np.zeros(r.shape[0])
    for t in range(r.shape[1] - 1, -1, -1):
        later = a
        a = np.fmin(imp[:, t], RHO) * (r[:, t] + discount[:, t] * nv[:, t] - v[:, t]) + \
            LAM * discount[:, t] * np.fmin(imp[:, t], C) * a
        adv[:, t] = a
        pg[:, t] = np.fmin(imp[:, t], RHO_PG) * (r[:, t] + discount[:, t] * (nv[:, t] + later) - v[:, t])
    return adv, adv + v, pg


@pytest.mark.parametrize("time_axis", [-1, 0])
@pytest.mark.parametrize("offset", [0, 1])
def test_large_outputs_streamed_past_the_caches(rng, time_axis, offset):
    """Outputs of 16 MiB and more are written with streaming stores (16-byte aligned
    rows only: offset 1 shifts the outputs off that and takes the cached stores)."""
    rows, horizon = 16400, 132  # 528-byte rows: 16-byte aligned
    r, v = (rng.standard_normal((rows, horizon)).astype(np.float32) for _ in range(2))
    term = rng.random((rows, horizon)) < 0.05
    imp = rng.uniform(0.0, 3.0, (rows, horizon)).astype(np.float32)
    last = rng.standard_normal(rows).astype(np.float32)
    want_adv, want_ret, want_pg = _by_step(r, v, term, last, imp, LAM)
    lay = (lambda x: x) if time_axis == -1 else (lambda x: np.ascontiguousarray(x.T))
    back = (lambda x: x) if time_axis == -1 else (lambda x: x.T)
    shape = (rows, horizon) if time_axis == -1 else (horizon, rows)
    out = [np.full(shape[0] * shape[1] + 8, np.nan, np.float32)[offset:offset + shape[0] * shape[1]].reshape(shape)
           for _ in range(2)]
    kw = dict(last_value=last, importance=lay(imp), gamma=GAMMA, rho_clip=RHO, c_clip=C, time_axis=time_axis)
    puffadv.gae(lay(r), lay(v), lay(term), gae_lambda=LAM, advantages=out[0], returns=out[1], **{"time_axis": -1, **kw})
    assert ref.relative_error(back(out[0]), want_adv) <= 1e-5
    assert ref.relative_error(back(out[1]), want_ret) <= 1e-5
    puffadv.vtrace(lay(r), lay(v), lay(term), lambda_=LAM, rho_pg_clip=RHO_PG, vs=out[0], pg_advantages=out[1],
                   **{"time_axis": -1, **kw})
    assert ref.relative_error(back(out[0]), want_ret) <= 1e-5
    assert ref.relative_error(back(out[1]), want_pg) <= 1e-5


def test_outputs_written_in_place_and_poisoned_first(rng):
    e = ref.random_episodes(rng, 6, 40, np.float32)
    adv = np.full((6, 40), np.nan, np.float32)
    ret = np.full((6, 40), np.nan, np.float32)
    sums = np.full(6, np.nan, np.float64)
    out = puffadv.gae(e["rewards"], e["values"], e["terminated"], e["truncated"],
                      bootstrap_values=e["bootstrap_values"], advantages=adv, returns=ret, sums=sums, time_axis=-1)
    assert out.advantages is adv and out.returns is ret and out.sums is sums
    want_adv, want_ret = expected("gae", e, "bootstrap_values", False, gamma=0.99, lam=0.95)
    assert ref.relative_error(adv, want_adv) <= 1e-5
    assert ref.relative_error(ret, want_ret) <= 1e-5
    assert ref.relative_error(sums, want_adv.sum(1)) <= 1e-5
    # Only what was asked for: a skipped output stays None.
    only = puffadv.gae(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"],
                       returns=False, time_axis=-1)
    assert only.returns is None and only.advantages is not None


def test_facts(rng):
    e = ref.random_episodes(rng, 5, 60, np.float64)
    args = (e["rewards"], e["values"], e["terminated"], e["truncated"])
    kw = dict(bootstrap_values=e["bootstrap_values"])
    # gamma * lambda == 0: the one-step TD error, with the bootstrap at truncations.
    one_step = puffadv.gae(*args, gamma=0.9, gae_lambda=0.0, **{"time_axis": -1, **kw}).advantages
    nxt = np.concatenate([e["values"][:, 1:], e["bootstrap_values"][:, -1:]], axis=1)
    nxt = np.where(e["truncated"], e["bootstrap_values"], nxt)
    td = e["rewards"] + 0.9 * np.where(e["terminated"], 0.0, nxt) - e["values"]
    assert ref.relative_error(one_step, td) <= 1e-12
    # gamma == 0: the reward minus the value.
    assert ref.relative_error(puffadv.gae(*args, gamma=0.0, **{"time_axis": -1, **kw}).advantages,
                              e["rewards"] - e["values"]) <= 1e-12
    # TD(lambda) returns are GAE's returns; V-trace without ratios at lambda = 1 is GAE(1).
    g = puffadv.gae(*args, gamma=GAMMA, gae_lambda=LAM, **{"time_axis": -1, **kw})
    t = puffadv.td_lambda_returns(*args, gamma=GAMMA, lambda_=LAM, advantages=True, **{"time_axis": -1, **kw})
    assert ref.relative_error(t.returns, g.returns) <= 1e-12
    assert ref.relative_error(t.advantages, g.advantages) <= 1e-12
    v = puffadv.vtrace(*args, gamma=GAMMA, **{"time_axis": -1, **kw})
    g1 = puffadv.gae(*args, gamma=GAMMA, gae_lambda=1.0, **{"time_axis": -1, **kw})
    assert ref.relative_error(v.vs, g1.returns) <= 1e-12
    # Importance ratios all 1 change nothing; rho_clip == 0 zeroes the advantages.
    ones = np.ones_like(e["rewards"])
    assert ref.relative_error(puffadv.gae(*args, importance=ones, **{"time_axis": -1, **kw}).advantages,
                              puffadv.gae(*args, **{"time_axis": -1, **kw}).advantages) <= 1e-12
    zero = puffadv.gae(*args, importance=e["importance"], rho_clip=0.0, **{"time_axis": -1, **kw}).advantages
    assert np.all(zero == 0)
    # Values past the end of a terminated step are never read: NaN there changes nothing.
    boot = np.where(e["terminated"], np.nan, e["bootstrap_values"])
    assert np.all(np.isfinite(puffadv.gae(*args, bootstrap_values=boot, time_axis=-1).advantages))


def test_shapes_edge_cases():
    for rows, horizon in [(0, 5), (3, 0), (0, 0)]:
        z = np.zeros((rows, horizon), np.float32)
        out = puffadv.gae(z, z, z.astype(bool), last_value=np.zeros(rows, np.float32), sums=True, time_axis=-1)
        assert out.advantages.shape == (rows, horizon) and out.sums.shape == (rows,)
        assert np.all(out.sums == 0)
    # H == 1: the step bootstraps from last_value directly.
    r, v = np.array([[1.0], [2.0]]), np.array([[0.5], [0.25]])
    out = puffadv.gae(r, v, np.array([[False], [True]]), last_value=np.array([4.0, 8.0]), gamma=0.5, time_axis=-1)
    assert np.allclose(out.advantages, [[1.0 + 2.0 - 0.5], [2.0 - 0.25]])


def test_vtrace_pg_advantage_by_hand():
    """One row, no ratios: pg_t = r_t + gamma vs_{t+1} - V_t inside, bootstrap at the end."""
    r = np.array([[1.0, 2.0, 3.0]])
    v = np.array([[0.5, -1.0, 2.0]])
    out = puffadv.vtrace(r, v, np.zeros((1, 3), bool), last_value=np.array([10.0]), gamma=0.5, time_axis=-1)
    vs2 = 3.0 + 0.5 * 10.0
    vs1 = 2.0 + 0.5 * vs2
    vs0 = 1.0 + 0.5 * vs1
    assert np.allclose(out.vs, [[vs0, vs1, vs2]])
    assert np.allclose(out.pg_advantages, [[1 + 0.5 * vs1 - 0.5, 2 + 0.5 * vs2 + 1.0, 3 + 5.0 - 2.0]])


# ---- bad input: each names the argument ----

def _episode():
    rng = np.random.default_rng(0)
    return ref.random_episodes(rng, 4, 10, np.float32)


@pytest.mark.parametrize("change, error, words", [
    (dict(last_value="both"), ValueError, "either last_value"),
    (dict(bootstrap_values=None), ValueError, "a bootstrap is needed"),
    (dict(bootstrap_values=None, last_value="ok"), ValueError, "truncated needs bootstrap_values"),
    (dict(bootstrap_values=np.zeros((4, 9), np.float32)), ValueError, "bootstrap_values has shape"),
    (dict(bootstrap_values=None, truncated=None, last_value=np.zeros(3, np.float32)),
     ValueError, "last_value has 3 elements"),
    (dict(bootstrap_values=None, truncated=None, last_value=np.zeros((4, 2), np.float32)),  # [B, 1]: accepted (issue 33)
     ValueError, "last_value must be a 1-D array"),
    (dict(time_axis=2), ValueError, "time_axis must be 0 or -2"),
    (dict(time_axis=-3), ValueError, "time_axis must be 0 or -2"),
    (dict(time_axis=1.0), TypeError, "time_axis must be an int"),
    (dict(time_axis=0), ValueError, "shape"),  # [4, 10] read as time-major: last... shapes differ
    (dict(rewards=np.zeros((4, 10), np.int64)), TypeError, "rewards has dtype int64"),
    (dict(values=np.zeros((4, 10), np.float64)), TypeError, "values has dtype float64 but rewards"),
    (dict(terminated=np.zeros((4, 10), np.int32)), TypeError, "terminated has dtype int32"),
    (dict(importance=np.zeros((4, 10), np.float64)), TypeError, "importance has dtype float64"),
    (dict(advantages=np.zeros((4, 10), np.float64)), TypeError, "advantages has dtype float64"),
    (dict(advantages="rewards"), ValueError, "advantages overlaps rewards"),
    (dict(returns="readonly"), ValueError, "returns is read-only"),
    (dict(sums=np.zeros(5)), ValueError, "sums has 5 elements"),
    (dict(sums=np.zeros(4, np.float16)), TypeError, "sums has dtype float16"),
    (dict(gamma=1.5), ValueError, "gamma must be finite and in [0, 1]"),
    (dict(gae_lambda=-0.1), ValueError, "gae_lambda must be finite and in [0, 1]"),
    (dict(rho_clip=float("nan")), ValueError, "rho_clip must be finite"),
    (dict(rewards=np.zeros(10, np.float32)), ValueError, "rewards must be a 2-D"),
    (dict(values=[[0.0] * 10] * 4), TypeError, "values must be an array"),
])
def test_bad_input(change, error, words):
    e = _episode()
    kw = dict(rewards=e["rewards"], values=e["values"], terminated=e["terminated"],
              truncated=e["truncated"], bootstrap_values=e["bootstrap_values"])
    for key, value in change.items():
        special = value if isinstance(value, str) else None
        if special == "terminated":
            value = e["terminated"].copy()
            value[0, 0] = True
            kw["terminated"] = value
        elif special in ("both", "ok"):
            value = e["last_value"]
        elif special == "rewards":
            value = kw["rewards"]
        elif special == "readonly":
            value = np.zeros((4, 10), np.float32)
            value.flags.writeable = False
        if key == "time_axis" and value == 0 and not isinstance(value, float):
            kw["rewards"] = np.zeros((10, 4), np.float32)
            kw["time_axis"] = 0
            continue
        kw[key] = value
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        puffadv.gae(**{"time_axis": -1, **kw})


def test_vtrace_and_td_lambda_name_their_lambda():
    e = _episode()
    with pytest.raises(ValueError, match="lambda_ must be finite"):
        puffadv.vtrace(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"], lambda_=2.0, time_axis=-1)
    with pytest.raises(ValueError, match="rho_pg_clip must be finite and >= 0"):
        puffadv.vtrace(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"],
                       rho_pg_clip=-1.0, time_axis=-1)


# ---- the puff advantage's fused outputs and dtypes ----

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_puff_fused_outputs(target, rng, dtype, layout):
    rows, horizon = int(rng.integers(1, 30)), int(rng.integers(1, 600))
    v, r, d, i = ref.random_puff_inputs(rng, rows, horizon, dtype)
    want = ref.puff_advantage(v, r, d, i, GAMMA, LAM, RHO, C)
    lay = (lambda x: target.put(x)) if layout == "contiguous" else \
        (lambda x: target.put(np.ascontiguousarray(x.T)).T)
    out = puffadv.compute_puff_advantage(lay(v), lay(r), lay(d), lay(i), None, GAMMA, LAM, RHO, C,
                                         returns=True, abs_sums=True, sums=True, square_sums=True)
    tol = ref.TOLERANCE[np.dtype(dtype)]
    assert isinstance(out, puffadv.Estimate)
    assert ref.relative_error(target.get(out.advantages), want) <= tol
    assert ref.relative_error(target.get(out.returns), want + v) <= tol
    check_sums([target.get(s) for s in out[2:]], want, tol * 10)
    # Without fused outputs the result is still the plain array (SPEC section 3).
    plain = puffadv.compute_puff_advantage(lay(v), lay(r), lay(d), lay(i), None, GAMMA, LAM, RHO, C)
    assert not isinstance(plain, tuple)


@pytest.mark.parametrize("flag_dtype", [bool, np.uint8])
def test_puff_byte_dones(rng, flag_dtype):
    v, r, d, i = ref.random_puff_inputs(rng, 9, 77)
    out = puffadv.compute_puff_advantage(v, r, d.astype(flag_dtype), i, None, GAMMA, LAM, RHO, C)
    assert ref.relative_error(out, ref.puff_advantage(v, r, d, i, GAMMA, LAM, RHO, C)) <= 1e-5


# ---- bfloat16 / float16 (torch carries both dtypes through DLPack) ----

try:
    import torch
    REDUCED = [torch.bfloat16, torch.float16]
except ImportError:  # the tests below are then skipped, saying why
    torch = None
    REDUCED = []
needs_torch = pytest.mark.skipif(torch is None, reason="bfloat16/float16 arrays come from torch here")
# The reduced-precision kernels on every device this machine has (CUDA on the GPU machine).
DEVICES = ["cpu"] + (["cuda"] if torch is not None and torch.cuda.is_available()
                     and puffadv.backend()["cuda"]["device_count"] > 0 else [])


def _rounded(x, dtype):
    """x rounded to dtype, back in float64: the reference sees exactly the kernel's inputs."""
    return torch.from_numpy(np.asarray(x, np.float32)).to(dtype).double().numpy()


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("horizon", [300, 304])  # 304: whole 16-byte loads of 16-bit floats on a GPU
@pytest.mark.parametrize("dtype", REDUCED)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("time_axis", [-1, 0])
def test_reduced_precision_standard(rng, dtype, kind, time_axis, horizon, device):
    e = ref.random_episodes(rng, 11, horizon, np.float32)
    for key in ("rewards", "values", "bootstrap_values", "importance"):
        e[key] = _rounded(e[key], dtype)
    want_adv, want_ret = expected(kind, e, "bootstrap_values", True)
    lay = (lambda x: x) if time_axis == -1 else (lambda x: x.T)
    put = lambda x: lay(torch.from_numpy(np.asarray(x)).to(dtype).to(device))
    kw = dict(gamma=GAMMA, gae_lambda=LAM, rho_clip=RHO, c_clip=C, time_axis=time_axis,
              bootstrap_values=put(e["bootstrap_values"]), importance=put(e["importance"]))
    if kind == "vtrace":
        kw["rho_pg_clip"] = RHO_PG
    flags = lambda x: lay(torch.from_numpy(x).to(device))
    adv, ret, sums = run(kind, put(e["rewards"]), put(e["values"]), flags(e["terminated"]),
                         flags(e["truncated"]), **kw)
    back = lambda x: (x if time_axis == -1 else x.T).double().cpu().numpy()
    sums = [s if s is None or not torch.is_tensor(s) else s.cpu() for s in sums]
    assert adv.dtype == torch.float32 and ret.dtype == torch.float32  # float32 arithmetic, float32 out
    assert ref.relative_error(back(adv), want_adv) <= 1e-5
    assert ref.relative_error(back(ret), want_ret) <= 1e-5
    check_sums(sums, want_adv, 1e-4)


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("horizon", [200, 203])
@pytest.mark.parametrize("dtype", REDUCED)
def test_reduced_precision_puff_and_own_dtype_output(rng, dtype, horizon, device):
    v, r, d, i = (_rounded(x, dtype) for x in ref.random_puff_inputs(rng, 16, horizon))
    want = ref.puff_advantage(v, r, d, i, GAMMA, LAM, RHO, C)
    t = lambda x: torch.from_numpy(x).to(dtype).to(device)
    out = puffadv.compute_puff_advantage(t(v), t(r), t(d), t(i), None, GAMMA, LAM, RHO, C)
    assert out.dtype == torch.float32
    assert ref.relative_error(out.double().cpu().numpy(), want) <= 1e-5
    # An output of the input dtype is accepted: float32 arithmetic, one rounding at the store.
    own = torch.full((16, horizon), float("nan"), dtype=dtype, device=device)
    puffadv.compute_puff_advantage(t(v), t(r), t(d), t(i), own, GAMMA, LAM, RHO, C)
    own = own.cpu()
    stored = torch.from_numpy(want.astype(np.float32)).to(dtype)
    mismatch = (own != stored).float().mean().item()
    assert mismatch < 0.01  # float32-vs-float64 arithmetic may flip a rounding now and then
    assert ref.relative_error(own.double().numpy(), want) <= (1e-2 if dtype == torch.bfloat16 else 1e-3)


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
def test_half_conversions_are_exact(device):
    """Every bit pattern decodes as torch decodes it; stores round to nearest even as torch does."""
    bits = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).to(device)
    for dtype in REDUCED:
        # One step per row: a NaN or inf cannot reach a neighbour through the recurrence.
        x = bits.view(dtype).reshape(-1, 1)
        zero = torch.zeros_like(x)
        out = puffadv.gae(x, zero, torch.zeros(x.shape, dtype=torch.bool, device=device),
                          last_value=zero[:, 0], gamma=0.0, returns=False, time_axis=-1).advantages
        assert torch.equal(out.isnan(), x.float().isnan())
        assert torch.equal(out.nan_to_num(), x.float().nan_to_num())
        # r - v in float32, stored as `dtype`: compare with torch's own rounding.
        g = torch.Generator().manual_seed(0)
        a = (torch.randn(64, 512, generator=g) * 100).to(dtype).to(device)
        b = (torch.randn(64, 512, generator=g) * 0.01).to(dtype).to(device)
        own = torch.empty(64, 512, dtype=dtype, device=device)
        # Terminated everywhere: each step is r - V, whatever the later steps hold.
        puffadv.gae(a, b, torch.ones(64, 512, dtype=torch.bool, device=device), last_value=b[:, 0],
                    gamma=0.5, advantages=own, returns=False, time_axis=-1)
        assert torch.equal(own, (a.float() - b.float()).to(dtype))


def test_gpu_arrays_without_a_usable_backend_fall_back_to_the_host(rng, monkeypatch):
    """The conventions go through the same dispatcher as the puff advantage: GPU
    arrays this build cannot compute on are computed on the host (1-D and bool
    arrays, absent optionals and outputs included) and written back."""
    import warnings

    from fake_device import FakeGpuArray
    from puffadv import _fallback
    if puffadv.backend()["cuda"]["device_count"] > 0:
        pytest.skip("this machine computes CUDA arrays itself: no fallback to exercise")
    real_writer = _fallback._writer

    def writer(framework, out, name):  # a FakeGpuArray is written back through its host memory
        if isinstance(out, FakeGpuArray):
            return (lambda dst, host: np.copyto(dst.host, np.asarray(host))), out
        return real_writer(framework, out, name)

    monkeypatch.setattr(_fallback, "_writer", writer)
    monkeypatch.delenv("PUFFADV_FALLBACK", raising=False)
    e = ref.random_episodes(rng, 5, 33, np.float32)
    fake = lambda x: FakeGpuArray(np.ascontiguousarray(x))
    adv = FakeGpuArray(np.full((5, 33), np.nan, np.float32))
    sums = FakeGpuArray(np.full(5, np.nan, np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", puffadv.FallbackWarning)  # the once-per-process fallback warning
        out = puffadv.gae(fake(e["rewards"]), fake(e["values"]), fake(e["terminated"]), fake(e["truncated"]),
                          bootstrap_values=fake(e["bootstrap_values"]), gamma=GAMMA, gae_lambda=LAM,
                          advantages=adv, returns=False, sums=sums, time_axis=-1)
    assert out.advantages is adv and out.sums is sums and out.returns is None
    want, _ = expected("gae", e, "bootstrap_values", False)
    assert ref.relative_error(adv.host, want) <= 1e-5
    assert ref.relative_error(sums.host, want.sum(1)) <= 1e-5


# ---- issue 15: messages, a fixed time_axis=-2 test, identity of given outputs ----

@pytest.mark.parametrize("time_axis", [2**31, 2**32, 2**63 - 1, 2**63, 2**64, -2**63 - 1, -2**31 - 1])
def test_time_axis_beyond_int_is_named(time_axis):
    # Found 2026-12-01: 2**31 and 2**64 gave nanobind's "incompatible function arguments".
    e = _episode()
    with pytest.raises(ValueError, match=rf"^time_axis must be 0 or -2 \(time-major \[T, B\]\) or 1 or -1 "
                                         rf"\(batch-major \[B, T\]\) for the 2-D rewards, got {time_axis}$"):
        puffadv.gae(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"], time_axis=time_axis)


@pytest.mark.parametrize("kind", KINDS)
def test_time_axis_minus_two_is_time_major(rng, kind):
    """-2 names the same axis as 0 on 2-D arrays: [T, B] data, read through its strides."""
    e = ref.random_episodes(rng, 5, 37, np.float64)
    want_adv, want_ret = expected(kind, e, "bootstrap_values", True)
    t = lambda x: np.ascontiguousarray(x.T)
    kw = dict(gamma=GAMMA, gae_lambda=LAM, rho_clip=RHO, c_clip=C, importance=t(e["importance"]),
              bootstrap_values=t(e["bootstrap_values"]), time_axis=-2)
    if kind == "vtrace":
        kw["rho_pg_clip"] = RHO_PG
    adv, ret, sums = run(kind, t(e["rewards"]), t(e["values"]), t(e["terminated"]), t(e["truncated"]), **kw)
    assert adv.shape == (37, 5)
    assert ref.relative_error(adv.T, want_adv) <= 1e-12
    assert ref.relative_error(ret.T, want_ret) <= 1e-12
    check_sums(sums, want_adv, 1e-12)


@pytest.mark.parametrize("name", ["abs_sums", "sums", "square_sums"])
@pytest.mark.parametrize("function", ["gae", "puff"])
def test_sums_of_an_unreadable_dtype_say_what_sums_take(name, function):
    # Found 2026-12-01: an int32 abs_sums was told bfloat16 and bool are accepted.
    e = _episode()
    with pytest.raises(TypeError) as info:
        if function == "gae":
            puffadv.gae(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"],
                        **{"time_axis": -1, **{name: np.zeros(4, np.int32)}})
        else:
            puffadv.compute_puff_advantage(e["values"], e["rewards"], e["terminated"].astype(np.float32),
                                           e["importance"], **{name: np.zeros(4, np.int32)})
    assert str(info.value) == f"{name} has dtype int32, which puffadv does not read; expected float32 or float64"


def test_outputs_overlapping_each_other_are_not_called_inputs():
    # Found 2026-12-01: two outputs sharing memory were said to "alias an input".
    e = _episode()
    buffer = np.zeros((4, 12), np.float32)
    with pytest.raises(ValueError, match="^returns overlaps advantages in memory; two outputs must not share "
                                         "memory$"):
        puffadv.gae(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"],
                    advantages=buffer[:, :10], returns=buffer[:, 2:], time_axis=-1)
    with pytest.raises(ValueError, match="^returns overlaps advantages in memory; two outputs must not share"):
        puffadv.compute_puff_advantage(e["values"], e["rewards"], e["terminated"].astype(np.float32),
                                       e["importance"], buffer[:, :10], returns=buffer[:, 2:])
    with pytest.raises(ValueError, match="^abs_sums overlaps sums in memory; two outputs must not share"):
        sums = np.zeros(4, np.float32)
        puffadv.gae(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"],
                    abs_sums=sums, sums=sums, time_axis=-1)
    with pytest.raises(ValueError, match="^returns overlaps values in memory; the output must not alias an "
                                         "input$"):
        puffadv.gae(e["rewards"], e["values"], e["terminated"], last_value=e["last_value"], returns=e["values"], time_axis=-1)


FUSED = ["returns", "abs_sums", "sums", "square_sums"]


@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("given_fused", [False, True])
def test_puff_given_advantages_come_back_with_each_fused_output(rng, fused, given_fused):
    """Mutation testing found nothing checked that .advantages is the given array
    when a fused output is requested (returning `values` there went unnoticed)."""
    v, r, d, i = ref.random_puff_inputs(rng, 6, 40)
    want = ref.puff_advantage(v, r, d, i, GAMMA, LAM, RHO, C)
    out = np.full((6, 40), np.nan, np.float32)
    extra = (np.full((6, 40), np.nan, np.float32) if fused == "returns" else np.full(6, np.nan, np.float32)) \
        if given_fused else True
    result = puffadv.compute_puff_advantage(v, r, d, i, out, GAMMA, LAM, RHO, C, **{fused: extra})
    assert isinstance(result, puffadv.Estimate)
    assert result.advantages is out
    assert ref.relative_error(out, want) <= 1e-5
    got = getattr(result, fused)
    if given_fused:
        assert got is extra
    expected_extra = {"returns": want + v, "abs_sums": np.abs(want).sum(1), "sums": want.sum(1),
                      "square_sums": (want * want).sum(1)}[fused]
    assert ref.relative_error(got, expected_extra) <= 1e-5
    for other in FUSED:
        if other != fused:
            assert getattr(result, other) is None
