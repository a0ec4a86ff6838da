"""puffadv against rl-triton (0.1.3, MIT; pure Python + Triton) on the same
inputs and semantics, for benchmarks/bench_conventions.py.

Where the conventions meet (docs/conventions.md):
  - GAE, last_value:           puffadv.gae(r, v, term, last_value=lv)
                               == rl_triton.compute_gae(r, v, term, last_value=lv)
  - GAE, truncations:          puffadv.gae(r, v, term, trunc, bootstrap_values=bv)
                               == rl_triton.compute_gae(r, v, term, trunc, bootstrap_values=bv)
                               (bv zero except at truncated steps and the last
                               column: rl-triton adds it everywhere, puffadv reads
                               it only there)
  - TD(lambda) returns:        puffadv.td_lambda_returns(r, v, term, last_value=lv)
                               == rl_triton.compute_lambda_returns(r, next_values, term,
                                  bootstrap_values=B) with next_values[:, t] = v[:, t+1],
                               lv in the last column, B zero but its last column lv
  - V-trace (vs, pg):          puffadv.vtrace(r, v, term, last_value=lv, importance=exp(lp_t - lp_b),
                               lambda_=1, rho_clip=rho_pg_clip=rho_bar, c_clip=c_bar)
                               == rl_triton.compute_vtrace(lp_t, lp_b, v, r, term, ...)
The estimator family (issue 20):
  - discounted returns:        puffadv.discounted_returns(r, term, last_value=lv)
                               == rl_triton.compute_discounted_returns(r, term, bootstrap_values=B)
                               (B zero but its last column lv); with truncations as GAE's
                               (bootstrap_values bv, zero except at truncated steps and the last column)
  - Retrace (Q_ret):           puffadv.retrace(r, q, nv, term, trunc, target_probs=pi, behaviour_probs=mu,
                               lambda_=LAM, c_clip=c_bar).returns
                               == rl_triton.compute_retrace(P, mu, q, NQ, actions=0, r, term, trunc, ...)[0]
                               with two actions, P = [pi, 1 - pi], NQ the next Q of both and
                               nv = (P * NQ).sum(-1) (rl-triton takes E_pi Q(s_{t+1}, .) with the
                               target probabilities of step t)
  - Q(lambda), Peng (returns): puffadv.q_lambda(r, q, nv, term, lambda_=LAM).returns
                               == rl_triton.compute_lambda_returns(r, nv, term, bootstrap_values=B)
                               (B zero but its last column nv[:, -1])
  - episodic cumulative sums:  puffadv.episodic_cumsum(x, dones) == rl_triton.compute_episodic_prefix_sum(x, dones)
  - eligibility traces:        puffadv.eligibility_traces(x, dones, gamma, lambda_)
                               == rl_triton.compute_eligibility_traces(x, dones, gamma, lambda_)
  - n-step returns (n = 3):    puffadv alone (rl-triton has none).
The generic scan (issue 29), a per-step decay (gamma lambda (1 - done)) and a seed:
  - backwards:                 puffadv.linear_recurrence(x, decay, seed=lv, reverse=True, time_axis=1)
                               == rl_triton.ops._scan._run_scan(x, decay, lv)
  - forwards:                  puffadv.linear_recurrence(x, decay, seed=lv, reverse=False, time_axis=1)
                               == rl_triton.ops._scan._run_scan_forward(x, decay, lv)
rl-triton has no counterpart of the puff advantage (PufferLib's convention).

rl-triton is found by `--rl-triton PATH` or the environment variable
PUFFADV_RL_TRITON (the package folder, e.g. ../shared/peers/rl_triton).
"""
from __future__ import annotations

import importlib
import os
import sys

import torch

import puffadv

GAMMA, LAM, RHO_BAR, C_BAR = 0.99, 0.95, 1.0, 1.0

# Bytes each side really reads and writes per element, float32 (flags as float32).
BYTES = {  # estimator: (puffadv, rl-triton)
    "gae last_value": (16, 16),             # r, v, term; A
    "gae trunc+bootstrap": (24, 24),        # + trunc, bootstrap_values (both read it whole)
    "td_lambda returns": (16, 16),          # r, v (next values), term; G
    "vtrace vs+pg": (24, 28),               # r, v, term, ratio (rl-triton: two log-probs); vs, pg
    "discounted last_value": (12, 12),      # r, term; G
    "discounted trunc+bootstrap": (20, 20),  # r, term, trunc, bootstrap_values; G
    "retrace Q_ret+delta": (36, 56),        # r, q, nv, term, trunc, pi, mu; Q_ret, Delta (rl-triton:
                                            # P, NQ of 2 actions, int64 actions; Q_ret, its advantages, a pi scratch)
    "q_lambda peng returns": (16, 16),      # r, nv, term; G
    "episodic cumsum": (12, 12),            # x, dones; C
    "eligibility traces": (12, 12),         # x, dones; z
    "n_step n=3 returns": (16, None),       # r, v, term; G (window reads come from the L1)
    "linear_recurrence reverse": (12, 12),  # x, decay; y
    "linear_recurrence forward": (12, 12),  # x, decay; y
    # Issue 29's per-step forms, puffadv alone (rl-triton's estimators take scalars; its per-step
    # scan is linear_recurrence's peer above); checked against puffadv's CPU call before timing.
    "gae per-step gamma+lambda": (24, None),        # r, v, term, gamma_t, lambda_t; A
    "td_lambda per-step gamma+lambda": (24, None),  # r, v, term, gamma_t, lambda_t; G
    "vtrace per-step gamma": (28, None),            # r, v, term, ratio, gamma_t; vs, pg
    "discounted per-step gamma": (16, None),        # r, term, gamma_t; G
    "gae next_values": (20, None),                  # r, v, next_values, term; A
}
PER_STEP = ("gae per-step gamma+lambda", "td_lambda per-step gamma+lambda", "vtrace per-step gamma",
            "discounted per-step gamma", "gae next_values")
ESTIMATORS = tuple(e for e in BYTES if e not in PER_STEP)
# Issue 20's estimators: their bar is 80 % of the copy bandwidth (issue 13's are 90 %).
FAMILY = ("discounted last_value", "discounted trunc+bootstrap", "retrace Q_ret+delta", "q_lambda peng returns",
          "episodic cumsum", "eligibility traces", "n_step n=3 returns")


def load(path=None):
    """The rl_triton module, or (None, why)."""
    path = path or os.environ.get("PUFFADV_RL_TRITON")
    if not path:
        return None, "no --rl-triton PATH and no PUFFADV_RL_TRITON: rl-triton columns left out"
    path = os.path.abspath(path)
    if not os.path.isfile(os.path.join(path, "__init__.py")):
        return None, f"rl-triton not found at {path} (expected the rl_triton package folder)"
    parent, name = os.path.split(path)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    try:
        module = importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - say why, keep benchmarking puffadv
        return None, f"rl-triton at {path} failed to import: {error!r}"
    return module, f"rl-triton {getattr(module, '__version__', '?')} from {path}"


def make_inputs(rows, horizon, generator, device="cuda"):
    """One input set: float32, float flags (terminations 5 %, truncations 1 %, never both)."""
    shape = (rows, horizon)
    f = lambda: torch.randn(shape, device=device, generator=generator)  # noqa: E731
    u = torch.rand(shape, device=device, generator=generator)
    term, trunc = (u < 0.05).float(), ((u >= 0.05) & (u < 0.06)).float()
    lv = torch.randn(rows, device=device, generator=generator)
    bv = f() * (trunc > 0)
    bv[:, -1] = lv
    lp_t, lp_b = 0.3 * f(), 0.3 * f()
    v = f()
    d = dict(r=f(), v=v, term=term, trunc=trunc, lv=lv, bv=bv, lp_t=lp_t, lp_b=lp_b,
             ratio=torch.exp(lp_t - lp_b))
    nv = torch.empty_like(v)
    nv[:, :-1], nv[:, -1] = v[:, 1:], lv
    d["next_values"] = nv
    d["lv_column"] = torch.zeros_like(v)
    d["lv_column"][:, -1] = lv
    for name in ("out", "out2"):
        d[name] = torch.empty_like(v)
    # Retrace with two actions, action 0 taken: pi, mu its probabilities, nv = E_P Q(s_{t+1}, .).
    d["pi"] = torch.rand(shape, device=device, generator=generator) * 0.9 + 0.1
    d["mu"] = torch.rand(shape, device=device, generator=generator) * 0.9 + 0.1
    d["P"] = torch.stack([d["pi"], 1 - d["pi"]], dim=-1)
    d["NQ"] = torch.randn((*shape, 2), device=device, generator=generator)
    d["retrace_nv"] = (d["P"] * d["NQ"]).sum(-1)
    d["actions"] = torch.zeros(shape, dtype=torch.int64, device=device)
    d["dones"] = ((term + trunc) > 0).float()
    d["decay"] = GAMMA * LAM * (1 - d["dones"])  # the generic scan's per-step decay
    # per-step gamma and lambda around the scalars (as per-environment discounts would be)
    d["gamma_t"] = GAMMA - 0.05 * torch.rand(shape, device=device, generator=generator)
    d["lam_t"] = LAM - 0.05 * torch.rand(shape, device=device, generator=generator)
    return d


def puffadv_call(estimator, d):
    """The puffadv call (outputs preallocated) and the arrays to compare."""
    if estimator == "gae last_value":
        return lambda: puffadv.gae(d["r"], d["v"], d["term"], last_value=d["lv"], gamma=GAMMA, gae_lambda=LAM,
                                   advantages=d["out"], returns=False, time_axis=-1), ("out",)
    if estimator == "gae trunc+bootstrap":
        return lambda: puffadv.gae(d["r"], d["v"], d["term"], d["trunc"], bootstrap_values=d["bv"], gamma=GAMMA,
                                   gae_lambda=LAM, advantages=d["out"], returns=False, time_axis=-1), ("out",)
    if estimator == "td_lambda returns":
        return lambda: puffadv.td_lambda_returns(d["r"], d["v"], d["term"], last_value=d["lv"], gamma=GAMMA,
                                                 lambda_=LAM, returns=d["out"], time_axis=-1), ("out",)
    if estimator == "vtrace vs+pg":
        return lambda: puffadv.vtrace(d["r"], d["v"], d["term"], last_value=d["lv"], importance=d["ratio"],
                                      gamma=GAMMA, lambda_=1.0, rho_clip=RHO_BAR, c_clip=C_BAR,
                                      rho_pg_clip=RHO_BAR, vs=d["out"], pg_advantages=d["out2"], time_axis=-1), ("out", "out2")
    if estimator == "discounted last_value":
        return lambda: puffadv.discounted_returns(d["r"], d["term"], last_value=d["lv"], gamma=GAMMA,
                                                  returns=d["out"], time_axis=-1), ("out",)
    if estimator == "discounted trunc+bootstrap":
        return lambda: puffadv.discounted_returns(d["r"], d["term"], d["trunc"], bootstrap_values=d["bv"],
                                                  gamma=GAMMA, returns=d["out"], time_axis=-1), ("out",)
    if estimator == "retrace Q_ret+delta":
        return lambda: puffadv.retrace(d["r"], d["v"], d["retrace_nv"], d["term"], d["trunc"], target_probs=d["pi"],
                                       behaviour_probs=d["mu"], gamma=GAMMA, lambda_=LAM, c_clip=C_BAR,
                                       returns=d["out"], advantages=d["out2"], time_axis=-1), ("out",)
    if estimator == "q_lambda peng returns":
        return lambda: puffadv.q_lambda(d["r"], d["v"], d["next_values"], d["term"], gamma=GAMMA, lambda_=LAM,
                                        returns=d["out"], advantages=False, time_axis=-1), ("out",)
    if estimator == "episodic cumsum":
        return lambda: puffadv.episodic_cumsum(d["r"], d["dones"], out=d["out"], time_axis=-1), ("out",)
    if estimator == "eligibility traces":
        return lambda: puffadv.eligibility_traces(d["r"], d["dones"], gamma=GAMMA, lambda_=LAM,
                                                  out=d["out"], time_axis=-1), ("out",)
    if estimator == "n_step n=3 returns":
        return lambda: puffadv.n_step_returns(d["r"], d["v"], d["term"], n=3, last_value=d["lv"], gamma=GAMMA,
                                              lambda_=1.0, returns=d["out"], time_axis=-1), ("out",)
    if estimator.startswith("linear_recurrence"):
        reverse = estimator.endswith("reverse")
        return lambda: puffadv.linear_recurrence(d["r"], d["decay"], seed=d["lv"], reverse=reverse, time_axis=1,
                                                 out=d["out"]), ("out",)
    if estimator == "gae per-step gamma+lambda":
        return lambda: puffadv.gae(d["r"], d["v"], d["term"], last_value=d["lv"], gamma=d["gamma_t"],
                                   gae_lambda=d["lam_t"], advantages=d["out"], returns=False, time_axis=-1), ("out",)
    if estimator == "td_lambda per-step gamma+lambda":
        return lambda: puffadv.td_lambda_returns(d["r"], d["v"], d["term"], last_value=d["lv"], gamma=d["gamma_t"],
                                                 lambda_=d["lam_t"], returns=d["out"], time_axis=-1), ("out",)
    if estimator == "vtrace per-step gamma":
        return lambda: puffadv.vtrace(d["r"], d["v"], d["term"], last_value=d["lv"], importance=d["ratio"],
                                      gamma=d["gamma_t"], lambda_=1.0, rho_clip=RHO_BAR, c_clip=C_BAR,
                                      rho_pg_clip=RHO_BAR, vs=d["out"], pg_advantages=d["out2"],
                                      time_axis=-1), ("out", "out2")
    if estimator == "discounted per-step gamma":
        return lambda: puffadv.discounted_returns(d["r"], d["term"], last_value=d["lv"], gamma=d["gamma_t"],
                                                  returns=d["out"], time_axis=-1), ("out",)
    if estimator == "gae next_values":
        return lambda: puffadv.gae(d["r"], d["v"], d["term"], next_values=d["next_values"], gamma=GAMMA,
                                   gae_lambda=LAM, advantages=d["out"], returns=False, time_axis=-1), ("out",)
    raise ValueError(estimator)


def cpu_check(estimator, d) -> float:
    """The largest relative error of the call's outputs against the same call on CPU copies
    of its inputs (the rows without a peer are checked so before they are timed)."""
    host = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in d.items()}
    call, names = puffadv_call(estimator, host)
    call()
    return max(relative_error(d[name].cpu(), host[name]) for name in names)


def rl_triton_call(rl, estimator, d):
    """The rl-triton call; returns a tuple of outputs in puffadv's order."""
    if estimator == "gae last_value":
        return lambda: (rl.compute_gae(d["r"], d["v"], d["term"], gamma=GAMMA, lambda_=LAM, last_value=d["lv"]),)
    if estimator == "gae trunc+bootstrap":
        return lambda: (rl.compute_gae(d["r"], d["v"], d["term"], d["trunc"], gamma=GAMMA, lambda_=LAM,
                                       bootstrap_values=d["bv"]),)
    if estimator == "td_lambda returns":
        return lambda: (rl.compute_lambda_returns(d["r"], d["next_values"], d["term"], gamma=GAMMA, lambda_=LAM,
                                                  bootstrap_values=d["lv_column"]),)
    if estimator == "vtrace vs+pg":
        return lambda: tuple(rl.compute_vtrace(d["lp_t"], d["lp_b"], d["v"], d["r"], d["term"], gamma=GAMMA,
                                               rho_bar=RHO_BAR, c_bar=C_BAR, last_value=d["lv"]))
    if estimator == "discounted last_value":
        return lambda: (rl.compute_discounted_returns(d["r"], d["term"], gamma=GAMMA, bootstrap_values=d["lv_column"]),)
    if estimator == "discounted trunc+bootstrap":
        return lambda: (rl.compute_discounted_returns(d["r"], d["term"], d["trunc"], gamma=GAMMA,
                                                      bootstrap_values=d["bv"]),)
    if estimator == "retrace Q_ret+delta":
        return lambda: rl.compute_retrace(d["P"], d["mu"], d["v"], d["NQ"], d["actions"],
                                          d["r"], d["term"], d["trunc"], gamma=GAMMA, lambda_=LAM, c_bar=C_BAR)[:1]
    if estimator == "q_lambda peng returns":
        return lambda: (rl.compute_lambda_returns(d["r"], d["next_values"], d["term"], gamma=GAMMA, lambda_=LAM,
                                                  bootstrap_values=d["lv_column"]),)
    if estimator == "episodic cumsum":
        return lambda: (rl.compute_episodic_prefix_sum(d["r"], d["dones"]),)
    if estimator == "eligibility traces":
        return lambda: (rl.compute_eligibility_traces(d["r"], d["dones"], GAMMA, LAM),)
    if estimator.startswith("linear_recurrence"):
        scan = importlib.import_module(rl.__name__ + ".ops._scan")  # its private generic scans
        run = scan._run_scan if estimator.endswith("reverse") else scan._run_scan_forward
        return lambda: (run(d["r"], d["decay"], d["lv"]),)
    return None  # no counterpart


def relative_error(got, want):
    got, want = got.double(), want.double()
    return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want).clamp_min(1e-300))
