"""What torch's tracers allow puffadv's recording path (_torch_autograd): which torch.func
transform the Function can take, and the calls dynamo or torch.export would trace into a silently
wrong result, refused by name instead."""
from __future__ import annotations

import torch

from . import _frameworks, _torch_status


_NOT_DIFFERENTIATING = (torch._C._functorch.TransformType.Vmap, torch._C._functorch.TransformType.Functionalize)


def transform_other_than_vmap() -> bool:
    """A torch.func transform other than vmap runs innermost: the recording path's Function takes
    its tensors (_torch_autograd.wanted). Not functionalize either: it converts tensors, and has
    no rule for a Function."""
    if not torch._C._are_functorch_transforms_active():
        return False
    if _frameworks.torch_compiling():  # dynamo cannot read the stack; under vmap torch then refuses
        return True
    return torch._C._functorch.peek_interpreter_stack().key() not in _NOT_DIFFERENTIATING


# Measured 2026-12-06 (torch 2.13): dynamo inside a torch.func transform loses the Function's
# plan ("'Function' object has no attribute 'array_roles'"); without fullgraph the call breaks
# the graph and runs eagerly, where the transform's derivatives are right. Before this check it
# went on to the detached compiled path: all-zero gradients.
UNTRACED_TRANSFORM = ("puffadv's Python API is not traced inside a torch.func transform (grad, vjp, jacrev, "
                      "...) under torch.compile: compile without fullgraph=True (the call then runs "
                      "eagerly, with the transform's derivatives), or call the operator torch.ops.puffadv.{op}, "
                      "which torch.compile traces there")


# torch.export inlines the Function's forward (detached inputs, the traced operator) and drops
# its backward: the exported module ran with the values right and the gradient through puffadv
# lost, without a word (fourth look, 2026-12-06).
UNEXPORTED_GRAPH = ("torch.export of a puffadv call whose inputs require grad would drop their gradient (export "
                    "inlines puffadv's autograd Function): export under torch.no_grad() for inference, or call "
                    "the operator torch.ops.puffadv.{op}, which exports with its autograd")


# Where dynamo traces, torch.compiler.is_exporting() is True in a strict export only from torch
# 2.13 on (measured 2026-12-06: 2.13.0 on the CPU; 2.11.0 answered True under a plain
# torch.compile too, which refused every compiled call recording a graph, on the H100).
DYNAMO_TELLS_EXPORT = _torch_status.release(torch.__version__) >= (2, 13)


def _exporting() -> bool:
    """torch.export traces the call: its default (non-strict) tracing, or a strict export where
    dynamo tells it (DYNAMO_TELLS_EXPORT; before, a strict export is not refused)."""
    compiler = torch.compiler
    if not getattr(compiler, "is_exporting", lambda: False)():
        return False
    return DYNAMO_TELLS_EXPORT or not compiler.is_dynamo_compiling()


def refuse_untraceable(op: str) -> None:
    """While dynamo or export traces a call that records a graph: the TypeError for a torch.func
    transform (dynamo) or an export, whose traced results would lose the gradient; `op`: the
    operator to name."""
    if torch._C._are_functorch_transforms_active():
        raise TypeError(UNTRACED_TRANSFORM.format(op=op))
    if _exporting():
        raise TypeError(UNEXPORTED_GRAPH.format(op=op))
