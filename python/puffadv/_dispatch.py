"""The one place where a Python call reaches the compiled core.

Every public function funnels through call_core(), so behaviour that applies
to all of them (device placement, a CPU fallback for GPU arrays that this
build cannot compute on) is written once.
"""
from __future__ import annotations

from . import _core, _fallback, _frameworks


def call_core(kernel, framework: str, inputs, outputs, scalars, stream=None):
    """Runs `kernel(*inputs, *outputs, *scalars, stream_handle)`.

    `inputs` are read, `outputs` written in place; all are arrays of `framework`.
    GPU arrays that this build cannot compute on go through the CPU fallback.
    """
    inputs = [_frameworks.for_import(framework, x) for x in inputs]
    handle = _frameworks.current_stream(framework, inputs[0], stream)
    # The kernel runs without the GIL: PUFFADV_NUM_THREADS is read now, not while
    # another Python thread may be changing the environment (getenv vs setenv).
    _core.pin_cpu_thread_count(True)
    try:
        reason = None
        try:
            kernel(*_frameworks.for_kernel(framework, [*inputs, *outputs]), *scalars, handle)
        except _fallback.BackendUnavailableError as missing:
            # Raised only after every argument check passed on the caller's own arrays.
            reason = str(missing)
        if reason is not None:  # outside the except: no chained traceback on the host path
            _fallback.run_on_host(kernel, framework, inputs, outputs, scalars, reason, stream)
    finally:
        _core.pin_cpu_thread_count(False)
    if framework == "jax" and _frameworks.is_gpu(inputs[0]):
        _frameworks.wait_for_gpu(inputs[0])
