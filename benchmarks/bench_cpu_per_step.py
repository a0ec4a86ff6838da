"""CPU benchmark (not a test) of issue 29's forms beside the scalar ones: every
estimator with scalar gamma/lambda, with per-step gamma and lambda arrays of the
rewards' shape, and (gae, td_lambda_returns, vtrace, n_step_returns) with
next_values, with scalar and with per-step gamma/lambda; float32, batch-major [B, T] and time-major [T, B] (time_axis=0),
one thread and all threads, beside a multi-threaded memcpy measured in the same
run. Outputs are preallocated (the kernels, not the allocator, are timed).

GB/s counts the bytes each call reads and writes: every array argument (bool
flags 1 byte an element, the per-step arrays included) and every output. The bar
of issue 29: the per-step forms at >= 0.6x memcpy with all threads at 65536x128.

Before timing, each per-step call is checked: with arrays holding the scalar
gamma and lambda everywhere it must equal the scalar call (relative error
<= 1e-6), with next_values too; next_values equal to values[t+1] (last_value at
the row's end, no truncations) must equal the last_value call.

    python benchmarks/bench_cpu_per_step.py [--rows 65536] [--horizon 128] [--repeats 10]
        [--markdown out.md]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_cpu  # noqa: E402  (build_baselines, best_seconds, cpu_name)

import puffadv  # noqa: E402

GAMMA, LAM = 0.99, 0.95
# name: (function, its lambda keyword, the outputs it writes)
ESTIMATORS = {
    "gae": (puffadv.gae, "gae_lambda", ("advantages", "returns")),
    "td_lambda_returns": (puffadv.td_lambda_returns, "lambda_", ("returns",)),
    "vtrace": (puffadv.vtrace, "lambda_", ("vs", "pg_advantages")),
    "discounted_returns": (puffadv.discounted_returns, None, ("returns",)),
    "n_step_returns(n=5)": (puffadv.n_step_returns, "lambda_", ("returns",)),
    "retrace": (puffadv.retrace, "lambda_", ("returns", "advantages")),
    "q_lambda": (puffadv.q_lambda, "lambda_", ("returns", "advantages")),
    "eligibility_traces": (puffadv.eligibility_traces, "lambda_", ("out",)),
}
NEXT_VALUES = ("gae", "td_lambda_returns", "vtrace", "n_step_returns(n=5)")


def inputs(rng, rows, horizon):
    """[B, T] float32 episodes; terminated bool (about one end in 50 steps)."""
    f = lambda lo=-1.0, hi=1.0: rng.uniform(lo, hi, (rows, horizon)).astype(np.float32)
    return {"rewards": f(), "values": f(), "q_values": f(), "next_values": f(), "importance": f(0.5, 1.5),
            "terminated": rng.random((rows, horizon)) < 0.02, "last_value": f()[:, 0].copy(),
            "gamma": f(0.9, 1.0), "lambda": f(0.8, 1.0)}


def call(name, x, form, time_axis, out):
    """(the call, bytes it moves: every array argument and output); x holds [B, T]
    arrays, or their [T, B] copies for time_axis=0 (last_value stays [B])."""
    fn, lam_kw, outputs = ESTIMATORS[name]
    kw = {"time_axis": time_axis, **{role: out[role] for role in outputs}}
    if name in ("eligibility_traces", "discounted_returns"):
        positional = (x["rewards"], x["terminated"])
    elif name in ("retrace", "q_lambda"):
        positional = (x["rewards"], x["q_values"], x["next_values"], x["terminated"])
        if name == "retrace":
            kw.update(target_probs=x["importance"], behaviour_probs=x["importance"])
    else:
        positional = (x["rewards"], x["values"], x["terminated"])
        if name == "vtrace":
            kw["importance"] = x["importance"]
        if form.startswith("next_values"):
            kw["next_values"] = x["next_values"]
        else:
            kw["last_value"] = x["last_value"]
    if name.startswith("n_step"):
        kw["n"] = 5
    per_step = form in ("per_step", "next_values+per_step")
    kw["gamma"] = x["gamma"] if per_step else GAMMA
    if lam_kw:
        kw[lam_kw] = x["lambda"] if per_step else LAM
    nbytes = sum(a.nbytes for a in (*positional, *kw.values()) if isinstance(a, np.ndarray))
    return (lambda: fn(*positional, **kw)), nbytes


def layout(x, time_axis):
    if time_axis == -1:
        return x
    return {k: (np.ascontiguousarray(v.T) if v.ndim == 2 else v) for k, v in x.items()}


def check(name, x, time_axis, out_shape):
    """Constant per-step arrays equal the scalars; next_values = values[t+1] equals last_value."""
    def run(form, x):
        out = {r: np.full(out_shape, np.nan, np.float32) for r in ESTIMATORS[name][2]}
        call(name, x, form, time_axis, out)[0]()
        return out
    constant = dict(x, gamma=np.full_like(x["gamma"], GAMMA), **{"lambda": np.full_like(x["lambda"], LAM)})
    scalar, per_step = run("scalar", x), run("per_step", constant)
    for role in scalar:
        error = np.abs(per_step[role] - scalar[role]).max() / max(1e-30, np.abs(scalar[role]).max())
        assert error <= 1e-6, f"{name} {role}: per-step arrays of the scalars differ by {error:.2e}"
    if name in NEXT_VALUES:
        axis = 1 if time_axis == -1 else 0
        v = x["values"]
        following = np.concatenate([v[:, 1:], x["last_value"][:, None]], 1) if axis == 1 else \
            np.concatenate([v[1:], x["last_value"][None]], 0)
        got = run("next_values", dict(x, next_values=following.astype(np.float32)))
        for role in scalar:
            error = np.abs(got[role] - scalar[role]).max() / max(1e-30, np.abs(scalar[role]).max())
            assert error <= 1e-5, f"{name} {role}: next_values = values[t+1] differs by {error:.2e}"
        plain, steps = run("next_values", x), run("next_values+per_step", constant)
        for role in plain:
            error = np.abs(steps[role] - plain[role]).max() / max(1e-30, np.abs(plain[role]).max())
            assert error <= 1e-6, f"{name} {role}: next_values with per-step arrays of the scalars differ by {error:.2e}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=65536)
    parser.add_argument("--horizon", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--markdown", help="also write the table here")
    args = parser.parse_args()
    rows, horizon = args.rows, args.horizon
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load_before, started = os.getloadavg(), time.perf_counter()
    so = bench_cpu.build_baselines()
    copy_bytes = 40 * rows * horizon
    src = np.ones(copy_bytes // 2, np.uint8)
    dst = np.empty_like(src)
    copy = {n: copy_bytes / bench_cpu.best_seconds(
        lambda n=n: so.parallel_memcpy(dst.ctypes.data, src.ctypes.data, src.nbytes, n), args.repeats)[0] / 1e9
        for n in sorted({1, threads})}
    del src, dst

    base = inputs(np.random.default_rng(0), rows, horizon)
    lines = [f"{rows}x{horizon} float32, {bench_cpu.cpu_name()}, {threads} threads; memcpy "
             + ", ".join(f"{n} thread{'s' * (n > 1)} {g:.1f} GB/s" for n, g in copy.items()), "",
             f"| estimator | layout | form | 1 thread ms | {threads} threads ms | {threads} threads GB/s "
             f"| vs memcpy | vs scalar form |", "|---|---|---|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for time_axis, layout_name in ((-1, "[B, T]"), (0, "[T, B]")):
        x = layout(base, time_axis)
        shape = x["rewards"].shape
        for name in ESTIMATORS:
            check(name, x, time_axis, shape)
            scalar_ms = None
            forms = ("scalar", "per_step") + (("next_values", "next_values+per_step") if name in NEXT_VALUES else ())
            for form in forms:
                out = {r: np.empty(shape, np.float32) for r in ESTIMATORS[name][2]}
                fn, nbytes = call(name, x, form, time_axis, out)
                ms = {}
                for n in sorted({1, threads}):
                    os.environ["PUFFADV_NUM_THREADS"] = str(n)
                    ms[n] = bench_cpu.best_seconds(fn, args.repeats)[0] * 1e3
                os.environ.pop("PUFFADV_NUM_THREADS", None)
                gbps = nbytes / ms[threads] / 1e6
                scalar_ms = ms[threads] if form == "scalar" else scalar_ms
                line = (f"| {name} | {layout_name} | {form} | {ms[1]:.2f} | {ms[threads]:.2f} | {gbps:.1f} "
                        f"| {gbps / copy[threads]:.2f} | {ms[threads] / scalar_ms:.2f}x |")
                lines.append(line)
                print(line, flush=True)
    footer = (f"\n{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; load average {load_before[0]:.2f} before, "
              f"{os.getloadavg()[0]:.2f} after; {time.perf_counter() - started:.0f} s")
    lines.append(footer)
    print(footer)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
