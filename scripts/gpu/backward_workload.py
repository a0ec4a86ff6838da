"""The fused backward's kernels (the core's value_vjp kind) on every GPU traversal, for
compute-sanitizer: GAE, TD(lambda) and discounted returns differentiated on CUDA,
float32 and float64, batch- and time-major, scalar and per-step gamma / lambda, at
shapes that take row groups, whole rows (flat and vector), split and long rows; each
gradient compared with the CPU kernel's. Prints one line and exits 1 on a mismatch."""
from __future__ import annotations

import sys

import torch

import puffadv

SHAPES = ((19, 64), (4100, 8), (3, 4501), (3, 4500), (1024, 128), (37, 50))


def grads(device, fn, rows, horizon, dtype, time_major, per_step, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (horizon, rows) if time_major else (rows, horizon)
    make = lambda: torch.randn(shape, generator=g, dtype=dtype)  # noqa: E731
    r, v, boot, w_a, w_r = make(), make(), make(), make(), make()
    term = torch.rand(shape, generator=g) < 0.1
    trunc = (torch.rand(shape, generator=g) < 0.05) & ~term
    gamma = torch.rand(shape, generator=g, dtype=dtype) if per_step else 0.97
    lam = torch.rand(shape, generator=g, dtype=dtype) if per_step else 0.9
    to = lambda x: x.to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
    leaves = [to(x).requires_grad_() for x in (r, v, boot)]
    axis = 0 if time_major else -1
    if fn == "discounted_returns":
        out = puffadv.discounted_returns(leaves[0], to(term), truncated=to(trunc), bootstrap_values=leaves[2],
                                         gamma=to(gamma), time_axis=axis)
        loss = (out.returns * to(w_r)).sum()
        return torch.autograd.grad(loss, [leaves[0], leaves[2]])
    call = puffadv.gae if fn == "gae" else puffadv.td_lambda_returns
    lam_name = "gae_lambda" if fn == "gae" else "lambda_"
    out = call(leaves[0], leaves[1], to(term), truncated=to(trunc), bootstrap_values=leaves[2], gamma=to(gamma),
               **{lam_name: to(lam)}, advantages=True, returns=True, time_axis=axis)
    loss = (out.advantages * to(w_a)).sum() + (out.returns * to(w_r)).sum()
    return torch.autograd.grad(loss, leaves)


def main() -> int:
    bad = 0
    runs = 0
    for fn in ("gae", "td_lambda_returns", "discounted_returns"):
        for dtype in (torch.float32, torch.float64):
            for i, (rows, horizon) in enumerate(SHAPES):
                for time_major in (False, True):
                    per_step = (i + time_major) % 2 == 1
                    args = (fn, rows, horizon, dtype, time_major, per_step, 100 + i)
                    gpu, cpu = grads("cuda", *args), grads("cpu", *args)
                    tol = 1e-4 if dtype == torch.float32 else 1e-10
                    for a, b in zip(gpu, cpu):
                        runs += 1
                        if not torch.allclose(a.cpu(), b, rtol=tol, atol=tol):
                            bad += 1
                            print(f"MISMATCH {args}: max {float((a.cpu() - b).abs().max()):.3g}")
    print(f"backward workload: {runs} gradients, {bad} mismatched")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
