"""The pieces every VJP in _vjp.py is made of: the reverse scan on the engine
(`engine_scan`, through SCANS), shifts along time, clips' pass-through masks,
selections that keep NaN out, the fused sums' VJP, bootstraps and the producer's
gamma/lambda tail. Arrays are batch-major [B, T] in torch or jax.numpy (`xp`)."""
from __future__ import annotations

from typing import Any, NamedTuple

from ._estimators import STEP_ROLES


# The engine's linear_recurrence on [rows, horizon] arrays, by framework ("torch", "jax"):
# registered by _recurrence.py and _jax_recurrence.py when they load (this module imports
# neither, which import the autograd layers that import this one).
SCANS: dict = {}


def engine_scan(inputs, decay, reverse: bool):
    """y_t = inputs_t + decay_t * y_{t+1} (reverse) or y_{t-1} (forward) along the last
    axis, with y = 0 outside the row: the one recurrence every backward runs, on the
    engine (linear_recurrence's kernel, itself differentiable, so double backward
    works), with the rows flattened to [rows, horizon]."""
    steps = inputs.shape[-1]
    if steps == 0:
        return inputs
    shape = inputs.shape
    if type(inputs).__module__.startswith("torch"):
        decay = decay.to(inputs.dtype).expand(shape).reshape(-1, steps)
        return SCANS["torch"](inputs.reshape(-1, steps), decay, reverse).reshape(shape)
    import jax.numpy as jnp
    decay = jnp.broadcast_to(jnp.asarray(decay, inputs.dtype), shape).reshape(-1, steps)
    return SCANS["jax"](inputs.reshape(-1, steps), decay, reverse).reshape(shape)


# A zero that carries a derivative, by framework ("torch", "jax"): derivative_only(x, slope) is 0
# (x's shape), its derivative in x is slope elementwise and it has none in slope. Registered by
# _torch_autograd.py and jax.py (this module imports neither framework).
DERIVATIVES_ONLY: dict = {}


def derivative_only(x, slope):
    """0, with the derivative slope dx: a term whose value a selection removed (a NaN it would
    read stays out of the value) but whose derivative in x is still slope. A product slope * x
    cannot give both: 0 * NaN is NaN."""
    return DERIVATIVES_ONLY["torch" if type(x).__module__.startswith("torch") else "jax"](x, slope)


# ---------------------------------------------------------------- shifts and masks


def next_step(xp, x, fill=0):
    """x_{t+1}, `fill` after the row's last step."""
    edge = xp.zeros_like(x[..., :1]) if fill == 0 else xp.ones_like(x[..., :1])
    return xp.concatenate((x[..., 1:], edge), axis=-1)


def previous_step(xp, x):
    """x_{t-1}, 0 before the row's first step."""
    return xp.concatenate((xp.zeros_like(x[..., :1]), x[..., :-1]), axis=-1)


def last_step(xp, flags):
    """True at the row's last step."""
    return next_step(xp, xp.zeros_like(flags), fill=1)


def clip_passing(xp, x, clip, alpha=1.0):
    """(min(x, clip) as fmin, where the gradient passes). Leaky V-trace's `alpha` < 1
    mixes the raw ratio in: alpha min(x, clip) + (1 - alpha) x, whose slope is 1 where x
    passes and 1 - alpha where it is clipped (`through_clip`)."""
    passes = x < clip
    clipped = xp.where(passes, x, clip)
    return (clipped if alpha == 1.0 else alpha * clipped + (1 - alpha) * x), passes


def through_clip(xp, passes, g, alpha=1.0):
    """g times the slope of `clip_passing(x, clip, alpha)` in x: g where x passes, (1 - alpha) g
    where it is clipped (0 without leaking: the clipped side's subgradient, ties included)."""
    return select(xp, passes, g) if alpha == 1.0 else xp.where(passes, g, (1 - alpha) * g)


def select(xp, keep, x):
    # The number 0, not a zeros_like array: one pass and one fresh array, not two. On the
    # H200 torch's where with a number took as long as a fill and a where of two tensors
    # (34 against 27 + 6 us at 65536x128); on the CPU each fresh array's first touch costs
    # more than the pass (14.0 against 21.7 ms there, 2-core Xeon, 2026-12-05).
    return xp.where(keep, x, 0.0)


def sums_vjp(xp, series, cot):
    """The row sums' cotangents on the series they sum (each [B] or None)."""
    g = None
    for role, local in (("abs_sums", lambda: xp.sign(series)), ("sums", lambda: xp.ones_like(series)),
                        ("square_sums", lambda: 2.0 * series)):
        if cot.get(role) is not None:
            term = cot[role][..., None] * local()
            g = term if g is None else g + term
    return g


def add_grads(a, b):
    return b if a is None else (a if b is None else a + b)


def grad_like(grad, like):
    """A per-step gradient summed to the shape of what it differentiates (a number or
    0-d array: everything; [B]: over time; [B, T]: itself). None stays None."""
    if grad is None:
        return None
    ndim = len(getattr(like, "shape", ()))
    if ndim == 0:
        return grad.sum()
    return grad.sum(-1) if ndim < grad.ndim else grad


class Bootstrap:
    """V'_t: values[t+1] inside the row, the bootstrap where the row ends or is
    truncated (bootstrap_values[t], else last_value, else 0); and its VJP."""

    def __init__(self, xp, x, end, values):
        self.xp, self.end, self._values, self._rewards = xp, end, values, x["rewards"]
        self.boot_values, self.last_value = x.get("bootstrap_values"), x.get("last_value")
        self._value = None

    @property
    def value(self):
        """V'_t, made when first read: a backward that needs only vjp() skips its passes."""
        if self._value is None:
            xp, end, values = self.xp, self.end, self._values
            if self.boot_values is not None:
                boot = self.boot_values
            elif self.last_value is not None:
                boot = self.last_value[..., None]  # [B, 1]: the where below broadcasts it
            else:
                boot = xp.zeros_like(end, dtype=self._rewards.dtype)
            self._value = xp.where(end, boot, next_step(xp, values)) if values is not None else select(xp, end, boot)
        return self._value

    def vjp(self, g, grads, values_role="values"):
        xp = self.xp
        if values_role is not None and values_role in grads:
            grads[values_role] = grads[values_role] + previous_step(xp, select(xp, ~self.end, g))
        at_end = select(xp, self.end, g)
        if self.boot_values is not None:
            grads["bootstrap_values"] = at_end
        elif self.last_value is not None:
            grads["last_value"] = at_end.sum(-1)


def puff_dones(xp, dones, gamma):
    """The puff advantage's float dones as its backwards read them. Its forward uses them
    arithmetically, as PufferLib does (gamma (1 - dones_{t+1}) in both the TD term and the
    trace), so a backward that read them as flags (non-zero: done) gave a wrong gradient
    for a fractional done. Here a done of exactly 1 stays a flag (selected away: a NaN
    beyond it stays out, as before) and every value scales gamma_t = gamma (1 -
    dones_{t+1}), the per-step gamma at step t in the puff advantage's own index, which
    both backwards read (exactly 0 after a done of 1; what the selection drops there is
    carried to the second derivatives by _vjp._puff's `ends`). Returns (flags, gamma_t)."""
    if hasattr(dones, "mul_") and not hasattr(gamma, "mul_"):
        # torch, gamma a number: gamma - gamma dones_{t+1} in one fresh array and two passes
        # (each fresh array costs a first touch); in place on a view, not with out= (which
        # torch.compile refuses). 0 and 1 give gamma and 0 exactly.
        steps = xp.full_like(dones, gamma)
        steps[..., :-1].add_(dones[..., 1:], alpha=-gamma)
        return dones == 1, steps
    return dones == 1, gamma * not_done_next(xp, dones)


def puff_gamma_steps_vjp(xp, vjp, inputs: dict):
    """dL/d gamma_t of the puff advantage with float dones (gamma_t = gamma (1 - dones_{t+1}),
    puff_dones' `inputs["gamma_steps"]`), a done of exactly 1 a number too: from `vjp(inputs,
    flags, scalar_gradients)` (_vjp.vjp's formulas) with no flags (the backwards select such a
    done away as a flag, which keeps NaN beyond it out of the other gradients but gives gamma_t's
    gradient 0 there)."""
    return vjp(inputs, {"terminated": xp.zeros_like(inputs["rewards"], dtype=bool)}, True)["gamma_steps"]


def puff_dones_vjp(xp, gamma_steps_grad, gamma):
    """dL/d dones of the puff advantage with float dones, which its forward reads as numbers
    only, from puff_gamma_steps_vjp's dL/d gamma_t: dL/d dones_s = -gamma dL/d gamma_{s-1}
    (dones_0 is never read)."""
    return previous_step(xp, gamma_steps_grad) * (-gamma)


def not_done_next(xp, dones):
    """1 - dones_{t+1} (1 after the row's last step): d gamma_t / d gamma in puff_dones."""
    return 1 - next_step(xp, dones)


def as_flags(xp, f, like):
    return tuple(xp.zeros_like(like, dtype=bool) if f.get(role) is None else f[role]
                 for role in ("terminated", "truncated"))


class Episodes(NamedTuple):
    """A call's episode masks, [B, T] bool, as every formula in _vjp reads them."""
    term: Any  # terminated (False where not given)
    trunc: Any  # truncated (likewise)
    last: Any  # the row's last step
    end: Any  # trunc | last: where the bootstrap is read
    cut: Any  # term | end: where a trace or a window stops


def episodes(xp, f, like) -> Episodes:
    """The masks of the flags `f` (by role) of a call shaped like `like`. (The fused
    backwards make the few they read in place instead: fewer fresh arrays.)"""
    term, trunc = as_flags(xp, f, like)
    last = last_step(xp, term)
    end = trunc | last
    return Episodes(term, trunc, last, end, term | end)


def producer_tail(xp, grads, k_grad_factor, s, keep):
    """gamma's and lambda's per-step gradients from dL/dk_t when k_t = gamma lambda c_t
    at the steps `keep` (elsewhere the trace is cut and a per-step gamma_t or lambda_t
    there is never read: 0, by selection, so a NaN there stays out)."""
    gamma, lam = s["gamma"], s["lambda"]
    grads["gamma"] = add_grads(grads.get("gamma"), select(xp, keep, k_grad_factor * lam))
    grads["lambda"] = add_grads(grads.get("lambda"), select(xp, keep, k_grad_factor * gamma))


# ---------------------------------------------------------------- the estimators


def per_step_roles(grads: dict, inputs: dict) -> dict:
    """`grads` with gamma's and lambda's per-step gradients ("gamma", "lambda") moved to
    the roles of their per-step arrays (gamma_steps, lambda_steps) where `inputs` holds
    those arrays: the caller's gradient of the array it passed."""
    for role, step_role in STEP_ROLES.items():
        if inputs.get(step_role) is not None:
            grads[step_role] = grads.pop(role)
    return grads

