"""The one place where a Python call reaches the compiled core.

Every public function funnels through call_core(), so behaviour that applies
to all of them (device placement, a CPU fallback for GPU arrays that this
build cannot compute on) is written once.
"""
from __future__ import annotations

from . import _fallback, _frameworks

_torch_rules = None  # imported with the first torch call (it imports torch)


def call_core(kernel, framework: str, inputs, outputs, scalars, stream=None, output_names=()):
    """Runs `kernel(*inputs, *outputs, *scalars, stream_handle)`.

    `inputs` are read, `outputs` written in place; all are arrays of `framework`,
    or None for an absent optional one. GPU arrays that this build cannot
    compute on go through the CPU fallback. torch outputs follow torch's rules
    for in-place writes (`_torch_rules`); `output_names` name them in its errors.
    """
    # The kernel runs without the GIL, having read PUFFADV_NUM_THREADS with it
    # (src/python/bindings_release.hpp).
    if framework == "numpy" and stream is None:  # the common case: host memory, no stream
        kernel(*inputs, *outputs, *scalars, 0)
        return
    rules = None
    if framework == "torch":
        rules = _torch_rules or _load_torch_rules()
        rules.check_all_writable(outputs, output_names)
    handle = _frameworks.current_stream(framework, inputs[0], stream)
    reason = None
    try:
        kernel(*_frameworks.for_kernel(framework, inputs, outputs), *scalars, handle)
    except _fallback.BackendUnavailableError as missing:
        # Raised only after every argument check passed on the caller's own arrays.
        reason = str(missing)
    if reason is not None:  # outside the except: no chained traceback on the host path
        kernel, inputs, outputs = _present_only(kernel, inputs, outputs)
        inputs = _frameworks.for_import(framework, inputs)
        _fallback.run_on_host(kernel, framework, inputs, outputs, scalars, reason, stream)
    if rules is not None:
        rules.mark_written(*outputs)
    elif framework == "jax" and _frameworks.is_gpu(inputs[0]):
        _frameworks.wait_for_gpu(inputs[0])


def _load_torch_rules():
    global _torch_rules
    from . import _torch_rules as rules
    _torch_rules = rules
    return rules


def _present_only(kernel, inputs, outputs):
    """(kernel', inputs', outputs') without the absent (None) arrays, kernel'
    putting them back in place: the fallback copies only arrays that exist."""
    if all(x is not None for x in (*inputs, *outputs)):
        return kernel, inputs, outputs
    present_in = [i for i, x in enumerate(inputs) if x is not None]
    present_out = [i for i, x in enumerate(outputs) if x is not None]

    def bound(*args):
        full_in, full_out = [None] * len(inputs), [None] * len(outputs)
        for i, x in zip(present_in, args[:len(present_in)]):
            full_in[i] = x
        rest = args[len(present_in):]
        for i, x in zip(present_out, rest[:len(present_out)]):
            full_out[i] = x
        kernel(*full_in, *full_out, *rest[len(present_out):])

    return bound, [inputs[i] for i in present_in], [outputs[i] for i in present_out]
