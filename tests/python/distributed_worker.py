"""One rank of a torch.distributed run: each rank computes its own rows with
puffadv, and the ranks normalise the advantages globally with one all_reduce of
the fused per-row sums and square sums.

Started the way torchrun starts ranks (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT in the environment), by tests/python/test_distributed.py
(gloo, CPU) and scripts/gpu/80-multi-gpu.sh (NCCL, one GPU per rank):

    torchrun --nproc-per-node 2 tests/python/distributed_worker.py --out DIR [--device cuda]

Each rank writes DIR/rank<R>.npz. ``python tests/python/distributed_worker.py
--verify DIR`` then checks them against the single-process computation over all
rows and the float64 reference (exit status 1 on a mismatch).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))  # for `import reference`
import reference  # noqa: E402

ROWS, HORIZON, SEED = 515, 64, 20261201  # 515: the ranks' row counts differ
PUFF = dict(gamma=0.97, gae_lambda=0.9, rho_clip=1.3, c_clip=0.8)
GAE = dict(gamma=0.99, gae_lambda=0.95)
EPS = 1e-8


def full_data():
    """Every rank builds the same global batch from one seed and keeps its rows."""
    rng = np.random.default_rng(SEED)
    puff = reference.random_puff_inputs(rng, ROWS, HORIZON)
    episodes = reference.random_episodes(rng, ROWS, HORIZON)
    # CleanRL / SB3 keep [T, B]: time-major, each rank owns a block of columns (envs).
    time_major = {k: episodes[k].T for k in ("rewards", "values", "terminated", "truncated",
                                              "bootstrap_values")}
    return puff, time_major


def row_range(rank: int, world: int) -> tuple[int, int]:
    bounds = np.linspace(0, ROWS, world + 1).round().astype(int)
    return int(bounds[rank]), int(bounds[rank + 1])


def normalise_globally(advantages, sums, square_sums):
    """(A - mean) / (std + eps) over every rank's advantages, as one process computing
    all rows would (torch.std: unbiased), from ONE all_reduce of three numbers."""
    import torch
    import torch.distributed as dist
    totals = torch.stack([sums.double().sum(), square_sums.double().sum(),
                          torch.tensor(float(advantages.numel()), dtype=torch.float64,
                                       device=sums.device)])
    dist.all_reduce(totals)  # sum over ranks: sum A, sum A^2, element count
    total, total_square, count = totals
    mean = total / count
    std = ((total_square - count * mean * mean) / (count - 1)).sqrt()
    return (advantages - mean.to(advantages.dtype)) / (std.to(advantages.dtype) + EPS)


def run_rank(out: Path, device_kind: str) -> None:
    import torch
    import torch.distributed as dist

    import puffadv
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_kind == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device_kind == "cuda" else "gloo")  # env:// as torchrun sets it
    rank, world = dist.get_rank(), dist.get_world_size()
    lo, hi = row_range(rank, world)
    puff, time_major = full_data()

    v, r, d, i = (torch.from_numpy(x[lo:hi]).to(device) for x in puff)
    est = puffadv.compute_puff_advantage(v, r, d, i, **PUFF, sums=True, square_sums=True)
    puff_normalised = normalise_globally(est.advantages, est.sums, est.square_sums)

    # Time-major [T, B]: this rank's columns are a strided view, passed as it is.
    cols = {k: torch.from_numpy(x)[:, lo:hi].to(device) for k, x in time_major.items()}
    g = puffadv.gae(cols["rewards"], cols["values"], cols["terminated"], cols["truncated"],
                    bootstrap_values=cols["bootstrap_values"], time_axis=0, **GAE,
                    sums=True, square_sums=True)
    gae_normalised = normalise_globally(g.advantages, g.sums, g.square_sums)

    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"rank{rank}.npz", lo=lo, hi=hi, world=world, device=str(device),
             puff=est.advantages.cpu().numpy(), puff_normalised=puff_normalised.cpu().numpy(),
             gae=g.advantages.cpu().numpy(), gae_normalised=gae_normalised.cpu().numpy())
    dist.barrier(device_ids=[local_rank] if device_kind == "cuda" else None)
    dist.destroy_process_group()


def _normalised(a: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    return (a - a.mean()) / (a.std(ddof=1) + EPS)


def verify(out: Path) -> list[str]:
    """Problems found in the ranks' files (empty when they equal the single-process run)."""
    import puffadv
    files = sorted(out.glob("rank*.npz"))
    if not files:
        return [f"no rank*.npz in {out}"]
    parts = [dict(np.load(f)) for f in files]
    world = int(parts[0]["world"])
    problems = [] if len(parts) == world else [f"{len(parts)} rank files for a world of {world}"]
    parts.sort(key=lambda p: int(p["lo"]))
    covered = [(int(p["lo"]), int(p["hi"])) for p in parts]
    if [lo for lo, _ in covered] != [0] + [hi for _, hi in covered[:-1]] or covered[-1][1] != ROWS:
        problems.append(f"row ranges {covered} do not tile 0..{ROWS}")
        return problems
    puff, time_major = full_data()
    single = {
        "puff": np.asarray(puffadv.compute_puff_advantage(*puff, **PUFF)),
        "gae": np.asarray(puffadv.gae(time_major["rewards"], time_major["values"],
                                      time_major["terminated"], time_major["truncated"],
                                      bootstrap_values=time_major["bootstrap_values"], time_axis=0,
                                      **GAE).advantages),
    }
    exact = {
        "puff": reference.puff_advantage(*puff, **PUFF),
        "gae": reference.standard_estimate(
            "gae", *(time_major[k].T for k in ("rewards", "values", "terminated", "truncated")),
            bootstrap_values=time_major["bootstrap_values"].T, gamma=GAE["gamma"],
            lam=GAE["gae_lambda"])[0].T,
    }
    axis = {"puff": 0, "gae": 1}  # gae is time-major: ranks own columns
    for name in ("puff", "gae"):
        for suffix, want_single, want_exact in (("", single[name], exact[name]),
                                                ("_normalised", _normalised(single[name]),
                                                 _normalised(exact[name]))):
            got = np.concatenate([p[name + suffix] for p in parts], axis=axis[name])
            for label, want in (("the single-process puffadv run", want_single),
                                ("the float64 reference", want_exact)):
                error = reference.relative_error(got, want)
                if not error <= 1e-5:
                    problems.append(f"{name}{suffix}: relative error {error:.2e} against {label}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for this rank's rank<R>.npz")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--verify", type=Path, metavar="DIR", help="check the ranks' files in DIR")
    args = parser.parse_args()
    if args.verify:
        problems = verify(args.verify)
        print("\n".join(problems) if problems else
              f"{len(list(args.verify.glob('rank*.npz')))} ranks == single process (rows {ROWS}, "
              f"horizon {HORIZON}): puff advantage and gae, raw and globally normalised")
        return 1 if problems else 0
    if args.out is None:
        parser.error("--out is required to run a rank")
    run_rank(args.out, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
