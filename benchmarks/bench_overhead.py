"""What one Python call of puffadv costs the host, beside what it could cost.

For each public function (puff advantage given / allocated / with fused
outputs, gae, td_lambda_returns, vtrace, the estimator family; and puffadv.jax's eagerly) and each
framework present (NumPy, torch CPU, torch CUDA, CuPy, JAX) at 4x8 and 8192x64:
host microseconds per call, without any synchronisation. Beside them, in the
same run: the torch operators (torch.ops.puffadv), direct calls of the compiled
core (puffadv._core) and a trivial nanobind call. Then issue 14's bars as ratios.

Timing: every case is timed in turn, round after round (so a burst of load from
other processes hits all cases alike), and each case keeps its fastest round:
the min of repeats, since the machine may be shared. `--clock cpu` counts the
process's CPU time instead of wall time, so that time spent descheduled by
other processes' load is left out (on a quiet machine the two agree). At
8192x64 the CPU rows include the computation itself.

On a GPU, also the eager time of one call at 8192x64 and 65536x128, two ways:
from an idle device (L2 flushed, then a synchronisation, CUDA events around the
call: the host's time up to the launch is counted) and as triton.testing.do_bench
times it (flush and call queued back to back: the host's time hides behind the
flush); and its device time (calls queued behind a sleep kernel, so no host gap
is counted, on buffers rotated past the L2). Beside them, the floor of any
Python-level call on that host: the compiled core called directly and a torch
kernel launch (torch.add with an output).

    python benchmarks/bench_overhead.py [--quick] [--clock wall|cpu] [--json out.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import time

import numpy as np

import puffadv
from puffadv import _core

SHAPES = [(4, 8), (8192, 64)]
GPU_SHAPES = [(8192, 64), (65536, 128)]
PUFF = (0.99, 0.95, 1.0, 1.0)  # gamma, gae_lambda, rho_clip, c_clip: PufferLib passes them positionally


def frameworks():
    """(name, put: NumPy array -> that framework's array) for each framework present."""
    found = [("numpy", lambda a: a)]
    try:
        import torch
        found.append(("torch-cpu", torch.from_numpy))
        if torch.cuda.is_available():
            found.append(("torch-cuda", lambda a: torch.from_numpy(a).cuda()))
        else:
            print("torch CUDA: skipped, no CUDA device")
    except ImportError:
        print("torch: skipped, not installed")
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        found.append(("cupy", cupy.asarray))
    except Exception:  # noqa: BLE001 - not installed, or no device
        print("CuPy: skipped, not installed or no GPU")
    try:
        import jax.numpy as jnp
        found.append(("jax", jnp.asarray))
    except ImportError:
        print("JAX: skipped, not installed")
    return found


def inputs(put, rows, horizon, seed=0):
    rng = np.random.default_rng(seed)
    floats = lambda: rng.standard_normal((rows, horizon), dtype=np.float32)  # noqa: E731
    return dict(values=put(floats()), rewards=put(floats()),
                dones=put((rng.random((rows, horizon)) < 0.1).astype(np.float32)),
                importance=put(rng.random((rows, horizon), dtype=np.float32) * 2),
                terminated=put(rng.random((rows, horizon)) < 0.1),
                last_value=put(floats()[:, 0].copy()), out=put(floats()), out2=put(floats()))


def public_calls(framework, a):
    """The public functions on one framework's arrays."""
    # Arguments as a trainer passes them (no ** unpacking, which alone costs ~0.3 us).
    v, r, d, i, out, out2 = (a[k] for k in ("values", "rewards", "dones", "importance", "out", "out2"))
    t, last = a["terminated"], a["last_value"]
    g, lam, rho, c = PUFF
    calls = {
        "puff, output given": lambda: puffadv.compute_puff_advantage(v, r, d, i, out, g, lam, rho, c),
        "puff, allocated": lambda: puffadv.compute_puff_advantage(v, r, d, i, None, g, lam, rho, c),
        "puff + returns + 3 sums": lambda: puffadv.compute_puff_advantage(
            v, r, d, i, out, g, lam, rho, c, returns=out2, abs_sums=True, sums=True, square_sums=True),
        "gae": lambda: puffadv.gae(r, v, t, last_value=last, time_axis=-1),
        "gae, advantages given": lambda: puffadv.gae(r, v, t, last_value=last, advantages=out, returns=False, time_axis=-1),
        "td_lambda_returns": lambda: puffadv.td_lambda_returns(r, v, t, last_value=last, time_axis=-1),
        "vtrace": lambda: puffadv.vtrace(r, v, t, last_value=last, importance=i, time_axis=-1),
        # The estimator family (issue 20): the same _estimate, eleven inputs and three options.
        "discounted_returns": lambda: puffadv.discounted_returns(r, t, last_value=last, time_axis=-1),
        "n_step_returns": lambda: puffadv.n_step_returns(r, v, t, n=3, last_value=last, time_axis=-1),
        "retrace": lambda: puffadv.retrace(r, v, v, t, target_probs=i, behaviour_probs=i, time_axis=-1),
        "q_lambda": lambda: puffadv.q_lambda(r, v, v, t, time_axis=-1),
        "episodic_cumsum": lambda: puffadv.episodic_cumsum(r, t, time_axis=-1),
    }
    if framework == "jax":  # jax.Arrays are immutable: the API refuses them as outputs
        for given in ("puff, output given", "puff + returns + 3 sums", "gae, advantages given"):
            del calls[given]
        import puffadv.jax as pjax
        calls["puffadv.jax: puff"] = lambda: pjax.compute_puff_advantage(v, r, d, i, g, lam, rho, c)
        calls["puffadv.jax: gae"] = lambda: pjax.gae(r, v, t, last_value=last, time_axis=-1)
    return calls


def reference_calls(framework, a):
    """What the public calls are measured against, on the same arrays."""
    v, r, d, i, out, out2 = (a[k] for k in ("values", "rewards", "dones", "importance", "out", "out2"))
    t, last = a["terminated"], a["last_value"]
    refs = {}
    if framework == "numpy":
        refs["_core.puff_advantage (direct, output given)"] = lambda: _core.puff_advantage(
            v, r, d, i, out, 0.99, 0.95, 1.0, 1.0, 0)
        refs["_core.standard_estimate (direct, gae)"] = lambda: _core.standard_estimate(
            r, v, t, None, last, None, None, out, out2, None, None, None,
            "gae", 0.99, 0.95, 1.0, 1.0, 1.0, -1, "gae_lambda", 0)
        refs["trivial nanobind call"] = lambda: _core.pin_cpu_thread_count(False)
    elif framework.startswith("torch"):
        ops = _torch_ops()
        if ops is None:
            return refs
        std = (r, v, t, None, last)
        refs["op compute_puff_advantage (given)"] = lambda: ops.compute_puff_advantage(
            v, r, d, i, out, 0.99, 0.95, 1.0, 1.0)
        refs["op puff_advantage (allocating)"] = lambda: ops.puff_advantage(v, r, d, i, 0.99, 0.95, 1.0, 1.0)
        if hasattr(ops, "gae"):
            refs["op gae"] = lambda: ops.gae(*std, time_axis=-1)
            refs["op td_lambda_returns"] = lambda: ops.td_lambda_returns(*std, time_axis=-1)
            refs["op vtrace"] = lambda: ops.vtrace(r, v, t, None, last, None, i, time_axis=-1)
    return refs


def _torch_ops():
    try:
        import puffadv.torch  # noqa: F401  loads the op library
        import torch
        return torch.ops.puffadv
    except ImportError as e:
        print(f"torch operators: skipped ({str(e).splitlines()[0][:100]})")
        return None


def host_us(cases, rounds, sample_s, clock=time.perf_counter):
    """Fastest per-call host time (us) of each zero-argument callable, interleaved."""
    counts = {}
    for name, fn in cases.items():
        fn(), fn()  # warm-up: imports, caches, first allocations
        start, n = clock(), 0
        while clock() - start < sample_s / 4:  # calls per sample of ~sample_s
            fn()
            n += 1
        counts[name] = max(1, round(n * sample_s / max(clock() - start, 1e-9)))
    best = dict.fromkeys(cases, math.inf)
    for _ in range(rounds):
        for name, fn in cases.items():
            n = counts[name]
            t0 = clock()
            for _ in range(n):
                fn()
            best[name] = min(best[name], (clock() - t0) / n * 1e6)
        _synchronize_all()
    return best


def _synchronize_all():
    """Lets queued GPU work drain between rounds (host timing never waits inside one)."""
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except ImportError:
        pass


def gpu_times(rows, horizon, repeats):
    """{call: (eager us from an idle device, eager us as do_bench, device us)} for torch CUDA at one shape."""
    import torch
    ops = _torch_ops()
    per_set = rows * horizon * 20
    sets = max(1, min(32, math.ceil((192 << 20) / per_set)))  # rotated past a 60 MB L2
    arrays = [inputs(lambda x: torch.from_numpy(x).cuda(), rows, horizon, seed=s) for s in range(sets)]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def call(name, a):
        v, r, d, i = a["values"], a["rewards"], a["dones"], a["importance"]
        if name == "puffadv.compute_puff_advantage (given)":
            return puffadv.compute_puff_advantage(v, r, d, i, a["out"], *PUFF)
        if name == "puffadv.gae (advantages given)":
            return puffadv.gae(a["rewards"], v, a["terminated"], last_value=a["last_value"],
                               advantages=a["out"], returns=False, time_axis=-1)
        if name == "op compute_puff_advantage (given)":
            return ops.compute_puff_advantage(v, r, d, i, a["out"], 0.99, 0.95, 1.0, 1.0)
        if name == "op gae":
            return ops.gae(a["rewards"], v, a["terminated"], None, a["last_value"], time_axis=-1)
        if name == "floor: direct _core.puff_advantage":
            return _core.puff_advantage(v, r, d, i, a["out"], *PUFF, raw_stream(v.get_device()))
        return torch.add(v, r, out=a["out"])  # floor: a torch kernel launch reading 2 arrays

    raw_stream = torch._C._cuda_getCurrentRawStream
    names = ["puffadv.compute_puff_advantage (given)", "puffadv.gae (advantages given)"]
    if ops is not None:
        names += ["op compute_puff_advantage (given)", "op gae"]
    names += ["floor: direct _core.puff_advantage", "floor: torch.add(v, r, out=)"]
    result = {}
    for name in names:
        call(name, arrays[0])
        eager = []
        for k in range(repeats):
            flush.zero_()
            torch.cuda.synchronize()  # idle device: the host's launch time is in the measurement
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call(name, arrays[k % sets])
            end.record()
            end.synchronize()
            eager.append(start.elapsed_time(end) * 1000)
        # As triton.testing.do_bench times it: flushes and calls queued back to back,
        # no wait between them, so the host's time overlaps the previous flush.
        pipelined = []
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        torch.cuda.synchronize()
        for k in range(repeats):
            flush.zero_()
            starts[k].record()
            call(name, arrays[k % sets])
            ends[k].record()
        torch.cuda.synchronize()
        pipelined = [s.elapsed_time(e) * 1000 for s, e in zip(starts, ends)]
        device = []
        for _ in range(max(3, repeats // 10)):
            torch.cuda.synchronize()
            torch.cuda._sleep(50_000_000)  # the host queues every call before the first runs
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for k in range(2 * sets):
                call(name, arrays[k % sets])
            end.record()
            end.synchronize()
            device.append(start.elapsed_time(end) * 1000 / (2 * sets))
        result[name] = (statistics.median(eager), statistics.median(pipelined), statistics.median(device))
    return result


def bars(table):
    """Issue 14's bars as (description, ratio, limit) from one run's table; limit
    None: no bar, shown for comparison (gae against its operator on the CPU)."""
    def get(framework, shape, name):
        return table.get(framework, {}).get(shape, {}).get(name)

    checks = []
    core = get("numpy", "4x8", "_core.puff_advantage (direct, output given)")
    for name, limit in (("puff, output given", 2.0), ("puff, allocated", 3.0)):
        ours = get("numpy", "4x8", name)
        if core and ours:
            checks.append((f"NumPy 4x8 {name} / direct _core call", ours / core, limit))
    pairs = (("puff, output given", "op compute_puff_advantage (given)"),
             ("puff, allocated", "op puff_advantage (allocating)"),
             ("gae, advantages given", "op gae"), ("gae", "op gae"))
    for framework, shapes in (("torch-cpu", ("4x8",)), ("torch-cuda", ("4x8", "8192x64"))):
        for ours_name, op_name in pairs:
            barred = framework == "torch-cuda" or ours_name.startswith("puff")
            for shape in shapes:
                ours, op = get(framework, shape, ours_name), get(framework, shape, op_name)
                if ours and op:
                    checks.append((f"{framework} {shape} {ours_name} / {op_name}", ours / op,
                                   1.5 if barred else None))
    return checks


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: time.perf_counter; cpu: time.process_time (a loaded machine)")
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args(argv)
    rounds, sample_s = (3, 0.005) if args.quick else (15, 0.02)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {machine()}; "
          f"puffadv {puffadv.__version__}; PUFFADV_NUM_THREADS={os.environ.get('PUFFADV_NUM_THREADS', 'unset')}; "
          f"host us per call, {args.clock} clock, min of {rounds} interleaved rounds")
    table = {}
    for framework, put in frameworks():
        for rows, horizon in SHAPES:
            a = inputs(put, rows, horizon)
            cases = {**public_calls(framework, a), **reference_calls(framework, a)}
            heavy = rows * horizon > 100_000 and not framework.startswith(("torch-cuda", "cupy"))
            times = host_us(cases, max(3, rounds // 3) if heavy else rounds, sample_s, clock)
            table.setdefault(framework, {})[f"{rows}x{horizon}"] = times
            print(f"\n{framework} {rows}x{horizon}")
            for name, us in times.items():
                print(f"  {name:48s} {us:10.2f}")

    print("\nbars (ratios within this run)")
    ok = True
    for what, ratio, limit in bars(table):
        if limit is None:
            print(f"  {what:80s} {ratio:5.2f} (no bar)")
            continue
        ok &= ratio <= limit
        print(f"  {what:80s} {ratio:5.2f} (<= {limit}) {'ok' if ratio <= limit else 'MISSED'}")

    gpu = {}
    if "torch-cuda" in table:
        for rows, horizon in GPU_SHAPES:
            gpu[f"{rows}x{horizon}"] = gpu_times(rows, horizon, 50 if args.quick else 200)
            print(f"\ntorch CUDA {rows}x{horizon}, us: eager from an idle device (L2 flushed) / "
                  f"eager as do_bench (flushes and calls queued) / device time")
            for name, (eager, pipelined, device) in gpu[f"{rows}x{horizon}"].items():
                print(f"  {name:48s} {eager:8.1f} {pipelined:8.1f} {device:8.1f}")
    else:
        print("\nGPU eager / device times: skipped, no CUDA device")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "host_us": table, "gpu_us": gpu,
                       "bars": [list(b) for b in bars(table)]}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
