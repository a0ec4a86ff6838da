"""The vector-Jacobian product of linear_recurrence, written once for torch and JAX
(the plumbing: _autograd.py). In batch-major [B, T] form, forwards
(reverse=False)::

    y_t = x_t + a_t y_{t-1},   y_{-1} = s

With g = dL/dy, the adjoint lam_t = dL/dy_t through every later step is the same
recurrence run the other way, its decays shifted one step:

    lam_t = g_t + a_{t+1} lam_{t+1},   lam_{T-1} = g_{T-1}

that is linear_recurrence(g[:, :-1], a[:, 1:], seed=g[:, -1], reverse=True) for
steps 0 .. T-2 (no shifted copy of a: the engine reads the views). Then

    dL/dx_t = lam_t,   dL/da_t = lam_t y_{t-1} (y_{-1} = s),   dL/ds = lam_0 a_0.

Backwards (reverse=True, y_t = x_t + a_t y_{t+1}, y_T = s) mirrors it:
lam_t = g_t + a_{t-1} lam_{t-1} (lam_0 = g_0), a forward scan over g[:, 1:] with
a[:, :-1] seeded by g[:, 0]; dL/da_t = lam_t y_{t+1} (y_T = s), dL/ds = lam_{T-1} a_{T-1}.
So the backward costs one scan of the engine plus elementwise products.
Arithmetic is in the output's dtype (float32 for 16-bit inputs); each gradient is
cast back to its argument's dtype.
"""
from __future__ import annotations


def adjoint(ops, g, a, reverse: bool):
    """lam: the recurrence of the opposite direction over g ([B, T]), decays shifted one step."""
    if g.shape[-1] <= 1:
        return g
    if reverse:  # lam_t = g_t + a_{t-1} lam_{t-1}
        tail = ops.scan(g[:, 1:], a[:, :-1], g[:, 0], False)
        return ops.concat([g[:, :1], tail])
    head = ops.scan(g[:, :-1], a[:, 1:], g[:, -1], True)  # lam_t = g_t + a_{t+1} lam_{t+1}
    return ops.concat([head, g[:, -1:]])


def linear_recurrence_vjp(ops, primals: dict, outputs: tuple, cotangents: tuple, needs: dict) -> dict:
    """The gradients of inputs, decay and seed (see the module's docstring)."""
    time_axis, reverse = primals["time_axis"], primals["reverse"]
    x, seed = primals["inputs"], primals["seed"]
    y = ops.batch_major(outputs[0], time_axis)
    g = ops.cast(ops.batch_major(cotangents[0], time_axis), y)
    a = ops.cast(ops.batch_major(primals["decay"], time_axis), y)
    lam = adjoint(ops, g, a, reverse)
    grads = {}
    if needs.get("inputs"):
        grads["inputs"] = ops.cast(ops.restore(lam, time_axis), x)
    if g.shape[-1] == 0:
        if needs.get("decay"):
            grads["decay"] = ops.zeros(primals["decay"])
        if seed is not None and needs.get("seed"):
            grads["seed"] = ops.zeros(seed)
        return grads
    if needs.get("decay"):
        grads["decay"] = ops.cast(ops.restore(lam * _neighbour(ops, y, seed, reverse), time_axis), primals["decay"])
    if seed is not None and needs.get("seed"):
        end = -1 if reverse else 0
        grads["seed"] = ops.cast(lam[:, end] * a[:, end], seed)
    return grads


def _neighbour(ops, y, seed, reverse: bool):
    """The y each step's decay multiplies: y_{t+1} (reverse; y_T = seed) or y_{t-1} (y_{-1} =
    seed), 0 outside the row without a seed; [B, T]."""
    outside = ops.zeros(y[:, :1]) if seed is None else ops.cast(seed, y)[:, None]
    return ops.concat([y[:, 1:], outside]) if reverse else ops.concat([outside, y[:, :-1]])


def linear_recurrence_jvp(ops, primals: dict, outputs: tuple, tangents: dict):
    """The tangent of y from those of inputs, decay and seed (name -> tangent, None where an
    argument has none): differentiating y_t = x_t + a_t y_{t-1} gives the same recurrence,
    y'_t = (x'_t + a'_t y_{t-1}) + a_t y'_{t-1} seeded with seed', so it is one more scan
    (reverse: y_{t+1} in y_{t-1}'s place). None where no tangent is given."""
    dx, da, ds = (tangents.get(name) for name in ("inputs", "decay", "seed"))
    if dx is None and da is None and ds is None:
        return None
    time_axis, reverse = primals["time_axis"], primals["reverse"]
    y = ops.batch_major(outputs[0], time_axis)
    u = ops.zeros(y) if dx is None else ops.cast(ops.batch_major(dx, time_axis), y)
    if y.shape[-1] == 0:
        return ops.restore(u, time_axis)
    if da is not None:
        u = u + ops.cast(ops.batch_major(da, time_axis), y) * _neighbour(ops, y, primals["seed"], reverse)
    a = ops.cast(ops.batch_major(primals["decay"], time_axis), y)
    return ops.restore(ops.scan(u, a, None if ds is None else ops.cast(ds, y), reverse), time_axis)
