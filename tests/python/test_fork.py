"""fork() around calls (issue 15): a process forked after (or during) a threaded
call computes in the child with threads of its own (helpers: pool_processes.py).
Under the sanitizer CI step (40-sanitize.sh) these double as use-after-free probes.
"""
from __future__ import annotations

import multiprocessing
import threading

import numpy as np

import puffadv
import reference
from pool_processes import (PARAMS, child_error, fork_and_check, fork_only, no_fork_warning,  # noqa: F401
                            threaded_parent)
from reference import relative_error


@fork_only
@no_fork_warning
def test_os_fork_after_a_threaded_call(threaded_parent):
    assert fork_and_check(1) == 0
    assert child_error(2) <= 1e-5  # and the parent goes on as before


@fork_only
@no_fork_warning
def test_multiprocessing_fork_pool_after_a_threaded_call(threaded_parent):
    # multiprocessing's fork pools and vectorised-environment workers fork exactly like this.
    with multiprocessing.get_context("fork").Pool(2) as workers:
        errors = workers.map_async(child_error, range(4)).get(timeout=120)
    assert max(errors) <= 1e-5


@fork_only
@no_fork_warning
def test_fork_while_another_thread_computes(threaded_parent):
    """fork() waits for a call that holds the pool to finish, so the child never
    inherits a half-done job; the calling thread goes on in the parent."""
    inputs = reference.random_puff_inputs(np.random.default_rng(9), 1024, 1024)
    want = reference.puff_advantage_by_step(*inputs, **PARAMS)
    first = puffadv.compute_puff_advantage(*inputs, **PARAMS)
    assert relative_error(first, want) <= 1e-5
    stop = threading.Event()
    same = []

    def compute():
        # No BLAS here (np.linalg.norm): NumPy's OpenBLAS hangs a thread that is inside
        # it when another thread forks (its fork handler stops its pool), puffadv or not.
        while not stop.is_set():
            same.append(bool(np.array_equal(puffadv.compute_puff_advantage(*inputs, **PARAMS), first)))

    thread = threading.Thread(target=compute)
    thread.start()
    try:
        codes = [fork_and_check(seed) for seed in range(3, 8)]
    finally:
        stop.set()
        thread.join()
    assert codes == [0] * 5
    assert same and all(same)
