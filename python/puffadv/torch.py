"""torch.ops.puffadv: the puff advantage as torch operators.

Importing this module loads puffadv's op library and registers its fake
kernels:

- ``torch.ops.puffadv.compute_puff_advantage(values, rewards, dones, importance,
  advantages, gamma, lambda, rho_clip, c_clip) -> ()`` writes ``advantages`` in
  place; it has PufferLib's schema, so PufferLib code switches by namespace.
- ``torch.ops.puffadv.puff_advantage(values, rewards, dones, importance, gamma,
  gae_lambda, rho_clip, c_clip) -> Tensor`` returns a new row-major tensor.

Both trace under torch.compile(fullgraph=True); there the in-place op becomes
the functional op plus a copy into ``advantages``.

CPU and CUDA (HIP under ROCm torch) tensors; on a GPU the work is queued on
torch's current stream with no host synchronisation, so it can be captured in a
CUDA graph. Errors are the core's: TypeError / ValueError naming the argument.
"""
from __future__ import annotations

import torch

from . import _torch_rules, _torch_status

_torch_status.load(torch)

compute_puff_advantage = torch.ops.puffadv.compute_puff_advantage
puff_advantage = torch.ops.puffadv.puff_advantage

from . import _torch_conventions  # noqa: E402  gae / td_lambda_returns / vtrace fakes

_torch_conventions.register()


# Fake kernels describe outputs only; the real kernels run the core's checks,
# so a bad call traced by torch.compile fails with the same message when it runs.
# The device check is theirs too: a meta tensor among CPU tensors dispatches here
# (Meta outranks CPU), and an empty result would be garbage, not an error.
_PUFF_NAMES = ("values", "rewards", "dones", "importance", "advantages")


@torch.library.register_fake("puffadv::compute_puff_advantage")
def _compute_puff_advantage_fake(values, rewards, dones, importance, advantages,
                                 gamma, lambda_, rho_clip, c_clip):
    _torch_rules.check_one_device(zip(_PUFF_NAMES, (values, rewards, dones, importance, advantages)))
    return None


@torch.library.register_fake("puffadv::puff_advantage")
def _puff_advantage_fake(values, rewards, dones, importance, gamma, gae_lambda, rho_clip, c_clip):
    _torch_rules.check_one_device(zip(_PUFF_NAMES, (values, rewards, dones, importance)))
    return torch.empty(values.shape, dtype=_torch_conventions.output_dtype(values.dtype),
                       device=values.device)


_lib = torch.library.Library("puffadv", "IMPL")
_BELOW_BACKEND_SELECT = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)


def _compute_puff_advantage_writes(keyset, values, rewards, dones, importance, advantages,
                                   gamma, lambda_, rho_clip, c_clip):
    """torch's rules for an in-place write, which a kernel writing through a pointer
    cannot follow: refuse what torch's in-place ops refuse, bump the version after.
    On BackendSelect, the one key every eager call passes (inference mode included)
    below autograd; torch.compile never comes here (its functional form does)."""
    _torch_rules.check_writable(advantages, "advantages")
    compute_puff_advantage.default.redispatch(keyset & _BELOW_BACKEND_SELECT, values, rewards,
                                              dones, importance, advantages, gamma, lambda_,
                                              rho_clip, c_clip)
    _torch_rules.mark_written(advantages)


def _refuse_negative_views(values, rewards, dones, importance, advantages, *params):
    """On the Negative key: torch's fallback there would compute into a resolved copy
    of a negative view and then fail an internal assert (and crash) putting it back,
    because every tensor of PufferLib's schema is marked mutable."""
    for name, t in zip(_PUFF_NAMES, (values, rewards, dones, importance, advantages)):
        if isinstance(t, torch.Tensor) and t.is_neg():
            raise ValueError(f"{name} is a negative view (torch's neg bit: its memory holds -x); "
                             "call .resolve_neg() first")
    raise AssertionError("the Negative key was dispatched without a negative view")


_lib.impl("compute_puff_advantage", _compute_puff_advantage_writes, "BackendSelect",
          with_keyset=True)
_lib.impl("compute_puff_advantage", _refuse_negative_views, "Negative")


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
        result = puff_advantage(*inputs, gamma, lambda_, rho_clip, c_clip).to(advantages.dtype)
    torch._functionalize_replace(advantages, result)
    torch._functionalize_commit_update(advantages)
    torch._sync(advantages)


def _refuse_like_eager(inputs, advantages, params):
    """An output dtype the eager op refuses (the functional form would just convert):
    the eager kernel's own error, from 1x1 real stand-ins of the same dtypes."""
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes(), _below_functionalize():
        stand_ins = [torch.zeros(1, 1, dtype=t.dtype) for t in (*inputs, advantages)]
        compute_puff_advantage(*stand_ins, *params)
    raise AssertionError(f"puffadv accepted {advantages.dtype} advantages for "
                         f"{inputs[0].dtype} inputs eagerly but not under torch.compile")


_FUNCTIONALIZATION_API = ("_sync", "_from_functional_tensor", "_functionalize_replace",
                          "_functionalize_commit_update")
if all(hasattr(torch, name) for name in _FUNCTIONALIZATION_API):  # private torch API
    _lib.impl("compute_puff_advantage", _compute_puff_advantage_functionalized, "Functionalize")


__all__ = ["compute_puff_advantage", "puff_advantage"]
