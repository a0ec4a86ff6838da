"""torch.ops.puffadv's words for the tensors its kernels never see.

The C++ kernels run on the CPU and CUDA keys. A call whose tensors dispatch
elsewhere (sparse, sparse CSR, quantized, nested, jagged nested, devices such as
MPS or XPU) or that carries no tensor at all would get torch's dispatcher
NotImplementedError ("Could not run ... 'SparseCPU' backend", "There were no
tensor arguments"). One kernel, registered once for every operator on the keys
that catch those calls (CompositeExplicitAutograd, which torch uses for any
backend without a kernel of its own, the nested-tensor keys, and the jagged
nested tensor's __torch_dispatch__), raises instead the TypeError the Python API
gives for the same tensor, naming the argument. Dense CPU and CUDA tensors never
come here: their keys have the real kernels, so the valid path costs nothing.

Before any kernel, torch reads the Python arguments by the schema and refuses
what it cannot convert with a RuntimeError. For the int arguments (`n=2.5`,
`n=2**70`, `time_axis="0"`), each operator's call (OpOverloadPacket and
OpOverload hold it as `_op`) is wrapped to raise a TypeError, or a ValueError for
an int beyond int64, naming the argument; every call pays one Python frame for
it. The float arguments keep torch's RuntimeError, which names them already.

torch also converts a 0-d tensor given for a float argument (gamma, lambda, a clip)
to a number, dropping any derivative it carries: a tensor that requires grad (torch
only warns), a forward-mode dual tensor (not a word), a torch.func transform's
tensor. The same wrapper refuses such a tensor before the conversion, with a
TypeError naming the argument and the differentiable way (the per-step tensor or
the Python API); PufferLib's schema op, which records no graph as PufferLib's own,
warns instead and reads it as a constant, as it does its tensor inputs.
"""
from __future__ import annotations

import functools
import re
import warnings

import torch

from . import _core, _torch_forward_ad

_NESTED_KEYS = ("NestedTensorCPU", "NestedTensorCUDA")
try:
    from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor  # torch.compile's tensors
except ImportError:  # pragma: no cover - private: absent in some torch
    class _FakeTensor:  # type: ignore[no-redef]
        pass
_DEVICES = ("cpu", "cuda", "meta")  # meta: the fake kernels (torch.compile)


def _is_tensor_argument(argument) -> tuple[bool, bool]:
    """(a tensor argument, an optional one) of a schema argument."""
    kind = argument.type
    if isinstance(kind, torch.OptionalType):
        return isinstance(kind.getElementType(), torch.TensorType), True
    return isinstance(kind, torch.TensorType), False


def refusal(op, args, kwargs) -> TypeError:
    """The TypeError for a call of `op` (an OpOverload) that reached no kernel of puffadv's."""
    schema = op._schema
    given = dict(zip((a.name for a in schema.arguments), args))
    given.update(kwargs)
    for argument in schema.arguments:
        is_tensor, optional = _is_tensor_argument(argument)
        if not is_tensor:
            continue
        value = given.get(argument.name)
        if value is None:
            if not optional:
                return TypeError(f"{argument.name} must be a tensor, got None")
            continue
        reason = _core.unreadable_reason(value, argument.name)
        if reason:
            return TypeError(reason)
        if value.device.type not in _DEVICES:
            return TypeError(f"{argument.name} is on {value.device}; torch.ops.puffadv runs on cpu and "
                             f"cuda tensors (rocm ones under a ROCm torch)")
    keys = sorted({str(k) for a in given.values() if isinstance(a, torch.Tensor)
                   for k in torch._C._dispatch_keys(a)})
    return TypeError(f"torch.ops.puffadv.{schema.name.split('::')[-1]} has no kernel for these tensors "
                     f"(dispatch keys {', '.join(keys) or 'none'}); it reads dense cpu and cuda tensors")


_PARSE_ERROR = re.compile(r"Expected a value of type '(?P<expected>[^']*)' for argument '(?P<name>\w+)' "
                          r"but instead found type '(?P<found>[^']*)'\.\nPosition: \d+\nValue: (?P<value>.*)")


def schema_refusal(qualified_name: str, error: RuntimeError) -> Exception | None:
    """torch's RuntimeError for an int argument its schema parser could not read, as
    TypeError or ValueError naming the argument; None for any other error."""
    message = str(error)
    found = _PARSE_ERROR.search(message) if message.startswith(qualified_name + "() ") else None
    if found is None or found["expected"] not in ("int", "Optional[int]"):  # time_axis: int?
        return None
    name, got, value = found["name"], found["found"], found["value"]
    if got == "int":
        return ValueError(f"{name} must be an int within int64 (from -2**63 to 2**63 - 1), got {value}")
    return TypeError(f"{name} must be an int, got {got} {value}")


def _float_arguments(schema) -> tuple[tuple[str, int], ...]:
    """(name, position) of each float argument of the schema."""
    return tuple((a.name, i) for i, a in enumerate(schema.arguments) if isinstance(a.type, torch.FloatType))


# How each derivative would be lost (_torch_forward_ad.derivative_carried's words first).
_LOST = {"requires grad": ": torch's conversion to a number would drop its derivative",
         "carries a forward-mode tangent": ": torch's conversion to a number would drop it",
         _torch_forward_ad.TRANSFORMED: " (grad, jvp, vmap), which no number can stand for"}


def _refuse_floats(schema, floats, args, kwargs, constant_warning) -> None:
    """Raises the TypeError for a tensor carrying a derivative given for a float argument;
    with `constant_warning` (PufferLib's schema op) warns instead."""
    refused = _float_refusal(schema, floats, args, kwargs, constant_warning)
    if refused is not None:
        raise refused


def _float_refusal(schema, floats, args, kwargs, constant_warning):
    """The TypeError for a tensor carrying a derivative given for a float argument (None:
    none is); with `constant_warning` (PufferLib's schema op) that warning instead, for each
    such argument (a torch.func tensor, which no number stands for, is refused even there)."""
    for name, position in floats:
        value = args[position] if position < len(args) else kwargs.get(name)
        if not isinstance(value, torch.Tensor):
            continue
        carried = _torch_forward_ad.derivative_carried(value)
        if carried is None:
            continue
        op = schema.name.split("::")[-1]
        lost = f"{name} of torch.ops.{schema.name.replace('::', '.')} is a float, but the tensor given " \
            f"{carried}{_LOST[carried]}"
        if constant_warning is not None and carried != _torch_forward_ad.TRANSFORMED:  # that one cannot convert
            warnings.warn(f"{lost}, and this op (PufferLib's schema) records none: {name} is read as a "
                          "constant. For a differentiable puff advantage call puffadv.compute_puff_advantage",
                          constant_warning, stacklevel=5)  # the caller of the op's __call__
            continue
        steps = {"gamma": "gamma_steps"}.get(name, "lambda_steps" if "lambda" in name else None)
        if steps is not None and any(a.name == steps for a in schema.arguments):
            way = f"pass it as {steps}= (a per-step tensor, which the op differentiates), or call " \
                f"puffadv.{op} (which differentiates a 0-d {name}), or detach it"
        elif steps is not None:
            way = "call puffadv.compute_puff_advantage, which differentiates a 0-d gamma and lambda, or detach it"
        else:
            way = "puffadv differentiates gamma and lambda only: pass it as a number or detach it"
        return TypeError(f"{lost}; {way}")
    return None


def _warn_unrecorded(schema, args, kwargs, constant_warning) -> None:
    """PufferLib's schema op records no graph, and its kernel warns of an input that requires
    grad; two such inputs never reach it as they are: a torch.func transform's tensor
    (unwrapped below the transform's layer: torch.func.grad gave zeros without a word) and,
    under torch.compile, a fake one that requires grad (traced without running the kernel).
    Warned here, with the kernel's words, where the tensors are still what the caller gave."""
    transforms = torch._C._are_functorch_transforms_active()
    if not transforms and not (args and type(args[0]) is _FakeTensor):  # type(): isinstance costs 0.3 us here
        return
    for i, argument in enumerate(schema.arguments[:4]):  # values, rewards, dones, importance
        value = args[i] if i < len(args) else kwargs.get(argument.name)
        if not isinstance(value, torch.Tensor):
            continue
        if not value.is_floating_point():  # a bool or uint8 flag has no derivative to lose
            continue
        why = _torch_forward_ad.derivative_carried(value)
        if why != _torch_forward_ad.TRANSFORMED and not (why == "requires grad" and isinstance(value, _FakeTensor)):
            continue  # a dual tensor or a real one that requires grad: the kernel warns of it
        warnings.warn(f"{argument.name} {why}, but torch.ops.{schema.name.replace('::', '.')} (PufferLib's schema: "
                      f"it writes advantages in place) records no graph and no tangent, as PufferLib's own op: "
                      f"{argument.name} is read as a constant. For a differentiable puff advantage call "
                      "torch.ops.puffadv.puff_advantage (functional) or puffadv.compute_puff_advantage",
                      constant_warning, stacklevel=4)  # the caller of the op's __call__
        return


def _checked_call(qualified_name: str, call, schema, constant_warning=None, unrecorded_warned_below=False):
    floats = _float_arguments(schema)
    float_names = frozenset(name for name, _ in floats)
    first_float = min((position for _, position in floats), default=1 << 30)
    tensor = torch.Tensor

    @functools.wraps(call)
    def checked(*args, **kwargs):
        # Every call pays this scan (0.26-0.38 us against a call of 15-20 us on a 2-core Xeon,
        # 2026-12-06), so numbers pass on their class and only a tensor takes the full check.
        for value in args[first_float:]:
            if value.__class__ is not float and isinstance(value, tensor):
                _refuse_floats(schema, floats, args, kwargs, constant_warning)
                break
        for name, value in kwargs.items():
            if name in float_names and value.__class__ is not float and isinstance(value, tensor):
                _refuse_floats(schema, floats, args, kwargs, constant_warning)
                break
        if constant_warning is not None and not unrecorded_warned_below:
            _warn_unrecorded(schema, args, kwargs, constant_warning)
        try:
            return call(*args, **kwargs)
        except RuntimeError as e:
            refused = schema_refusal(qualified_name, e)
            if refused is None:
                raise
            raise refused from None
    return checked


def check_calls(packet, constant_warning=None, unrecorded_warned_below=False) -> None:
    """An operator's calls (the packet's and its overload's) refuse a tensor carrying a
    derivative in a float argument (or warn `constant_warning`) and name their schema errors.
    `unrecorded_warned_below`: the operator calls another that warns of unrecorded tensor
    inputs (PufferLib's stand-in calls puffadv's op), which would otherwise be said twice."""
    op = packet.default
    for callable_op in (packet, op):
        callable_op._op = _checked_call(op._schema.name, callable_op._op, op._schema, constant_warning,
                                        unrecorded_warned_below)


def register(lib: torch.library.Library, names, constant_inputs: dict | None = None) -> None:
    """The refusing kernel of every operator in `names`, on every key described above,
    its call's schema errors as TypeError/ValueError, and its float arguments' refusal of
    a tensor carrying a derivative. `constant_inputs`: op name -> the warning it gives
    instead (it reads its inputs as constants)."""
    for name in names:
        packet = getattr(torch.ops.puffadv, name)
        op = packet.default
        check_calls(packet, (constant_inputs or {}).get(name))

        def refuse(*args, _op=op, **kwargs):
            raise refusal(_op, args, kwargs)

        for key in ("CompositeExplicitAutograd", *_NESTED_KEYS):
            lib.impl(name, refuse, key)
        _register_jagged(op)


def _register_jagged(op) -> None:
    """The jagged nested tensor is a Python subclass: its __torch_dispatch__ would raise
    NotImplementedError(op name) for an operator it has no rule for."""
    try:
        from torch.nested._internal.nested_tensor import NestedTensor  # private: absent in some torch
        register = torch.library.register_torch_dispatch
    except (ImportError, AttributeError):
        return

    def refuse(cls, func, types, args, kwargs):
        raise refusal(op, args, kwargs or {})

    register(op, NestedTensor, refuse)
