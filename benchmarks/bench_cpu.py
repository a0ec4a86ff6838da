"""CPU benchmark (not a test), float32, best of repeats after a warm-up, one thread
and all threads, every kernel beside a multi-threaded memcpy measured in the same
run (read + write bytes) and checked equal to its baseline before timing:

1. the puff advantage against PufferLib 3's naive row loop (cpu_baselines.c, -O3);
2. GAE, TD(lambda) and V-trace at --rows x --horizon in both layouts ([B, T], and
   [T, B] via time_axis=0), beside a NumPy loop over time on [T, B] arrays (the
   natural layout for such a loop; NumPy runs it on one thread);
3. the same estimators at --peer-rows x --horizon beside TorchRL (its loop and its
   vectorised form) and rlax under jit(vmap) (XLA's own threads), when installed.

GB/s counts the bytes each call really reads and writes, float32 flags included:
GAE 20 bytes per element (rewards, values, terminated; advantages, returns),
TD(lambda) 16 (returns only), V-trace 24 (+ importance; vs, pg advantages).

    python benchmarks/bench_cpu.py [--rows 65536] [--horizon 128] [--peer-rows 16384]
                                   [--repeats 10] [--no-peers]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

import puffadv

HERE = Path(__file__).resolve().parent
GAMMA, LAM, RHO, C_CLIP, RHO_PG = 0.99, 0.95, 1.0, 1.0, 1.0
ESTIMATORS = ("GAE", "TD(lambda)", "V-trace")


def build_baselines():
    """Compiles cpu_baselines.c with the same optimisation a release build gets."""
    lib = Path(tempfile.mkdtemp()) / "libpuff_cpu_baselines.so"
    subprocess.run([os.environ.get("CC", "cc"), "-O3", "-fopenmp", "-shared", "-fPIC",
                    str(HERE / "cpu_baselines.c"), "-o", str(lib), "-lm"], check=True)
    so = ctypes.CDLL(str(lib))
    ptr, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    so.naive_puff_advantage.argtypes = [ptr] * 5 + [i64, i64] + [f32] * 4
    so.parallel_memcpy.argtypes = [ptr, ptr, i64, ctypes.c_int]
    return so


def best_seconds(fn, repeats, budget=3.0):
    """Min and median of up to `repeats` timed calls (at least 3, else until `budget` s)."""
    fn()  # warm-up: page faults, thread pool start, jit
    times, spent = [], 0.0
    while len(times) < repeats and (len(times) < 3 or spent < budget):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
        spent += times[-1]
    return min(times), float(np.median(times))


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def relative_error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def check_equal(label, pairs, tol=1e-4):
    worst = max(relative_error(g, w) for g, w in pairs)
    if not worst <= tol:
        sys.exit(f"{label}: results differ (relative error {worst:.1e} > {tol:.0e}); not timed")
    return worst


# ---- inputs and the NumPy loops over time ([T, B] arrays) ----

def make_inputs(rng, rows, horizon):
    """[B, T] float32 episodes (2 % terminations), their [T, B] copies, last_value [B]."""
    bt = dict(rewards=rng.standard_normal((rows, horizon), np.float32),
              values=rng.standard_normal((rows, horizon), np.float32),
              terminated=(rng.random((rows, horizon)) < 0.02).astype(np.float32),
              importance=rng.uniform(0.5, 1.5, (rows, horizon)).astype(np.float32))
    tb = {k: np.ascontiguousarray(v.T) for k, v in bt.items()}
    return bt, tb, rng.standard_normal(rows).astype(np.float32)


def numpy_gae(r, v, term, last_value, adv, ret):
    """CleanRL's loop, with the buffer's own terminated[t] (puffadv's convention)."""
    last = np.zeros_like(last_value)
    for t in range(r.shape[0] - 1, -1, -1):
        next_values = last_value if t == r.shape[0] - 1 else v[t + 1]
        nonterminal = 1.0 - term[t]
        delta = r[t] + GAMMA * next_values * nonterminal - v[t]
        adv[t] = last = delta + GAMMA * LAM * nonterminal * last
    np.add(adv, v, out=ret)


def numpy_td_lambda(r, v, term, last_value, ret):
    """G_t = r_t + gamma (1 - term_t) [(1 - lambda) V_{t+1} + lambda G_{t+1}], G_T = last_value."""
    g = last_value
    for t in range(r.shape[0] - 1, -1, -1):
        next_values = last_value if t == r.shape[0] - 1 else v[t + 1]
        ret[t] = g = r[t] + GAMMA * (1.0 - term[t]) * ((1.0 - LAM) * next_values + LAM * g)


def numpy_vtrace(r, v, term, imp, last_value, vs, pg):
    """IMPALA's V-trace (lambda = 1), as rlax writes it, one step at a time."""
    acc = np.zeros_like(last_value)
    for t in range(r.shape[0] - 1, -1, -1):
        last = t == r.shape[0] - 1
        discount = GAMMA * (1.0 - term[t])
        td = r[t] + discount * (last_value if last else v[t + 1]) - v[t]
        acc = np.minimum(imp[t], RHO) * td + discount * np.minimum(imp[t], C_CLIP) * acc
        vs[t] = v[t] + acc
        pg[t] = np.minimum(imp[t], RHO_PG) * (r[t] + discount * (last_value if last else vs[t + 1]) - v[t])


def puffadv_call(kind, x, last_value, out, time_axis):
    """The estimator on arrays x ([B, T] or [T, B]) into preallocated outputs."""
    common = dict(last_value=last_value, gamma=GAMMA, time_axis=time_axis)
    if kind == "GAE":
        return lambda: puffadv.gae(x["rewards"], x["values"], x["terminated"], gae_lambda=LAM,
                                   advantages=out[0], returns=out[1], **{"time_axis": -1, **common})
    if kind == "TD(lambda)":
        return lambda: puffadv.td_lambda_returns(x["rewards"], x["values"], x["terminated"], lambda_=LAM,
                                                 returns=out[0], **{"time_axis": -1, **common})
    return lambda: puffadv.vtrace(x["rewards"], x["values"], x["terminated"], importance=x["importance"],
                                  lambda_=1.0, rho_clip=RHO, c_clip=C_CLIP, rho_pg_clip=RHO_PG,
                                  vs=out[0], pg_advantages=out[1], **{"time_axis": -1, **common})


def numpy_call(kind, tb, last_value, out):
    if kind == "GAE":
        return lambda: numpy_gae(tb["rewards"], tb["values"], tb["terminated"], last_value, *out)
    if kind == "TD(lambda)":
        return lambda: numpy_td_lambda(tb["rewards"], tb["values"], tb["terminated"], last_value, out[0])
    return lambda: numpy_vtrace(tb["rewards"], tb["values"], tb["terminated"], tb["importance"], last_value,
                                *out)


def bytes_moved(kind, rows, horizon):
    per_element = {"GAE": 20, "TD(lambda)": 16, "V-trace": 24}[kind]
    return per_element * rows * horizon + 4 * rows  # + last_value


def outputs_for(kind, shape):
    return [np.empty(shape, np.float32) for _ in range(1 if kind == "TD(lambda)" else 2)]


def with_threads(n, fn):
    def run():
        os.environ["PUFFADV_NUM_THREADS"] = str(n)
        return fn()
    return run


# ---- peers: TorchRL and rlax on the CPU, the conventions mapped as tests/python/test_peers.py does ----

def torchrl_calls(kind, bt, last_value):
    """name -> call returning puffadv's outputs in its order (GAE: A, returns; TD: returns; V-trace: vs, pg)."""
    import torch
    from torchrl.objectives.value import functional as F
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))[..., None]  # [B, T, 1], time_dim=-2
    next_values = np.concatenate([bt["values"][:, 1:], last_value[:, None]], axis=1)
    value, next_value, reward, done = t(bt["values"]), t(next_values), t(bt["rewards"]), t(bt["terminated"] != 0)
    if kind == "GAE":
        args = (GAMMA, LAM, value, next_value, reward, done, done)
        return {"TorchRL loop": lambda: F.generalized_advantage_estimate(*args),
                "TorchRL vectorised": lambda: F.vec_generalized_advantage_estimate(*args)}
    if kind == "TD(lambda)":
        args = (GAMMA, LAM, next_value, reward, done, done)
        return {"TorchRL loop": lambda: (F.td_lambda_return_estimate(*args),),
                "TorchRL vectorised": lambda: (F.vec_td_lambda_return_estimate(*args),)}
    log_pi, log_mu = t(np.log(bt["importance"])), t(np.zeros_like(bt["importance"]))  # ratio = exp(log_pi - log_mu)
    args = (GAMMA, log_pi, log_mu, value, next_value, reward, done, done, RHO, C_CLIP)
    return {"TorchRL loop": lambda: F.vtrace_advantage_estimate(*args)[::-1]}  # (adv, vs) -> (vs, pg)


def rlax_call(kind, bt, last_value):
    """rlax per [T] trajectory, vmapped over B and jitted; returns puffadv's outputs in its order."""
    import jax
    import jax.numpy as jnp
    import rlax
    r, v = jnp.asarray(bt["rewards"]), jnp.asarray(bt["values"])
    discount = jnp.asarray(GAMMA * (1.0 - bt["terminated"]))
    next_values = jnp.concatenate([v[:, 1:], jnp.asarray(last_value)[:, None]], axis=1)
    if kind == "GAE":
        def one(r, d, v, nv):
            adv = rlax.truncated_generalized_advantage_estimation(r, d, LAM, jnp.append(v, nv[-1]))
            return adv, adv + v
        args = (r, discount, v, next_values)
    elif kind == "TD(lambda)":
        def one(r, d, nv):
            return (rlax.lambda_returns(r, d, nv, LAM),)
        args = (r, discount, next_values)
    else:
        def one(r, d, v, nv, rho):
            out = rlax.vtrace_td_error_and_advantage(v, nv, r, d, rho, 1.0, RHO, RHO_PG)
            return out.errors + v, out.pg_advantage
        args = (r, discount, v, next_values, jnp.asarray(bt["importance"]))
    fn = jax.jit(jax.vmap(one))
    return lambda: jax.block_until_ready(fn(*args))


def peer_table(rows, horizon, threads, reps, copy_gbps):
    """Every estimator at rows x horizon: puffadv, the NumPy loop, TorchRL, rlax. Returns (table, note)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    missing = []
    try:
        import torch
        import torchrl.objectives.value.functional  # noqa: F401
    except ImportError as error:
        torch = None
        missing.append(f"TorchRL ({error})")
    try:
        import rlax  # noqa: F401
    except ImportError as error:
        rlax = None
        missing.append(f"rlax ({error})")
    bt, tb, last_value = make_inputs(np.random.default_rng(1), rows, horizon)
    table = Table(copy_gbps)
    for kind in ESTIMATORS:
        nbytes = bytes_moved(kind, rows, horizon)
        ours = outputs_for(kind, (rows, horizon))
        fn = puffadv_call(kind, bt, last_value, ours, -1)
        with_threads(threads, fn)()
        numpy_out = outputs_for(kind, (horizon, rows))
        numpy_fn = numpy_call(kind, tb, last_value, numpy_out)
        numpy_fn()
        check_equal(f"{kind} NumPy loop", [(o, w.T) for o, w in zip(ours, numpy_out)])
        numpy_s = table.add(kind, "[T, B]", "NumPy loop over time", 1, best_seconds(numpy_fn, reps), nbytes)
        for n in sorted({1, threads}):
            table.add(kind, "[B, T]", "puffadv", n, best_seconds(with_threads(n, fn), reps), nbytes, numpy_s)
        if torch is not None:
            for name, call in torchrl_calls(kind, bt, last_value).items():
                check_equal(f"{kind} {name}", [(o, g[..., 0]) for o, g in zip(ours, call())], 2e-4)
                for n in sorted({1, threads}):
                    torch.set_num_threads(n)
                    table.add(kind, "[B, T, 1]", name, n, best_seconds(call, reps), nbytes, numpy_s)
        if rlax is not None:
            call = rlax_call(kind, bt, last_value)
            check_equal(f"{kind} rlax", [(o, np.asarray(g)) for o, g in zip(ours, call())], 2e-4)
            table.add(kind, "[B, T]", "rlax, jit(vmap)", "XLA", best_seconds(call, reps), nbytes, numpy_s)
    return table, "not run: " + ", ".join(missing) if missing else "all checked equal to puffadv first"


# ---- the report ----

class Table:
    def __init__(self, copy_gbps):
        self.copy_gbps, self.rows = copy_gbps, []

    def add(self, estimator, layout, impl, threads, seconds, nbytes, baseline=None):
        gbps = nbytes / seconds[0] / 1e9
        self.rows.append((estimator, layout, impl, threads, seconds, gbps,
                          "" if baseline is None else f"{baseline / seconds[0]:.2f}x"))
        return seconds[0]

    def print(self, baseline_name):
        print(f"| estimator | layout | implementation | threads | best ms | median ms | GB/s | "
              f"vs {baseline_name} | vs memcpy |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|")
        for est, layout, impl, threads, (best, median), gbps, ratio in self.rows:
            print(f"| {est} | {layout} | {impl} | {threads} | {best * 1e3:.2f} | {median * 1e3:.2f} | "
                  f"{gbps:.1f} | {ratio} | {gbps / self.copy_gbps:.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=65536)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--peer-rows", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--no-peers", action="store_true", help="skip TorchRL and rlax")
    args = parser.parse_args()
    rows, horizon, reps = args.rows, args.horizon, args.repeats
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load_before = os.getloadavg()
    started = time.perf_counter()
    so = build_baselines()

    # memcpy: the bandwidth reference (bytes read + written), as large as the biggest call.
    copy_bytes = 24 * rows * horizon
    src = np.ones(copy_bytes // 2, np.uint8)
    dst = np.empty_like(src)
    copy = {n: copy_bytes / best_seconds(lambda n=n: so.parallel_memcpy(dst.ctypes.data, src.ctypes.data,
                                                                         src.nbytes, n), reps)[0] / 1e9
            for n in sorted({1, threads})}
    del src, dst

    rng = np.random.default_rng(0)
    bt, tb, last_value = make_inputs(rng, rows, horizon)

    # 1. The puff advantage (SPEC section 1) against the naive loop.
    puff_out, naive_out = np.empty_like(bt["values"]), np.empty_like(bt["values"])
    puff = lambda: puffadv.compute_puff_advantage(bt["values"], bt["rewards"], bt["terminated"],
                                                  bt["importance"], puff_out, GAMMA, LAM, 5.0, 1.0)
    naive = lambda: so.naive_puff_advantage(*(bt[k].ctypes.data for k in ("values", "rewards", "terminated",
                                                                          "importance")),
                                            naive_out.ctypes.data, rows, horizon, GAMMA, LAM, 5.0, 1.0)
    naive(), puff()
    puff_error = check_equal("puff advantage", [(puff_out, naive_out)])
    puff_table = Table(copy[threads])
    naive_s = puff_table.add("puff advantage", "[B, T]", "naive row loop (PufferLib 3)", 1,
                             best_seconds(naive, reps), 20 * rows * horizon)
    for n in sorted({1, threads}):
        puff_table.add("puff advantage", "[B, T]", "puffadv", n, best_seconds(with_threads(n, puff), reps),
                       20 * rows * horizon, naive_s)

    # 2. GAE, TD(lambda), V-trace in both layouts against the NumPy loop.
    table, errors, bars = Table(copy[threads]), [], []
    for kind in ESTIMATORS:
        nbytes = bytes_moved(kind, rows, horizon)
        ref_out = outputs_for(kind, (horizon, rows))
        numpy_fn = numpy_call(kind, tb, last_value, ref_out)
        numpy_fn()
        numpy_s = None
        for layout, x, time_axis in (("[B, T]", bt, -1), ("[T, B]", tb, 0)):
            out = outputs_for(kind, x["rewards"].shape)
            fn = puffadv_call(kind, x, last_value, out, time_axis)
            with_threads(threads, fn)()
            errors.append(check_equal(f"{kind} {layout}", [(o.T if time_axis == -1 else o, w)
                                                           for o, w in zip(out, ref_out)]))
            if numpy_s is None:
                numpy_s = table.add(kind, "[T, B]", "NumPy loop over time", 1, best_seconds(numpy_fn, reps),
                                    nbytes)
            one = table.add(kind, layout, "puffadv", 1, best_seconds(with_threads(1, fn), reps), nbytes, numpy_s)
            every = table.add(kind, layout, "puffadv", threads, best_seconds(with_threads(threads, fn), reps),
                              nbytes, numpy_s)
            bars.append((kind, layout, numpy_s / one, nbytes / every / 1e9 / copy[threads]))
        del ref_out
    os.environ.pop("PUFFADV_NUM_THREADS", None)

    # 3. Peers, at their own (smaller) shape: TorchRL's vectorised GAE is slow.
    peers = None if args.no_peers else peer_table(args.peer_rows, horizon, threads, reps, copy[threads])

    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# CPU benchmark, float32, {rows}x{horizon} (peers {args.peer_rows}x{horizon})")
    print(f"Machine: {cpu_name()}, {threads} cores; {platform.system()} {platform.release()}; "
          f"puffadv {puffadv.__version__}; {stamp}; load average {load_before[0]:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; {time.perf_counter() - started:.0f} s")
    print(f"memcpy (read + write): {copy[1]:.1f} GB/s on 1 thread, {copy[threads]:.1f} GB/s on {threads}. "
          f"Results checked before timing: puff vs naive {puff_error:.1e}, estimators vs NumPy "
          f"<= {max(errors):.1e} (relative error)\n")
    puff_table.print("naive")
    print()
    table.print("NumPy loop")
    if peers is not None:
        print(f"\nPeers at {args.peer_rows}x{horizon} ([B, T] for puffadv, TorchRL [B, T, 1], rlax vmapped "
              f"over B; the NumPy loop on [T, B]); {peers[1]}\n")
        peers[0].print("NumPy loop")
    print(f"\nBars ({rows}x{horizon}): one thread >= 2.5x the NumPy loop; {threads} threads >= 0.6x memcpy")
    for kind, layout, speedup, fraction in bars:
        print(f"- {kind} {layout}: {speedup:.2f}x ({'met' if speedup >= 2.5 else 'MISSED'}), "
              f"{fraction:.2f}x memcpy ({'met' if fraction >= 0.6 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
