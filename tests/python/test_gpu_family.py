"""The estimator family (issue 20) on the GPU: every kernel layout against the
CPU backend. tests/python/test_family.py compares every target, CUDA too, with
the float64 references on small shapes; here the shapes reach each GPU layout:
row groups, whole rows, split rows (three launches, reversed carries for the
episodic sums), strided and unaligned views, and the n-step window kernel.
The GPU machinery shared with the puff advantage is tested in test_gpu.py."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv
import reference
from reference import relative_error
from test_gpu import UNDER_SANITIZER, _views, needs_gpu, torch

FAMILY_GAMMA, FAMILY_LAMBDA = 0.97, 0.9


def _family_calls(e):
    """name -> (function, positional arrays, keyword arrays, scalars, outputs asked for)."""
    r, term, trunc, dones = e["rewards"], e["terminated"], e["truncated"], e["terminated"] | e["truncated"]
    estimate = ("returns", "advantages", "abs_sums", "sums", "square_sums")
    acting = [r, e["q_values"], e["next_values"], term, trunc]
    g, lam = dict(gamma=FAMILY_GAMMA), dict(gamma=FAMILY_GAMMA, lambda_=FAMILY_LAMBDA)
    return {
        "discounted/bootstrap_values": (puffadv.discounted_returns, [r, term, trunc],
                                        dict(bootstrap_values=e["bootstrap_values"]), g, estimate[:1] + estimate[2:]),
        "discounted/last_value": (puffadv.discounted_returns, [r, dones], dict(last_value=e["last_value"]), g,
                                  estimate[:1] + estimate[2:]),
        "discounted/no-bootstrap": (puffadv.discounted_returns, [r, dones], {}, g, estimate[:1] + estimate[2:]),
        "n_step/3": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=3, **lam), estimate),
        "n_step/1": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=1, **lam), estimate),
        "n_step/2": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=2, **lam), estimate),
        "n_step/4": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=4, **lam), estimate),
        "n_step/5": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=5, **lam), estimate),
        "n_step/3/bootstrap_values-returns-only": (puffadv.n_step_returns, [r, e["values"], dones],
                                                   dict(bootstrap_values=e["bootstrap_values"]), dict(n=3, **lam),
                                                   ("returns",)),
        "n_step/6/advantages-only": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                                     dict(bootstrap_values=e["bootstrap_values"]),
                                     dict(n=6, returns=False, **lam), ("advantages",)),
        "n_step/7/last_value": (puffadv.n_step_returns, [r, e["values"], dones], dict(last_value=e["last_value"]),
                                dict(n=7, gamma=FAMILY_GAMMA, lambda_=1.0), estimate),
        "n_step/8": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=8, **lam), estimate),
        "n_step/9": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                     dict(bootstrap_values=e["bootstrap_values"]), dict(n=9, **lam), estimate),
        "n_step/T+5": (puffadv.n_step_returns, [r, e["values"], term, trunc],
                       dict(bootstrap_values=e["bootstrap_values"]), dict(n=r.shape[1] + 5, **lam), estimate),
        "retrace/probs": (puffadv.retrace, acting, dict(target_probs=e["target_probs"],
                                                        behaviour_probs=e["behaviour_probs"]),
                          dict(c_clip=1.3, **lam), estimate),
        "retrace/log_probs": (puffadv.retrace, acting, dict(target_log_probs=e["target_log_probs"],
                                                            behaviour_log_probs=e["behaviour_log_probs"]),
                              dict(c_clip=0.8, **lam), estimate),
        "q_lambda/peng": (puffadv.q_lambda, acting, {}, lam, estimate),
        "q_lambda/watkins": (puffadv.q_lambda, acting, dict(greedy=e["greedy"]), lam, estimate),
        "q_lambda/returns-only": (puffadv.q_lambda, acting, dict(greedy=e["greedy"]), dict(advantages=False, **lam),
                                  ("returns",)),
        "episodic_cumsum/ends_at": (puffadv.episodic_cumsum, [r, dones], {}, {}, ("out",)),
        "episodic_cumsum/starts_at+seed": (puffadv.episodic_cumsum, [r, dones], dict(seed=e["last_value"]),
                                           dict(boundary="starts_at"), ("out",)),
        "eligibility_traces+seed": (puffadv.eligibility_traces, [r, dones], dict(seed=e["last_value"]), lam,
                                    ("out",)),
    }


FAMILY_KINDS = list(_family_calls(reference.random_off_policy(np.random.default_rng(0), 1, 2)))


def _family_run(name, e, move, time_axis, out_like):
    """Runs `name` on `e` moved by `move`, into NaN-poisoned outputs (out_like(rows, horizon)
    makes one in the caller's layout); returns {output: [B, T] or [B] NumPy float64}."""
    fn, args, kw, scalars, wanted = _family_calls(e)[name]
    rows = e["rewards"].shape[0]
    given = {}
    for out in wanted:
        if out in ("returns", "advantages", "out"):
            given[out] = out_like()
    asked = {out: given.get(out, True) for out in wanted}
    result = fn(*map(move, args), **{k: move(v) for k, v in kw.items()}, **scalars, **asked, time_axis=time_axis)
    got = {}
    for out in wanted:
        x = result if out == "out" else getattr(result, out)
        if out in given:
            assert x is given[out]
        x = np.asarray(x.double().cpu().numpy() if torch is not None and torch.is_tensor(x) else x, np.float64)
        got[out] = x.T if x.ndim == 2 and time_axis == 0 else x
        assert got[out].shape[0] == rows
    return got


def _family_compare(name, e, dtype, layout, flag_dtype=None):
    """The CUDA result of `name` against the CPU backend's on the same arrays."""
    time_axis = 0 if layout == "time-major" else -1
    rows, horizon = e["rewards"].shape
    tdtype = getattr(torch, np.dtype(dtype).name) if not isinstance(dtype, str) else getattr(torch, dtype)

    def arrange(x, device):
        t = torch.from_numpy(np.ascontiguousarray(x))
        if t.dtype == torch.bool:
            t = t.to(flag_dtype or torch.bool)
        elif t.is_floating_point():
            t = t.to(tdtype)
        t = t.to(device)
        if t.ndim != 2:
            return t
        if layout == "time-major":
            return t.T.contiguous()
        if layout == "every-other-step":
            return torch.repeat_interleave(t, 2, dim=1)[:, ::2]
        if layout == "offset-base":
            flat = torch.empty(rows * horizon + 1, dtype=t.dtype, device=device)[1:].view(rows, horizon)
            return flat.copy_(t)
        return t

    def out_like(device):
        out_dtype = torch.float32 if tdtype in (torch.bfloat16, torch.float16) else tdtype
        shape = (horizon, rows) if layout == "time-major" else (rows, horizon)
        return lambda: torch.full(shape, float("nan"), dtype=out_dtype, device=device)

    cpu = _family_run(name, e, lambda x: arrange(x, "cpu"), time_axis, out_like("cpu"))
    gpu = _family_run(name, e, lambda x: arrange(x, "cuda"), time_axis, out_like("cuda"))
    torch.cuda.synchronize()
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for out in cpu:
        assert not np.isnan(gpu[out]).any(), f"{name} {out}: unwritten or NaN on the GPU"
        err = relative_error(gpu[out], cpu[out])
        assert err <= tol * (10 if "sums" in out else 1), f"{name} {out}: GPU vs CPU rel err {err:.2e}"


def _family_episodes(rng, rows, horizon, dtype=np.float32, end_rate=0.05):
    return reference.random_off_policy(rng, rows, horizon, dtype, end_rate)


@needs_gpu
@pytest.mark.parametrize("name", FAMILY_KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(7, 37), (33, 36), (64, 1024), (50, 1000), (3000, 64), (2, 40000), (3, 50001)])
def test_family_every_layout_matches_the_cpu(rng, name, dtype, shape):
    if UNDER_SANITIZER and shape[0] * shape[1] > 100_000:
        pytest.skip("long under the sanitizer")
    if name == "n_step/T+5" and shape[1] > 5000:
        pytest.skip("the CPU backend's window is O(T n): minutes here (the GPU runs the TD(lambda) scan)")
    _family_compare(name, _family_episodes(rng, *shape, dtype), dtype, "batch-major")


@needs_gpu
@pytest.mark.parametrize("name", FAMILY_KINDS)
@pytest.mark.parametrize("layout", ["time-major", "every-other-step", "offset-base"])
@pytest.mark.parametrize("flag_dtype", ["bool", "uint8", "float"])
def test_family_strided_views_and_flag_types(rng, name, layout, flag_dtype):
    flags = {"bool": torch.bool, "uint8": torch.uint8, "float": torch.float32}[flag_dtype] if torch else None
    _family_compare(name, _family_episodes(rng, 33, 2500), np.float32, layout, flags)


@needs_gpu
@pytest.mark.parametrize("name", FAMILY_KINDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_family_reduced_precision(rng, name, dtype):
    e = _family_episodes(rng, 20, 3000)
    rounded = {k: (torch.from_numpy(v).to(getattr(torch, dtype)).float().numpy() if v.dtype == np.float32 else v)
               for k, v in e.items()} if torch else e
    _family_compare(name, rounded, dtype, "batch-major", torch.uint8 if torch else None)


@needs_gpu
@pytest.mark.parametrize("name", FAMILY_KINDS)
@pytest.mark.parametrize("shape", [(40, 128), (3, 20000)])  # whole rows; split rows
def test_family_nan_stays_in_its_row(rng, name, shape):
    """A NaN reward poisons only its own row: the other rows are bitwise those of a clean run."""
    e = _family_episodes(rng, *shape, np.float32)
    move = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to("cuda")  # noqa: E731
    out_like = lambda: torch.full(shape, float("nan"), device="cuda")  # noqa: E731
    clean = _family_run(name, e, move, -1, out_like)
    e["rewards"][1, shape[1] // 2] = np.nan
    dirty = _family_run(name, e, move, -1, out_like)
    torch.cuda.synchronize()
    for out in clean:
        others = np.delete(np.arange(shape[0]), 1)
        assert np.array_equal(dirty[out][others], clean[out][others]), out
        assert np.isnan(dirty[out][1]).any(), out


# ---- the n-step vector kernel (src/gpu/n_step_window.cuh) ----
# It takes contiguous rows whose horizon is a multiple of N = 4 (n <= 4) or 8
# (n <= 8): each thread N outputs, a warp of 32 lanes 31 chunks (its top lane's
# chunk only feeds the lane below), one shuffle of W per round of the window.
# These shapes put row ends at every lane and warp position: rows of one or two
# chunks, rows of exactly one warp (31 chunks of 4), rows that end mid-warp, a
# horizon that is a multiple of 4 but not 8 (n > 4 takes the generic kernel).
N_STEP_SHAPES = [(1000, 8), (37, 12), (31, 124), (33, 248), (70001, 8), (3, 4096)]


def _n_step_run(e, n, flags, bootstrap, device, dtype):
    """returns and advantages of n_step_returns on `device` (NaN-poisoned outputs), as float64 NumPy."""
    tdtype = getattr(torch, np.dtype(dtype).name)
    move = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(device)  # noqa: E731
    shape = e["rewards"].shape
    out = lambda: torch.full(shape, float("nan"), dtype=tdtype, device=device)  # noqa: E731
    result = puffadv.n_step_returns(move(e["rewards"]), move(e["values"]), *map(move, flags), n=n,
                                    **{"time_axis": -1, **{k: move(e[k]) for k in bootstrap}}, gamma=FAMILY_GAMMA, lambda_=FAMILY_LAMBDA,
                                    returns=out(), advantages=out())
    if device != "cpu":
        torch.cuda.synchronize()
    return {k: getattr(result, k).double().cpu().numpy() for k in ("returns", "advantages")}


def _n_step_flags(e, case):
    """Positional flags and bootstrap keywords: truncations with bootstrap_values, or
    done flags with bootstrap_values (read at the row's last step only) or last_value."""
    if case == "truncations":
        return [e["terminated"], e["truncated"]], ["bootstrap_values"]
    dones = e["terminated"] | e["truncated"]
    return [dones], ["bootstrap_values" if case == "bootstrap_values" else "last_value"]


@needs_gpu
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8])
@pytest.mark.parametrize("shape", N_STEP_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ["truncations", "bootstrap_values", "last_value"])
def test_family_n_step_vector_kernel_matches_the_cpu(rng, n, shape, dtype, case):
    if UNDER_SANITIZER and shape[0] * shape[1] > 100_000:
        pytest.skip("long under the sanitizer")
    e = _family_episodes(rng, *shape, dtype)
    flags, bootstrap = _n_step_flags(e, case)
    cpu = _n_step_run(e, n, flags, bootstrap, "cpu", dtype)
    gpu = _n_step_run(e, n, flags, bootstrap, "cuda", dtype)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for out in cpu:
        assert not np.isnan(gpu[out]).any(), f"{out}: unwritten or NaN on the GPU"
        err = relative_error(gpu[out], cpu[out])
        assert err <= tol, f"{out}: GPU vs CPU rel err {err:.2e}"


@needs_gpu
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("shape", [(40, 128), (40, 124)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_family_n_step_nan_stays_in_its_episode(rng, n, shape, dtype):
    """A window cut by an episode's end takes W1 by a select: a NaN reward or value
    just after the end (which the step before computes with, then drops) reaches
    no output of the ended episode, and a step both terminated and truncated is
    terminated (issue 33) on the GPU as on the CPU. Every row has its end at
    another lane/chunk position."""
    rows, horizon = shape
    e = _family_episodes(rng, rows, horizon, dtype)
    term, trunc = e["terminated"], e["truncated"]
    both = np.zeros_like(term)
    for i in range(rows):
        cut = (13 * i + 1) % (horizon - 1)
        term[i, cut], trunc[i, cut] = True, False
        e["rewards"][i, cut + 1] = np.nan
        if i % 2:
            e["values"][i, cut + 1] = np.nan
        if i % 3 == 0:
            both[i, (cut + 50) % horizon] = True
    gpu_flags = [term | both, trunc | both]
    cpu_flags = [term | both, trunc & ~both]  # flagged both is terminated alone
    gpu = _n_step_run(e, n, gpu_flags, ["bootstrap_values"], "cuda", dtype)
    cpu = _n_step_run(e, n, cpu_flags, ["bootstrap_values"], "cpu", dtype)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for out in cpu:
        expected_nan = np.isnan(cpu[out])
        assert np.array_equal(np.isnan(gpu[out]), expected_nan), out
        keep = ~expected_nan
        assert relative_error(gpu[out][keep], cpu[out][keep]) <= tol, out
