"""Issue 30's benchmark: each estimator's backward beside its forward on one GPU,
float32, the way a torch user runs them, and forward + backward beside torch's
compiled associative_scan formulation and autograd of a Python loop over time.

Per estimator and shape:
- device time (CUDA-graph replays) of the forward, and of the forward and backward
  together (one graph: torch.autograd.grad of the outputs); the backward's is their
  difference. A backward that cannot be captured is reported as such, with its error.
- eager time (CUDA events, as a user's loop sees it) of the forward and of the backward
  (torch.autograd.grad with retain_graph after one forward).
- % of the copy bandwidth (measured in the same run) of the backward, counting the
  bytes a fused backward must move: the cotangent, the flags and every input its
  formula reads, once, and every gradient written once (BYTES_PER_STEP).
Peers compute the same GAE (terminated only, last_value bootstrap) and are checked
equal to puffadv first, forward and gradients: torch's compiled associative_scan,
autograd of a Python loop, TorchRL's vectorised GAE, and with --jax jax.grad of rlax's
GAE and of puffadv.jax's (JAX peers: eager time only, against puffadv's eager time).

    python benchmarks/bench_backward.py [--shapes 65536x128,...] [--out results.md]
    python benchmarks/bench_backward.py --device cpu   # wall time with torch's threads, % of memcpy

On the CPU, device and eager time are both the wall time of one call (best of the
repeats), and the bandwidth is a 256 MiB tensor copy's in the same run. A second CPU
table splits the fused backward (GAE, TD(lambda), discounted returns): the core's
value_vjp kernel alone, writing into gradient tensors allocated once, against the
allocation and first touch of the fresh gradient tensors a backward returns (torch's
CPU allocator hands large tensors fresh pages from the kernel each call: with
THP_MEM_ALLOC_ENABLE=1 it asks for huge pages, which fault in far fewer steps).
"""
from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import sys
import time
import traceback

import torch

import puffadv
from bench_gpu import eager_time_us, median_time_us  # this folder is on sys.path

DEV = "cuda"
SHAPES = ((1024, 128), (65536, 128), (262144, 128), (4096, 1024))
GAMMA, LAMBDA = 0.99, 0.95

# (bytes the backward reads, bytes it writes) per step, float32 arrays, bool flags: the
# GAE family's gradients need only the cotangent and the flags (delta and the decay are
# linear in rewards and values); V-trace's and the puff advantage's clipped ratios need
# rewards, values, the ratios and the forward's output too.
BYTES_PER_STEP = {"gae": (5, 8), "td_lambda_returns": (5, 8), "discounted_returns": (5, 4),
                  "vtrace": (21, 12), "puff_advantage": (24, 12)}



def make_case(name, rows, horizon, gen):
    """(forward(leaves) -> output tensor, leaves): the leaves require grad."""
    r = torch.randn(rows, horizon, device=DEV, generator=gen)
    v = torch.randn(rows, horizon, device=DEV, generator=gen)
    lv = torch.randn(rows, device=DEV, generator=gen)
    term = torch.rand(rows, horizon, device=DEV, generator=gen) < 0.02
    term[:, 0] = term[:, -1] = True
    imp = torch.rand(rows, horizon, device=DEV, generator=gen) * 2
    if name == "gae":
        leaves = (r, v, lv)
        fn = lambda r, v, lv: puffadv.gae(r, v, term, last_value=lv, gamma=GAMMA, gae_lambda=LAMBDA, returns=False,
                                          time_axis=-1).advantages
    elif name == "td_lambda_returns":
        leaves = (r, v, lv)
        fn = lambda r, v, lv: puffadv.td_lambda_returns(r, v, term, last_value=lv, gamma=GAMMA, lambda_=LAMBDA,
                                                        time_axis=-1).returns
    elif name == "discounted_returns":
        leaves = (r,)
        fn = lambda r: puffadv.discounted_returns(r, term, gamma=GAMMA, time_axis=-1).returns
    elif name == "vtrace":
        leaves = (r, v, lv, imp)
        fn = lambda r, v, lv, imp: puffadv.vtrace(r, v, term, last_value=lv, importance=imp, gamma=GAMMA,
                                                  pg_advantages=False, time_axis=-1).vs
    elif name == "puff_advantage":
        dones = term.float()
        leaves = (v, r, imp)
        fn = lambda v, r, imp: puffadv.compute_puff_advantage(v, r, dones, imp, gamma=GAMMA, gae_lambda=LAMBDA,
                                                              rho_clip=1.0, c_clip=1.0)
    else:
        raise ValueError(name)
    return fn, [x.requires_grad_() for x in leaves], term


# ---------------------------------------------------------------- peers (GAE)

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


def jax_peers(leaves, term, cot):
    """{label: (rel err against puffadv's torch gradients, eager us)}: jit(value_and_grad)
    of rlax's truncated_generalized_advantage_estimation (vmapped over rows) and of
    puffadv.jax.gae, on the same arrays (through DLPack), wall time of one call to
    block_until_ready: JAX has no CUDA-graph replay here, so only eager time is compared."""
    import jax
    import jax.numpy as jnp

    import puffadv.jax as pj
    r, v, lv = (jax.dlpack.from_dlpack(x.detach().contiguous()) for x in leaves)
    done, w = jax.dlpack.from_dlpack(term.contiguous()), jax.dlpack.from_dlpack(cot.contiguous())
    ours = torch.autograd.grad(puffadv.gae(*leaves[:2], term, last_value=leaves[2], gamma=GAMMA, gae_lambda=LAMBDA,
                                           returns=False, time_axis=-1).advantages, leaves, cot)
    result = {}
    try:
        import rlax

        def rlax_loss(r, v, lv):
            discount = GAMMA * (1.0 - done.astype(r.dtype))
            boot = jnp.concatenate([v, lv[:, None]], 1)
            adv = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=(0, 0, None, 0))(
                r, discount, LAMBDA, boot)
            return (adv * w).sum()
        losses = {"jax.grad of rlax (jit, vmap)": rlax_loss}
    except ImportError as error:
        result["jax.grad of rlax (jit, vmap)"] = (None, f"not run: {error}")
        losses = {}

    def puffadv_loss(r, v, lv):
        return (pj.gae(r, v, done, last_value=lv, gamma=GAMMA, gae_lambda=LAMBDA, time_axis=-1).advantages * w).sum()
    losses["jax.grad of puffadv.jax (jit)"] = puffadv_loss
    for label, loss in losses.items():
        step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
        _, grads = step(r, v, lv)
        err = max(rel(torch.from_dlpack(g), o) for g, o in zip(grads, ours))
        call = lambda: jax.block_until_ready(step(r, v, lv))  # noqa: E731
        call()
        times = []
        for _ in range(20):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        times.sort()
        result[label] = (err, times[len(times) // 2] * 1e6)
    return result


# ---------------------------------------------------------------- timing

def graph_us(fn, calls=10, repeats=7):
    """Median device time of fn() over CUDA-graph replays of `calls` calls (bench_gpu's)."""
    torch.cuda.synchronize()  # the inputs, made on the default stream, are ready for the capture stream
    return median_time_us(lambda i: fn(), calls, repeats)


def eager_us(fn, repeats=20):
    """One call as a training loop makes it: CUDA events (bench_gpu's), or wall time on the CPU."""
    return cpu_us(fn, repeats) if DEV == "cpu" else eager_time_us(fn, repeats)


def cpu_us(fn, repeats):
    """Best wall time of one call on the CPU (the least disturbed by the rest of the machine)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e6


def copy_bandwidth():
    n = 1 << 28 if DEV == "cuda" else 1 << 26
    src, dst = torch.empty(n, device=DEV), torch.empty(n, device=DEV)
    return 2 * n * 4 / (eager_us(lambda: dst.copy_(src)) * 1e-6) / 1e9  # GB/s read + written


# The fused backward's kernel on the CPU: (lambda, whether it writes dL/dvalues too).
VALUE_VJP = {"gae": (LAMBDA, True), "td_lambda_returns": (LAMBDA, True), "discounted_returns": (1.0, False)}


def cpu_kernel_split(name, rows, horizon, gen):
    """(value_vjp's time into gradients allocated once, the time to allocate and first
    touch the gradient tensors a backward returns), microseconds, on the CPU."""
    from puffadv import _engine  # the kernel the fused backward calls (python/puffadv/_vjp_fused.py)
    lam, with_values = VALUE_VJP[name]
    total = torch.randn(rows, horizon, generator=gen)
    term = torch.rand(rows, horizon, generator=gen) < 0.02
    term[:, 0] = term[:, -1] = True
    grads = {"advantages": torch.empty_like(total)}
    if with_values:
        grads["returns"] = torch.empty_like(total)
    kernel = _engine.kernel("value_vjp", (GAMMA, lam, 1.0, 1.0), time_axis=1)
    run = functools.partial(_engine.run, kernel, "torch", {"rewards": total, "terminated": term}, grads)
    fresh = lambda: [torch.empty_like(total).fill_(0.0) for _ in grads]  # noqa: E731
    return cpu_us(run, 10), cpu_us(fresh, 10)


def measure(fn, leaves, cot):
    """{fwd_dev, both_dev, bwd_dev, fwd_eager, bwd_eager, capture}: microseconds."""
    result = {}
    with torch.no_grad():
        result["fwd_eager"] = eager_us(lambda: fn(*leaves))
    result["bwd_eager"] = eager_us(functools.partial(torch.autograd.grad, fn(*leaves), leaves, cot,
                                                     retain_graph=True))
    if DEV == "cpu":  # no graphs: the wall times are the device's
        result.update(fwd_dev=result["fwd_eager"], bwd_dev=result["bwd_eager"], capture="CPU wall time",
                      both_dev=result["fwd_eager"] + result["bwd_eager"])
        return result
    try:
        with torch.no_grad():
            result["fwd_dev"] = graph_us(lambda: fn(*leaves))
        result["both_dev"] = graph_us(lambda: torch.autograd.grad(fn(*leaves), leaves, cot))
        result["bwd_dev"] = result["both_dev"] - result["fwd_dev"]
        result["capture"] = "captured"
    except Exception as error:  # noqa: BLE001 - reported in the table, never hidden
        torch.cuda.synchronize()
        result["capture"] = f"not captured: {type(error).__name__}: {str(error).splitlines()[0][:120]}"
    return result


def _forward_backward(peer, leaves, term, cot):
    return torch.autograd.grad(peer(*leaves, term), leaves, cot)


def rel(a, b):
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


def check_peer(peer, rows, horizon, gen):
    """Forward and gradients of `peer` against puffadv.gae on the same inputs (rel err)."""
    fn, leaves, term = make_case("gae", rows, horizon, gen)
    cot = torch.randn(rows, horizon, device=DEV, generator=gen)
    ours = fn(*leaves)
    theirs = peer(*leaves, term)
    g_ours = torch.autograd.grad(ours, leaves, cot)
    g_theirs = torch.autograd.grad(theirs, leaves, cot)
    return max([rel(theirs, ours)] + [rel(a, b) for a, b in zip(g_theirs, g_ours)])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=",".join(f"{r}x{t}" for r, t in SHAPES))
    parser.add_argument("--estimators", default=",".join(BYTES_PER_STEP))
    parser.add_argument("--out", default=None)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--jax", action="store_true", help="GAE's peers in JAX too: jax.grad of rlax and of "
                        "puffadv.jax (eager time only)")
    args = parser.parse_args()
    global DEV
    DEV = args.device
    shapes = [tuple(int(p) for p in s.split("x")) for s in args.shapes.split(",")]
    gen = torch.Generator(device=DEV).manual_seed(0)
    copy = copy_bandwidth()
    lines = [f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on "
             f"{_machine()} (torch {torch.__version__}, puffadv {puffadv.__version__}); "
             f"copy bandwidth {copy:.0f} GB/s. Command: python benchmarks/bench_backward.py "
             f"--device {DEV} --shapes {args.shapes}", "",
             "| shape | estimator | fwd device us | bwd device us | bwd / fwd | bwd % of copy BW | "
             "fwd eager us | bwd eager us | capture |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    peers = {"torch compiled associative_scan": associative_scan_gae(), "autograd of a Python loop": loop_gae}
    try:
        peers["TorchRL vec_generalized_advantage_estimate (autograd)"] = torchrl_vec_gae()
    except ImportError as error:
        print(f"TorchRL not run: {error}", flush=True)
    peer_lines = ["", "Forward + backward of GAE (terminated, last_value), each checked equal to puffadv first "
                  "(max rel err of the output and every gradient):", "",
                  "| shape | implementation | rel err | fwd+bwd device us | fwd+bwd eager us | its time / puffadv's |",
                  "|---|---|---:|---:|---:|---:|"]
    split_lines = ["", "The fused backward on the CPU, split: the value_vjp kernel alone (gradients written "
                   "into tensors allocated once) and the fresh gradient tensors a backward allocates and "
                   "writes (their first touch):", "",
                   "| shape | estimator | kernel us | kernel % of copy BW | fresh gradients us |",
                   "|---|---|---:|---:|---:|"]
    for rows, horizon in shapes:
        steps = rows * horizon
        for name in args.estimators.split(","):
            fn, leaves, term = make_case(name, rows, horizon, gen)
            cot = torch.randn(rows, horizon, device=DEV, generator=gen)
            m = measure(fn, leaves, cot)
            read, write = BYTES_PER_STEP[name]
            bwd = m.get("bwd_dev")
            pct = "-" if bwd is None or bwd <= 0 else f"{(read + write) * steps / (bwd * 1e-6) / 1e9 / copy * 100:.1f}"
            ratio = "-" if bwd is None else f"{bwd / m['fwd_dev']:.2f}"
            lines.append(f"| {rows}x{horizon} | {name} | {m.get('fwd_dev', float('nan')):.1f} | "
                         f"{'-' if bwd is None else f'{bwd:.1f}'} | {ratio} | {pct} | {m['fwd_eager']:.1f} | "
                         f"{m['bwd_eager']:.1f} | {m['capture']} |")
            print(lines[-1], flush=True)
            if DEV == "cpu" and name in VALUE_VJP:
                kernel, fresh = cpu_kernel_split(name, rows, horizon, gen)
                split_lines.append(f"| {rows}x{horizon} | {name} | {kernel:.1f} | "
                                   f"{(read + write) * steps / (kernel * 1e-6) / 1e9 / copy * 100:.1f} | {fresh:.1f} |")
                print(split_lines[-1], flush=True)
            if name == "gae":
                ours_both = m.get("both_dev")
                ours_eager = m["fwd_eager"] + m["bwd_eager"]
                peer_lines.append(f"| {rows}x{horizon} | puffadv | 0 | "
                                  f"{'-' if ours_both is None else f'{ours_both:.1f}'} | {ours_eager:.1f} | 1.00x |")
                for label, peer in peers.items():
                    if label.startswith("autograd of a Python loop") and horizon > 128:
                        continue  # thousands of launches per call: minutes of the device's time
                    try:
                        err = check_peer(peer, min(rows, 4096), horizon, gen)
                        if err > 1e-4:
                            peer_lines.append(f"| {rows}x{horizon} | {label} | {err:.1e} | not timed: differs | | |")
                            continue
                        both = functools.partial(_forward_backward, peer, leaves, term, cot)
                        eager = eager_us(both, repeats=5)
                        try:
                            device = graph_us(both, calls=2, repeats=3) if DEV == "cuda" else eager
                        except Exception:  # noqa: BLE001
                            torch.cuda.synchronize()
                            device = None
                        versus = ours_eager if device is None or ours_both is None else ours_both
                        peer_lines.append(f"| {rows}x{horizon} | {label} | {err:.1e} | "
                                          f"{'-' if device is None else f'{device:.1f}'} | {eager:.1f} | "
                                          f"{(eager if device is None else device) / versus:.2f}x |")
                    except Exception as error:  # noqa: BLE001
                        traceback.print_exc()
                        peer_lines.append(f"| {rows}x{horizon} | {label} | - | failed: {type(error).__name__} | | |")
                    print(peer_lines[-1], flush=True)
                if args.jax:
                    try:
                        for label, (err, eager) in jax_peers(leaves, term, cot).items():
                            if err is None:
                                peer_lines.append(f"| {rows}x{horizon} | {label} | - | {eager} | | |")
                            else:
                                peer_lines.append(f"| {rows}x{horizon} | {label} | {err:.1e} | - | {eager:.1f} | "
                                                  f"{eager / ours_eager:.2f}x (eager) |")
                            print(peer_lines[-1], flush=True)
                    except Exception as error:  # noqa: BLE001
                        traceback.print_exc()
                        peer_lines.append(f"| {rows}x{horizon} | JAX | - | failed: {type(error).__name__} | | |")
            if DEV == "cuda":
                torch.cuda.empty_cache()
    text = "\n".join(lines + peer_lines + (split_lines if DEV == "cpu" else [])) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


def _machine():
    if DEV == "cuda":
        return torch.cuda.get_device_name()
    thp = os.environ.get("THP_MEM_ALLOC_ENABLE", "unset")
    return (f"the CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads, "
            f"{platform.processor() or platform.machine()}, THP_MEM_ALLOC_ENABLE={thp})")


if __name__ == "__main__":
    sys.exit(main())
