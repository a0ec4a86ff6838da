"""SB3's and CleanRL's episode-start flags as the `terminated` a family call reads
(issue 33), for the NumPy/DLPack functions, their torch.compile path and puffadv.jax.

Those trainers store, at step t, whether the observation t STARTS an episode
(SB3's `episode_starts[t]`, CleanRL's `dones[t]`), so the end of step t's episode
is the flag one step later, and the last step's end is the flag of the observation
after the buffer (SB3's `dones` argument of compute_returns_and_advantage,
CleanRL's `next_done`):

    terminated[t] = episode_starts[t + 1]     for t < T - 1
    terminated[T - 1] = last_episode_start

`truncated`, when given, keeps its own meaning (truncated[t]: step t was cut by a
time limit) and says which of those ends are truncations: terminated is the
shifted flags where truncated is not set. The flags are a new array (one copy of
the flags; the other arrays are read in place).
"""
from __future__ import annotations

from . import _frameworks
from ._shapes import required_time_axis

NAMES = ("episode_starts", "last_episode_start")


def with_terminated(function: str, args: dict) -> dict:
    """`args` (a public call's arguments by name) with `terminated` made from
    episode_starts and last_episode_start, which are then None."""
    starts, last = args["episode_starts"], args["last_episode_start"]
    if args.get("terminated") is not None:
        raise ValueError(f"{function}() takes either terminated (terminated[t]: step t ended its episode) or "
                         f"episode_starts (SB3's and CleanRL's flags: episode_starts[t + 1] ends step t's "
                         f"episode), not both")
    if starts is None or last is None:
        missing, given = ("episode_starts", "last_episode_start") if starts is None else NAMES[::-1]
        raise ValueError(f"{function}() needs {missing} with {given}: episode_starts[t + 1] ends step t's "
                         f"episode, and last_episode_start (SB3's `dones`, CleanRL's `next_done`, [B]) "
                         f"ends the last step's")
    time_axis = required_time_axis(args["time_axis"], function)
    # While dynamo traces, the arrays are tensors and _compiled checks them (is_neg() cannot be traced).
    framework = "torch" if _frameworks.torch_compiling() else _frameworks.framework_of_call((starts,), (last,), NAMES)
    rewards_shape = tuple(getattr(args["rewards"], "shape", ()) or ())
    shape = tuple(starts.shape)
    if shape != rewards_shape:
        raise ValueError(f"episode_starts has shape {list(shape)}, but rewards has {list(rewards_shape)}")
    if len(shape) < 2 or not -len(shape) <= time_axis < len(shape):
        return {**args, "terminated": starts, "episode_starts": None, "last_episode_start": None}  # the core names it
    axis = time_axis % len(shape)
    last_shape = tuple(1 if k == axis else n for k, n in enumerate(shape))
    size = 1
    for n in last_shape:
        size *= n
    if int(getattr(last, "size", -1) if framework != "torch" else last.numel()) != size:
        raise ValueError(f"last_episode_start has shape {list(last.shape)}: one flag per row ({size}) expected")
    last = last.reshape(last_shape)
    later = tuple(slice(1, None) if k == axis else slice(None) for k in range(len(shape)))
    terminated = _concatenate(framework, starts[later], last, axis)
    truncated = args.get("truncated")
    if truncated is not None:  # truncated[t] says which ends are time limits
        terminated = (terminated != 0) & (truncated == 0)
    return {**args, "terminated": terminated, "episode_starts": None, "last_episode_start": None}


def _concatenate(framework: str, head, tail, axis: int):
    """[head, tail] along `axis`, in the arrays' framework (tail cast to head's dtype)."""
    if framework == "torch":
        import torch
        return torch.cat((head, tail.to(head.dtype)), axis)
    if framework == "jax":
        import jax.numpy as jnp
        return jnp.concatenate((head, jnp.asarray(tail).astype(head.dtype)), axis)
    if framework == "cupy":
        import cupy
        return cupy.concatenate((head, tail.astype(head.dtype)), axis)
    if framework == "numpy":
        import numpy as np
        return np.concatenate((head, np.asarray(tail).astype(head.dtype)), axis)
    raise TypeError(f"episode_starts must be a NumPy, torch, CuPy or JAX array, got {_frameworks.describe(head)}")
