"""GAE's forward + backward as bench_backward.py's peers compute it (terminated only,
a last_value bootstrap, float32 [B, T]): torch's compiled associative_scan, autograd of
a Python loop over time, TorchRL's vectorised GAE, and jax.grad of rlax's GAE and of
puffadv.jax's. Each torch peer is peer(rewards, values, last_value, terminated) ->
advantages; jax_peers gives the JAX ones as calls for the caller to time."""
from __future__ import annotations

import torch

GAMMA, LAMBDA = 0.99, 0.95


def rel(a, b):
    """Max error of a relative to b's largest magnitude."""
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


def _gae_steps(r, v, lv, term):
    """GAE's producer: delta_t and the decay k_t of A_t = delta_t + k_t A_{t+1}."""
    following = torch.cat([v[:, 1:], lv[:, None]], 1)
    live = (~term).to(r.dtype)
    return r + GAMMA * live * following - v, GAMMA * LAMBDA * live


def _combine(a, b):
    (ka, da), (kb, db) = a, b
    return kb * ka, db + kb * da


def associative_scan_gae():
    """torch's associative_scan (reverse, compiled) of GAE's affine steps."""
    from torch._higher_order_ops.associative_scan import associative_scan

    def gae(r, v, lv, term):
        delta, k = _gae_steps(r, v, lv, term)
        return associative_scan(_combine, (k, delta), dim=1, reverse=True, combine_mode="generic")[1]
    return torch.compile(gae, fullgraph=True)


def loop_gae(r, v, lv, term):
    """Autograd of the recurrence as a Python loop over time (how TorchRL's
    generalized_advantage_estimate and most trainers write it)."""
    delta, k = _gae_steps(r, v, lv, term)
    a, out = torch.zeros_like(lv), []
    for t in range(r.shape[1] - 1, -1, -1):
        a = delta[:, t] + k[:, t] * a
        out.append(a)
    return torch.stack(out[::-1], 1)


def torchrl_vec_gae():
    """TorchRL's vectorised GAE (vec_generalized_advantage_estimate, what its GAE module
    runs by default), differentiated by torch autograd (TorchRL's differentiable=True
    only stops detaching the values; the functional itself is differentiable)."""
    from torchrl.objectives.value.functional import vec_generalized_advantage_estimate

    def gae(r, v, lv, term):
        col = lambda x: x[..., None]  # noqa: E731  [B, T, 1], time_dim=-2
        following = torch.cat([v[:, 1:], lv[:, None]], 1)
        adv, _ = vec_generalized_advantage_estimate(GAMMA, LAMBDA, col(v), col(following), col(r), col(term),
                                                    col(term))
        return adv[..., 0]
    return gae


def jax_peers(leaves, term, cot, expected):
    """{label: (rel err against `expected`, puffadv's torch gradients of (r, v, lv), a call
    of jit(value_and_grad) that blocks until ready), or (None, why it did not run)}: rlax's
    truncated_generalized_advantage_estimation (vmapped over rows) and puffadv.jax.gae, on
    the same arrays through DLPack. The caller times the calls (wall time: JAX has no
    CUDA-graph replay here)."""
    import jax
    import jax.numpy as jnp

    import puffadv.jax as pj
    r, v, lv = (jax.dlpack.from_dlpack(x.detach().contiguous()) for x in leaves)
    done, w = jax.dlpack.from_dlpack(term.contiguous()), jax.dlpack.from_dlpack(cot.contiguous())
    result, losses = {}, {}
    try:
        import rlax

        def rlax_loss(r, v, lv):
            discount = GAMMA * (1.0 - done.astype(r.dtype))
            boot = jnp.concatenate([v, lv[:, None]], 1)
            adv = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=(0, 0, None, 0))(
                r, discount, LAMBDA, boot)
            return (adv * w).sum()
        losses["jax.grad of rlax (jit, vmap)"] = rlax_loss
    except Exception as error:  # noqa: BLE001  not installed, or its imports fail under this JAX
        # (TensorFlow Probability 0.25 under JAX 0.11: AttributeError); puffadv.jax still runs
        result["jax.grad of rlax (jit, vmap)"] = (None, f"not run: {type(error).__name__}: {error}")

    def puffadv_loss(r, v, lv):
        return (pj.gae(r, v, done, last_value=lv, gamma=GAMMA, gae_lambda=LAMBDA, time_axis=-1).advantages * w).sum()
    losses["jax.grad of puffadv.jax (jit)"] = puffadv_loss
    for label, loss in losses.items():
        step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
        _, grads = step(r, v, lv)
        err = max(rel(torch.from_dlpack(g), o) for g, o in zip(grads, expected))
        result[label] = (err, lambda step=step: jax.block_until_ready(step(r, v, lv)))
    return result
