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
from backward_peers import GAMMA, LAMBDA, associative_scan_gae, jax_peers, loop_gae, rel, torchrl_vec_gae
from bench_gpu import eager_time_us, median_time_us  # this folder is on sys.path

DEV = "cuda"
SHAPES = ((1024, 128), (65536, 128), (262144, 128), (4096, 1024))

# (bytes the backward reads, bytes it writes) per step, float32 arrays, bool flags: the
# GAE family's gradients need only the cotangent and the flags (delta and the decay are
# linear in rewards and values); V-trace's and the puff advantage's clipped ratios need
# rewards, values, the ratios and the forward's output too.
# gae_meta: GAE with gamma and lambda 0-d tensors that require grad (meta-gradient RL),
# whose gradients also read the forward's output and the values. vtrace_vs: V-trace's
# targets differentiated through rewards, values and last_value, the ratios constants (the
# fused kernel: it reads the cotangent, the flags and the ratios); vtrace: the ratios too.
# puff_values: the puff advantage through values and rewards (PufferLib's float dones, the
# ratios constants: fused); puff_advantage: the ratios too. retrace (the probabilities
# constants), q_lambda (Watkins) and eligibility_traces: their fused backwards. n_step
# (n = 3) and n_step_long (n = 32): n-step returns on their own kernel, flipped in time.
BYTES_PER_STEP = {"gae": (5, 8), "gae_meta": (13, 8), "td_lambda_returns": (5, 8), "discounted_returns": (5, 4),
                  "vtrace_vs": (9, 8), "vtrace": (21, 12), "puff_values": (12, 8), "puff_advantage": (24, 12),
                  "retrace": (13, 12), "q_lambda": (6, 12), "eligibility_traces": (5, 4), "n_step": (5, 8),
                  "n_step_long": (5, 8)}



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
    elif name == "gae_meta":
        leaves = (r, v, lv, torch.tensor(GAMMA, device=DEV), torch.tensor(LAMBDA, device=DEV))
        fn = lambda r, v, lv, g, lam: puffadv.gae(r, v, term, last_value=lv, gamma=g, gae_lambda=lam,
                                                  returns=False, time_axis=-1).advantages
    elif name == "td_lambda_returns":
        leaves = (r, v, lv)
        fn = lambda r, v, lv: puffadv.td_lambda_returns(r, v, term, last_value=lv, gamma=GAMMA, lambda_=LAMBDA,
                                                        time_axis=-1).returns
    elif name == "discounted_returns":
        leaves = (r,)
        fn = lambda r: puffadv.discounted_returns(r, term, gamma=GAMMA, time_axis=-1).returns
    elif name == "vtrace_vs":
        leaves = (r, v, lv)
        fn = lambda r, v, lv: puffadv.vtrace(r, v, term, last_value=lv, importance=imp, gamma=GAMMA,
                                             pg_advantages=False, time_axis=-1).vs
    elif name == "vtrace":
        leaves = (r, v, lv, imp)
        fn = lambda r, v, lv, imp: puffadv.vtrace(r, v, term, last_value=lv, importance=imp, gamma=GAMMA,
                                                  pg_advantages=False, time_axis=-1).vs
    elif name == "puff_values":
        dones = term.float()
        leaves = (v, r)
        fn = lambda v, r: puffadv.compute_puff_advantage(v, r, dones, imp, gamma=GAMMA, gae_lambda=LAMBDA,
                                                         rho_clip=1.0, c_clip=1.0)
    elif name in ("retrace", "q_lambda"):
        nv = torch.randn(rows, horizon, device=DEV, generator=gen)
        leaves = (r, v, nv)
        probs = torch.rand(rows, horizon, device=DEV, generator=gen) * 0.9 + 0.05
        if name == "retrace":
            fn = lambda r, q, nv: puffadv.retrace(r, q, nv, term, target_probs=probs, behaviour_probs=imp * 0.45 + 0.05,
                                                  gamma=GAMMA, lambda_=LAMBDA, advantages=False, time_axis=-1).returns
        else:
            fn = lambda r, q, nv: puffadv.q_lambda(r, q, nv, term, greedy=probs > 0.3, gamma=GAMMA, lambda_=LAMBDA,
                                                   advantages=False, time_axis=-1).returns
    elif name == "eligibility_traces":
        leaves = (r, lv)
        fn = lambda x, seed: puffadv.eligibility_traces(x, term, gamma=GAMMA, lambda_=LAMBDA, seed=seed, time_axis=-1)
    elif name in ("n_step", "n_step_long"):
        leaves, n = (r, v, lv), 3 if name == "n_step" else 32
        fn = lambda r, v, lv: puffadv.n_step_returns(r, v, term, last_value=lv, gamma=GAMMA, lambda_=LAMBDA, n=n,
                                                     time_axis=-1).returns
    elif name == "puff_advantage":
        dones = term.float()
        leaves = (v, r, imp)
        fn = lambda v, r, imp: puffadv.compute_puff_advantage(v, r, dones, imp, gamma=GAMMA, gae_lambda=LAMBDA,
                                                              rho_clip=1.0, c_clip=1.0)
    else:
        raise ValueError(name)
    return fn, [x.requires_grad_() for x in leaves], term


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


def kernel_breakdown(fn, leaves, cot, calls=5):
    """torch.profiler's table of the device kernels of forward + backward (the time of each
    kernel summed over `calls` calls), so that a backward's time can be read kernel by
    kernel: the engine's scan against the elementwise passes around it."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
    torch.autograd.grad(fn(*leaves), leaves, cot)
    with profile(activities=activities) as prof:
        for _ in range(calls):
            torch.autograd.grad(fn(*leaves), leaves, cot)
        if DEV == "cuda":
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if DEV == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=70)


def _forward_backward(peer, leaves, term, cot):
    return torch.autograd.grad(peer(*leaves, term), leaves, cot)


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
    parser.add_argument("--profile", default=None, help="write each estimator's kernel-by-kernel table "
                        "(torch.profiler, forward + backward, the first shape) to this file")
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
             f"--device {DEV} --shapes {args.shapes} --estimators {args.estimators}"
             f"{' --jax' if args.jax else ''}", "",
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
            if args.profile and (rows, horizon) == shapes[0]:
                with open(args.profile, "a") as f:
                    f.write(f"\n== {name} {rows}x{horizon}: forward + backward, {DEV}\n")
                    f.write(kernel_breakdown(fn, leaves, cot))
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
                    if label.startswith(("autograd of a Python loop", "TorchRL")) and horizon > 128:
                        # the loop: thousands of launches per call; TorchRL: every episode padded to
                        # the longest, then a convolution over time with ~300 taps (gamma lambda 0.94).
                        continue
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
                        expected = torch.autograd.grad(fn(*leaves), leaves, cot)
                        for label, (err, call) in jax_peers(leaves, term, cot, expected).items():
                            if err is None:  # `call` says why it did not run
                                peer_lines.append(f"| {rows}x{horizon} | {label} | - | {call} | | |")
                            else:
                                eager = cpu_us(call, 20)  # wall time to block_until_ready, best of 20
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
