"""Test cases that need JAX with several host CPU devices.

XLA reads ``--xla_force_host_platform_device_count`` from ``XLA_FLAGS`` once,
when its CPU backend starts. Import this module before ``import jax``: if JAX is
not imported yet, it starts JAX with ``DEVICES`` host devices (and restores
``XLA_FLAGS`` for everything else). Cases decorated with ``on_forced_devices``
then run in this process. Otherwise (another test module started JAX first, as
in a whole-suite run) each decorated case becomes a proxy: the first proxy runs
the test file once more in a child pytest process with the flag set, and every
proxy reports its own case's outcome from that run (failure text included), so
a suite run runs every case and skips none that the child did not skip.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

DEVICES = 4
FLAG = f"--xla_force_host_platform_device_count={DEVICES}"
CHILD = "PUFFADV_FORCED_DEVICES_CHILD"  # set in the child run: never proxy again
CHILD_TIMEOUT_S = 900


def _with_flag(flags: str | None) -> str:
    kept = [f for f in (flags or "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    return " ".join(kept + [FLAG])


def _start_jax() -> int:
    """Host CPU devices of this process's JAX (0 when jax is missing)."""
    if "jax" not in sys.modules:
        previous = os.environ.get("XLA_FLAGS")
        os.environ["XLA_FLAGS"] = _with_flag(previous)
        try:
            import jax
            count = len(jax.devices("cpu"))  # starts the backend while the flag is set
        except ImportError:
            return 0
        finally:
            if previous is None:
                os.environ.pop("XLA_FLAGS", None)
            else:
                os.environ["XLA_FLAGS"] = previous
        return count
    import jax
    return len(jax.devices("cpu"))


IN_PROCESS = _start_jax() >= DEVICES
if os.environ.get(CHILD) and not IN_PROCESS:
    raise RuntimeError(f"XLA_FLAGS={os.environ.get('XLA_FLAGS')!r} gave this child process fewer than "
                       f"{DEVICES} CPU devices; jax was imported before {__name__}?")


@functools.lru_cache(maxsize=None)
def _child_run(test_file: str):
    """Runs `test_file` in a child pytest with the flag; ({case name: (outcome, text)}, output)."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.xml"
        env = dict(os.environ, XLA_FLAGS=_with_flag(os.environ.get("XLA_FLAGS")), **{CHILD: "1"})
        env.pop("PYTEST_CURRENT_TEST", None)
        # On a GPU machine the child's JAX starts the GPU backend too: no 75 % grab of
        # GPU memory beside the parent's and pytest-xdist's other workers.
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                   f"--junitxml={report}", test_file]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  timeout=CHILD_TIMEOUT_S)
            output = done.stdout + done.stderr
        except subprocess.TimeoutExpired as error:
            output = f"child pytest timed out after {CHILD_TIMEOUT_S} s\n{error.stdout or ''}"
        outcomes = {}
        if report.exists():
            for case in ElementTree.parse(report).getroot().iter("testcase"):
                outcome, text = "passed", ""
                for tag in ("failure", "error", "skipped"):
                    found = case.find(tag)
                    if found is not None:
                        outcome = "skipped" if tag == "skipped" else "failed"
                        text = (found.get("message") or "") + "\n" + (found.text or "")
                        break
                outcomes[case.get("name")] = (outcome, text)
    return outcomes, output


def _current_case() -> str:
    """The running case's name as junit writes it: 'test_x[param-ids]'."""
    node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" (", 1)[0]
    return node.split("::", 1)[1]


def on_forced_devices(test_file: str):
    """Decorator for the cases of `test_file` (pass __file__) that need DEVICES devices."""

    def decorate(test):
        if IN_PROCESS:
            return test

        @functools.wraps(test)  # same signature and marks: pytest parametrizes the proxy alike
        def proxy(*args, **kwargs):
            outcomes, output = _child_run(str(Path(test_file).resolve()))
            name = _current_case()
            if name not in outcomes:
                pytest.fail(f"{name} did not run in the child process with {FLAG}; its output:\n"
                            f"{output[-6000:]}", pytrace=False)
            outcome, text = outcomes[name]
            if outcome == "failed":
                pytest.fail(f"failed in the child process with {FLAG}:\n{text}", pytrace=False)
            if outcome == "skipped":
                pytest.skip(f"skipped in the child process: {text.strip()}")

        return proxy

    return decorate
