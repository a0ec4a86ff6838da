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

from . import _torch_status

_torch_status.load(torch)

compute_puff_advantage = torch.ops.puffadv.compute_puff_advantage
puff_advantage = torch.ops.puffadv.puff_advantage

from . import _torch_conventions  # noqa: E402  gae / td_lambda_returns / vtrace fakes

_torch_conventions.register()


# Fake kernels describe outputs only; the real kernels run the core's checks,
# so a bad call traced by torch.compile fails with the same message when it runs.
@torch.library.register_fake("puffadv::compute_puff_advantage")
def _compute_puff_advantage_fake(values, rewards, dones, importance, advantages,
                                 gamma, lambda_, rho_clip, c_clip):
    return None


@torch.library.register_fake("puffadv::puff_advantage")
def _puff_advantage_fake(values, rewards, dones, importance, gamma, gae_lambda, rho_clip, c_clip):
    return torch.empty(values.shape, dtype=values.dtype, device=values.device)


def _compute_puff_advantage_functionalized(values, rewards, dones, importance, advantages,
                                           gamma, lambda_, rho_clip, c_clip):
    """The in-place op as torch.compile sees it: the functional op, then its result
    recorded as the new value of `advantages`. Without this kernel torch would
    auto-functionalize the op, passing PufferLib's `lambda` argument by name,
    which generated Python code cannot do. Eager calls never come here."""
    inputs = [values, rewards, dones, importance]
    for t in (*inputs, advantages):
        torch._sync(t)
    inputs = [torch._from_functional_tensor(t) for t in inputs]
    target = torch._from_functional_tensor(advantages)
    # A float32 output for reduced-precision inputs: widen them (exactly), so the
    # arithmetic is the float32 of the eager call, not a rounded half result.
    inputs = [t.to(target.dtype) if t.is_floating_point() and t.dtype != target.dtype else t
              for t in inputs]
    below = torch._C._ExcludeDispatchKeyGuard(
        torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize))
    with below:
        result = puff_advantage(*inputs, gamma, lambda_, rho_clip, c_clip)
    torch._functionalize_replace(advantages, result)
    torch._functionalize_commit_update(advantages)
    torch._sync(advantages)


_FUNCTIONALIZATION_API = ("_sync", "_from_functional_tensor", "_functionalize_replace",
                          "_functionalize_commit_update")
if all(hasattr(torch, name) for name in _FUNCTIONALIZATION_API):  # private torch API
    _lib = torch.library.Library("puffadv", "IMPL")
    _lib.impl("compute_puff_advantage", _compute_puff_advantage_functionalized, "Functionalize")


__all__ = ["compute_puff_advantage", "puff_advantage"]
