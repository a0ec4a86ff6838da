"""The one place where a Python call reaches the compiled core.

Every public function (and every torch.compile operator's body) funnels through
run(), so behaviour that applies to all of them (device placement, a CPU
fallback for GPU arrays that this build cannot compute on) is written once, and
kernel() is the one place that knows how the core is called: arrays travel
keyed by role, never in positional slots.
"""
from __future__ import annotations

import functools
import operator

from . import _core, _fallback, _frameworks

_torch_rules = None  # imported with the first torch call (it imports torch)
# torch.Tensor once _torch_rules is loaded, where the core imports plain tensors as they are
# (DLPack's C exchange API) through its one entry: compute_puff_advantage's direct torch path.
host_tensor = None

# The core's one entry (issue 28), where this build has it: kernel() switches on this alone.
_ONE_ENTRY = getattr(_core, "estimate", None)


def _binding(function, renamed: dict):
    """(function, the positional keys' getter, keyword (name, key, default) triples, its arrays
    as None): `function`'s parameters by name, read once from its nanobind signature, each
    bound to the key kernel() fills (the parameter's own name unless `renamed` names the role
    or scalar it takes). A call then costs one C-level look-up of the positional values
    instead of nanobind's matching of some 28 keywords (about 5 us per call)."""
    text = function.__nb_signature__[0][0]
    parameters = [p.strip().split(":")[0].strip() for p in text[text.index("(") + 1:text.rindex(")")].split(",")]
    star = parameters.index("*") if "*" in parameters else len(parameters)
    positional = tuple(renamed.get(p, p) for p in parameters[:star])
    defaults = function.__nb_signature__[0][2][-(len(parameters) - star - 1):] if star < len(parameters) else ()
    keywords = tuple((p, renamed.get(p, p), d) for p, d in zip(parameters[star + 1:], defaults))
    absent = {k: None for k in (*positional, *(k for _, k, _ in keywords)) if k in _ARRAY_ROLES}
    return function, operator.itemgetter(*positional), keywords, absent


_ARRAY_ROLES = frozenset({"rewards", "values", "terminated", "truncated", "last_value", "bootstrap_values",
                          "importance", "next_values", "target_probs", "behaviour_probs", "greedy", "decay",
                          "gamma_steps", "lambda_steps", "sample_mask", "advantages",
                          "returns", "abs_sums", "sums", "square_sums"})
if _ONE_ENTRY is None:  # today's three bindings (src/bindings.cpp, src/python/bindings_conventions.cpp)
    _RENAMED = {"dones": "terminated", "gae_lambda": "lambda", "lambda_": "lambda"}
    _STANDARD = _binding(_core.standard_estimate, _RENAMED)
    _PUFF = _binding(_core.puff_advantage, _RENAMED)
    _PUFF_FUSED = _binding(_core.puff_advantage_fused, _RENAMED)


def _call(binding, constants: dict, arrays: dict, stream) -> None:
    """One binding's call: arrays by role (absent ones None), the rest from `constants`."""
    function, positional, keywords, absent = binding
    values = {**absent, **constants, **arrays, "stream": stream}
    if keywords:  # a keyword at its default is left out (nanobind matches each one it gets: ~0.3 us)
        function(*positional(values), **{name: values[k] for name, k, default in keywords
                                         if values[k] is not default})
    else:
        function(*positional(values))


def kernel(kind: str, scalars: tuple, *, lambda_name: str = "lambda", n: int = 1, log_probs: bool = False,
           reset_at_start: bool = False, time_axis: int = -1, reverse: bool = False, check_only: bool = False):
    """`kernel(arrays, stream)`: the core's estimator `kind` on `arrays` (role -> array; an
    absent role may be left out) with `scalars` (floats in SCALAR_ROLES order: gamma, lambda,
    rho_clip, c_clip, and rho_pg_clip and alpha where the kind reads them, else 1.0) on the
    stream handle `stream`. `reverse`: linear_recurrence's direction (the one-entry core only).
    `check_only`: the core's checks of the call alone (see check())."""
    gamma, lam, rho_clip, c_clip = scalars[0], scalars[1], scalars[2], scalars[3]
    rho_pg_clip = scalars[4] if len(scalars) > 4 else 1.0
    alpha = scalars[5] if len(scalars) > 5 else 1.0
    if check_only:
        return functools.partial(_one_entry_check, kind, gamma, lam, rho_clip, c_clip, rho_pg_clip, n, log_probs,
                                 reset_at_start, lambda_name, time_axis, reverse, alpha)
    if _ONE_ENTRY is not None:  # THE switch: the core's one entry serves every kind
        # A partial, not a closure: made per call, and a partial costs a third as much to make.
        if reverse:
            return functools.partial(_one_entry_reverse, kind, gamma, lam, rho_clip, c_clip, rho_pg_clip, n,
                                     log_probs, reset_at_start, lambda_name, time_axis)
        return functools.partial(_one_entry, kind, gamma, lam, rho_clip, c_clip, rho_pg_clip, n, log_probs,
                                 reset_at_start, lambda_name, time_axis, alpha)
    named = {"gamma": gamma, "lambda": lam, "rho_clip": rho_clip, "c_clip": c_clip}
    if kind == "puff_advantage":
        return functools.partial(_puff, named)
    constants = {**named, "rho_pg_clip": rho_pg_clip, "kind": kind, "lambda_name": lambda_name, "n": n,
                 "log_probs": log_probs, "reset_at_start": reset_at_start, "time_axis": time_axis}
    return functools.partial(_call, _STANDARD, constants)


def _one_entry(kind, gamma, lam, rho_clip, c_clip, rho_pg_clip, n, log_probs, reset_at_start, lambda_name,
               time_axis, alpha, arrays, stream) -> None:
    """The core's one entry (read here at each call: tests stand in for it)."""
    _ONE_ENTRY(kind, arrays, gamma=gamma, lambda_=lam, rho_clip=rho_clip, c_clip=c_clip, rho_pg_clip=rho_pg_clip,
               n=n, log_probs=log_probs, reset_at_start=reset_at_start, lambda_name=lambda_name,
               time_axis=time_axis, stream=stream, alpha=alpha)


def _one_entry_reverse(kind, gamma, lam, rho_clip, c_clip, rho_pg_clip, n, log_probs, reset_at_start,
                       lambda_name, time_axis, arrays, stream) -> None:
    """_one_entry with reverse=True (linear_recurrence backwards over time)."""
    _ONE_ENTRY(kind, arrays, gamma=gamma, lambda_=lam, rho_clip=rho_clip, c_clip=c_clip, rho_pg_clip=rho_pg_clip,
               n=n, log_probs=log_probs, reset_at_start=reset_at_start, lambda_name=lambda_name,
               time_axis=time_axis, stream=stream, reverse=True)


def _one_entry_check(kind, gamma, lam, rho_clip, c_clip, rho_pg_clip, n, log_probs, reset_at_start, lambda_name,
                     time_axis, reverse, alpha, arrays, stream) -> None:
    """_one_entry's checks alone (the core's check_only): raises as the call would, computes nothing."""
    _ONE_ENTRY(kind, arrays, gamma=gamma, lambda_=lam, rho_clip=rho_clip, c_clip=c_clip, rho_pg_clip=rho_pg_clip,
               n=n, log_probs=log_probs, reset_at_start=reset_at_start, lambda_name=lambda_name,
               time_axis=time_axis, stream=stream, reverse=reverse, alpha=alpha, check_only=True)


def _puff(scalars: dict, arrays: dict, stream) -> None:
    """The puff advantage through today's bindings: the fused one where a fused output is given."""
    get = arrays.get
    if get("returns") is None and get("abs_sums") is None and get("sums") is None and get("square_sums") is None:
        function, positional = _PUFF[0], _PUFF[1]  # every array of the plain binding is given
        function(*positional({**scalars, **arrays, "stream": stream}))
    else:
        _call(_PUFF_FUSED, scalars, arrays, stream)


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
        rules.check_all_writable(outputs, names)
        if stream is None and not first.is_cuda and rules.all_plain(inputs.values()):
            # Host tensors, no stream: handle 0, imported as they are (for_kernel), no fallback.
            call({**inputs, **outputs}, 0)
            rules.mark_written_all(outputs.values())
            return
    handle = _frameworks.current_stream(framework, first, stream)
    reason = None
    arguments = _frameworks.for_kernel(framework, inputs, outputs)
    try:
        call(arguments, handle)
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


def check(call, framework: str, inputs: dict, outputs: dict) -> None:
    """The core's every check of one call, `call` a kernel(..., check_only=True), on `inputs`
    and `outputs` as run() takes them; nothing is written or computed. The torch autograd path
    (_torch_autograd) computes into tensors of its own and then copies into the outputs a
    caller gives: this refuses those outputs first, by the rules and in the words of a call
    that writes them itself. torch's in-place rules are left to the copy, which records it."""
    call(_frameworks.for_kernel(framework, inputs, outputs), 0)


def _load_torch_rules():
    global _torch_rules, host_tensor
    from . import _torch_rules as rules
    _torch_rules = rules
    if rules.EXCHANGE_API and _ONE_ENTRY is not None:
        host_tensor = rules._Tensor
    return rules
