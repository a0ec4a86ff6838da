"""What a torch operator call of the puff advantage could cost at best (issue 33's host bar).

The operators' bar is "at or below the Python API's host cost". This measures the
parts of an operator call in separate processes, because the one part worth knowing,
the operator's C++ kernel with no Python kernel registered, is only reachable in a
process that loaded the op library without `import puffadv.torch`:

- `python API (given)`: `puffadv.compute_puff_advantage(v, r, d, i, out, ...)`;
- `operator (given)`: `torch.ops.puffadv.compute_puff_advantage.default`, as
  `import puffadv.torch` registers it (its Python BackendSelect kernel: TypeErrors,
  torch's in-place rules, the fallback and constant-input warnings, then the kernel);
- `pufferlib operator`: `torch.ops.pufferlib.compute_puff_advantage` (PufferLib's path);
- `operator, C++ kernel alone`: the same op with only the Stable-ABI C++ kernels
  registered (`torch.ops.load_library`): no rule, no TypeError, no warning. No
  operator on the Stable ABI can cost less than this;
- `torch's in-place rules via aten`: `out.narrow(0, 0, 0).zero_()`, an in-place aten
  op on a zero-size view of the output. Through the dispatcher it applies torch's
  in-place refusals and bumps the output's version counter, which a C++ kernel
  could do this way (the Stable ABI has no call for either);
- floors: `torch.add(v, r, out=)` and `_core.puff_advantage` called directly.

Each process times its cases as bench_overhead.py does (`host_us`: interleaved, round
after round, each case's fastest round kept, on its `inputs`); the processes alternate, `--processes` times each, and the table keeps
the fastest. `--clock cpu` (the default) counts the process's CPU time, so that time
spent descheduled by other load is left out.

    python benchmarks/bench_operator_floor.py [--device cpu|cuda] [--shape 4x8] [--processes 3]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench_overhead import host_us, inputs, machine  # the same inputs, timer and machine line

ROUNDS, SAMPLE_S = 7, 0.02  # interleaved rounds per process; seconds of calls per case per round


def _measure(mode: str, device: str, rows: int, horizon: int, clock) -> dict:
    import torch

    import puffadv
    from puffadv import _core, _torch_status

    if mode == "bare":
        torch.ops.load_library(str(_torch_status.library_path()))  # the C++ kernels, nothing else
    else:
        import puffadv.pufferlib_compat  # noqa: F401  torch.ops.pufferlib on puffadv's operator
        import puffadv.torch  # noqa: F401
    a = inputs(lambda x: torch.from_numpy(x).to(device), rows, horizon)
    v, r, d, i, out = (a[k] for k in ("values", "rewards", "dones", "importance", "out"))
    args = (v, r, d, i, out, 0.99, 0.95, 1.0, 1.0)
    op = torch.ops.puffadv.compute_puff_advantage.default
    cases = {"operator, C++ kernel alone" if mode == "bare" else "operator (given)": lambda: op(*args)}
    if mode == "full":
        cases["python API (given)"] = lambda: puffadv.compute_puff_advantage(*args)
        if hasattr(torch.ops.pufferlib, "compute_puff_advantage"):
            cases["pufferlib operator"] = lambda: torch.ops.pufferlib.compute_puff_advantage(*args)
    else:
        cases["torch's in-place rules via aten"] = lambda: out.narrow(0, 0, 0).zero_()
        cases["floor: torch.add(v, r, out=)"] = lambda: torch.add(v, r, out=out)
        if device == "cpu":
            arrays = [x.numpy() for x in (v, r, d, i, out)]
            cases["floor: _core.puff_advantage direct (NumPy)"] = lambda: _core.puff_advantage(
                *arrays, 0.99, 0.95, 1.0, 1.0, 0)
    return host_us(cases, ROUNDS, SAMPLE_S, clock)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--shape", default="4x8")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--child", choices=("bare", "full"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rows, horizon = (int(n) for n in args.shape.split("x"))
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.child:
        print(json.dumps(_measure(args.child, args.device, rows, horizon, clock)))
        return 0
    best: dict = {}
    for _ in range(args.processes):
        for mode in ("full", "bare"):
            child = [sys.executable, __file__, "--child", mode, "--device", args.device, "--shape", args.shape,
                     "--clock", args.clock]
            line = subprocess.run(child, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            for name, us in json.loads(line).items():
                best[name] = min(best.get(name, float("inf")), us)
    print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC; {machine()}; torch {args.device} {args.shape}; "
          f"host us per call, {args.clock} clock, min over {args.processes} x 2 processes of {ROUNDS} interleaved rounds")
    api = best.get("python API (given)")
    for name, us in best.items():
        ratio = f"{us / api:5.2f}x the Python API" if api and not name.startswith(("floor", "torch's")) else ""
        print(f"  {name:44s} {us:8.2f}  {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
