"""puffadv under torch.distributed: two ranks on the CPU (gloo), started by torchrun
(`python -m torch.distributed.run`, MASTER_ADDR 127.0.0.1 and a free port on
loopback), each computing its own rows (puff advantage and time-major GAE, with
fused sums / square_sums) and normalising the advantages globally with one
all_reduce; the gathered result equals the single-process computation and the
float64 reference (distributed_worker.py --verify)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: torch.distributed is untested")
import torch.distributed  # noqa: E402

import distributed_worker  # noqa: E402

WORKER = Path(distributed_worker.__file__).resolve()
TIMEOUT_S = 300


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torchrun(out: Path, ranks: int) -> subprocess.CompletedProcess:
    env = dict(os.environ,
               GLOO_SOCKET_IFNAME="lo",   # gloo's own connections on loopback too, whatever the hostname resolves to
               PUFFADV_NUM_THREADS="1",   # two ranks share this machine's cores
               OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc-per-node", str(ranks), "--master-addr", "127.0.0.1",
               "--master-port", str(free_loopback_port()), str(WORKER), "--out", str(out)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch has no torch.distributed")
def test_two_ranks_normalise_like_one_process(tmp_path):
    done = run_torchrun(tmp_path, ranks=2)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    files = sorted(p.name for p in tmp_path.glob("rank*.npz"))
    assert files == ["rank0.npz", "rank1.npz"]
    assert distributed_worker.verify(tmp_path) == []


def test_verify_catches_a_wrong_rank(tmp_path):
    """The check itself can fail: one rank's normalisation off by its own mean."""
    import numpy as np
    puff, time_major = distributed_worker.full_data()
    import puffadv
    adv = np.asarray(puffadv.compute_puff_advantage(*puff, **distributed_worker.PUFF))
    gae = np.asarray(puffadv.gae(time_major["rewards"], time_major["values"], time_major["terminated"],
                                 time_major["truncated"], bootstrap_values=time_major["bootstrap_values"],
                                 time_axis=0, **distributed_worker.GAE).advantages)
    for rank in range(2):
        lo, hi = distributed_worker.row_range(rank, 2)
        local = adv[lo:hi]
        wrong = (local - local.mean()) / (local.std() + 1e-8)  # per-rank statistics: the bug to catch
        right_gae = distributed_worker._normalised(gae)[:, lo:hi]
        np.savez(tmp_path / f"rank{rank}.npz", lo=lo, hi=hi, world=2, device="cpu", puff=local,
                 puff_normalised=wrong, gae=gae[:, lo:hi], gae_normalised=right_gae)
    problems = distributed_worker.verify(tmp_path)
    assert problems and all(p.startswith("puff_normalised") for p in problems), problems
