"""The one place where a Python call reaches the compiled core.

Every public function (and every torch.compile operator's body) funnels through
run(), so behaviour that applies to all of them (device placement, a CPU
fallback for GPU arrays that this build cannot compute on) is written once, and
kernel() is the one place that knows how the core is called: arrays travel
keyed by role, never in positional slots.
"""
from __future__ import annotations

from . import _core, _fallback, _frameworks

_torch_rules = None  # imported with the first torch call (it imports torch)

# The roles of today's bindings (src/python/bindings_conventions.cpp), until _core.estimate.
_STANDARD_ROLES = ("rewards", "values", "terminated", "truncated", "last_value", "bootstrap_values",
                   "importance", "next_values", "target_probs", "behaviour_probs", "greedy", "advantages",
                   "returns", "abs_sums", "sums", "square_sums")
_PUFF_FUSED = ("returns", "abs_sums", "sums", "square_sums")


def kernel(kind: str, scalars: dict, *, lambda_name: str = "lambda", n: int = 1, log_probs: bool = False,
           reset_at_start: bool = False, time_axis: int = -1):
    """`kernel(arrays, stream)`: the core's estimator `kind` on `arrays` (role -> array; an
    absent role is not given) with `scalars` (role -> float: gamma, lambda, rho_clip, c_clip,
    rho_pg_clip; the puff advantage reads the first four) on the stream handle `stream`."""
    gamma, lam = scalars["gamma"], scalars["lambda"]
    rho_clip, c_clip, rho_pg_clip = scalars["rho_clip"], scalars["c_clip"], scalars.get("rho_pg_clip", 1.0)
    if hasattr(_core, "estimate"):  # THE switch: the core's one entry (issue 28) serves every kind
        def one_entry(arrays, stream):
            _core.estimate(kind, arrays, gamma=gamma, lambda_=lam, rho_clip=rho_clip, c_clip=c_clip,
                           rho_pg_clip=rho_pg_clip, n=n, log_probs=log_probs, reset_at_start=reset_at_start,
                           lambda_name=lambda_name, time_axis=time_axis, stream=stream)
        return one_entry
    # Until then: today's three bindings, called by keyword.
    if kind == "puff_advantage":
        def puff(arrays, stream):
            get = arrays.get
            fused = {role: get(role) for role in _PUFF_FUSED}
            common = dict(values=arrays["values"], rewards=arrays["rewards"], dones=arrays["terminated"],
                          importance=arrays["importance"], advantages=arrays["advantages"], gamma=gamma,
                          gae_lambda=lam, rho_clip=rho_clip, c_clip=c_clip, stream=stream)
            if all(x is None for x in fused.values()):
                _core.puff_advantage(**common)
            else:
                _core.puff_advantage_fused(**common, **fused)
        return puff

    def standard(arrays, stream):
        get = arrays.get
        _core.standard_estimate(**{role: get(role) for role in _STANDARD_ROLES}, kind=kind, gamma=gamma,
                                lambda_=lam, rho_clip=rho_clip, c_clip=c_clip, rho_pg_clip=rho_pg_clip,
                                time_axis=time_axis, lambda_name=lambda_name, stream=stream, n=n,
                                log_probs=log_probs, reset_at_start=reset_at_start)
    return standard


def run(call, framework: str, inputs: dict, outputs: dict, stream=None, names=None):
    """Runs `call(arrays, stream_handle)` (a kernel()) on `inputs` (read) and `outputs`
    (written in place), each role -> array of `framework` or None (absent); the first
    input decides the device. GPU arrays that this build cannot compute on go through
    the CPU fallback. torch outputs follow torch's rules for in-place writes
    (`_torch_rules`); `names` (role -> the caller's name) name arrays in errors."""
    # The kernel runs without the GIL, having read PUFFADV_NUM_THREADS with it
    # (src/python/bindings_release.hpp).
    if framework == "numpy" and stream is None:  # the common case: host memory, no stream
        call({**inputs, **outputs}, 0)
        return
    names = names or {}
    first = next(iter(inputs.values()))
    rules = None
    if framework == "torch":
        rules = _torch_rules or _load_torch_rules()
        rules.check_all_writable(outputs.values(), [names.get(role, role) for role in outputs])
    handle = _frameworks.current_stream(framework, first, stream)
    reason = None
    arguments = _frameworks.for_kernel(framework, tuple(inputs.values()), tuple(outputs.values()))
    try:
        call(dict(zip((*inputs, *outputs), arguments)), handle)
    except _fallback.BackendUnavailableError as missing:
        # Raised only after every argument check passed on the caller's own arrays.
        reason = str(missing)
    if reason is not None:  # outside the except: no chained traceback on the host path
        present = [role for role, x in inputs.items() if x is not None]
        host_inputs = dict(zip(present, _frameworks.for_import(framework, [inputs[r] for r in present])))
        _fallback.run_on_host(call, framework, host_inputs,
                              {role: x for role, x in outputs.items() if x is not None}, names, reason, stream)
    if rules is not None:
        rules.mark_written(*outputs.values())
    elif framework == "jax" and _frameworks.is_gpu(first):
        _frameworks.wait_for_gpu(first)


def _load_torch_rules():
    global _torch_rules
    from . import _torch_rules as rules
    _torch_rules = rules
    return rules
