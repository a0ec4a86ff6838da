"""CPU benchmark of the estimator family (issue 20), not a test: discounted returns,
Retrace, Q(lambda) (Watkins), episodic sums and n-step returns at --rows x --horizon
float32 in both layouts ([B, T], and [T, B] via time_axis=0), one thread by default,
beside a NumPy loop over time on [T, B] arrays (as benchmarks/bench_cpu.py compares
GAE). Every result is checked against its NumPy loop before timing. Times are the
best of --repeats calls after a warm-up, in process CPU time by default (steadier
than wall time on a shared machine; --wall for wall time).

Calls the core's generic entry (_core.standard_estimate) with preallocated outputs,
so it measures the kernels, not the Python layer.

    PUFFADV_NUM_THREADS=1 python benchmarks/bench_cpu_family.py [--rows 65536] [--horizon 128]
        [--n 5] [--repeats 9] [--wall] [kind ...]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

os.environ.setdefault("PUFFADV_NUM_THREADS", "1")
import puffadv._core as core  # noqa: E402  (after the thread count is set)

GAMMA, LAM = 0.99, 0.95


def episodes(rows, horizon, seed=0):
    """[B, T] float32 inputs (2 % terminations, float32 flags) and their [T, B] copies."""
    rng = np.random.default_rng(seed)
    bt = dict(r=rng.standard_normal((rows, horizon), np.float32),
              v=rng.standard_normal((rows, horizon), np.float32),
              term=(rng.random((rows, horizon)) < 0.02).astype(np.float32),
              nv=rng.standard_normal((rows, horizon), np.float32),
              tp=rng.uniform(0.1, 1, (rows, horizon)).astype(np.float32),
              bp=rng.uniform(0.1, 1, (rows, horizon)).astype(np.float32),
              greedy=(rng.random((rows, horizon)) < 0.7).astype(np.float32))
    tb = {k: np.ascontiguousarray(x.T) for k, x in bt.items()}
    return bt, tb, rng.standard_normal(rows).astype(np.float32)


# ---- NumPy loops over time on [T, B] (one step of all rows per iteration)

def np_discounted(x, last_value, out):
    T = x["r"].shape[0]
    for t in range(T - 1, -1, -1):
        nt = 1.0 - x["term"][t]
        out[t] = x["r"][t] + GAMMA * nt * (last_value if t == T - 1 else out[t + 1])


def np_retrace(x, out):
    T = x["r"].shape[0]
    for t in range(T - 1, -1, -1):
        nt = 1.0 - x["term"][t]
        delta = x["r"][t] + GAMMA * nt * x["nv"][t] - x["v"][t]
        if t < T - 1:
            c = LAM * np.minimum(1.0, x["tp"][t + 1] / x["bp"][t + 1])
            delta += GAMMA * nt * c * out[t + 1]
        out[t] = delta


def np_q_lambda(x, out):
    T = x["r"].shape[0]
    g = None
    for t in range(T - 1, -1, -1):
        nt = 1.0 - x["term"][t]
        if g is None:
            g = x["r"][t] + GAMMA * nt * x["nv"][t]
        else:
            lt = LAM * x["greedy"][t + 1]
            g = x["r"][t] + GAMMA * nt * ((1 - lt) * x["nv"][t] + lt * g)
        out[t] = g - x["v"][t]


def np_episodic(x, out):
    c = np.zeros(x["r"].shape[1], np.float32)
    for t in range(x["r"].shape[0]):
        reset = x["term"][t - 1] if t > 0 else 0.0
        out[t] = c = x["r"][t] + GAMMA * LAM * (1.0 - reset) * c


def np_n_step(x, last_value, out, n):
    T = x["r"].shape[0]
    for t in range(T):
        end = min(t + n, T)
        s = end - 1
        w = x["r"][s] + GAMMA * (1 - x["term"][s]) * (last_value if s == T - 1 else x["v"][s + 1])
        for s in range(end - 2, t - 1, -1):
            w = x["r"][s] + GAMMA * (1 - x["term"][s]) * ((1 - LAM) * x["v"][s + 1] + LAM * w)
        out[t] = w - x["v"][t]


def puffadv_call(kind, x, last_value, time_axis, n, out):
    """The kind on x ([B, T] or [T, B]) into `out` (advantages; discounted returns: returns)."""
    v, lv, nv, tp, bp, greedy = x["v"], last_value, None, None, None, None
    adv, ret = out, None
    if kind == "discounted_returns":
        v, adv, ret = None, None, out
    elif kind == "episodic_sum":
        v, lv = None, None
    elif kind in ("retrace", "q_lambda"):
        nv, lv = x["nv"], None
        if kind == "retrace":
            tp, bp = x["tp"], x["bp"]
        else:
            greedy = x["greedy"]
    return lambda: core.standard_estimate(
        x["r"], v, x["term"], None, lv, None, None, adv, ret, None, None, None, kind, GAMMA, LAM, 1.0, 1.0,
        1.0, time_axis, "lambda_", next_values=nv, target_probs=tp, behaviour_probs=bp, greedy=greedy, n=n)


def best(fn, repeats, clock):
    fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=65536)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--n", type=int, default=5, help="n_step_returns' window")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--wall", action="store_true", help="wall time instead of process CPU time")
    parser.add_argument("kinds", nargs="*")
    args = parser.parse_args()
    clock = time.perf_counter if args.wall else time.process_time
    bt, tb, lv = episodes(args.rows, args.horizon)
    shape_tb = (args.horizon, args.rows)
    loops = {
        "discounted_returns": lambda o: np_discounted(tb, lv, o),
        "retrace": lambda o: np_retrace(tb, o),
        "q_lambda": lambda o: np_q_lambda(tb, o),
        "episodic_sum": lambda o: np_episodic(tb, o),
        "n_step_returns": lambda o: np_n_step(tb, lv, o, args.n),
    }
    print(f"{args.rows}x{args.horizon} float32, PUFFADV_NUM_THREADS={os.environ['PUFFADV_NUM_THREADS']}, "
          f"{'wall' if args.wall else 'process CPU'} ms, best of {args.repeats}; n = {args.n}")
    print(f"| estimator | NumPy loop [T, B] | puffadv [B, T] | vs NumPy | puffadv [T, B] | vs NumPy |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, loop in loops.items():
        if args.kinds and kind not in args.kinds:
            continue
        want = np.empty(shape_tb, np.float32)
        loop(want)
        out_bt = np.full((args.rows, args.horizon), np.nan, np.float32)
        out_tb = np.full(shape_tb, np.nan, np.float32)
        call_bt = puffadv_call(kind, bt, lv, -1, args.n, out_bt)
        call_tb = puffadv_call(kind, tb, lv, 0, args.n, out_tb)
        call_bt(), call_tb()
        for got in (out_bt.T, out_tb):
            err = np.linalg.norm(got - want) / np.linalg.norm(want)
            assert err < 1e-5, f"{kind}: relative error {err} against the NumPy loop"
        t_np = best(lambda: loop(want), max(3, args.repeats // 3), clock)
        t_bt, t_tb = best(call_bt, args.repeats, clock), best(call_tb, args.repeats, clock)
        print(f"| {kind} | {t_np * 1e3:.2f} | {t_bt * 1e3:.2f} | {t_np / t_bt:.2f}x | {t_tb * 1e3:.2f} | "
              f"{t_np / t_tb:.2f}x |")


if __name__ == "__main__":
    main()
