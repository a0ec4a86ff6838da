"""torch's rules that puffadv's kernels cannot follow by themselves.

One device per call: a meta tensor among CPU tensors sends an operator to its
fake kernel (Meta outranks CPU), which must refuse it by name rather than return
an empty tensor as if computed.

Writing into a tensor: puffadv's kernels write through raw pointers, which torch cannot see. torch's
own in-place ops refuse some outputs (a leaf that requires grad, an inference
tensor outside inference mode) and bump the version counter of what they wrote,
so that autograd refuses a saved tensor that changed since. These functions
do the same for puffadv's outputs: check before the write, bump after it.
Used by the torch operators (puffadv.torch) and usable by any other path that
writes into torch tensors."""
from __future__ import annotations

import torch


def check_one_device(named) -> None:
    """ValueError, in the core's words, unless the tensors of (name, tensor) pairs
    are on one device. Non-tensors (None for an optional argument) are skipped."""
    named = [(name, t) for name, t in named if isinstance(t, torch.Tensor)]
    ref_name, ref = named[0]
    for name, t in named[1:]:
        if t.device != ref.device:
            raise ValueError(f"{name} is on {t.device} but {ref_name} is on {ref.device}; "
                             "all arrays must be on one device")


def check_writable(tensor, name: str, recorded: bool = False) -> None:
    """RuntimeError, as torch's own in-place ops raise, when writing into tensor
    would break autograd or inference mode. None and non-tensors pass (the
    argument checks name them). `recorded`: the write is a copy_ recorded in the
    graph (the public functions while they record one), so a tensor with a history
    (not a leaf's view) takes the result's, as torch's in-place ops give it."""
    if not isinstance(tensor, torch.Tensor):
        return
    if tensor.is_inference():
        if not torch.is_inference_mode_enabled():
            raise RuntimeError(
                f"Inplace update to inference tensor outside InferenceMode is not allowed: {name} "
                "was made under torch.inference_mode(). Write into a clone of it (a normal "
                "tensor), or call inside torch.inference_mode()")
        return  # inference tensors have no autograd state
    if not (tensor.requires_grad and torch.is_grad_enabled()):
        return  # torch allows this write (e.g. under torch.no_grad()); the version bump follows it
    if tensor.is_leaf:
        raise RuntimeError(
            f"a leaf Variable that requires grad is being used in an in-place operation: {name}. "
            "Write into a tensor that does not require grad, or call under torch.no_grad()")
    base = tensor._base
    if base is not None and base.is_leaf and base.requires_grad:
        raise RuntimeError(
            f"a view of a leaf Variable that requires grad is being used in an in-place "
            f"operation: {name}. Write into a tensor that does not require grad, or call under "
            "torch.no_grad()")
    if recorded:
        return
    # torch would rebase the history onto the in-place op; puffadv's outputs are
    # targets without a gradient, so the old history would give a wrong gradient.
    raise RuntimeError(
        f"{name} requires grad, but puffadv's outputs are training targets without a "
        "gradient: writing into it would leave its autograd history stale. Write into a "
        "tensor that does not require grad (e.g. torch.empty_like(values)), or call under "
        "torch.no_grad()")


def check_all_writable(outputs: dict, names: dict, recorded: bool = False) -> None:
    """check_writable() over one call's outputs (role -> tensor or None), each named
    by `names` (role -> the caller's name; the role where it has none). The common
    output (no autograd history, not an inference tensor) costs two attribute reads:
    this runs before every torch call's kernel launch."""
    for role, tensor in outputs.items():
        if tensor is None or writes_freely(tensor):
            continue
        check_writable(tensor, names.get(role, role), recorded)


def writes_freely(tensor) -> bool:
    """A plain tensor that torch lets a kernel write without a word: no autograd history,
    not an inference tensor (the common output; the others go through check_writable)."""
    return type(tensor) is _Tensor and not tensor.requires_grad and not tensor.is_inference()


_Tensor = torch.Tensor


def _version_bumper():
    """torch._C._increment_version, what torch.autograd.graph.increment_version
    calls, if it takes a list (torch >= 2.5 or so); else the public function
    per tensor (older torch took one tensor)."""
    bump = getattr(torch._C, "_increment_version", None)
    try:
        bump([])
        return bump
    except Exception:
        public = torch.autograd.graph.increment_version
        return lambda tensors: [public(t) for t in tensors]


_increment_version = _version_bumper()


def all_plain(tensors) -> bool:
    """Whether the core imports these (torch tensors or None) as they are: plain torch.Tensor
    objects (no subclass) through DLPack's C exchange API (_frameworks.for_kernel)."""
    if not EXCHANGE_API:
        return False
    for tensor in tensors:
        if type(tensor) is not _Tensor and tensor is not None:
            return False
    return True


# The core reads plain tensors through DLPack's C exchange API (as _frameworks._TorchFunctions).
EXCHANGE_API = "__dlpack_c_exchange_api__" in torch.Tensor.__dict__


def mark_written_all(tensors) -> None:
    """mark_written() over one call's outputs, torch tensors or None."""
    written = [t for t in tensors if t is not None]
    if written:
        _increment_version(written)


def mark_written(*tensors) -> None:
    """Bump the version counters, as torch's in-place ops do after a write, so that
    a backward that saved one of these tensors earlier fails instead of using new
    values. None is skipped; inference tensors have no counter and are left alone
    (torch skips them)."""
    written = [t for t in tensors if t is not None and isinstance(t, _Tensor)]
    if written:
        _increment_version(written)
