"""CPU benchmark of the one engine (issue 28), not a test: every scan kind through
_core.estimate with preallocated outputs (the kernels, not the Python layer), in
the layouts and dtypes the engine's traversals serve:
  bt / tb    float32 [B, T] and time-major [T, B] (time_axis=0), float32 flags
  bf16       bfloat16 [B, T] inputs and outputs, bool flags
  f16-tb     float16 time-major
  strided    float32 [B, T] views of every other step (x[:, ::2]): neither layout
  puff       the puff advantage, plain, and fused (returns + the three row sums)
Each cell is the median of --repeats calls after a warm-up, in wall milliseconds.
Run it once per thread count (PUFFADV_NUM_THREADS=1, then unset: all threads).

    PUFFADV_NUM_THREADS=1 python benchmarks/bench_cpu_engine.py [--shapes 65536x128,4096x1024]
        [--repeats 9] [--cells gae/bt,...] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import puffadv._core as core

GAMMA, LAM = 0.99, 0.95
try:  # NumPy's bfloat16 (ml_dtypes) does not cross DLPack: bfloat16 cells take torch tensors
    import torch
except ImportError:  # pragma: no cover
    torch = None


def bf16(x):
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16)


def inputs(rows, horizon, seed=0):
    rng = np.random.default_rng(seed)
    f = lambda: rng.standard_normal((rows, horizon), np.float32)  # noqa: E731
    return dict(rewards=f(), values=f(), next_values=f(),
                terminated=(rng.random((rows, horizon)) < 0.02).astype(np.float32),
                target_probs=rng.uniform(0.1, 1, (rows, horizon)).astype(np.float32),
                behaviour_probs=rng.uniform(0.1, 1, (rows, horizon)).astype(np.float32),
                importance=rng.uniform(0.5, 1.5, (rows, horizon)).astype(np.float32),
                greedy=(rng.random((rows, horizon)) < 0.7).astype(np.float32),
                last_value=rng.standard_normal(rows).astype(np.float32))


KINDS = {  # kind -> (roles read, extra keywords)
    "gae": (("rewards", "values", "terminated", "last_value"), {}),
    "vtrace": (("rewards", "values", "terminated", "last_value", "importance"), {"rho_clip": 1.0}),
    "discounted_returns": (("rewards", "terminated", "last_value"), {}),
    "retrace": (("rewards", "values", "terminated", "next_values", "target_probs", "behaviour_probs"), {}),
    "q_lambda": (("rewards", "values", "terminated", "next_values", "greedy"), {}),
    "episodic_sum": (("rewards", "terminated"), {}),
    "puff_advantage": (("rewards", "values", "terminated", "importance"), {}),
}


def layout(x, name, horizon):
    """The [rows, horizon] array x in layout `name`, and the time_axis to pass."""
    if name in ("bt", "bf16", "puff", "fused"):
        return (bf16(x) if name == "bf16" and x.dtype == np.float32 else x), 1
    if name == "tb":
        return np.ascontiguousarray(x.T), 0
    if name == "f16-tb":
        return np.ascontiguousarray(x.T.astype(np.float16)), 0
    if name == "strided":
        wide = np.empty((x.shape[0], 2 * horizon), x.dtype)
        wide[:, ::2] = x
        return wide[:, ::2], 1
    raise ValueError(name)


def cell(kind, name, x, rows, horizon):
    roles, extra = KINDS[kind]
    arrays, axis = {}, 1
    for r in roles:
        a = x[r]
        if r == "terminated" and name == "bf16":
            a = a.astype(bool)
        if r == "last_value" and name in ("bf16", "f16-tb"):
            a = bf16(a) if name == "bf16" else a.astype(np.float16)
        arrays[r], ax = (a, None) if a.ndim == 1 else layout(a, name, horizon)
        axis = ax if ax is not None else axis
    like = arrays["rewards"]
    empty = (lambda a: torch.empty_like(a)) if name == "bf16" else np.empty_like
    arrays["advantages"] = empty(like) if name != "strided" else layout(
        np.empty((rows, horizon), np.float32), "strided", horizon)[0]
    if kind == "episodic_sum":
        arrays.pop("last_value", None)
    if name == "fused":
        arrays["returns"] = empty(like)
        for s in ("abs_sums", "sums", "square_sums"):
            arrays[s] = np.empty(rows, np.float32)
    kw = dict(gamma=GAMMA, lambda_=LAM, **extra)
    if kind != "puff_advantage":
        kw["time_axis"] = axis
    return lambda: core.estimate(kind, arrays, **kw)


CELLS = [f"{k}/{l}" for k in ("gae", "vtrace", "discounted_returns", "retrace", "q_lambda", "episodic_sum")
         for l in ("bt", "tb")] + [
    "gae/bf16", "retrace/bf16", "gae/f16-tb", "gae/strided", "episodic_sum/strided",
    "puff_advantage/puff", "puff_advantage/fused", "puff_advantage/bf16"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="65536x128,4096x1024")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--cells", default=",".join(CELLS))
    p.add_argument("--json")
    args = p.parse_args()
    results = {}
    for shape in args.shapes.split(","):
        rows, horizon = map(int, shape.split("x"))
        x = inputs(rows, horizon)
        for c in args.cells.split(","):
            kind, name = c.split("/")
            if name == "bf16" and torch is None:
                continue
            run = cell(kind, name, x, rows, horizon)
            run()
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                run()
                times.append((time.perf_counter() - t0) * 1e3)
            results[f"{shape} {c}"] = statistics.median(times)
            print(f"{shape:>11} {c:<28} {statistics.median(times):8.2f} ms  (min {min(times):.2f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
