"""GPU == CPU for issue 29's forms on CUDA (imported by new_kernels_check.py, so run
by scripts/gpu/validate.sh's sanitize stage under memcheck and racecheck, and alone):
per-step gamma / lambda arrays for every estimator that takes them, next_values for
gae / vtrace / n_step_returns, V-trace's sample_mask and leaky alpha; float32,
float64 and bfloat16, [B, T] and time-major memory, a strided view; episodes ending
at the first and last steps. Through the Python API and torch.ops.puffadv. No call
may fall back to the host (a FallbackWarning is a failure)."""
from __future__ import annotations

import warnings

import torch

import puffadv

DEV = "cuda"
TOL = {torch.float32: 2e-5, torch.float64: 1e-11, torch.bfloat16: 3e-2}


def _inputs(rows, horizon, g, dtype):
    def rand(lo=-1.0, hi=1.0):
        return (lo + (hi - lo) * torch.rand(rows, horizon, generator=g, dtype=torch.float64)).to(dtype)

    term = torch.rand(rows, horizon, generator=g) < 0.08
    term[::3, 0] = True
    term[1::3, -1] = True
    trunc = (torch.rand(rows, horizon, generator=g) < 0.05) & ~term
    trunc[2::3, -1] = True
    trunc[2::3, -1] &= ~term[2::3, -1]
    gamma = rand(0, 1)
    gamma[term & (torch.rand(rows, horizon, generator=g) < 0.5)] = 0  # rlax's discount_t
    mask = torch.rand(rows, horizon, generator=g) < 0.8
    mask[1::4, 0] = mask[1::4, -1] = False
    return dict(r=rand(), v=rand(), nv=rand(), boot=rand(), imp=rand(0.5, 1.6), pi=rand(0.05, 1), mu=rand(0.05, 1),
                term=term, trunc=trunc, gamma=gamma, lam=rand(0, 1), mask=mask, greedy=torch.rand(
                    rows, horizon, generator=g) < 0.7, last=torch.rand(rows, generator=g, dtype=torch.float64).to(dtype))


def _calls(x, steps):
    """(name, function, positional arrays, keywords) of each form on inputs x (dict of tensors)."""
    g = dict(gamma=x["gamma"]) if steps else dict(gamma=0.97)
    lam = x["lam"] if steps else 0.9
    flags = (x["term"], x["trunc"])
    calls = [
        ("discounted_returns", puffadv.discounted_returns, (x["r"],) + flags, dict(bootstrap_values=x["boot"], **g)),
        ("retrace", puffadv.retrace, (x["r"], x["v"], x["nv"]) + flags,
         dict(target_probs=x["pi"], behaviour_probs=x["mu"], lambda_=lam, **g)),
        ("q_lambda", puffadv.q_lambda, (x["r"], x["v"], x["nv"]) + flags, dict(greedy=x["greedy"], lambda_=lam, **g)),
        ("eligibility_traces", puffadv.eligibility_traces, (x["r"], x["term"]), dict(lambda_=lam, seed=x["last"], **g)),
    ]
    if steps:
        calls += [
            ("gae", puffadv.gae, (x["r"], x["v"]) + flags,
             dict(bootstrap_values=x["boot"], importance=x["imp"], gae_lambda=lam, **g)),
            ("td_lambda_returns", puffadv.td_lambda_returns, (x["r"], x["v"]) + flags,
             dict(bootstrap_values=x["boot"], lambda_=lam, **g)),
            ("vtrace", puffadv.vtrace, (x["r"], x["v"]) + flags,
             dict(bootstrap_values=x["boot"], importance=x["imp"], lambda_=lam, **g)),
        ] + [(f"n_step_returns n={n}", puffadv.n_step_returns, (x["r"], x["v"]) + flags,
              dict(bootstrap_values=x["boot"], n=n, lambda_=lam, advantages=True, **g)) for n in (3, 20, 10**6)]
    else:  # next_values, sample_mask and alpha (scalar gamma and lambda: the combination is refused)
        calls += [
            ("gae next_values", puffadv.gae, (x["r"], x["v"]) + flags,
             dict(next_values=x["nv"], importance=x["imp"], gae_lambda=lam, **g)),
            ("vtrace next_values", puffadv.vtrace, (x["r"], x["v"]) + flags,
             dict(next_values=x["nv"], importance=x["imp"], lambda_=lam, **g)),
            ("vtrace next_values sample_mask alpha", puffadv.vtrace, (x["r"], x["v"]) + flags,
             dict(next_values=x["nv"], importance=x["imp"], sample_mask=x["mask"], alpha=0.6, lambda_=lam, **g)),
            ("vtrace sample_mask alpha", puffadv.vtrace, (x["r"], x["v"]) + flags,
             dict(bootstrap_values=x["boot"], importance=x["imp"], sample_mask=x["mask"], alpha=0.6, **g)),
        ] + [(f"n_step_returns next_values n={n}", puffadv.n_step_returns, (x["r"], x["v"]) + flags,
              dict(next_values=x["nv"], n=n, lambda_=lam, advantages=True, **g)) for n in (3, 20, 10**6)]
    return calls


def _outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in out if isinstance(t, torch.Tensor)]


def _check(same, failures, label, function, args, kw, layout):
    def put(t, dev):
        if not isinstance(t, torch.Tensor):
            return t
        if t.ndim == 1:
            return t.to(dev)
        if layout == "time_major":  # [T, B] memory viewed with time_axis=0
            return t.t().contiguous().to(dev)
        if layout == "strided":  # every other row and column of a wider array
            wide = torch.zeros(t.shape[0] * 2, t.shape[1] * 2 + 1, dtype=t.dtype)
            wide[::2, 1::2] = t
            return wide.to(dev)[::2, 1::2]
        return t.to(dev)
    axis = 0 if layout == "time_major" else -1
    want = _outputs(function(*(put(a, "cpu") for a in args), time_axis=axis,
                             **{k: put(v, "cpu") for k, v in kw.items()}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _outputs(function(*(put(a, DEV) for a in args), time_axis=axis,
                                **{k: put(v, DEV) for k, v in kw.items()}))
    if any(issubclass(w.category, puffadv.FallbackWarning) for w in caught):
        failures.append(f"{label}: fell back to the host ({caught[0].message})")
    for i, (a, b) in enumerate(zip(got, want)):
        same(f"{label} output {i}", a, b, TOL[args[0].dtype])


def forms(same, failures):
    g = torch.Generator().manual_seed(29)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        for rows, horizon in ((19, 64), (4096, 33), (3, 5000)):
            x = _inputs(rows, horizon, g, dtype)
            for steps in (True, False):
                for name, function, args, kw in _calls(x, steps):
                    for layout in ("batch_major", "time_major", "strided"):
                        if layout == "strided" and rows == 4096:
                            continue
                        label = f"{name}{' per-step' if steps else ''} {dtype} {rows}x{horizon} {layout}"
                        try:
                            _check(same, failures, label, function, args, kw, layout)
                        except Exception as exc:
                            failures.append(f"{label}: {type(exc).__name__}: {exc}")
    print("issue 29 forms (per-step gamma/lambda, next_values, sample_mask, alpha) on CUDA: checked", flush=True)


def torch_ops(same, failures):
    """torch.compile (torch.ops.puffadv) with per-step gamma / lambda tensors on CUDA: the CPU's numbers."""
    g = torch.Generator().manual_seed(30)
    x = _inputs(64, 128, g, torch.float32)
    out = {}
    for dev in ("cpu", DEV):
        kw = dict(bootstrap_values=x["boot"].to(dev), gamma=x["gamma"].to(dev), gae_lambda=x["lam"].to(dev),
                  time_axis=-1)
        out[dev] = torch.compile(lambda *a, **k: puffadv.gae(*a, **k).advantages, fullgraph=True)(
            x["r"].to(dev), x["v"].to(dev), x["term"].to(dev), x["trunc"].to(dev), **kw)
    same("torch.compile gae per-step on CUDA", out[DEV], out["cpu"], 2e-5)
    print("torch.compile gae with per-step arrays on CUDA: checked", flush=True)
