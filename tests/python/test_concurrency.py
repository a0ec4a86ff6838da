"""Calls from several Python threads at once (issue 7); fork() and signals around
calls are in test_fork.py and test_signals.py (issue 15).

The calls release the GIL, so they really overlap: each must give the float64
reference's answer, bitwise the result of the same call made alone, whatever
the other threads are doing (calling, dropping arrays, collecting garbage,
changing PUFFADV_NUM_THREADS). Under the sanitizer CI step (40-sanitize.sh)
these double as use-after-free and data-race probes.
"""
from __future__ import annotations

import gc
import os
import threading
import time

import numpy as np
import pytest

import puffadv
import reference
from reference import relative_error

try:
    import torch
except ImportError:
    torch = None

from pool_processes import PARAMS  # noqa: E402

N_THREADS = 8


def puff_case(seed):
    """One call's arguments, varied in shape, dtype, layout and framework."""
    rng = np.random.default_rng(seed)
    rows, horizon = [(1, 1), (3, 70), (64, 257), (700, 64), (9, 2000), (257, 129)][seed % 6]
    dtype = [np.float32, np.float64][seed % 2]
    inputs = reference.random_puff_inputs(rng, rows, horizon, dtype)
    if seed % 3 == 1:
        inputs = tuple(a.T.copy().T for a in inputs)  # time-major memory
    if seed % 4 == 3 and torch is not None:
        inputs = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs)
    return inputs


def as_numpy(x):
    return x.numpy() if torch is not None and isinstance(x, torch.Tensor) else np.asarray(x)


def call(kind, inputs):
    if kind == "puff":
        return as_numpy(puffadv.compute_puff_advantage(*inputs, **PARAMS))
    rewards, values, dones, importance = inputs[1], inputs[0], inputs[2], inputs[3]
    estimate = puffadv.gae(rewards, values, dones.astype(bool) if isinstance(dones, np.ndarray) else dones > 0,
                           last_value=values[:, 0], importance=importance, gamma=0.99, gae_lambda=0.95, time_axis=-1)
    return as_numpy(estimate.advantages)


def expected(kind, inputs):
    """The float64 reference's answer for call(kind, inputs)."""
    values, rewards, dones, importance = (as_numpy(a).astype(np.float64) for a in inputs)
    if kind == "puff":
        return reference.puff_advantage_by_step(values, rewards, dones, importance, **PARAMS)
    return reference.standard_estimate("gae", rewards, values, dones > 0, last_value=values[:, 0],
                                       importance=importance, gamma=0.99, lam=0.95)[0]


def tolerance(inputs):
    return 1e-5 if as_numpy(inputs[0]).dtype == np.float32 else 1e-12


def in_threads(n, work):
    """Runs work(i) in n threads released together; re-raises the first error."""
    barrier = threading.Barrier(n)
    errors = []

    def run(i):
        try:
            barrier.wait()
            work(i)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("kind", ["puff", "gae"])
def test_eight_threads_give_the_serial_results(kind):
    cases = [puff_case(seed) for seed in range(24)]
    serial = [call(kind, c) for c in cases]
    results = {}

    def work(i):
        for round_ in range(3):
            for j in range(i, len(cases), N_THREADS):
                results[(round_, j)] = call(kind, cases[j])

    in_threads(N_THREADS, work)
    assert len(results) == 3 * len(cases)
    for j, case in enumerate(cases):
        assert relative_error(serial[j], expected(kind, case)) <= tolerance(case), f"case {j}"
    for (_, j), got in results.items():
        np.testing.assert_array_equal(got, serial[j])  # bitwise: rows never share work


def test_threads_writing_disjoint_parts_of_one_output():
    rng = np.random.default_rng(5)
    inputs = reference.random_puff_inputs(rng, 8 * 40, 300)
    want = reference.puff_advantage_by_step(*inputs, **PARAMS)
    alone = puffadv.compute_puff_advantage(*inputs, **PARAMS)
    out = np.full(inputs[0].shape, np.nan, np.float32)

    def work(i):
        part = slice(40 * i, 40 * (i + 1))
        for _ in range(5):
            puffadv.compute_puff_advantage(*(a[part] for a in inputs), out[part], **PARAMS)

    in_threads(N_THREADS, work)
    assert relative_error(out, want) <= 1e-5
    np.testing.assert_array_equal(out, alone)


def test_calls_while_other_threads_drop_arrays():
    """Callers take arrays from a shared slot that other threads keep replacing,
    deleting and garbage-collecting: a call keeps its arguments alive to the end."""
    slot = {}
    lock = threading.Lock()
    stop = threading.Event()
    checked = []

    def publish(seed):
        inputs = puff_case(seed)
        want = expected("puff", inputs)
        with lock:
            slot["case"] = (inputs, want, tolerance(inputs))

    def dropper(i):
        seed = 1000 * (i + 1)
        while not stop.is_set():
            publish(seed)
            seed += 1
            with lock:
                if seed % 3 == 0:
                    slot.pop("case", None)  # the only reference, while a call may be using it
            junk = [np.empty(1 << 16, np.float32) for _ in range(8)]  # reuse of freed memory
            del junk
            gc.collect()

    def caller(i):
        # Until enough calls found a live case (a slow, sanitized or loaded run skips
        # more), within a bound: the droppers empty the slot a third of the time.
        for _ in range(3000):
            if len(checked) >= 120:
                return
            with lock:
                case = slot.get("case")
            if case is None:
                time.sleep(0.001)
                continue
            inputs, want, tol = case
            del case
            got = call("puff", inputs)
            del inputs
            assert relative_error(got, want) <= tol
            checked.append(1)

    publish(1)
    droppers = [threading.Thread(target=dropper, args=(i,)) for i in range(2)]
    for t in droppers:
        t.start()
    try:
        in_threads(6, caller)
    finally:
        stop.set()
        for t in droppers:
            t.join()
    assert len(checked) >= 120


@pytest.mark.parametrize("value,threads", [("1", 1), ("2", 2), ("3", 3), ("7", 7), ("5000", 1024),
                                           ("0", None), ("-2", None), ("junk", None), ("", None),
                                           ("4x", None), (None, None)])
def test_num_threads_changing_between_calls(monkeypatch, value, threads):
    inputs = reference.random_puff_inputs(np.random.default_rng(11), 300, 257)
    monkeypatch.delenv("PUFFADV_NUM_THREADS", raising=False)
    default = puffadv.backend()["cpu_threads"]
    baseline = puffadv.compute_puff_advantage(*inputs, **PARAMS)
    assert relative_error(baseline, reference.puff_advantage_by_step(*inputs, **PARAMS)) <= 1e-5
    if value is not None:
        monkeypatch.setenv("PUFFADV_NUM_THREADS", value)
    assert puffadv.backend()["cpu_threads"] == (threads or default)  # bad values: all cores
    np.testing.assert_array_equal(puffadv.compute_puff_advantage(*inputs, **PARAMS), baseline)


def test_num_threads_changing_while_other_threads_call():
    """Regression, 2026-11-30: the kernels read PUFFADV_NUM_THREADS with getenv
    after releasing the GIL, and a SEGV in getenv followed when another thread
    changed os.environ meanwhile (ASan caught it). Now it is read under the GIL."""
    cases = [puff_case(seed) for seed in (2, 4, 5)]
    serial = [call("puff", c) for c in cases]
    for case, alone in zip(cases, serial):
        assert relative_error(alone, expected("puff", case)) <= tolerance(case)
    stop = threading.Event()
    saved = os.environ.get("PUFFADV_NUM_THREADS")

    def toggler():
        i = 0
        while not stop.is_set():
            os.environ["PUFFADV_NUM_THREADS"] = str(1 + i % 3)
            for j in range(4):  # adding variables makes libc move the environment array
                os.environ[f"PUFFADV_TEST_FILLER_{j}"] = "x" * i
            for j in range(4):
                del os.environ[f"PUFFADV_TEST_FILLER_{j}"]
            del os.environ["PUFFADV_NUM_THREADS"]
            i += 1

    def work(i):
        for _ in range(150):
            for case, expected in zip(cases, serial):
                np.testing.assert_array_equal(call("puff", case), expected)

    t = threading.Thread(target=toggler)
    t.start()
    try:
        in_threads(4, work)
    finally:
        stop.set()
        t.join()
        if saved is None:
            os.environ.pop("PUFFADV_NUM_THREADS", None)
        else:
            os.environ["PUFFADV_NUM_THREADS"] = saved


def spin(until):
    """Loop iterations of this (Python) thread, with their times, until until() is true."""
    ticks = []
    while not until():
        ticks.append(time.perf_counter())
    return np.array(ticks)


@pytest.mark.parametrize("kind", ["puff", "gae"])
def test_the_gil_is_released_during_a_call(monkeypatch, kind):
    """While one thread computes on a large array, another Python thread runs at
    nearly its own speed. Were the GIL held, it could run only around the call's
    edges (a few 5 ms switch intervals), so only the middle of each call counts."""
    monkeypatch.setenv("PUFFADV_NUM_THREADS", "1")  # leave a core to the other thread
    inputs = reference.random_puff_inputs(np.random.default_rng(3), 4096, 4096)
    start = time.perf_counter()
    call(kind, inputs)  # warm: first-touch page faults and imports outside the measurement
    took = time.perf_counter() - start
    if took < 0.25:  # a fast machine: more rows, so a call outlasts its two edges
        factor = min(8, int(np.ceil(0.25 / max(took, 1e-3))))
        inputs = tuple(np.tile(a, (factor, 1)) for a in inputs)
        call(kind, inputs)
    end = time.perf_counter() + 0.1
    solo = len(spin(lambda: time.perf_counter() > end)) / 0.1  # iterations per second alone
    edge = 0.03
    intervals = []
    done = threading.Event()

    def worker():
        for _ in range(2):
            start = time.perf_counter()
            call(kind, inputs)
            intervals.append((start + edge, time.perf_counter() - edge))
        done.set()

    t = threading.Thread(target=worker)
    t.start()
    ticks = spin(done.is_set)
    t.join()
    middles = [(a, b) for a, b in intervals if b > a]
    assert middles, f"calls too short to measure: {intervals}"
    inside = sum(int(((ticks > a) & (ticks < b)).sum()) for a, b in middles)
    busy = sum(b - a for a, b in middles)
    share = inside / (solo * busy)
    assert share > 0.3, f"the other thread ran at {share:.0%} of its speed during {busy:.3f} s of calls"
