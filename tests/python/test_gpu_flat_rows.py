"""Flat whole rows on the GPU (src/gpu/scan_rows.cuh): packed, aligned
[rows, horizon] arrays whose horizon is not a multiple of a thread's steps (4
for float32 and float64, 8 for the 16-bit floats and the wide float32 policy)
load a thread's steps in one access per array even where they run over a
row's end. Every estimator against the CPU backend on shapes that put row
ends at every position of a group, block starts inside groups and a last
group past the arrays' end; episode ends at rows' last and first steps;
NaN rows; and which kernel each layout takes (the old paths still run)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import puffadv
import reference
from reference import relative_error
from test_gpu import UNDER_SANITIZER, _puffadv_kernels_launched, needs_gpu, torch
from test_gpu_family import FAMILY_GAMMA, FAMILY_LAMBDA, _family_calls

# Horizons 1..7 (shorter than a group: the scalar kernels; 5..7 flat with 4 steps per
# thread), 33, 91 (the SPEC grid's), 127, 1023/1025/1029 (rows of about a round, one row
# per block), 9001 (3 rows: split rows, the scalar kernels); row counts not multiples of
# 4 or 8, so that the last group runs past the arrays.
FLAT_SHAPES = [(1, 1), (3, 1), (6, 2), (5, 3), (9, 5), (7, 6), (10, 7), (13, 33), (333, 91), (2001, 91),
               (37, 127), (11, 1023), (5, 1025), (301, 1029), (3, 9001)]
# The same horizons in a layout that is not flat: every row padded by 3 elements.
PADDED = "padded"


def _episodes(rng, rows, horizon, dtype=np.float32):
    """Random off-policy episodes with ends at rows' last steps (terminated in
    some rows, truncated in others) and at their first steps."""
    e = reference.random_off_policy(rng, rows, horizon, dtype, end_rate=0.08)
    last = np.arange(rows) % 4
    e["terminated"][:, -1] = last == 1
    e["truncated"][:, -1] = last == 2
    e["terminated"][:, 0] |= (last == 3) & ~e["truncated"][:, 0]
    return e


def _calls(e):
    """name -> (function, positional arrays, keyword arrays, scalars, outputs): the
    family's (test_gpu.py) and GAE / TD(lambda) / V-trace with each bootstrap."""
    r, v, term, trunc = e["rewards"], e["values"], e["terminated"], e["truncated"]
    dones = term | trunc
    float_dones = dones.astype(r.dtype)  # the puff advantage's plain path: one float dtype
    sums = ("abs_sums", "sums", "square_sums")
    boot = dict(bootstrap_values=e["bootstrap_values"])
    lam = dict(gamma=FAMILY_GAMMA, lambda_=FAMILY_LAMBDA)
    calls = dict(_family_calls(e))
    calls.update({
        "gae/bootstrap_values": (puffadv.gae, [r, v, term, trunc], boot,
                                 dict(gamma=FAMILY_GAMMA, gae_lambda=FAMILY_LAMBDA),
                                 ("advantages", "returns") + sums),
        "gae/last_value+importance": (puffadv.gae, [r, v, dones], dict(last_value=e["last_value"],
                                                                      importance=e["importance"]),
                                      dict(gamma=FAMILY_GAMMA, gae_lambda=FAMILY_LAMBDA, rho_clip=1.5, c_clip=0.8),
                                      ("advantages", "returns") + sums),
        "gae/bootstrap_values+importance": (puffadv.gae, [r, v, term, trunc], dict(importance=e["importance"], **boot),
                                            dict(gamma=FAMILY_GAMMA, gae_lambda=FAMILY_LAMBDA, rho_clip=1.5,
                                                 c_clip=0.8), ("advantages", "returns")),
        "td_lambda/last_value": (puffadv.td_lambda_returns, [r, v, dones], dict(last_value=e["last_value"]), lam,
                                 ("returns",)),
        "vtrace/bootstrap_values": (puffadv.vtrace, [r, v, term, trunc], dict(importance=e["importance"], **boot),
                                    dict(rho_clip=1.5, c_clip=0.8, rho_pg_clip=1.2, **lam),
                                    ("pg_advantages", "vs") + sums),
        "vtrace/last_value": (puffadv.vtrace, [r, v, dones], dict(importance=e["importance"],
                                                                 last_value=e["last_value"]),
                              dict(rho_clip=1.5, c_clip=0.8, rho_pg_clip=1.2, **lam), ("pg_advantages", "vs")),
        "puff": (puffadv.compute_puff_advantage, [v, r, float_dones, e["importance"]], {},
                 dict(gamma=FAMILY_GAMMA, gae_lambda=FAMILY_LAMBDA, rho_clip=1.5, c_clip=0.8), ("advantages",)),
        "puff/fused": (puffadv.compute_puff_advantage, [v, r, float_dones, e["importance"]], {},
                       dict(gamma=FAMILY_GAMMA, gae_lambda=FAMILY_LAMBDA, rho_clip=1.5, c_clip=0.8),
                       ("advantages", "returns") + sums),
    })
    return calls


KINDS = list(_calls(reference.random_off_policy(np.random.default_rng(0), 1, 2)))
ARRAY_OUTPUTS = ("advantages", "returns", "out", "pg_advantages", "vs")


def _run(name, e, dtype, device, layout=None, flag_dtype=None):
    """`name` on `e` as [B, T] arrays of `dtype` on `device` (padded rows where
    layout is PADDED), into NaN-poisoned outputs; returns {output: float64 NumPy}."""
    fn, args, kw, scalars, wanted = _calls(e)[name]
    rows, horizon = e["rewards"].shape
    tdtype = getattr(torch, dtype) if isinstance(dtype, str) else getattr(torch, np.dtype(dtype).name)
    out_dtype = torch.float32 if tdtype in (torch.bfloat16, torch.float16) else tdtype

    def arranged(x, dt=None):
        t = torch.from_numpy(np.ascontiguousarray(x))
        if t.dtype == torch.bool:
            t = t.to(flag_dtype or torch.bool)
        elif t.is_floating_point():
            t = t.to(dt or tdtype)
        t = t.to(device)
        if layout == PADDED and t.ndim == 2:
            padded = torch.empty(rows, horizon + 3, dtype=t.dtype, device=device)[:, :horizon]
            return padded.copy_(t)
        return t

    def poisoned():
        return arranged(np.full((rows, horizon), np.nan), out_dtype)

    if fn is puffadv.compute_puff_advantage:  # the advantages are the fifth argument; the rest as the others
        out = poisoned()
        extra = {k: True for k in wanted if k != "advantages"}
        result = fn(*map(arranged, args), out, **scalars, **extra)
        results = {"advantages": out, **({k: getattr(result, k) for k in extra} if extra else {})}
    else:
        given = {k: poisoned() for k in wanted if k in ARRAY_OUTPUTS}
        asked = {k: given.get(k, True) for k in wanted}
        result = fn(*map(arranged, args), **{k: arranged(x) for k, x in kw.items()}, **scalars, **asked,
                    time_axis=-1)
        results = {k: result if k == "out" else getattr(result, k) for k in wanted}
        for k, x in given.items():
            assert results[k] is x
    return {k: np.asarray(x.double().cpu().numpy(), np.float64) for k, x in results.items()}


def _compare(name, e, dtype, layout=None, flag_dtype=None):
    cpu = _run(name, e, dtype, "cpu", layout, flag_dtype)
    gpu = _run(name, e, dtype, "cuda", layout, flag_dtype)
    torch.cuda.synchronize()
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for out in cpu:
        assert not np.isnan(gpu[out]).any(), f"{name} {out}: unwritten or NaN on the GPU"
        err = relative_error(gpu[out], cpu[out])
        assert err <= tol * (10 if "sums" in out else 1), f"{name} {out}: GPU vs CPU rel err {err:.2e}"


@needs_gpu
@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", FLAT_SHAPES)
def test_flat_rows_match_the_cpu(rng, name, dtype, shape):
    if UNDER_SANITIZER and shape[0] * shape[1] > 40_000:
        pytest.skip("long under the sanitizer")
    _compare(name, _episodes(rng, *shape, dtype), dtype)


# Aligned rows (horizons multiples of 8): the row groups and whole-row blocks with
# every combination of optional inputs fixed at compile time (GAE with and without
# truncations and importance ratios), V-trace's 8-step kernel for rows of 8 steps,
# and float32 rows of >= 1024 steps in calls that are not small (long_row_policy,
# launch.cuh): whole rows of one round (2200, 1024) and of four (3, 4096), split
# rows (2, 16384).
ALIGNED_SHAPES = [(3001, 8), (257, 16), (1000, 64), (129, 128), (33, 1024), (2200, 1024), (3, 4096), (2, 16384)]


@needs_gpu
@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("shape", ALIGNED_SHAPES)
def test_aligned_rows_match_the_cpu(rng, name, shape):
    if UNDER_SANITIZER and shape[0] * shape[1] > 40_000:
        pytest.skip("long under the sanitizer")
    _compare(name, _episodes(rng, *shape), np.float32)


@needs_gpu
@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("flag_dtype", ["bool", "uint8"])
@pytest.mark.parametrize("shape", [(9, 5), (333, 91)])
def test_flat_rows_byte_flags_and_padded_rows(rng, name, flag_dtype, shape):
    """Byte flags (their own storage type in the fast kernels), and the same
    horizons with padded rows: not flat, the generic kernels as before."""
    flags = getattr(torch, flag_dtype)
    e = _episodes(rng, *shape)
    _compare(name, e, np.float32, flag_dtype=flags)
    _compare(name, e, np.float32, layout=PADDED, flag_dtype=flags)


# The 16-bit fast kernels: GAE / TD(lambda) / V-trace and the puff advantage with fused
# outputs (the family's 16-bit calls take the generic kernels, the plain puff call is float32/64).
REDUCED_KINDS = [k for k in KINDS if k.split("/")[0] in ("gae", "td_lambda", "vtrace") or k == "puff/fused"]


@needs_gpu
@pytest.mark.parametrize("name", REDUCED_KINDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", [(3, 1), (10, 7), (9, 12), (333, 91), (5, 1025)])
def test_flat_rows_reduced_precision(rng, name, dtype, shape):
    """16-bit floats: 8 steps per thread (12 is a multiple of 4, not of 8)."""
    e = _episodes(rng, *shape)
    for k, x in e.items():  # values the 16-bit dtype holds exactly, so that both backends read the same
        if x.dtype == np.float32:
            e[k] = torch.from_numpy(x).to(getattr(torch, dtype)).float().numpy()
    _compare(name, e, dtype, flag_dtype=torch.uint8)


@needs_gpu
@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("shape", [(41, 5), (40, 91), (12, 1025), (64, 8)])
def test_flat_rows_nan_stays_in_its_row(rng, name, shape):
    """A NaN at a row's last step, and one at the next row's first step, share a
    group with their neighbours: only their own rows change (bitwise). Rows of 8
    steps are aligned: one to a thread in V-trace's 8-step kernel."""
    rows, horizon = shape
    e = _episodes(rng, rows, horizon)
    clean = _run(name, e, np.float32, "cuda")
    for key in ("rewards", "values", "q_values", "next_values"):
        e[key][1, -1] = np.nan  # row 1's last step
        e[key][4, 0] = np.nan   # row 4's first step
    dirty = _run(name, e, np.float32, "cuda")
    torch.cuda.synchronize()
    others = np.setdiff1d(np.arange(rows), [1, 4])
    for out in clean:
        assert np.array_equal(dirty[out][others], clean[out][others], equal_nan=True), out
        assert np.isnan(dirty[out][[1, 4]]).any(), out


def _scan_kernels(names):
    """The kind of each whole-row scan kernel launched: "flat", "aligned"
    (vector blocks), "groups" (row groups, aligned) or "generic"."""
    found = []
    for n in names:
        if "scan_row_groups_kernel<" in n:
            found.append("groups")
            continue
        m = re.search(r"scan_whole_rows_kernel<.*?row_scan_policy<[\d, ]+>, (true|false)(?:, (true|false))?", n)
        if m:
            vec, flat = m.group(1) == "true", m.group(2) == "true"
            found.append("flat" if flat else "aligned" if vec else "generic")
    return found


@needs_gpu
@pytest.mark.skipif(UNDER_SANITIZER, reason="the profiler and the sanitizer both want CUPTI")
@pytest.mark.parametrize("name", ["gae/bootstrap_values", "vtrace/last_value", "discounted/last_value",
                                  "retrace/probs", "q_lambda/watkins", "puff", "episodic_cumsum/ends_at"])
def test_each_layout_takes_its_kernel(rng, name):
    """Packed odd horizons take the flat kernel (the episodic sums too: over the
    whole run backwards); multiples of 4 row groups (aligned, a few warp rounds
    a row); padded rows the generic."""
    cases = {(64, 91, None): "flat", (64, 92, None): "groups", (64, 91, PADDED): "generic"}
    for (rows, horizon, layout), want in cases.items():
        e = _episodes(rng, rows, horizon)
        got = _scan_kernels(_puffadv_kernels_launched(lambda: _run(name, e, np.float32, "cuda", layout)))
        assert got, f"{name}: no whole-row scan kernel seen: the check is blind"
        assert set(got) == {want}, f"{name} {rows}x{horizon} {layout}: {got}, want {want}"


@needs_gpu
@pytest.mark.skipif(UNDER_SANITIZER, reason="the profiler and the sanitizer both want CUPTI")
@pytest.mark.parametrize("name", ["gae/last_value+importance", "gae/bootstrap_values", "td_lambda/last_value",
                                  "puff", "puff/fused", "vtrace/last_value"])
def test_long_rows_take_their_kernel(rng, name):
    """float32 rows of >= 1024 steps in a call that is not small take the
    vector block kernels (long_row_policy, launch.cuh), not row groups; V-trace
    keeps its row groups there, and a small call of such rows too."""
    cases = {(2200, 1024): "groups" if name.startswith("vtrace") else "aligned", (33, 1024): "groups"}
    for (rows, horizon), want in cases.items():
        e = _episodes(rng, rows, horizon)
        got = _scan_kernels(_puffadv_kernels_launched(lambda: _run(name, e, np.float32, "cuda")))
        assert got, f"{name}: no whole-row scan kernel seen: the check is blind"
        assert set(got) == {want}, f"{name} {rows}x{horizon}: {got}, want {want}"
