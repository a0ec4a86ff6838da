"""torch.ops.puffadv.linear_recurrence's Python half (registered by puffadv.torch):
its fake kernel (torch.compile), its BackendSelect kernel (type problems as TypeError,
as every puffadv op), and its autograd (_autograd.register_torch with the vjp of
_recurrence_vjp.py). Also the NumPy-style function's path for torch tensors that
require grad, or under torch.compile: the op, so the gradient is kept."""
from __future__ import annotations

import functools
import numbers

import torch

from . import (_autograd, _eager, _frameworks, _parameters, _torch_conventions, _torch_forward_ad, _torch_kernels,
               _torch_refusals, _torch_rules)
from ._recurrence_vjp import linear_recurrence_jvp, linear_recurrence_vjp

_NAMES = ("inputs", "decay", "seed")


def _fake(inputs, decay, seed=None, *, reverse, time_axis):
    _torch_rules.check_one_device(zip(_NAMES, (inputs, decay, seed)))
    return torch.empty(inputs.shape, dtype=_torch_conventions.output_dtype(inputs.dtype), device=inputs.device)


def _decay_tensor(inputs, decay):
    """decay as the op takes it: a tensor of the inputs' shape (a scalar or 0-d tensor expanded,
    its autograd history kept)."""
    if isinstance(decay, torch.Tensor):
        if decay.ndim != 0:
            return decay
        return decay.to(device=inputs.device, dtype=inputs.dtype).expand(inputs.shape).contiguous()
    if isinstance(decay, bool):
        raise TypeError(f"decay must be a real number or a tensor, got {_frameworks.describe(decay)}")
    framework = _frameworks.framework_of(decay)
    if framework is not None and getattr(decay, "ndim", 0) != 0:  # an array of another framework
        raise _frameworks.mixed_frameworks_error("decay", framework, "inputs", "torch")
    value = _parameters.real_parameter(decay, "decay")
    return torch.full(inputs.shape, value, dtype=inputs.dtype, device=inputs.device)


_NAMES = {"rewards": "inputs", "decay": "decay", "last_value": "seed"}


def through_op(inputs, decay, seed, out, stream, reverse: bool, time_axis: int, differentiable: bool):
    """puffadv.linear_recurrence on torch tensors through the op (autograd, torch.compile);
    `out` given: the result copied in (torch's in-place autograd rules apply to the copy)."""
    if stream is not None:
        raise ValueError("stream= cannot be passed with tensors that require grad or under torch.compile: "
                         "the op runs on torch's current stream (use `with torch.cuda.stream(s):`)")
    if seed is not None and not isinstance(seed, torch.Tensor):
        framework = _frameworks.framework_of(seed)
        if framework is not None:
            raise _frameworks.mixed_frameworks_error("seed", framework, "inputs", "torch")
        raise TypeError(f"seed must be a torch tensor like inputs, got {_frameworks.describe(seed)}")
    if isinstance(time_axis, bool) or not isinstance(time_axis, numbers.Integral):
        raise TypeError(f"time_axis must be an int (0: time-major [T, B], 1: batch-major [B, T]), "
                        f"got {_frameworks.describe(time_axis)}")
    time_axis = int(time_axis)
    decay = _decay_tensor(inputs, decay)
    shape = None
    if isinstance(inputs, torch.Tensor) and inputs.ndim > 2:  # [*B, T], [T, *B], [*B, T, 1]: 2-D views (_shapes)
        views, _, plan, time_axis = _eager.as_views("torch", {"rewards": inputs, "decay": decay, "last_value": seed},
                                                    {}, time_axis, _NAMES)
        inputs, decay, seed, shape = views["rewards"], views["decay"], views["last_value"], plan.shape
    if _frameworks.torch_compiling():  # the op's own autograd (register_torch): what dynamo traces
        y = torch.ops.puffadv.linear_recurrence(inputs, decay, seed, reverse=bool(reverse), time_axis=time_axis)
    else:  # the autograd.Function over the op, which torch.func's transforms can also run
        y = FUNCTION.apply(inputs, decay, seed, bool(reverse), time_axis)
    if shape is not None:
        y = y.reshape(shape)  # the caller's shape (a reshape: the gradient follows)
    if out is None:
        return y
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch tensor like inputs, got {_frameworks.describe(out)}")
    return out.copy_(y)


def _vmap(info, in_dims, inputs, decay, seed, reverse, time_axis):
    """torch.func.vmap: the batch axis folds into the rows (every row is independent) and
    one call computes them all; time-major data is reordered to [T, N * B] first."""
    n = info.batch_size

    def batched(x, dim):
        if x is None:
            return None
        return x.unsqueeze(0).expand(n, *x.shape) if dim is None else x.movedim(dim, 0)

    x, a = batched(inputs, in_dims[0]), batched(decay, in_dims[1])
    s = batched(seed, in_dims[2])
    time_major = time_axis in (0, -2)
    fold = (lambda m: m.movedim(0, 1).reshape(m.shape[1], -1)) if time_major else (lambda m: m.reshape(-1, m.shape[-1]))
    y = FUNCTION.apply(fold(x), fold(a), None if s is None else s.reshape(-1), reverse, time_axis)
    if time_major:
        return y.reshape(x.shape[1], n, x.shape[2]).movedim(1, 0), 0
    return y.reshape(x.shape), 0


FUNCTION = None  # linear_recurrence's autograd.Function (register)


_NO_JVP = ("torch.ops.puffadv.linear_recurrence has no forward-mode derivative (jvp): a tangent given to it "
           "would be dropped. Call puffadv.linear_recurrence, whose jvp computes it (forward_ad, torch.func.jvp, "
           "jacfwd)")


def _backend_select(op, keyset, *args, **kwargs):
    """The op's kernel, which refuses a forward-mode tangent: the op's autograd
    (torch.library.register_autograd) has no jvp, so torch would return the result without
    its tangent. The Function (FUNCTION.apply) passes none here: torch hands its forward the
    primals."""
    if torch.autograd.forward_ad._current_level >= 0 and _torch_forward_ad.carries_tangent(*args, *kwargs.values()):
        raise TypeError(_NO_JVP)
    return _torch_kernels._run_kernel(op, keyset, *args, **kwargs)


def _through_the_function_under_torch_func(call, schema):
    """The op's call, handing a torch.func transform's tensors and forward_ad's dual tensors to
    FUNCTION (the Python API's autograd.Function, with the vjp, jvp and vmap rules they need).
    Through the op's own torch.library autograd torch.func.grad raised torch's "must override
    setup_context", torch.func.jvp / jacfwd gave all-zero tangents without a word, and a dual
    tensor was refused (2026-12-06). Checked where the tensors are still wrapped; C-level
    checks only for every other call."""
    from torch._C._functorch import is_functorch_wrapped_tensor
    active = torch._C._are_functorch_transforms_active
    arguments, forward_ad = schema.arguments, torch.autograd.forward_ad

    @functools.wraps(call)
    def checked(*args, **kwargs):
        if (active() and any(isinstance(x, torch.Tensor) and is_functorch_wrapped_tensor(x)
                             for x in (*args, *kwargs.values()))) or (
                forward_ad._current_level >= 0 and _torch_forward_ad.carries_tangent(*args, *kwargs.values())):
            given = {**dict(zip((a.name for a in arguments), args)), **kwargs}
            missing = [a.name for a in arguments if a.name not in given and not a.has_default_value()]
            if missing:  # the op's own words for it
                return call(*args, **kwargs)
            # FUNCTION.apply takes every schema argument by position, keyword-only ones last.
            return FUNCTION.apply(*(given.get(a.name, a.default_value) for a in arguments))
        return call(*args, **kwargs)
    return checked


def register(lib: torch.library.Library) -> None:
    global FUNCTION
    torch.library.register_fake("puffadv::linear_recurrence", _fake, lib=lib)
    op = torch.ops.puffadv.linear_recurrence.default
    lib.impl("linear_recurrence", functools.partial(_backend_select, op), "BackendSelect", with_keyset=True)
    _autograd.register_torch(lib, "linear_recurrence", linear_recurrence_vjp)
    _torch_refusals.register(lib, ("linear_recurrence",))  # sparse, quantized, nested, None: named
    packet = torch.ops.puffadv.linear_recurrence
    for callable_op in (packet, packet.default):
        callable_op._op = _through_the_function_under_torch_func(callable_op._op, packet.default._schema)
    FUNCTION = _autograd.torch_function("linear_recurrence", linear_recurrence_vjp, vmap=_vmap,
                                        jvp=linear_recurrence_jvp)
    _autograd.TorchOps.scan_function = FUNCTION
