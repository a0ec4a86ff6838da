"""n-step returns' backward on the engine's own n_step_returns kernel, for eager torch
calls whose gamma and lambda want no gradient (_vjp_fused), in array-API style (`xp`;
`window_sums`: the framework's call of the kernel). puffadv.jax keeps _vjp's formulas:
under jit XLA fuses them and drops the forward, which their gradient never reads (2-core
Xeon, JAX 0.10.2 CPU, 4096x128 float32, jit(grad): n = 3 0.4 ms against 1.8 ms with this,
n = 32 0.3 against 8.0; but 6.0 s against 0.34 s to compile at n = 32).

The forward (lambda-mixed, as _vjp._n_step has it) sums over each step's window of at
most n steps, cut at an end (a termination, a truncation, the row's last step):
G_t = sum_k (gamma lambda)^k [r_{t+k} + gamma (1 - lambda) V'_{t+k}], except that the
window's last step reads gamma (1 - term) V' whole (per-step gamma_t lambda_t: the
product of those the window passes). Its VJP is a window too, run the other way in time:
dL/dr_s = R_s = sum_k (gamma lambda)^k g_{s-k} over the windows that reach s (no cut
in s-k .. s-1), which is the same kernel on the cotangent flipped in time, its flags the
cuts one step earlier (cut_{s-1}), its discount gamma_{s-1} lambda_{s-1}, values 0.
V'_s is read whole where s is its window's last step: at a cut, by every window that
reaches it; elsewhere by the one window of exactly n steps (X = R - R^(n-1), the kernel
with n - 1). So dL/dV'_s = gamma (1 - term) R_s at a cut, gamma ((1 - lambda) R_s +
lambda X_s) elsewhere. Two kernel calls and about a dozen elementwise passes whatever n
is, where the formulas take some ten passes per window step.
"""
from __future__ import annotations

from typing import Callable

from ._estimators import SUM_ROLES
from ._vjp_parts import Bootstrap, add_grads, episodes, next_step, select, sums_vjp

# window_sums(arrays by role, discount number, n) -> the kernel's returns: the n_step_returns
# kernel on batch-major [B, T] arrays (rewards, values, terminated as bool flags,
# next_values, and gamma_steps where the discount is per step), lambda 1.
WindowSums = Callable


def vjp(xp, inputs: dict, flags: dict, scalars: dict, outputs: dict, cot: dict, n: int,
        window_sums: WindowSums) -> dict:
    """The gradients by role of one n_step_returns call (batch-major [B, T] arrays, flags
    bool, gamma and lambda numbers or per-step arrays that want no gradient)."""
    r, values = inputs["rewards"], inputs["values"]
    # end: where the bootstrap is read (a truncation, the row's last step); cut: where a
    # window stops (an end or a termination).
    term, _, _, end, cut = episodes(xp, flags, r)
    adv = None
    if any(cot.get(role) is not None for role in SUM_ROLES):  # the sums are over the advantages G - V
        adv = outputs["advantages"] if outputs.get("advantages") is not None else outputs["returns"] - values
    adv_cot = add_grads(cot.get("advantages"), sums_vjp(xp, adv, cot))
    g = add_grads(cot.get("returns"), adv_cot)
    grads = {"values": -adv_cot if adv_cot is not None else xp.zeros_like(values)}
    if g is None or r.shape[-1] == 0:
        g = xp.zeros_like(r)
    gamma, lam = (inputs[f"{role}_steps"] if inputs.get(f"{role}_steps") is not None else scalars[role]
                  for role in ("gamma", "lambda"))
    window = max(1, min(n, r.shape[-1]))
    reach = _reaching_sums(xp, g, cut, gamma * lam, window, window_sums)
    longest = reach[0] if window == 1 else reach[0] - reach[1]  # X: the windows of exactly n steps
    grads["rewards"] = reach[0]
    # V'_s's gradient, selected (not multiplied) where s is cut: a NaN beyond a termination stays out.
    inside = reach[0] * (gamma * (1 - lam)) + longest * (gamma * lam)
    at_cut = select(xp, ~term, reach[0] * gamma)
    next_grad = xp.where(cut, at_cut, inside)
    if inputs.get("next_values") is not None:
        grads["next_values"] = next_grad
    else:
        Bootstrap(xp, inputs, end, values).vjp(next_grad, grads)
    return grads


def _reaching_sums(xp, g, cut, decay, window: int, window_sums: WindowSums) -> list:
    """[R, R^(window-1)] (the second only for window > 1): R_s = the sum over the windows of
    `window` steps that reach s of decay^k g_{s-k} (decay per step: the product of
    decay_{s-k} .. decay_{s-1}), on the n_step_returns kernel in flipped time."""
    flipped = xp.flip(g, (-1,))
    ends = next_step(xp, xp.flip(cut, (-1,)))  # flipped cut_{s-1}: the window stops past it
    # Dense zeros: the engine walks a 0-strided array through gathered lines (2-core Xeon,
    # 1024x128, n = 3: 183 against 97 us for the kernel call). The bootstrap is last_value's
    # zeros, not next_values': a call with next_values (issue 29's form) takes the GPU's
    # generic window kernel, one with a number discount and last_value the vector kernel.
    zero = xp.zeros_like(flipped)
    last_value = flipped.new_zeros(flipped.shape[:-1])  # torch's call only (module docstring)
    arrays = {"rewards": flipped, "values": zero, "terminated": ends, "last_value": last_value}
    number = decay
    if not isinstance(decay, (int, float)):  # per step: flipped decay_{s-1}
        arrays["gamma_steps"], number = next_step(xp, xp.flip(decay + zero, (-1,))), 1.0
    lengths = (window,) if window == 1 else (window, window - 1)
    return [xp.flip(window_sums(arrays, number, length), (-1,)) for length in lengths]
