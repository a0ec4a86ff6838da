"""Every estimator's vector-Jacobian product, written once for torch and jax.numpy
(`xp`: the array namespace; the few calls used are spelled alike in both).

Every estimator is a linear recurrence S_t = delta_t + k_t S_{t+1} (backwards in
time; the episodic sums run forwards, S_t = delta_t + k_t S_{t-1}) with a producer
(delta_t, k_t from step t's inputs) and an epilogue (the outputs from S). Its VJP:
(1) the epilogue's VJP gives the adjoint u_t of S_t; (2) the same recurrence run in
the opposite direction with the decays shifted one step gives a_t = dL/d delta_t
(`engine_scan`); (3) the producer's VJP gives each input's gradient from a_t and from
dL/dk_t = a_t S_{t+1}. An input read at t+1 (values[t+1] as V'_t) gathers from
two steps. n-step returns are a window, not a scan: their VJP runs the window's
steps mirrored (`_n_step`).

Arrays are batch-major [B, T] (the caller moves the time axis last), flags bool,
per-row arrays [B]. Clips (`min(x, clip)`, NaN -> clip as C's fmin) pass the
gradient where x < clip and give 0 where x >= clip (the clipped side, ties
included) or x is NaN. sign(0) = 0 for abs_sums. gamma and lambda come back as
per-step [B, T] gradients (`grad_like` sums them to the scalar's shape). Where a
step's input is never read (next values after a termination, the window past an
episode end) its gradient is exactly 0, by selection (NaN there stays out).
"""
from __future__ import annotations

from ._estimators import STEP_ROLES
from ._vjp_parts import (Bootstrap, add_grads, clip_passing, derivative_only, engine_scan, episodes, last_step,
                         next_step, per_step_roles, previous_step, producer_tail, select, sums_vjp, through_clip)
from ._vjp_parts import SCANS, grad_like  # noqa: F401  (reached as _vjp.SCANS, _vjp.grad_like)


def _value_family(xp, kind, x, f, s, out, cot):
    """gae, td_lambda, vtrace: delta_t = rho_t (r_t + gamma_t (1-term_t) V'_t - v_t),
    k_t = gamma_t lambda_t c_t (1 - done_t); A = S; returns A + v; vtrace's pg epilogue.
    V-trace's sample_mask m_t (rlax): A_t = A_{t+1} where m_t = 0, so delta_t -> m_t
    delta_t and k_t -> 1 there; leaky V-trace's alpha mixes each clipped ratio (clip_passing)."""
    r, v, imp = x["rewards"], x["values"], x.get("importance")
    term, _, _, end, cut = episodes(xp, f, r)
    live = ~term  # where step t reads its bootstrap or next value
    keep = ~cut
    sampled = f.get("sample_mask")
    traced = keep if sampled is None else keep & sampled  # where k_t = gamma lambda c_t is read
    # next_values (issue 29): V'_t at every step, truncated only cuts; else the bootstrap pair.
    boot = None if x.get("next_values") is not None else Bootstrap(xp, x, end, v)
    gamma, lam, alpha = s["gamma"], s["lambda"], s.get("alpha", 1.0)
    scalars_too = s["differentiate_scalars"]
    (rho, rho_passes), (c, c_passes) = ((1.0, None), (1.0, None)) if imp is None else \
        (clip_passing(xp, imp, s["rho_clip"], alpha), clip_passing(xp, imp, s["c_clip"], alpha))
    adv = out["advantages"] if kind != "vtrace" and out.get("advantages") is not None else out["returns"] - v
    grads = {"rewards": None, "values": None}  # None: 0 so far (add_grads), no pass over zeros
    g_nv = None
    if kind == "vtrace":
        u = cot.get("returns")
        grads["values"] = add_grads(grads["values"], u)
        g_pg = add_grads(cot.get("advantages"), None)
        if any(cot.get(role) is not None for role in ("abs_sums", "sums", "square_sums")) or g_pg is not None:
            vs = out["returns"]
            inside = keep
            vs_next = xp.where(inside, next_step(xp, vs), _next_values(x, boot))
            (rho_pg, pg_passes) = (1.0, None) if imp is None else clip_passing(xp, imp, s["rho_pg_clip"], alpha)
            target = r + select(xp, live, gamma * vs_next) - v
            g_pg = add_grads(g_pg, sums_vjp(xp, rho_pg * target, cot))
            g_target = g_pg * rho_pg
            grads["rewards"] = add_grads(grads["rewards"], g_target)
            grads["values"] = add_grads(grads["values"], -g_target)
            g_next = select(xp, live, g_target * gamma)
            via_vs = previous_step(xp, select(xp, inside, g_next))
            u = add_grads(u, via_vs)
            grads["values"] = grads["values"] + via_vs
            g_nv = select(xp, ~inside, g_next)
            if scalars_too:
                grads["gamma"] = select(xp, live, g_target * vs_next)
            if imp is not None:
                grads["importance"] = through_clip(xp, pg_passes, g_pg * target, alpha)
        u = xp.zeros_like(r) if u is None else u
    else:
        u = add_grads(add_grads(cot.get("advantages"), cot.get("returns")), sums_vjp(xp, adv, cot))
        u = xp.zeros_like(r) if u is None else u
        grads["values"] = cot.get("returns")
    k = select(xp, keep, gamma * lam * c + xp.zeros_like(r))
    if sampled is not None:
        k = xp.where(sampled, k, xp.ones_like(k))
    a = engine_scan(u, previous_step(xp, k), reverse=False)
    g_td = a * rho if sampled is None else select(xp, sampled, a * rho)
    grads["rewards"] = add_grads(grads["rewards"], g_td)
    grads["values"] = -g_td if grads["values"] is None else grads["values"] - g_td
    g_nv = add_grads(g_nv, select(xp, live, g_td * gamma))
    if scalars_too or imp is not None:
        g_k = select(xp, traced, a * next_step(xp, adv))
    if scalars_too:
        decay_gradients(xp, grads, s, g_td, _next_values(x, boot), g_k * c, live, traced)
    if imp is not None:
        td = r + select(xp, live, gamma * _next_values(x, boot)) - v
        g_rho = a * td if sampled is None else select(xp, sampled, a * td)
        g_c = select(xp, traced, g_k * gamma * lam)
        grads["importance"] = add_grads(grads.get("importance"),
                                   through_clip(xp, rho_passes, g_rho, alpha) + through_clip(xp, c_passes, g_c, alpha))
    if boot is None:
        grads["next_values"] = g_nv
    else:
        boot.vjp(g_nv, grads)
    return grads


def decay_gradients(xp, grads, s, g_td, next_values, g_k_c, live, traced):
    """gamma's and lambda's per-step gradients in the value family (added to grads): delta_t
    reads gamma_t in rho_t gamma_t (1 - term_t) V'_t (g_td: dL/d delta_t times rho_t), and
    k_t = gamma_t lambda_t c_t at the steps `traced` (g_k_c: dL/dk_t times c_t); `live`: the
    steps not terminated. Also taken by the fused backward (_vjp_fused), whose kernel gives
    dL/d delta_t."""
    grads["gamma"] = add_grads(grads.get("gamma"), select(xp, live, g_td * next_values))
    producer_tail(xp, grads, g_k_c, s, traced)


def discounted_gamma_gradient(xp, a, returns, bootstrap, term, keep):
    """gamma's per-step gradient in discounted returns, G_t = r_t + gamma_t ((1 - term_t) B_t +
    (1 - done_t) G_{t+1}), from a_t = dL/dG_t's scan (here and in _vjp_fused)."""
    return select(xp, ~term, a * bootstrap.value) + select(xp, keep, a * next_step(xp, returns))


def _next_values(x, boot):
    """V'_t: the next_values given, else the bootstrap pair's (made when first read)."""
    return x["next_values"] if boot is None else boot.value


def _discounted(xp, x, f, s, out, cot):
    """delta_t = r_t + gamma (1-term_t) B_t (B_t the bootstrap where the row ends or is
    truncated, else 0), k_t = gamma (1 - done_t); G = S."""
    r, gamma = x["rewards"], s["gamma"]
    term, _, _, end, cut = episodes(xp, f, r)
    keep = ~cut
    boot = Bootstrap(xp, x, end, None)
    g = out["returns"]
    u = add_grads(cot.get("returns"), sums_vjp(xp, g, cot))
    u = xp.zeros_like(r) if u is None else u
    k = select(xp, keep, gamma + xp.zeros_like(r))
    a = engine_scan(u, previous_step(xp, k), reverse=False)
    grads = {"rewards": a}
    if s["differentiate_scalars"]:
        grads["gamma"] = discounted_gamma_gradient(xp, a, g, boot, term, keep)
    boot.vjp(select(xp, ~term, a * gamma), grads, values_role=None)
    return grads


def _n_step(xp, x, f, s, out, cot, n):
    """G = W^n: W^1 = r + gamma (1-term) V'; W^j = W^1 where the step is cut (an end,
    the row's last step), else r + gamma ((1-lambda) V' + lambda W^(j-1)_{t+1}). Linear
    in W: the adjoint runs the window's steps mirrored (earlier, not later)."""
    r, v, gamma, lam = x["rewards"], x["values"], s["gamma"], s["lambda"]
    term, _, _, end, cut = episodes(xp, f, r)
    # next_values (issue 29): V'_s at every step (rlax's v_t); else the bootstrap pair.
    boot = None if x.get("next_values") is not None else Bootstrap(xp, x, end, v)
    nv = x["next_values"] if boot is None else boot.value
    steps = max(1, min(n, r.shape[-1]))
    one = r + select(xp, ~term, gamma * nv)
    windows = [one]
    if s["differentiate_scalars"]:
        for _ in range(steps - 1):  # W^1 .. W^(n-1), read by gamma's and lambda's gradients
            windows.append(xp.where(cut, one, r + gamma * ((1 - lam) * nv + lam * next_step(xp, windows[-1]))))
    adv_cot = add_grads(cot.get("advantages"), sums_vjp(xp, out["returns"] - v, cot))
    g = add_grads(cot.get("returns"), adv_cot)
    g = xp.zeros_like(r) if g is None else g
    grads = {"rewards": xp.zeros_like(r), "values": xp.zeros_like(v) if adv_cot is None else -adv_cot}
    g_one, g_nv = xp.zeros_like(r), xp.zeros_like(r)
    g_gamma, g_lam = xp.zeros_like(r), xp.zeros_like(r)
    for j in range(steps, 1, -1):
        g_one = g_one + select(xp, cut, g)
        mixed = select(xp, ~cut, g)
        grads["rewards"] = grads["rewards"] + mixed
        g_nv = g_nv + select(xp, ~cut, mixed * gamma * (1 - lam))
        if len(windows) == steps:
            later = next_step(xp, windows[j - 2])
            g_gamma = g_gamma + select(xp, ~cut, mixed * ((1 - lam) * nv + lam * later))
            g_lam = g_lam + select(xp, ~cut, mixed * gamma * (later - nv))
        g = previous_step(xp, select(xp, ~cut, mixed * gamma * lam))
    g_one = g_one + g
    grads["rewards"] = grads["rewards"] + g_one
    g_nv = g_nv + select(xp, ~term, g_one * gamma)
    if s["differentiate_scalars"]:
        grads["gamma"], grads["lambda"] = g_gamma + select(xp, ~term, g_one * nv), g_lam
    if boot is None:
        grads["next_values"] = g_nv
    else:
        boot.vjp(g_nv, grads)
    return grads


def _retrace(xp, x, f, s, out, cot, log_probs):
    """delta_t = r_t + gamma (1-term_t) next_values_t - q_t, k_t = gamma lambda
    min(c_clip, ratio_{t+1}) (1 - done_t); Delta = S; returns Delta + q."""
    r, q, nv = x["rewards"], x["values"], x["next_values"]
    pi, mu = x.get("target_probs"), x.get("behaviour_probs")
    gamma, lam = s["gamma"], s["lambda"]
    masks = episodes(xp, f, r)
    term, keep = masks.term, ~masks.cut
    delta = out["advantages"] if out.get("advantages") is not None else out["returns"] - q
    if pi is None:
        ratio, c, passes = None, 1.0, None
    else:
        ratio = xp.exp(pi - mu) if log_probs else pi / mu
        c, passes = clip_passing(xp, ratio, s["c_clip"])
    c_next = next_step(xp, c + xp.zeros_like(r))
    u = add_grads(add_grads(cot.get("advantages"), cot.get("returns")), sums_vjp(xp, delta, cot))
    u = xp.zeros_like(r) if u is None else u
    a = engine_scan(u, previous_step(xp, select(xp, keep, gamma * lam * c_next)), reverse=False)
    grads = {"rewards": a, "values": -a if cot.get("returns") is None else cot["returns"] - a,
             "next_values": select(xp, ~term, a * gamma)}
    if s["differentiate_scalars"] or ratio is not None:
        g_k = select(xp, keep, a * next_step(xp, delta))
    if s["differentiate_scalars"]:
        grads["gamma"] = select(xp, ~term, a * nv)
        producer_tail(xp, grads, g_k * c_next, s, keep)
    if ratio is not None:
        g_ratio = select(xp, passes, previous_step(xp, select(xp, keep, g_k * gamma * lam)))
        grads["target_probs"] = g_ratio * ratio if log_probs else g_ratio / mu
        grads["behaviour_probs"] = -g_ratio * ratio if log_probs else -g_ratio * ratio / mu
    return grads


def _q_lambda(xp, x, f, s, out, cot):
    """Cut steps (an end, the row's last step): G_t = r_t + gamma (1-term_t) nv_t; else
    delta_t = r_t + gamma (1-lambda_t) nv_t, k_t = gamma lambda_t, lambda_t = lambda
    (Peng) or lambda greedy_{t+1} (Watkins). G = S; advantages G - q."""
    r, q, nv = x["rewards"], x["values"], x["next_values"]
    gamma, lam = s["gamma"], s["lambda"]
    masks = episodes(xp, f, r)
    term, cut = masks.term, masks.cut
    greedy = f.get("greedy")
    traced = ~cut if greedy is None else ~cut & next_step(xp, greedy)  # where lambda_t is read
    lam_t = lam if greedy is None else select(xp, next_step(xp, greedy), lam + xp.zeros_like(r))
    g_ret = out["returns"] if out.get("returns") is not None else out["advantages"] + q
    adv_cot = add_grads(cot.get("advantages"), sums_vjp(xp, g_ret - q, cot))
    u = add_grads(cot.get("returns"), adv_cot)
    u = xp.zeros_like(r) if u is None else u
    a = engine_scan(u, previous_step(xp, select(xp, ~cut, gamma * lam_t + xp.zeros_like(r))), reverse=False)
    later = next_step(xp, g_ret)
    grads = {"rewards": a, "values": xp.zeros_like(q) if adv_cot is None else -adv_cot,
             "next_values": xp.where(cut, select(xp, ~term, a * gamma), a * gamma * (1 - lam_t))}
    if s["differentiate_scalars"]:
        grads["gamma"] = xp.where(cut, select(xp, ~term, a * nv), a * ((1 - lam_t) * nv + lam_t * later))
        grads["lambda"] = select(xp, traced, a * gamma * (later - nv))
    return grads


def _episodic(xp, x, f, s, out, cot, reset_at_start):
    """Forwards: C_t = x_t + k_t C_{t-1}, C_{-1} = seed, k_t = gamma lambda (1 - reset_t)
    (episodic_cumsum: gamma = lambda = 1), reset_t = dones_t ('starts_at') or dones_{t-1}."""
    inputs, seed = x["rewards"], x.get("last_value")
    dones = f["terminated"]
    reset = dones if reset_at_start else previous_step(xp, dones)
    gamma, lam = s["gamma"], s["lambda"]
    k = select(xp, ~reset, gamma * lam + xp.zeros_like(inputs))
    c = out["advantages"]
    u = cot.get("advantages")
    u = xp.zeros_like(inputs) if u is None else u
    a = engine_scan(u, next_step(xp, k), reverse=True)
    grads = {"rewards": a}
    if s["differentiate_scalars"]:
        before = xp.zeros_like(inputs[..., :1]) if seed is None else seed[..., None]
        previous = xp.concatenate((before, c[..., :-1]), axis=-1)
        g_decay = select(xp, ~reset, a * previous)
        grads["gamma"], grads["lambda"] = select(xp, ~reset, g_decay * lam), select(xp, ~reset, g_decay * gamma)
    if seed is not None:
        grads["last_value"] = a[..., 0] * k[..., 0]
    return grads


def _puff(xp, x, f, s, out, cot):
    """PufferLib's index convention: for t < H-1, delta_t = rho_t (r_{t+1} + gamma
    (1-dones_{t+1}) v_{t+1} - v_t), k_t = gamma lambda c_t (1-dones_{t+1}); A_{H-1} = 0.
    Float dones (_vjp_parts.puff_dones) come as gamma_t = gamma (1 - dones_{t+1}) per step,
    exactly 0 where dones_{t+1} is 1, which is a flag too: there the decay and the values'
    term are arithmetic (0 either way, and gamma_t's derivative in dones stays), and what
    the selection drops (values[t+1] and A_{t+1}, which a NaN beyond the done may be) keeps
    its derivative in dones through derivative_only where the caller gives the float dones
    (x["dones"], s["dones_gamma"]: gamma as a number), for the second derivatives."""
    r, v, imp = x["rewards"], x["values"], x["importance"]
    dones = f["terminated"]
    gamma, lam = s["gamma"], s["lambda"]
    valid = ~last_step(xp, dones)
    going = valid & ~next_step(xp, dones)
    per_step = len(getattr(gamma, "shape", ())) > 0  # len: dynamo
    (rho, rho_passes), (c, c_passes) = clip_passing(xp, imp, s["rho_clip"]), clip_passing(xp, imp, s["c_clip"])
    adv = out["advantages"] if out.get("advantages") is not None else out["returns"] - v
    u = add_grads(add_grads(cot.get("advantages"), cot.get("returns")), sums_vjp(xp, adv, cot))
    u = xp.zeros_like(r) if u is None else u
    # previous_step drops step H-1's decay and values' term: per step, only gamma_t = 0 ends the trace.
    decay = gamma * lam * c
    a = engine_scan(u, previous_step(xp, decay if per_step else select(xp, going, decay)), reverse=False)
    # What a NaN may be (values[t+1], A_{t+1}, the TD term) is selected before it is multiplied,
    # so that the derivatives of these products (double backward) never make 0 * NaN either.
    v_next, adv_next = next_step(xp, v), next_step(xp, adv)
    read_v, read_adv = select(xp, going, v_next), select(xp, going, adv_next)
    td = next_step(xp, r) + gamma * read_v - v
    g_td = select(xp, valid, a * rho)
    carried = g_td * gamma
    grads = {"values": -g_td + previous_step(xp, carried if per_step else select(xp, going, carried)),
             "rewards": previous_step(xp, g_td)}
    if cot.get("returns") is not None:
        grads["values"] = grads["values"] + cot["returns"]
    if s["differentiate_scalars"]:
        g_k = a * read_adv
        grads["gamma"] = g_td * read_v
        producer_tail(xp, grads, g_k * c, s, going)
    grads["importance"] = a * select(xp, rho_passes & valid, td) + a * select(xp, c_passes, read_adv) * gamma * lam
    if x.get("dones") is not None:  # the terms gamma_t X_t selected away where dones_{t+1} is 1
        ends, slope = valid & ~going, -s["dones_gamma"]  # d gamma_t / d dones_{t+1}

        def lost(term):  # 0, with the derivative -gamma X_t d dones_{t+1} at those steps
            return derivative_only(next_step(xp, x["dones"]), select(xp, ends, term) * slope)

        grads["importance"] = grads["importance"] + lost(
            a * (select(xp, rho_passes, v_next) + select(xp, c_passes, adv_next) * lam))
        if s["differentiate_scalars"]:
            grads["lambda"] = grads["lambda"] + lost(a * adv_next * c)
    return grads


def vjp(xp, kind: str, inputs: dict, flags: dict, scalars: dict, outputs: dict, cotangents: dict, *, n: int = 1,
        log_probs: bool = False, reset_at_start: bool = False, scalar_gradients: bool = True) -> dict:
    """The gradients by role (the core's roles, plus "gamma" and "lambda" per step) of
    one call of the core's estimator `kind`.

    inputs: float arrays by role ([B, T], last_value [B]; absent: missing or None),
    per-step gamma_steps / lambda_steps among them (their gradients come back per step
    under the same roles); flags: bool arrays by role (terminated, truncated, greedy,
    sample_mask); scalars: by role (gamma, lambda, rho_clip, c_clip, rho_pg_clip, alpha;
    numbers or 0-d arrays); outputs: the
    forward's results by role (advantages, returns); cotangents: by output role
    (advantages, returns [B, T]; abs_sums, sums, square_sums [B]; None: no gradient).
    scalar_gradients=False: gamma's and lambda's gradients are not wanted (numbers, as in
    most calls), so their passes over the arrays are skipped; per-step ones always get theirs."""
    x = {role: a for role, a in inputs.items() if a is not None}
    f = {role: a for role, a in flags.items() if a is not None}
    if x.get("next_values") is not None and f.get("terminated") is not None:
        # Never read where terminated (a NaN there stays out by selection); made 0 there first,
        # so that the formulas' own derivatives (double backward) do not multiply it by 0 either.
        x["next_values"] = xp.where(f["terminated"], xp.zeros_like(x["next_values"]), x["next_values"])
    # Per-step gamma_t / lambda_t (issue 29) take the scalars' places: every formula reads
    # step t's, and gamma's and lambda's gradients are per step already.
    steps = {role: x.pop(step_role) for role, step_role in STEP_ROLES.items() if step_role in x}
    wanted = {"differentiate_scalars": scalar_gradients or len(steps) > 0}  # len: dynamo (torch 2.11)
    grads = _by_kind(xp, kind, x, f, {**scalars, **steps, **wanted}, outputs, cotangents, n, log_probs,
                     reset_at_start)
    return per_step_roles(grads, inputs)


def _by_kind(xp, kind, x, f, scalars, outputs, cotangents, n, log_probs, reset_at_start) -> dict:
    if kind == "td_lambda" and x.get("next_values") is not None:  # src/core/estimate.cpp: Q(lambda)'s scan
        return _q_lambda(xp, x, f, scalars, outputs, cotangents)
    if kind in ("gae", "td_lambda", "vtrace"):
        return _value_family(xp, kind, x, f, scalars, outputs, cotangents)
    if kind == "discounted_returns":
        return _discounted(xp, x, f, scalars, outputs, cotangents)
    if kind == "n_step_returns":
        return _n_step(xp, x, f, scalars, outputs, cotangents, n)
    if kind == "retrace":
        return _retrace(xp, x, f, scalars, outputs, cotangents, log_probs)
    if kind == "q_lambda":
        return _q_lambda(xp, x, f, scalars, outputs, cotangents)
    if kind == "episodic_sum":
        return _episodic(xp, x, f, scalars, outputs, cotangents, reset_at_start)
    if kind == "puff_advantage":
        return _puff(xp, x, f, scalars, outputs, cotangents)
    raise AssertionError(f"no VJP for the core's kind {kind!r}")
