"""python -m puffadv: print backend() and run a short self-check.
python -m puffadv --cmake-dir: print the folder of the installed CMake package."""
from __future__ import annotations

import argparse
import sys

import numpy as np

import puffadv


def reference_puff_advantage(values, rewards, dones, importance, gamma, gae_lambda, rho_clip, c_clip):
    """SPEC section 1 in float64, vectorised over rows."""
    v, r, d, imp = (np.asarray(a, dtype=np.float64) for a in (values, rewards, dones, importance))
    out = np.zeros_like(v)
    a = np.zeros(v.shape[0])
    for t in range(v.shape[1] - 2, -1, -1):
        nnt = 1.0 - d[:, t + 1]
        rho = np.fmin(imp[:, t], rho_clip)
        c = np.fmin(imp[:, t], c_clip)
        delta = rho * (r[:, t + 1] + gamma * v[:, t + 1] * nnt - v[:, t])
        a = delta + gamma * gae_lambda * c * a * nnt
        out[:, t] = a
    return out


def _random_inputs(rng, rows, horizon, dtype):
    return (rng.standard_normal((rows, horizon)).astype(dtype),
            rng.standard_normal((rows, horizon)).astype(dtype),
            (rng.random((rows, horizon)) < 0.1).astype(dtype),
            rng.uniform(0.2, 2.0, (rows, horizon)).astype(dtype))


def self_check() -> bool:
    rng = np.random.default_rng()
    params = dict(gamma=0.99, gae_lambda=0.95, rho_clip=5.0, c_clip=1.0)
    cases = [("cpu float32", 257, 67, np.float32, 1e-5), ("cpu float64", 33, 129, np.float64, 1e-12)]
    ok = True
    for label, rows, horizon, dtype, tol in cases:
        inputs = _random_inputs(rng, rows, horizon, dtype)
        out = np.full((rows, horizon), np.nan, dtype=dtype)  # poison: unwritten elements show
        puffadv.compute_puff_advantage(*inputs, out, **params)
        ref = reference_puff_advantage(*inputs, **params)
        err = float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))
        passed = bool(np.isfinite(out).all() and err <= tol)
        ok &= passed
        print(f"  {label:<14} {rows}x{horizon}: relative error {err:.2e} "
              f"(<= {tol:g}) {'PASS' if passed else 'FAIL'}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m puffadv", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cmake-dir", action="store_true",
                        help="print the folder holding puffadvConfig.cmake and exit")
    args = parser.parse_args(argv)
    if args.cmake_dir:
        print(puffadv.cmake_dir())
        return 0
    print(puffadv.backend())
    print("self-check against a float64 reference on random data:")
    ok = self_check()
    print("self-check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
