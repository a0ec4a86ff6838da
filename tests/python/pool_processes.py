"""Helpers of the tests of puffadv's CPU thread pool across processes and signals
(test_fork.py, test_signals.py, issue 15): a threaded parent, forked children
that make one threaded call each, and the pool's threads as /proc lists them.

Found 2026-12-01: with GNU OpenMP, a process that called puffadv with several
threads and then forked hung for ever at its child's next large call (libgomp's
threads do not survive fork). puffadv's own pool gives the child a fresh one.
"""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import puffadv
import reference
from reference import relative_error

PARAMS = dict(gamma=0.99, gae_lambda=0.95, rho_clip=2.0, c_clip=1.0)

FORK_ROWS, FORK_STEPS = 512, 257  # 131584 elements: enough work for 4 threads
fork_only = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() on this platform")
# Python >= 3.12 warns about fork() in a process with threads (ours, sleeping at the fork).
# JAX (when a test imported it) warns about any fork.
no_fork_warning = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning",
                                             r"ignore:os.fork\(\) was called:RuntimeWarning")


def child_error(seed):
    """In a child: one threaded call's relative error against the reference."""
    inputs = reference.random_puff_inputs(np.random.default_rng(seed), FORK_ROWS, FORK_STEPS)
    out = puffadv.compute_puff_advantage(*inputs, **PARAMS)
    return relative_error(out, reference.puff_advantage_by_step(*inputs, **PARAMS))


def pool_threads():
    """puffadv's worker threads in this process (Linux names them puffadv-cpu)."""
    tasks = "/proc/self/task"
    names = []
    for tid in os.listdir(tasks):
        try:
            with open(f"{tasks}/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # a thread that just ended
            pass
    return sum(name == "puffadv-cpu" for name in names)


@pytest.fixture
def threaded_parent(monkeypatch):
    """This process has made a call with 4 threads (its pool has workers)."""
    monkeypatch.setenv("PUFFADV_NUM_THREADS", "4")
    assert child_error(0) <= 1e-5
    if os.path.isdir("/proc/self/task"):
        assert pool_threads() >= 3


def wait_for(pid, seconds=60.0):
    """The child's exit code, or a test failure (after killing it) if it hangs."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child did not finish one call in {seconds:.0f} s")


def fork_and_check(seed):
    """Forks a child that makes one threaded call; returns the child's exit code:
    0 right answer (and, on Linux, computed with fresh pool threads), 2 wrong, 3 no threads."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if child_error(seed) <= 1e-5 else 2
            if code == 0 and os.path.isdir("/proc/self/task") and pool_threads() < 3:
                code = 3
        finally:
            os._exit(code)
    return wait_for(pid)
