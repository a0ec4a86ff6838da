"""GPU == CPU for this round's kernels and paths (run by scripts/gpu/validate.sh's
sanitize stage, under memcheck and racecheck, and alone): linear_recurrence (both
directions, both layouts, float32/float64/bfloat16, strided views, seeds), td_lambda
with next_values (the Q(lambda) route), decays whose products overflow (issue 31:
zero inputs stay zero), steps both terminated and truncated (terminated), and the
torch backward of gae / vtrace / linear_recurrence on CUDA equal to the CPU's, and issue 29's
forms (forms_check.py: per-step gamma / lambda, next_values, sample_mask, leaky alpha).
Exits non-zero on a mismatch; prints one line per group."""
from __future__ import annotations

import os
import sys

import torch

import puffadv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forms_check  # noqa: E402  (beside this script)

DEV = "cuda"
failures = []


def same(label, got, want, tol):
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    both_nan = got.isnan() & want.isnan()
    err = (got - want).abs().masked_fill(both_nan, 0).max().item() if got.numel() else 0.0
    scale = 1 + want.abs().masked_fill(want.isnan(), 0).max().item() if want.numel() else 1.0
    if not err <= tol * scale:
        failures.append(f"{label}: max error {err:.3g} (scale {scale:.3g})")


def recurrence():
    g = torch.Generator().manual_seed(1)
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12), (torch.bfloat16, 2e-2)):
        for rows, horizon in ((7, 1), (33, 64), (5, 1000), (4096, 37), (3, 20000)):
            for reverse in (False, True):
                for time_axis in (-1, 0):
                    shape = (rows, horizon) if time_axis == -1 else (horizon, rows)
                    x = torch.randn(shape, generator=g).to(dtype)
                    a = torch.rand(shape, generator=g).to(dtype)
                    a.view(-1)[:: max(1, a.numel() // 7)] = 0  # restarts
                    seed = torch.randn(rows, generator=g).to(dtype)
                    want = puffadv.linear_recurrence(x, a, seed=seed, reverse=reverse, time_axis=time_axis)
                    got = puffadv.linear_recurrence(x.to(DEV), a.to(DEV), seed=seed.to(DEV), reverse=reverse,
                                                    time_axis=time_axis)
                    same(f"linear_recurrence {dtype} {shape} reverse={reverse} axis={time_axis}", got, want, tol)
    x = torch.randn(64, 300, generator=g, dtype=torch.float64)
    a = torch.rand(64, 300, generator=g, dtype=torch.float64)
    want = puffadv.linear_recurrence(x[::2, 1::2], a[::2, 1::2], reverse=True, time_axis=-1)
    got = puffadv.linear_recurrence(x.to(DEV)[::2, 1::2], a.to(DEV)[::2, 1::2], reverse=True, time_axis=-1)
    same("linear_recurrence strided", got, want, 1e-12)
    print("linear_recurrence: checked", flush=True)


def episodes(rows, horizon, g, dtype=torch.float32):
    r, v = torch.randn(rows, horizon, generator=g, dtype=dtype), torch.randn(rows, horizon, generator=g, dtype=dtype)
    term = torch.rand(rows, horizon, generator=g) < 0.1
    trunc = torch.rand(rows, horizon, generator=g) < 0.05
    term[:, 0] = term[:, -1] = True
    trunc[:, 1] = True
    term[:, 1] = True  # a step both terminated and truncated: terminated
    nv = torch.randn(rows, horizon, generator=g, dtype=dtype)
    return r, v, term, trunc, nv


def next_values_and_flags():
    g = torch.Generator().manual_seed(2)
    for rows, horizon in ((19, 64), (4096, 33), (3, 5000)):
        r, v, term, trunc, nv = episodes(rows, horizon, g, torch.float64)
        args = dict(gamma=0.97, lambda_=0.9, time_axis=-1, next_values=nv)
        want = puffadv.td_lambda_returns(r, v, term, trunc, **{"time_axis": -1, **args}).returns
        got = puffadv.td_lambda_returns(*(t.to(DEV) for t in (r, v, term, trunc)),
                                        **{"time_axis": -1, **{**args, "next_values": nv.to(DEV)}}).returns
        same(f"td_lambda next_values {rows}x{horizon}", got, want, 1e-12)
        boot = torch.full_like(v, float("nan"))  # read only at truncations that are not terminations
        boot[trunc & ~term] = 1.5
        boot[:, -1] = 0.5
        want = puffadv.gae(r, v, term, trunc, bootstrap_values=boot, time_axis=-1).advantages
        got = puffadv.gae(*(t.to(DEV) for t in (r, v, term, trunc)), bootstrap_values=boot.to(DEV),
                          time_axis=-1).advantages
        same(f"gae both flags {rows}x{horizon}", got, want, 1e-12)
        if got.isnan().any():
            failures.append(f"gae both flags {rows}x{horizon}: NaN on the GPU")
    print("next_values and both flags: checked", flush=True)


def overflowing_decays():
    for rows, horizon in ((1, 64), (64, 1), (33, 129), (4096, 64), (2, 4000)):
        for layout in ("bt", "tb"):
            shape = (rows, horizon) if layout == "bt" else (horizon, rows)
            axis = -1 if layout == "bt" else 0
            z = torch.zeros(shape, device=DEV)
            imp = torch.full(shape, 1e5, device=DEV)
            out = puffadv.gae(z, z, torch.zeros(shape, dtype=torch.bool, device=DEV), importance=imp, c_clip=1e5,
                              rho_clip=1e5, gamma=1.0, gae_lambda=1.0,
                              last_value=torch.zeros(rows, device=DEV), time_axis=axis).advantages
            if not bool((out == 0).all()):
                failures.append(f"overflowing decays gae {layout} {rows}x{horizon}: {int(out.isnan().sum())} NaN")
    print("overflowing decays: checked", flush=True)


def backward():
    g = torch.Generator().manual_seed(3)
    r, v, term, trunc, _ = episodes(257, 100, g, torch.float64)
    lv = torch.randn(257, generator=g, dtype=torch.float64)
    imp = torch.rand(257, 100, generator=g, dtype=torch.float64) * 2
    grads = []
    for dev in ("cpu", DEV):
        leaves = [t.to(dev).requires_grad_(True) for t in (r, v, lv, imp)]
        gae = puffadv.gae(leaves[0], leaves[1], term.to(dev), last_value=leaves[2], importance=leaves[3],
                          rho_clip=1.2, c_clip=0.9, time_axis=-1).advantages
        vt = puffadv.vtrace(leaves[0], leaves[1], term.to(dev), last_value=leaves[2], importance=leaves[3],
                            time_axis=-1)
        x = leaves[0] * leaves[3]
        lr = puffadv.linear_recurrence(x, leaves[3] / 2, reverse=False, time_axis=-1)
        loss = (gae * torch.linspace(-1, 1, 100, dtype=torch.float64, device=dev)).sum() + vt.vs.square().sum() \
            + vt.pg_advantages.sum() + lr.sin().sum()
        grads.append(torch.autograd.grad(loss, leaves))
    for name, a, b in zip(("rewards", "values", "last_value", "importance"), grads[1], grads[0]):
        same(f"backward d/d{name}", a, b, 1e-10)
    print("backward on CUDA: checked", flush=True)


def issue_29_forms():
    forms_check.forms(same, failures)
    forms_check.torch_ops(same, failures)


for group in (recurrence, next_values_and_flags, overflowing_decays, backward, issue_29_forms):
    try:
        group()
    except Exception as exc:  # a crash is a failure of its group, the others still run
        failures.append(f"{group.__name__}: {type(exc).__name__}: {exc}")
print("\n".join(failures) or "all GPU == CPU checks passed")
sys.exit(1 if failures else 0)
