#!/usr/bin/env bash
# Builds and installs the package (as README says, plus the torch op library,
# which needs torch at build time), then runs pytest: two workers (pytest-xdist,
# -n 2: the CI machine has 2 cores), then a serial group.
# Serial: test_concurrency.py, test_fork.py, test_signals.py. Their tests time
# themselves against the machine (the GIL-release test counts a spinning
# thread's iterations against a solo run; Ctrl-C must land while a call is
# running; fork children must finish in time) and start threads of their own,
# so a second worker beside them competes for the same two cores. Everything else is xdist-safe: environment variables
# are set with monkeypatch (per process, restored), files go to tmp_path, the
# distributed test picks a free port, subprocesses get their own environment,
# and conftest.py hands every worker the controller's rng session seed.
# PUFF_PYTEST_WORKERS=0 runs all of it in one process.
set -euo pipefail
python -m pip install -q --no-build-isolation -C build-dir=build/test-wheel .
python -m puffadv
workers="${PUFF_PYTEST_WORKERS:-2}"
serial=(tests/python/test_concurrency.py tests/python/test_fork.py tests/python/test_signals.py)
started=$SECONDS
python -m pytest -q -n "${workers}" "${serial[@]/#/--ignore=}" tests/python
echo "pytest, ${workers} workers: $((SECONDS - started)) s"
started=$SECONDS
python -m pytest -q "${serial[@]}"
echo "pytest, serial group: $((SECONDS - started)) s"
