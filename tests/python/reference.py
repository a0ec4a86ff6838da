"""Float64 references every test compares against. Written from SPEC.md, not
from the kernels, and deliberately naive."""
from __future__ import annotations

import numpy as np


def puff_advantage(values, rewards, dones, importance, gamma=0.99, gae_lambda=0.95,
                   rho_clip=1.0, c_clip=1.0):
    """SPEC section 1, one row at a time, in float64 (NaN importance -> the clip, as fmin)."""
    v, r, d, imp = (np.asarray(a, dtype=np.float64) for a in (values, rewards, dones, importance))
    rows, horizon = v.shape
    out = np.zeros((rows, horizon))
    for row in range(rows):
        a = 0.0
        for t in range(horizon - 2, -1, -1):
            nnt = 1.0 - d[row, t + 1]
            rho = np.fmin(imp[row, t], rho_clip)
            c = np.fmin(imp[row, t], c_clip)
            delta = rho * (r[row, t + 1] + gamma * v[row, t + 1] * nnt - v[row, t])
            a = delta + gamma * gae_lambda * c * a * nnt
            out[row, t] = a
    return out


def puff_advantage_by_step(values, rewards, dones, importance, gamma=0.99, gae_lambda=0.95,
                           rho_clip=1.0, c_clip=1.0):
    """The same recurrence, all rows at once (one NumPy step per time step): for
    long rows, where the row loop above is too slow."""
    v, r, d, imp = (np.asarray(a, dtype=np.float64) for a in (values, rewards, dones, importance))
    out = np.zeros(v.shape)
    a = np.zeros(v.shape[0])
    for t in range(v.shape[1] - 2, -1, -1):
        nnt = 1.0 - d[:, t + 1]
        delta = np.fmin(imp[:, t], rho_clip) * (r[:, t + 1] + gamma * v[:, t + 1] * nnt - v[:, t])
        a = delta + gamma * gae_lambda * np.fmin(imp[:, t], c_clip) * a * nnt
        out[:, t] = a
    return out


def relative_error(out, ref) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    scale = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (scale if scale > 0 else 1.0))


TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def random_puff_inputs(rng, rows, horizon, dtype=np.float32, done_rate=0.1):
    """Fresh random inputs, never all zeros: normal values/rewards, sparse dones,
    importance ratios spread around 1 so both clips bite."""
    return (rng.standard_normal((rows, horizon)).astype(dtype),
            rng.standard_normal((rows, horizon)).astype(dtype),
            (rng.random((rows, horizon)) < done_rate).astype(dtype),
            rng.uniform(0.0, 3.0, (rows, horizon)).astype(dtype))
