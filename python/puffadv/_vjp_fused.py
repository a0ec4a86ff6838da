"""The backward on the engine's own kernels: the core's `value_vjp` kind
(src/cpu/estimators_backward.hpp, src/gpu/backward_steps.cuh), the forward's scan run
forwards in time, its producer reading the cotangents (and the forward's importance
ratios) and its epilogue writing dL/drewards and dL/dvalues in one pass. _vjp's
formulas take some 25 elementwise passes around one scan for the same result (the
backward ran at 10-29x the forward's time on the H200, 2026-12-04).

Taken by eager torch backward calls (applies()), estimator by estimator:
- GAE (bootstrap pair or next_values), TD(lambda) (bootstrap pair), discounted returns,
  with or without importance ratios; V-trace's vs, its pg advantages' cotangent entering
  in a few elementwise passes (_pg_cotangent). With ratios the kernel gives
  e_t = rho_t a_t = dL/dr_t, which stands in for a everywhere below.
- the puff advantage: the same kernel in PufferLib's index convention (_puff_shifted);
- Retrace: GAE with next_values and the per-step lambda_t c_{t+1} (_retrace);
- Q(lambda), and TD(lambda) with next_values (its recursion): the kernel with the per-step
  lambda_t (_q_lambda);
- the episodic sums: discounted returns of the cotangent, on that kernel (_episodic);
- n-step returns: the n_step_returns kernel on the cotangent flipped in time (_n_step_windows).
Where gamma or lambda (numbers as tensors, or per-step arrays) want gradients, as in
meta-gradient RL, the value family without ratios reads them off the kernel's dL/d delta
and the forward's output in a few elementwise passes, by the formulas' own functions
(_vjp.decay_gradients, _vjp.discounted_gamma_gradient). Everything else keeps _vjp's
formulas: a gradient for any ratio (it needs a, not rho a), decay gradients elsewhere,
V-trace's sample_mask, n-step returns' decays; torch.compile (the formulas are traced and fused
by inductor), torch.func transforms, and create_graph (double backward differentiates
the formulas). The bootstrap's gradient, gamma_t (1 - terminated_t) a_t where V'_t is
the bootstrap (next_values: every step), is read off a here: a few elementwise passes,
only where last_value, bootstrap_values or next_values is an input.
"""
from __future__ import annotations

import torch

from . import _engine, _frameworks, _n_step_windows, _vjp
from ._estimators import STEP_ROLES, SUM_ROLES
from ._vjp_parts import (Bootstrap, add_grads, as_flags, clip_passing, last_step, next_step, per_step_roles,
                         previous_step, select, sums_vjp)

KINDS = frozenset({"gae", "td_lambda", "vtrace", "discounted_returns", "puff_advantage", "episodic_sum", "retrace",
                   "q_lambda", "n_step_returns"})
_RATIOS = ("importance", "target_probs", "behaviour_probs")
_NO_DECAY_GRADIENTS = frozenset({"retrace", "q_lambda", "episodic_sum", "puff_advantage", "n_step_returns"})


def _is_q_lambda(kind: str, inputs: dict) -> bool:
    """Q(lambda)'s recursion: q_lambda, and TD(lambda) with next_values (src/core/estimate.cpp)."""
    return kind == "q_lambda" or (kind == "td_lambda" and inputs.get("next_values") is not None)


def applies(kind: str, inputs: dict, flags: dict, outputs: dict, cotangents: dict, needed=None,
            decays: bool = False) -> bool:
    """Whether value_vjp computes this backward: its kinds and forms, an eager call on
    plain tensors. `flags`: the flag arrays by role (V-trace's sample_mask is one: the
    kernel has no mask, so a masked call keeps the formulas); `needed`: the roles
    autograd asks gradients for (None: all); `decays`: whether gamma's and lambda's are
    among them."""
    if kind not in KINDS or flags.get("sample_mask") is not None:
        return False
    # With ratios the kernel gives e = rho a (Retrace: c_{t+1} rides in lambda_t): the ratios'
    # and the decays' gradients read a, or the ratios themselves. The estimators below the
    # value family make no decay gradients here either.
    ratios = [role for role in _RATIOS if inputs.get(role) is not None]
    if ratios and (needed is None or any(role in needed for role in ratios)):
        return False
    if decays and (ratios or kind in _NO_DECAY_GRADIENTS or _is_q_lambda(kind, inputs)):
        return False
    if kind == "vtrace" and not _pg_fused(inputs, outputs, cotangents):
        return False
    # The episodic sums' per-step decays would be read one step later: the formulas shift them.
    if kind == "episodic_sum" and (inputs.get("gamma_steps") is not None or inputs.get("lambda_steps") is not None):
        return False
    # A dual level open: the backward's own inputs may carry tangents (forward over reverse),
    # which the formulas' torch operations propagate and the kernel would drop.
    if torch.is_grad_enabled() or _frameworks.torch_compiling() or torch._C._are_functorch_transforms_active() \
            or _frameworks.torch_dual_level_open():
        return False
    return all(type(x) is torch.Tensor for x in inputs.values() if x is not None)


def _n_step_sums(arrays: dict, discount: float, n: int):
    """_n_step_windows' kernel call on torch tensors."""
    out = torch.empty_like(arrays["rewards"])
    _engine.run(_engine.kernel("n_step_returns", (discount, 1.0, 1.0, 1.0), n=n, time_axis=1), "torch", arrays,
                {"returns": out})
    return out


def _pg_fused(inputs: dict, outputs: dict, cotangents: dict) -> bool:
    """Whether V-trace's pg cotangent (with the row sums', which sum the pg series) enters
    the kernel here: with the bootstrap pair, and the pg series stored where the sums
    read it. Without one, V-trace's backward is its vs's alone, in any form."""
    sums = any(cotangents.get(role) is not None for role in SUM_ROLES)
    if cotangents.get("advantages") is None and not sums:
        return True
    return inputs.get("next_values") is None and (not sums or outputs.get("advantages") is not None)


def _number(x) -> float:
    return float(x) if isinstance(x, torch.Tensor) else x


def vjp(kind: str, inputs: dict, flags: dict, scalars: dict, outputs: dict, cotangents: dict, *,
        decays: bool = False, reset_at_start: bool = False, log_probs: bool = False, n: int = 1) -> dict:
    """The gradients by role of one call (batch-major [B, T] tensors, flags bool), as
    _vjp.vjp gives them; gamma's and lambda's too where `decays` (per step: "gamma" /
    "lambda", or the per-step arrays' roles). `n`: n_step_returns' window."""
    if kind == "n_step_returns":
        numbers = {role: _number(scalars[role]) for role in ("gamma", "lambda")}
        return _n_step_windows.vjp(torch, inputs, flags, numbers, outputs, cotangents, n, _n_step_sums)
    if kind == "episodic_sum":
        return _episodic(inputs, flags, scalars, cotangents, reset_at_start)
    if kind == "retrace":
        return _retrace(inputs, flags, scalars, outputs, cotangents, log_probs)
    if _is_q_lambda(kind, inputs):
        return _q_lambda(inputs, flags, scalars, outputs, cotangents)
    return _value_family(kind, inputs, flags, scalars, outputs, cotangents, decays)


def _value_family(kind: str, inputs: dict, flags: dict, scalars: dict, outputs: dict, cotangents: dict,
                  decays: bool) -> dict:
    """GAE, TD(lambda), V-trace, discounted returns and the puff advantage on value_vjp."""
    r = inputs["rewards"]
    total, grad_returns, pg, adv = _SERIES.get(kind, _advantage_series)(inputs, flags, scalars, outputs,
                                                                         cotangents)
    if total is None:
        total = torch.zeros_like(r)
    terminated = flags.get("terminated")
    if terminated is None:
        terminated = torch.zeros_like(r, dtype=torch.bool)
    if kind == "puff_advantage":  # PufferLib's step t reads dones_{t+1}: those end its episode
        terminated = next_step(torch, terminated)
    gamma = inputs.get("gamma_steps")
    g = _number(scalars["gamma"]) if gamma is None else gamma  # gamma_t where the bootstrap is read
    lam = 1.0 if kind == "discounted_returns" else _number(scalars["lambda"])
    total = _dense(total, r)
    grad_returns = None if grad_returns is None else _dense(grad_returns, r)
    # GAE with next_values reads no V_{t+1}: the kernel gives a alone (its grad_values adds the
    # bootstrap pair's gamma_{t-1} a_{t-1}), and dL/dV = dL/dreturns - a is done here.
    next_values = inputs.get("next_values")
    by_kernel = kind != "discounted_returns" and next_values is None
    ratios = inputs.get("importance")
    clips = (1.0, 1.0, 1.0, 1.0) if ratios is None else \
        (scalars["rho_clip"], scalars["c_clip"], 1.0, scalars.get("alpha", 1.0) if kind == "vtrace" else 1.0)
    grads = {"rewards": torch.empty_like(total)}
    if by_kernel:
        grads["values"] = torch.empty_like(total)
    _run_value_vjp({"rewards": total, "values": grad_returns if by_kernel else None, "terminated": terminated,
                    "truncated": flags.get("truncated"), "gamma_steps": gamma,
                    "lambda_steps": inputs.get("lambda_steps"), "importance": ratios},
                   (_number(scalars["gamma"]), lam, *clips), grads["rewards"], grads.get("values"))
    if pg is not None:  # the pg target's own terms: r_t + ... - V_t, and V'_t where the row ends
        grads["rewards"] += pg
        if by_kernel:
            grads["values"] -= pg
    if kind == "puff_advantage":
        return _puff_shifted(grads)
    a = grads["rewards"]  # dL/d delta_t (with ratios: e = rho a), which reads V'_t with gamma_t
    if next_values is not None:
        grads["values"] = -a if grad_returns is None else grad_returns - a
        grads["next_values"] = (a * g).masked_fill_(terminated, 0)
    elif inputs.get("last_value") is not None or inputs.get("bootstrap_values") is not None:
        _bootstrap_grads(grads, inputs, a, terminated, flags.get("truncated"), g)
    if decays:
        _decay_gradients(kind, grads, inputs, flags, scalars, outputs, adv)
        per_step_roles(grads, inputs)
    return grads


# How a kind's outputs meet the scan's adjoint: (S's whole cotangent, the returns' own
# (added to dL/dV), V-trace's pg part rho_pg dL/dpg, the advantages where made), None for 0.
def _advantage_series(inputs: dict, flags: dict, scalars: dict, outputs: dict, cot: dict) -> tuple:
    """GAE, TD(lambda), the puff advantage: A = S, returns A + V. The advantages (returns - V
    where none were output: a pass) only where the row sums read them."""
    adv = _advantages(outputs, inputs["values"]) if any(cot.get(role) is not None for role in SUM_ROLES) else None
    grad_returns = cot.get("returns")
    return add_grads(add_grads(cot.get("advantages"), grad_returns), sums_vjp(torch, adv, cot)), grad_returns, None, adv


def _discounted_series(inputs: dict, flags: dict, scalars: dict, outputs: dict, cot: dict) -> tuple:
    """Discounted returns: G = S, their only series."""
    return add_grads(cot.get("returns"), sums_vjp(torch, outputs["returns"], cot)), None, None, None


def _vtrace_series(inputs: dict, flags: dict, scalars: dict, outputs: dict, cot: dict) -> tuple:
    """V-trace: vs (returns) and the pg advantages, which enter S's cotangent (_pg_cotangent)."""
    pg, total = _pg_cotangent(inputs, flags, scalars, outputs, cot)
    return total, total, pg, None


_SERIES = {"discounted_returns": _discounted_series, "vtrace": _vtrace_series}


def _run_value_vjp(arrays: dict, scalars: tuple, grad_rewards, grad_values=None) -> None:
    """The core's value_vjp on batch-major `arrays` (role -> tensor or None; the cotangent in
    rewards'), `scalars` (gamma, lambda, rho_clip, c_clip[, rho_pg_clip, alpha]): writes
    dL/drewards (and, where given, dL/dvalues)."""
    kernel = _engine.kernel("value_vjp", scalars, time_axis=1)
    _engine.run(kernel, "torch", {k: v for k, v in arrays.items() if v is not None},
                {"advantages": grad_rewards, "returns": grad_values})


def _pg_cotangent(inputs: dict, flags: dict, scalars: dict, outputs: dict, cot: dict):
    """V-trace's pg advantages pg_t = rho_pg_t (r_t + gamma_t (1 - term_t) vs'_t - V_t), vs'_t
    = vs_{t+1} inside an episode, the bootstrap where the row ends or is cut: their
    cotangent (with the row sums', on the pg series) gives h = rho_pg dL/dpg, which the
    caller adds to dL/dr and takes from dL/dV, and gamma_t h_t, which enters step t + 1's
    vs (so its adjoint u and dL/dV_{t+1}) inside an episode. Returns (h, vs's whole
    cotangent), h None where there is no pg cotangent. Where the row ends, gamma_t
    (1 - term_t) h_t is the bootstrap's, read off dL/dr with the TD part's (_bootstrap_grads)."""
    g_vs = cot.get("returns")
    g = add_grads(cot.get("advantages"), sums_vjp(torch, outputs.get("advantages"), cot))
    if g is None:
        return None, g_vs
    ratios = inputs.get("importance")
    if ratios is not None:
        g = g * clip_passing(torch, ratios, scalars["rho_pg_clip"], scalars.get("alpha", 1.0))[0]
    term, trunc = as_flags(torch, flags, g)
    ends = term | trunc  # the row's last step is never shifted in below
    gamma = inputs.get("gamma_steps")
    gamma = _number(scalars["gamma"]) if gamma is None else gamma[..., :-1]
    # gamma_t h_t one step later, selected away where step t ends or is cut (a NaN there stays
    # out), in one fresh array that then takes vs's own cotangent: one allocation, not four.
    total = torch.zeros_like(g)
    torch.mul(g[..., :-1], gamma, out=total[..., 1:])
    total[..., 1:].masked_fill_(ends[..., :-1], 0)
    if g_vs is not None:
        total += g_vs
    return g, total


def _episodic(inputs: dict, flags: dict, scalars: dict, cot: dict, reset_at_start: bool) -> dict:
    """The episodic sums run forwards, C_t = x_t + k_t C_{t-1} with k_t = gamma lambda
    (1 - reset_t) and C_{-1} the seed; their VJP a_t = u_t + k_{t+1} a_{t+1} runs backwards,
    and is discounted returns of the cotangent u with gamma lambda as the discount and
    reset_{t+1} as the flags: dones_t (reset_t = dones_{t-1}), or dones_{t+1} with
    reset_at_start. So the discounted_returns kernel is this backward, in one pass."""
    x, dones = inputs["rewards"], flags["terminated"]
    decay = _number(scalars["gamma"]) * _number(scalars["lambda"])
    u = cot.get("advantages")
    grads = {"rewards": torch.zeros_like(x) if u is None else torch.empty_like(x)}
    if u is not None:
        ends = next_step(torch, dones) if reset_at_start else dones
        kernel = _engine.kernel("discounted_returns", (decay, 1.0, 1.0, 1.0), time_axis=1)
        _engine.run(kernel, "torch", {"rewards": _dense(u, x), "terminated": ends}, {"advantages": grads["rewards"]})
    if inputs.get("last_value") is not None:  # C_0 reads the seed with k_0 (reset_0: dones_0 at start)
        a = grads["rewards"]
        if a.shape[-1] == 0:
            grads["last_value"] = a.new_zeros(a.shape[:-1])
        else:
            grads["last_value"] = a[..., 0] * decay
            if reset_at_start:
                grads["last_value"].masked_fill_(dones[..., 0], 0)
    return grads


def _retrace(inputs: dict, flags: dict, scalars: dict, outputs: dict, cot: dict, log_probs: bool) -> dict:
    """Retrace is GAE with next_values, q in the values' place (Delta = S, returns S + q)
    and the per-step lambda_t c_{t+1}, c_t = min(c_clip, pi_t / mu_t) (log-probabilities:
    exp of their difference): its backward is that one's, those lambdas made here in a few
    elementwise passes (the ratios are constants there: applies())."""
    pi, mu = inputs["target_probs"], inputs["behaviour_probs"]
    mapped = {role: x for role, x in inputs.items() if role not in ("target_probs", "behaviour_probs")}
    lam = inputs.get("lambda_steps")
    lam = _number(scalars["lambda"]) if lam is None else lam[..., :-1]
    # lambda_t c_{t+1} in one fresh array: the ratio of step t + 1 written at step t, then
    # c = min(c_clip, ratio) as clip_passing has it (fmin: a NaN ratio gives the clip) and the
    # product, in place; c_T = 0 (the row's last step is cut anyway). One fresh array and
    # no masks, where there were two arrays and two masks (four arrays before that).
    lam_c = torch.empty_like(pi)
    c = lam_c[..., :-1]
    if log_probs:
        torch.sub(pi[..., 1:], mu[..., 1:], out=c).exp_()
    else:
        torch.div(pi[..., 1:], mu[..., 1:], out=c)
    # (the clip as a 0-d CPU tensor: a GPU one would be a host-to-device copy in the backward)
    torch.fmin(c, torch.tensor(scalars["c_clip"], dtype=c.dtype), out=c).mul_(lam)
    lam_c[..., -1:] = 0
    mapped["lambda_steps"] = lam_c
    return _value_family("gae", mapped, flags, scalars, outputs, cot, False)


def _q_lambda(inputs: dict, flags: dict, scalars: dict, outputs: dict, cot: dict) -> dict:
    """Q(lambda): G = S with k_t = gamma_t lambda_t, 0 where the step is cut (an end, the
    row's last step), lambda_t = lambda (Peng) or lambda greedy_{t+1} (Watkins; per step
    too). value_vjp with those lambda_t gives a = dL/dr; q's gradient is the advantages'
    (G - q) cotangent negated; next_values' is gamma_t a_t (1 - term_t) where the step is
    cut, gamma_t a_t (1 - lambda_t) elsewhere: _vjp._q_lambda's, in a few passes."""
    r, q = inputs["rewards"], inputs["values"]
    term, trunc = as_flags(torch, flags, r)
    lam = inputs.get("lambda_steps")
    lam = _number(scalars["lambda"]) if lam is None else lam
    greedy = flags.get("greedy")
    # lambda_t selected (not multiplied) where greedy_{t+1} is unset: a NaN lambda there stays out
    if greedy is None:
        lam_t = lam
    elif isinstance(lam, torch.Tensor):
        lam_t = torch.where(next_step(torch, greedy), lam, 0.0)
    else:  # one fresh array of r's dtype, filled through shifted views (no shifted copy of greedy)
        lam_t = torch.zeros_like(r)
        lam_t[..., :-1].masked_fill_(greedy[..., 1:], lam)
    adv = _advantages(outputs, q) if any(cot.get(role) is not None for role in SUM_ROLES) else None
    adv_cot = add_grads(cot.get("advantages"), sums_vjp(torch, adv, cot))
    total = add_grads(cot.get("returns"), adv_cot)
    total = torch.zeros_like(r) if total is None else _dense(total, r)
    gamma = inputs.get("gamma_steps")
    g = _number(scalars["gamma"]) if gamma is None else gamma
    per_step_lambda = isinstance(lam_t, torch.Tensor)
    a = torch.empty_like(total)
    _run_value_vjp({"rewards": total, "terminated": term, "truncated": flags.get("truncated"), "gamma_steps": gamma,
                    "lambda_steps": lam_t if per_step_lambda else None},
                   (_number(scalars["gamma"]), 1.0 if per_step_lambda else lam_t, 1.0, 1.0), a)
    # next_values: gamma_t a_t (1 - lambda_t) inside the trace; where it is cut (an end, the
    # row's last step) gamma_t a_t, 0 at a termination (selected: a NaN there stays out).
    # Made in one array, in place: 1 - lambda_t (in lambda_t's own array where it is ours),
    # 1 where cut, times a and gamma_t, 0 where terminated. No fresh array where Watkins'
    # lambda_t is ours (there were four: a gamma, 1 - lambda, their product, the where).
    cut = term | trunc
    if cut.shape[-1] > 0:
        cut[..., -1] = True
    if not per_step_lambda:
        factor = torch.full_like(a, 1 - lam_t)
    elif greedy is not None:  # Watkins' lam_t is this call's own array, free once the kernel read it
        factor = lam_t.neg_().add_(1)
    else:
        factor = torch.rsub(lam_t, 1)
    next_grad = factor.masked_fill_(cut, 1).mul_(a).mul_(g).masked_fill_(term, 0)
    return {"rewards": a, "values": torch.zeros_like(q) if adv_cot is None else -adv_cot, "next_values": next_grad}


def _puff_shifted(grads: dict) -> dict:
    """The puff advantage in PufferLib's index convention: step t reads r_{t+1} (and
    dones_{t+1}, the kernel's flags), and its last step's advantage is 0. So dL/dr_{t+1}
    is the kernel's e_t (dL/dr_0 = 0), and the last step's e, of a constant, is taken back
    out of dL/dV there (the kernel took it as -e for delta's -V_t)."""
    e = grads["rewards"]
    if e.shape[-1] > 0:
        grads["values"][..., -1] += e[..., -1]
    grads["rewards"] = previous_step(torch, e)
    return grads


def _advantages(outputs: dict, values):
    return outputs["advantages"] if outputs.get("advantages") is not None else outputs["returns"] - values


def _decay_gradients(kind: str, grads: dict, inputs: dict, flags: dict, scalars: dict, outputs: dict,
                     adv=None) -> None:
    """gamma's and lambda's per-step gradients (grads["gamma"], grads["lambda"]) from the
    kernel's a = dL/d delta (grads["rewards"]) and the forward's output (`adv`: its
    advantages when vjp made them already), by _vjp's formulas for these forms (no
    ratios: rho = c = 1)."""
    a, r = grads["rewards"], inputs["rewards"]
    term, trunc = as_flags(torch, flags, r)
    last = last_step(torch, term)
    end, keep = trunc | last, ~(term | trunc | last)
    s = {role: inputs[STEP_ROLES[role]] if inputs.get(STEP_ROLES[role]) is not None else scalars.get(role)
         for role in STEP_ROLES}
    if kind == "discounted_returns":
        bootstrap = Bootstrap(torch, inputs, end, None)
        grads["gamma"] = _vjp.discounted_gamma_gradient(torch, a, outputs["returns"], bootstrap, term, keep)
        return
    values = inputs["values"]
    adv = _advantages(outputs, values) if adv is None else adv
    next_values = inputs["next_values"] if inputs.get("next_values") is not None else \
        Bootstrap(torch, inputs, end, values).value
    _vjp.decay_gradients(torch, grads, s, a, next_values, select(torch, keep, a * next_step(torch, adv)), ~term, keep)


def _dense(x, like):
    """x as the kernel reads it at speed: itself where no stride is 0, else (a cotangent
    expanded from a sum: 0-strided) a copy in `like`'s layout, so that a time-major call's
    arrays stay time-major together rather than mixing layouts."""
    if x.numel() <= 1 or 0 not in x.stride():
        return x
    return torch.empty_like(like, dtype=x.dtype).copy_(x)


def _bootstrap_grads(grads: dict, inputs: dict, a, terminated, truncated, gamma) -> None:
    """The bootstrap's gradient gamma_t (1 - terminated_t) a_t where V'_t is read from it:
    bootstrap_values at truncations and the row's last step, last_value at the last step.
    Filled by mask (a NaN of a step that reads no bootstrap stays out); few passes: each is
    a kernel beside the scan's one."""
    if inputs.get("bootstrap_values") is not None:
        unread = torch.ones_like(terminated) if truncated is None else terminated | ~truncated
        if a.shape[-1] > 0:
            unread[..., -1] = terminated[..., -1]
        grads["bootstrap_values"] = (a * gamma).masked_fill_(unread, 0)
    elif a.shape[-1] == 0:
        grads["last_value"] = a.new_zeros(a.shape[:-1])
    else:
        g_last = gamma[..., -1] if isinstance(gamma, torch.Tensor) else gamma
        grads["last_value"] = (a[..., -1] * g_last).masked_fill_(terminated[..., -1], 0)
