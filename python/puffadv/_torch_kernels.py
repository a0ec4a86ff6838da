"""The Python half of torch.ops.puffadv: what torch's LibTorch Stable ABI, on
which the C++ kernels are built (src/torch/), cannot express. Registered by
puffadv.torch right after it loads the library:

- Autograd: every functional op's graph (_torch_op_autograd, backward from _vjp); a
  fallthrough for PufferLib's in-place op, whose BackendSelect kernel refuses inputs
  that require grad under grad mode;
- BackendSelect, the one key below autograd that every eager call passes
  (inference mode included): type problems raised as TypeError, the host
  fallback's one-time FallbackWarning, and torch's rules for the in-place op's
  write (refusals, version counter);
- Negative: the in-place op refuses negative views by name (torch's fallback crashes);
- Functionalize: the in-place op under torch.compile;
- the keys no C++ kernel serves (sparse, quantized, nested, no tensor at all):
  _torch_refusals' TypeError naming the argument;
- the fake kernels of the puff ops (those of the estimator family are in _torch_conventions).
"""
from __future__ import annotations

import functools
import warnings

import torch

from . import (_core, _fallback, _torch_conventions, _torch_forward_ad, _torch_op_autograd,
               _torch_refusals, _torch_rules)
from ._estimators import PUFF_ADVANTAGE

_PUFF_NAMES = tuple(PUFF_ADVANTAGE.names().values())[:5]  # values, rewards, dones, importance, advantages
_FUNCTIONAL = ("puff_advantage", *_torch_conventions.OPERATORS)
_BELOW_BACKEND_SELECT = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
_any_requires_grad = torch._C._any_requires_grad
_TYPE_ERROR = "TypeError: "  # how a kernel marks a type problem (type_error_prefix in src/torch/ops.hpp)


# Fake kernels describe outputs only; the real kernels run the core's checks,
# so a bad call traced by torch.compile fails with the same message when it runs.
# The device check is theirs too: a meta tensor among CPU tensors dispatches here
# (Meta outranks CPU), and an empty result would be garbage, not an error.
def _compute_puff_advantage_fake(values, rewards, dones, importance, advantages,
                                 gamma, lambda_, rho_clip, c_clip):
    _torch_rules.check_one_device(zip(_PUFF_NAMES, (values, rewards, dones, importance, advantages)))
    # Traced, the kernel's own check never runs, and a write into an advantages that requires
    # grad kept its history: a silently wrong gradient where the eager call refuses.
    _torch_rules.check_writable(advantages, "advantages")


def _puff_advantage_fake(values, rewards, dones, importance, gamma, gae_lambda, rho_clip, c_clip):
    _torch_rules.check_one_device(zip(_PUFF_NAMES, (values, rewards, dones, importance)))
    return torch.empty(values.shape, dtype=_torch_conventions.output_dtype(values.dtype),
                       device=values.device)


def _run_kernel(op, keyset, *args, **kwargs):
    """The device kernel (or the fake) below BackendSelect, its type problems
    raised as TypeError: no exception of the Stable ABI becomes one."""
    watch = isinstance(args[0], torch.Tensor) and args[0].is_cuda and _may_fall_back()
    fallbacks_before = _core.fallback_stats()["calls"] if watch else None
    try:
        result = op.redispatch(keyset & _BELOW_BACKEND_SELECT, *args, **kwargs)
    except RuntimeError as e:
        if str(e).startswith(_TYPE_ERROR):
            raise TypeError(str(e)[len(_TYPE_ERROR):]) from None
        raise
    except NotImplementedError:  # a key no kernel serves (_torch_refusals' are meant to catch them first)
        raise _torch_refusals.refusal(op, args, kwargs) from None
    if fallbacks_before == 0:
        stats = _core.fallback_stats()
        if stats["calls"] > 0:  # this call made the process's first fallback
            warnings.warn(_core.fallback_warning_message(stats["last_reason"], stats["bytes"]),
                          _fallback.FallbackWarning, stacklevel=4)
    return result


@functools.lru_cache(maxsize=None)
def _may_fall_back() -> bool:
    """Whether the CUDA key computes on the host (ops_cuda.cpp): the core has no
    backend for torch's GPU tensors, or no device. Its count is watched then, so
    that the first fallback of the process gets the Python API's FallbackWarning
    (a c10 warning from a torch.ops call reaches only stderr)."""
    status = _core.gpu_status("hip" if torch.version.hip else "cuda")
    return not (status["compiled"] and status["device_count"] > 0)


def compute_puff_advantage_writes(keyset, values, rewards, dones, importance, advantages,
                                   gamma, lambda_, rho_clip, c_clip):
    """torch's rules for an in-place write, which a kernel writing through a pointer
    cannot follow: refuse what torch's in-place ops refuse, bump the version after."""
    _torch_rules.check_writable(advantages, "advantages")
    warn_constant_inputs(values, rewards, dones, importance)
    _run_kernel(torch.ops.puffadv.compute_puff_advantage.default, keyset, values, rewards, dones,
                importance, advantages, gamma, lambda_, rho_clip, c_clip)
    _torch_rules.mark_written(advantages)


class ConstantInputWarning(UserWarning):
    """PufferLib's schema op read an input that requires grad as a constant (no graph)."""


def warn_constant_inputs(values, rewards, dones, importance):
    """PufferLib's schema op writes a target in place and records no graph, as PufferLib's own
    op does; PufferLib's trainer relies on that (it passes the live ``ratio`` as importance).
    So an input that requires grad, or carries a forward-mode tangent, is read as a constant,
    and said so (once per process under Python's default warning filter), never dropped
    without a word."""
    graph = torch.is_grad_enabled() and _any_requires_grad(values, rewards, dones, importance)  # one C call
    if not graph and torch.autograd.forward_ad._current_level < 0:  # no dual level open
        return
    for name, t in zip(("values", "rewards", "dones", "importance"), (values, rewards, dones, importance)):
        if not isinstance(t, torch.Tensor):
            continue
        why = _torch_forward_ad.derivative_carried(t)  # a transform's tensor never reaches this kernel
        if why is not None:
            warnings.warn(
                f"{name} {why}, but torch.ops.puffadv.compute_puff_advantage (PufferLib's "
                "schema: it writes advantages in place) records no graph and no tangent, as PufferLib's "
                f"own op: {name} is read as a constant. For a differentiable puff advantage call "
                "torch.ops.puffadv.puff_advantage (functional) or puffadv.compute_puff_advantage",
                ConstantInputWarning, stacklevel=2)
            return


def _bump_then_below(keyset, values, rewards, dones, importance, advantages, *params):
    """The in-place op's ADInplaceOrView kernel: the write's version bump where autograd sees
    the tensor, as torch's own in-place ops, then on below. An eager call bumps after its kernel
    too (compute_puff_advantage_writes); a traced one (torch.compile) runs neither, and
    AOTAutograd's trace missed a write into a tensor saved for backward earlier in the graph,
    whose compiled backward then read the new values: a wrong gradient (third audit,
    2026-12-06). Now that trace refuses it, as eager autograd does at backward. Plain tensors (no
    key between here and BackendSelect) take the BackendSelect kernel directly, as the
    Autograd kernels do: one Python kernel per eager call, not two."""
    if not keyset.raw_repr() & _torch_op_autograd.KEYS_BETWEEN_AUTOGRAD_AND_BACKEND_SELECT:
        return compute_puff_advantage_writes(keyset, values, rewards, dones, importance, advantages, *params)
    with torch._C._AutoDispatchBelowADInplaceOrView():
        torch.ops.puffadv.compute_puff_advantage.default.redispatch(
            keyset & torch._C._after_ADInplaceOrView_keyset, values, rewards, dones, importance, advantages, *params)
    _torch_rules.mark_written(advantages)  # after: a call refused below (a negative view) wrote nothing


def refuse_negative_views(values, rewards, dones, importance, advantages, *params):
    """torch's Negative fallback would compute into a resolved copy of a negative view
    and then fail an internal assert (and crash) putting it back, because every
    tensor of PufferLib's schema is marked mutable."""
    for name, t in zip(_PUFF_NAMES, (values, rewards, dones, importance, advantages)):
        if isinstance(t, torch.Tensor) and t.is_neg():
            raise ValueError(f"{name} is a negative view (torch's neg bit: its memory holds -x); "
                             "call .resolve_neg() first")
    raise AssertionError("the Negative key was dispatched without a negative view")


def _below_functionalize():
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize))


def _compute_puff_advantage_functionalized(values, rewards, dones, importance, advantages,
                                           gamma, lambda_, rho_clip, c_clip):
    """The in-place op as torch.compile sees it: the functional op, then its result
    recorded as the new value of `advantages`. Without this kernel torch would
    auto-functionalize the op, passing PufferLib's `lambda` argument by name,
    which generated Python code cannot do. Eager calls never come here."""
    inputs = [values, rewards, dones, importance]
    if advantages.dtype not in (_torch_conventions.output_dtype(values.dtype), values.dtype):
        _refuse_like_eager(inputs, advantages, (gamma, lambda_, rho_clip, c_clip))
    for t in (*inputs, advantages):
        torch._sync(t)
    inputs = [torch._from_functional_tensor(t) for t in inputs]
    with _below_functionalize():
        # The kernel eager uses for these inputs (float32 arithmetic for half inputs);
        # a half output of half inputs is its float32 result rounded, as eager writes it.
        result = torch.ops.puffadv.puff_advantage(*inputs, gamma, lambda_, rho_clip, c_clip)
        result = result.to(advantages.dtype)
    torch._functionalize_replace(advantages, result)
    torch._functionalize_commit_update(advantages)
    torch._sync(advantages)


def _refuse_like_eager(inputs, advantages, params):
    """An output dtype the eager op refuses (the functional form would just convert):
    the eager kernel's own error, from 1x1 real stand-ins of the same dtypes."""
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes(), _below_functionalize():
        stand_ins = [torch.zeros(1, 1, dtype=t.dtype) for t in (*inputs, advantages)]
        torch.ops.puffadv.compute_puff_advantage(*stand_ins, *params)
    raise AssertionError(f"puffadv accepted {advantages.dtype} advantages for "
                         f"{inputs[0].dtype} inputs eagerly but not under torch.compile")


_FUNCTIONALIZATION_API = ("_sync", "_from_functional_tensor", "_functionalize_replace",
                          "_functionalize_commit_update")  # private torch API


def register(lib: torch.library.Library) -> None:
    """Everything above, on the loaded op library (lib: a Library("puffadv", "IMPL"))."""
    torch.library.register_fake("puffadv::compute_puff_advantage", _compute_puff_advantage_fake, lib=lib)
    torch.library.register_fake("puffadv::puff_advantage", _puff_advantage_fake, lib=lib)
    lib.impl("compute_puff_advantage", compute_puff_advantage_writes, "BackendSelect", with_keyset=True)
    for name in _FUNCTIONAL:
        op = getattr(torch.ops.puffadv, name).default
        lib.impl(name, functools.partial(_run_kernel, op), "BackendSelect", with_keyset=True)
    # The in-place schema op records no graph, as PufferLib's (its BackendSelect kernel warns
    # once when an input requires grad); every functional op differentiates (_torch_op_autograd).
    lib.impl("compute_puff_advantage", torch.library.fallthrough_kernel, "Autograd")
    lib.impl("compute_puff_advantage", _bump_then_below, "ADInplaceOrView", with_keyset=True)
    _torch_op_autograd.register(lib, _FUNCTIONAL, _run_kernel)
    # Sparse, quantized, nested tensors and calls without a tensor: a TypeError naming the argument.
    _torch_refusals.register(lib, ("compute_puff_advantage", *_FUNCTIONAL),
                             {"compute_puff_advantage": ConstantInputWarning})
    lib.impl("compute_puff_advantage", refuse_negative_views, "Negative")
    if all(hasattr(torch, name) for name in _FUNCTIONALIZATION_API):
        lib.impl("compute_puff_advantage", _compute_puff_advantage_functionalized, "Functionalize")
