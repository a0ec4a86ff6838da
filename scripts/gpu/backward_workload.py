"""The fused backward's kernels on every GPU traversal, for compute-sanitizer: every case
of tests/python/test_gradients_fused.py (GAE, TD(lambda), discounted returns, with and
without importance ratios, V-trace, the puff advantage, Retrace, Q(lambda), the episodic
sums) differentiated on CUDA at shapes that take row groups, whole rows (flat and
vector), split and long rows, each gradient compared with the CPU's. Each case meets
each shape once, float32 and float64, batch- and time-major, scalar and per-step
gamma / lambda taking turns (a sanitizer run checks kernels, not the grid: that is
the tests' work). WORKLOAD_DEVICE=cpu runs it here against itself (a smoke test of the script);
WORKLOAD_CASES=a,b runs those cases alone (unset or empty: all; the whole workload
was cut off at about 290 s under memcheck beside racecheck and pytest on an H100, 2026-12-06).
Prints one line and exits 1 on a mismatch or a backward that missed the fused path."""
from __future__ import annotations

import itertools
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))

from test_gradients_fused import (CASES, EPISODIC, GPU_TRAVERSAL_SHAPES as SHAPES, PUFF, _call, _grads,  # noqa: E402
                                  _vjp_fused)

DEVICE = os.environ.get("WORKLOAD_DEVICE", "cuda")
CHOSEN = sorted(c.strip() for c in (os.environ.get("WORKLOAD_CASES") or ",".join(CASES)).split(",") if c.strip())


def main() -> int:
    bad = runs = 0
    fused = []  # the backwards the fused path computed (every case here takes it on both devices)
    real = _vjp_fused.vjp
    _vjp_fused.vjp = lambda *args, **kwargs: fused.append(args[0]) or real(*args, **kwargs)
    turns = itertools.cycle(itertools.product((torch.float32, torch.float64), (False, True), (False, True)))
    unknown = set(CHOSEN) - set(CASES)
    if not CHOSEN:
        raise SystemExit(f"WORKLOAD_CASES names no case; the cases: {sorted(CASES)}")
    if unknown:
        raise SystemExit(f"WORKLOAD_CASES: no such case {sorted(unknown)}; the cases: {sorted(CASES)}")
    for case in CHOSEN:
        for seed, (rows, horizon) in enumerate(SHAPES):
            dtype, time_major, per_step = next(turns)
            if case in PUFF:
                time_major = per_step = False
            per_step = per_step and case not in EPISODIC  # their per-step decays take the formulas
            kw = dict(seed=seed + 40, time_major=time_major, per_step=per_step, dtype=dtype, rows=rows,
                      horizon=horizon)
            cpu, weights = _grads(*_call(case, **kw)[:2])
            call, leaves, names = _call(case, device=DEVICE, **kw)
            gpu, _ = _grads(call, leaves, [w.to(DEVICE) for w in weights])
            tol = 1e-4 if dtype == torch.float32 else 1e-10
            for name, a, b in zip(names, gpu, cpu):
                runs += 1
                if not torch.allclose(a.cpu(), b, rtol=tol, atol=tol):
                    bad += 1
                    print(f"MISMATCH {case} {name} {kw}: max {float((a.cpu() - b).abs().max()):.3g}")
    expected = 2 * len(CHOSEN) * len(SHAPES)
    print(f"backward workload: {runs} gradients, {bad} mismatched; {len(fused)} of {expected} backwards fused")
    return 1 if bad or len(fused) != expected else 0


if __name__ == "__main__":
    sys.exit(main())
