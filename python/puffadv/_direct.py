"""The common call of a family estimator, direct: NumPy arrays (np.ndarray itself, no
subclass) or host torch tensors (torch.Tensor itself, dense, none requiring grad, outside
torch.compile's tracing; given outputs that torch lets a kernel write), float scalars,
an int time_axis, no stream and no log-probability pair.

For such a call (2-D arrays, a [B] last_value; leading batch axes take the general
path: _shapes) every check that Python applies is decided by type alone, so each
estimator's plan (its roles and names: _arguments.layout) is read once, at import,
and a call only reads its arguments, allocates the outputs it asks for and calls
the core's one entry, as _eager.estimate would with the same arrays, scalars and
options. Anything else (another framework, a stream, an int gamma, an argument a
check would refuse) returns MISSED before any work, and _route takes the general
path, which applies every rule and message in its order. The host cost of one call
is what issue 14's overhead bars time.
"""
from __future__ import annotations

import operator
import sys

import numpy as np

from . import _eager, _engine, _frameworks, _outputs
from ._arguments import layout
from ._estimators import SUM_ROLES, Estimate, Estimator, VTraceEstimate

MISSED = object()  # not the common call: take the general path


class _HostTensors:
    """torch's side of the direct call: what _engine.run's host branch does for plain
    host tensors (imported as they are, handle 0, version counters bumped after)."""

    def __init__(self):
        self.tensor = None  # torch.Tensor once torch is loaded and usable here
        self.forward_ad = None  # torch.autograd.forward_ad then: no dual level may be open
        self.transforms_active = None  # torch's check that a torch.func transform is running

    def type_of(self, x):
        """torch.Tensor when x is a plain torch tensor and the direct call may take it
        (torch imported, its DLPack exchange API present, no tracing under way, no dual level
        open and no torch.func transform running: a tangent or a transform's wrapped tensor is
        read on the general path), else None."""
        if self.tensor is None:
            torch = sys.modules.get("torch")
            if torch is None or type(x) is not getattr(torch, "Tensor", None):
                return None
            from . import _torch_rules
            if not _torch_rules.EXCHANGE_API:
                return None
            self.torch, self.rules, self.tensor = torch, _torch_rules, torch.Tensor
            self.forward_ad = torch.autograd.forward_ad
            self.transforms_active = torch._C._are_functorch_transforms_active
        if type(x) is not self.tensor or _frameworks.torch_compiling() or self.forward_ad._current_level >= 0 \
                or self.transforms_active():  # a torch.func transform's wrapped tensors: the general path
            return None
        return self.tensor

    def usable(self, tensors) -> bool:
        """Dense host tensors recording no graph: none requires grad (the general path
        decides whether one must be recorded: _route.needs_graph); sparse, quantized and
        negative views (the neg bit: memory holding -x) take the general path too, which
        refuses them by name (_frameworks.framework_of_call)."""
        strided = self.torch.strided
        for x in tensors:
            if x.requires_grad or not x.is_cpu or x.layout is not strided or x.is_quantized or x.is_neg():
                return False
        return True

    def writable(self, out) -> bool:
        """A given output torch lets a kernel write without a word (_torch_rules.writes_freely),
        dense, on the host and not a negative view."""
        return (self.rules.writes_freely(out) and out.is_cpu and out.layout is self.torch.strided
                and not out.is_neg())


_host_tensors = _HostTensors()

_INT64_MAX, _INT64_MIN = 2**63 - 1, -2**63
_BOUNDARIES = ("ends_at", "starts_at")
_ONE = (1.0,)  # a scalar the estimator does not take


def _result_maker(estimator: Estimator):
    """The public result from the outputs by role (Estimator.make_result, decided once)."""
    if estimator.result == "array":
        first = next(iter(estimator.outputs))
        return lambda outputs: outputs[first]
    kind = VTraceEstimate if estimator.result == "VTraceEstimate" else Estimate
    first, second = ("returns", "advantages") if kind is VTraceEstimate else ("advantages", "returns")
    new = tuple.__new__  # what the NamedTuple's own __new__ does, one Python frame less
    return lambda o: new(kind, (o[first], o[second], o["abs_sums"], o["sums"], o["square_sums"]))


def _getter(names: tuple):
    """The values of `names` from an arguments dict, as a tuple (one C call)."""
    if len(names) == 1:
        name = names[0]
        return lambda args: (args[name],)
    return operator.itemgetter(*names) if names else lambda args: ()


def direct(estimator: Estimator):
    """`call(args) -> result or MISSED`: the estimator's public call from its function's
    arguments by name (as _route.estimate gets them), on the common call only."""
    shape = layout(estimator, False)
    inputs = tuple((role, name, k < shape.required) for k, (role, name) in enumerate(shape.arguments))
    made = tuple((role, name) for role, name in shape.outputs if name is not None)
    never_made = {role: None for role, name in shape.outputs if name is None}
    fetch_specs = _getter(tuple(name for _, name in made))
    taken = tuple(name for _, name in shape.scalars if name is not None)
    fetch_scalars = _getter(taken)
    # The six scalars in SCALAR_ROLES order from the taken ones plus a trailing 1.0 (-1: not taken).
    pick_scalars = operator.itemgetter(*(taken.index(name) if name is not None else -1
                                         for _, name in shape.scalars))
    # An `out=None` of a single-array result allocates (as call_of decides); elsewhere None skips.
    none_allocates = ("advantages",) if estimator.result == "array" else ()
    pair = tuple(a.name for a in estimator.arguments if a.log_probs)
    window, boundary = estimator.window, estimator.boundary
    kind, lambda_name = estimator.kind, estimator.lambda_name
    make_result = _result_maker(estimator)
    # Row sums without the advantages of these kinds: the general path decides whether the kernel
    # needs hidden advantages (_eager.advantages_for_sums: on a GPU only, but decided in one place).
    sums_need_advantages = estimator.kind in _eager.GPU_SUMS_NEED_ADVANTAGES
    made_roles = tuple(role for role, _ in made)
    first_input = inputs[0][1]  # a required array: its type decides NumPy or torch
    made_sums = tuple(role in SUM_ROLES for role in made_roles)
    ndarray, empty = np.ndarray, np.empty
    one_entry = _engine._one_entry  # the core's one entry, called as _engine.kernel() would

    def call(args: dict):
        if args["stream"] is not None or _engine._ONE_ENTRY is None:
            return MISSED
        for name in pair:
            if args[name] is not None:
                return MISSED
        n, reset = 1, False
        if window:
            n = args["n"]
            if type(n) is not int:
                return MISSED
            n = max(min(n, _INT64_MAX), _INT64_MIN)
        if boundary:
            reset = args["boundary"]
            if type(reset) is not str or reset not in _BOUNDARIES:
                return MISSED
            reset = reset == "starts_at"
        # Each check a plain loop: cheaper here than sets of types (issue 14 times this path).
        arrays = {}  # absent inputs left out (the core reads a missing role as None)
        array_type = ndarray
        if type(args[first_input]) is not ndarray:
            array_type = _host_tensors.type_of(args[first_input])
            if array_type is None:
                return MISSED
        for role, name, needed in inputs:
            x = args[name]
            if type(x) is array_type:
                arrays[role] = x
            elif needed or x is not None:
                return MISSED
        tensors = array_type is not ndarray
        if tensors and not _host_tensors.usable(arrays.values()):
            return MISSED
        scalars = fetch_scalars(args)
        for value in scalars:
            if type(value) is not float:
                return MISSED
        time_axis = args["time_axis"]
        if type(time_axis) is not int:
            return MISSED
        specs = fetch_specs(args)
        if sums_need_advantages and _eager.sums_without_advantages(estimator, dict(zip(made_roles, specs))):
            return MISSED
        # Check each output and allocate those asked for (as _outputs.allocate), in one pass:
        # an allocation before a refused output is only dropped, with the call's other work.
        rewards = arrays["rewards"]
        if rewards.ndim != 2:
            return MISSED  # leading batch axes (_shapes): the general path
        seed = arrays.get("last_value")
        if seed is not None and seed.ndim != 1:
            return MISSED
        like = arrays.get("values")
        if like is None:
            like = rewards
        series_dtype = None
        for role, is_sum, spec in zip(made_roles, made_sums, specs):
            if spec is True or (spec is None and role in none_allocates):
                if tensors:  # as _outputs.allocate makes them
                    spec = (_frameworks.torch_empty(like, (_outputs.batch_size(rewards, time_axis),),
                                                    _outputs.sums_dtype("torch", like)) if is_sum
                            else _frameworks.torch_empty(like, rewards.shape, _outputs.output_dtype("torch", like)))
                elif is_sum:
                    spec = empty((_outputs.batch_size(rewards, time_axis),), _outputs.sums_dtype("numpy", like))
                else:
                    if series_dtype is None:
                        series_dtype = _outputs.numpy_output_dtype(like)
                    spec = empty(rewards.shape, series_dtype)
            elif spec is False:
                spec = None
            elif spec is not None and (type(spec) is not array_type or tensors and not _host_tensors.writable(spec)):
                return MISSED  # another framework's, or one torch's in-place rules refuse: the general path names it
            arrays[role] = spec
        if never_made:
            arrays.update(never_made)
        gamma, lam, rho_clip, c_clip, rho_pg_clip, alpha = pick_scalars(scalars + _ONE)
        one_entry(kind, gamma, lam, rho_clip, c_clip, rho_pg_clip, n, False, reset, lambda_name, time_axis, alpha,
                  arrays, 0)
        if tensors:  # as torch's in-place ops do after a write (_engine.run's host branch)
            _host_tensors.rules.mark_written_all([arrays[role] for role in made_roles])
        return make_result(arrays)
    return call
