"""CPU benchmark of the one engine (issue 28), not a test: every scan kind through
_core.estimate with preallocated outputs (the kernels, not the Python layer), in
the layouts and dtypes the engine's traversals serve:
  bt / tb    float32 [B, T] and time-major [T, B] (time_axis=0), float32 flags
  bf16       bfloat16 [B, T] inputs and outputs, bool flags
  f16-tb     float16 time-major
  strided    float32 [B, T] views of every other step (x[:, ::2]): neither layout
  puff       the puff advantage, plain, and fused (returns + the three row sums)
Each cell is the median of --repeats calls after a warm-up, in milliseconds of
wall time, or of process CPU time (--clock process: all threads' time summed,
steadier than wall time on a loaded machine). Run it once per thread count
(PUFFADV_NUM_THREADS=1, then unset: all threads). To compare two builds on a
noisy machine, alternate them: --ab SITE_A,SITE_B --rounds R runs each build
in its own process R times in turn and prints the median over rounds of each
cell's B/A ratio.

    PUFFADV_NUM_THREADS=1 python benchmarks/bench_cpu_engine.py [--shapes 65536x128,4096x1024]
        [--repeats 9] [--cells gae/bt,...] [--json out.json] [--clock wall|process]
        [--ab SITE_A,SITE_B --rounds 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
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
    "n_step_returns": (("rewards", "values", "terminated", "last_value"), {"n": 5}),
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
    "n_step_returns/bt", "n_step_returns/tb",
    "gae/bf16", "retrace/bf16", "gae/f16-tb", "gae/strided", "episodic_sum/strided",
    "puff_advantage/puff", "puff_advantage/fused", "puff_advantage/bf16"]


def ab(args):
    """Alternates two builds (PYTHONPATH folders), each round in fresh processes."""
    sites = args.ab.split(",")
    ratios, times = {}, {site: {} for site in sites}
    for _ in range(args.rounds):
        got = {}
        for site in sites:
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                cmd = [sys.executable, __file__, "--shapes", args.shapes, "--repeats", str(args.repeats),
                       "--cells", args.cells, "--clock", args.clock, "--json", f.name]
                subprocess.run(cmd, check=True, env=dict(os.environ, PYTHONPATH=site), stdout=subprocess.DEVNULL)
                got[site] = json.load(open(f.name))
        for cell in got[sites[0]]:
            ratios.setdefault(cell, []).append(got[sites[1]][cell] / got[sites[0]][cell])
            for site in sites:
                times[site].setdefault(cell, []).append(got[site][cell])
    print(f"{'cell':<40} {'A ms':>8} {'B ms':>8} {'B/A':>6}  (ratios over rounds)")
    for cell, r in ratios.items():
        a, b = (statistics.median(times[s][cell]) for s in sites)
        print(f"{cell:<40} {a:8.2f} {b:8.2f} {statistics.median(r):6.3f}  "
              + " ".join(f"{x:.2f}" for x in sorted(r)), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ratios": ratios, "times": times}, f, indent=1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="65536x128,4096x1024")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--cells", default=",".join(CELLS))
    p.add_argument("--json")
    p.add_argument("--clock", choices=("wall", "process"), default="wall")
    p.add_argument("--ab", help="SITE_A,SITE_B: alternate two builds")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    if args.ab:
        return ab(args)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
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
                t0 = clock()
                run()
                times.append((clock() - t0) * 1e3)
            results[f"{shape} {c}"] = statistics.median(times)
            if not args.json or args.ab is None:
                print(f"{shape:>11} {c:<28} {statistics.median(times):8.2f} ms  (min {min(times):.2f})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
