"""A short run of every kernel of the conventions, for compute-sanitizer
(scripts/gpu/validate.sh, stage sanitize): each layout the host can pick (float32 with
8 and 4 steps per thread, V-trace, truncations, split rows, bfloat16, the
generic and the strided kernels, the puff advantage), each compared with the
CPU backend on the same inputs. Exits non-zero on a mismatch.

    python scripts/gpu/kernel_workload.py
"""
from __future__ import annotations

import sys

import numpy as np
import torch

import puffadv

CASES = [  # rows, horizon, dtype, layout
    (64, 1024, torch.float32, "batch"),   # 8 steps per thread (GAE), 4 (V-trace, truncations)
    (2, 40000, torch.float32, "batch"),   # split rows: three launches, carries in the output
    (48, 304, torch.bfloat16, "batch"),   # 16-bit inputs: 8 steps per thread
    (7, 37, torch.float32, "batch"),      # no vectorised access: the generic kernel
    (37, 7, torch.float32, "time"),       # time-major: one thread per row
]


def main():
    rng = np.random.default_rng(5)
    failures = 0
    for rows, horizon, dtype, layout in CASES:
        u = rng.random((rows, horizon))
        host = dict(r=rng.standard_normal((rows, horizon)), v=rng.standard_normal((rows, horizon)),
                    term=u < 0.05, trunc=(u >= 0.05) & (u < 0.07), bv=rng.standard_normal((rows, horizon)),
                    ratio=rng.uniform(0, 2, (rows, horizon)), lv=rng.standard_normal(rows))
        results = {}
        for device in ("cpu", "cuda"):
            def put(x):
                t = torch.from_numpy(np.ascontiguousarray(x))
                t = (t if t.dtype == torch.bool else t.to(dtype)).to(device)
                return t.T.contiguous().T if layout == "time" and t.ndim == 2 else t
            d = {k: put(x) for k, x in host.items()}
            out = {}
            out["gae"] = puffadv.gae(d["r"], d["v"], d["term"], last_value=d["lv"], abs_sums=True, time_axis=-1)
            out["gae_trunc"] = puffadv.gae(d["r"], d["v"], d["term"], d["trunc"], bootstrap_values=d["bv"], time_axis=-1)
            out["td"] = puffadv.td_lambda_returns(d["r"], d["v"], d["term"], last_value=d["lv"], time_axis=-1)
            out["vtrace"] = puffadv.vtrace(d["r"], d["v"], d["term"], d["trunc"], bootstrap_values=d["bv"],
                                           importance=d["ratio"], sums=True, time_axis=-1)
            out["vtrace_pg_only"] = puffadv.vtrace(d["r"], d["v"], d["term"], last_value=d["lv"],
                                                   importance=d["ratio"], vs=False, time_axis=-1)
            out["puff"] = puffadv.compute_puff_advantage(d["v"], d["r"], d["term"], d["ratio"], None,
                                                         0.99, 0.95, 1.5, 1.0, returns=True)
            results[device] = out
        torch.cuda.synchronize()
        for name, cpu in results["cpu"].items():
            for i, (a, b) in enumerate(zip(cpu, results["cuda"][name])):
                if a is None and b is None:
                    continue
                a, b = a.double().cpu().numpy(), b.double().cpu().numpy()
                err = np.linalg.norm(np.nan_to_num(a - b)) / max(np.linalg.norm(np.nan_to_num(a)), 1e-30)
                bad = (np.isnan(a) != np.isnan(b)).any() or not err <= 1e-5
                failures += bad
                if bad:
                    print(f"MISMATCH {rows}x{horizon} {dtype} {layout} {name}[{i}]: rel err {err:.2e}")
    print(f"kernel workload: {'FAILED' if failures else 'all outputs match the CPU'} ({len(CASES)} layouts)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
