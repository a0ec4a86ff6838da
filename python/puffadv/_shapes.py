"""The caller's array shapes as the core's [rows, horizon] views (issue 33), shared by
the NumPy/DLPack functions, their torch.compile path and puffadv.jax.

time_axis is required (no default layout: a time-major [T, B] buffer must never be
read as batch-major [B, T]) and names the time axis of the caller's arrays:

    [T, *B]     time_axis=0            (SB3, CleanRL, skrl; a trailing 1 is one more batch axis)
    [*B, T]     time_axis=-1 (ndim-1)  (PufferLib)
    [*B, T, 1]  time_axis=-2 (ndim-2)  (TorchRL's [*B, T, 1] tensordicts; the last axis must be 1)

2-D arrays keep the core's rule (0 or -2 time-major, 1 or -1 batch-major). Arrays of
more dimensions are handed over as 2-D views: the batch axes collapse into rows where
their strides allow it (never a copy; where they do not, a ValueError says so), and
outputs come back in the caller's shape (the row sums in the rewards' shape without
its time axis: [*B], or [*B, 1] for [*B, T, 1] and [T, *B, 1]). A per-row array
(last_value, seed) may be [*B], or carry extra axes of 1 ([B, 1], [1, B]).
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Optional

from . import _core, _frameworks


def required_time_axis(time_axis, function: str) -> int:
    """time_axis as an int; None (not passed) is the TypeError naming both layouts."""
    if type(time_axis) is int:
        return time_axis
    if time_axis is None:
        raise TypeError(_core.time_axis_required_message(function))
    if isinstance(time_axis, bool) or not isinstance(time_axis, numbers.Integral):
        raise TypeError(f"time_axis must be an int (0: time-major [T, B], 1: batch-major [B, T]), "
                        f"got {_frameworks.describe(time_axis)}")
    return int(time_axis)


class Plan(NamedTuple):
    """How one call's [rows, horizon] arrays become 2-D views and its outputs come back."""
    shape: tuple      # the caller's series shape (the rewards')
    view: tuple       # the 2-D shape the core reads, in the caller's orientation
    time_axis: int    # the core's time_axis for `view`: 0 (time-major) or -1 (batch-major)
    batch: tuple      # the row sums' shape: the rewards' without the time axis
    reference: str    # the caller's name of the rewards, for messages


def plan(rewards, time_axis: int, name: str = "rewards") -> Optional[Plan]:
    """None for 2-D (and malformed) rewards: the core reads them as they are. `name`:
    the caller's name of the rewards (episodic_cumsum's `inputs`)."""
    shape = tuple(getattr(rewards, "shape", ()) or ())
    ndim = len(shape)
    if ndim <= 2:
        return None
    if not -ndim <= time_axis < ndim:
        raise ValueError(f"time_axis must name an axis of the {ndim}-D {name} {list(shape)} (0: time-major "
                         f"[T, *B]; -1: batch-major [*B, T]; -2: [*B, T, 1]), got {time_axis}")
    axis = time_axis % ndim
    if axis == 0:
        return Plan(shape, (shape[0], math.prod(shape[1:])), 0, shape[1:], name)
    if axis == ndim - 1:
        return Plan(shape, (math.prod(shape[:-1]), shape[-1]), -1, shape[:-1], name)
    if axis == ndim - 2 and shape[-1] == 1:
        return Plan(shape, (math.prod(shape[:-2]), shape[-2]), -1, (*shape[:-2], 1), name)
    raise ValueError(f"time_axis={time_axis} of the {ndim}-D {name} {list(shape)}: the time axis must be the "
                     f"first ([T, *B]), the last ([*B, T]) or the last but one before a trailing axis of 1 "
                     f"([*B, T, 1])")


def _strides(x) -> Optional[tuple]:
    strides = getattr(x, "strides", None)
    if callable(strides):  # torch: Tensor.stride()
        strides = None
    if strides is None and hasattr(x, "stride") and callable(x.stride):
        strides = tuple(x.stride())
    return None if strides is None else tuple(strides)


def _collapsible(shape: tuple, strides: tuple) -> bool:
    """Whether consecutive axes `shape` (with `strides`) are one axis of one stride."""
    kept = [(n, s) for n, s in zip(shape, strides) if n != 1]
    return all(outer == inner * n for (_, outer), (n, inner) in zip(kept, kept[1:]))


def series_view(x, p: Plan, name: str, framework: str):
    """A [rows, horizon]-role array as the plan's 2-D view (the caller's memory)."""
    if x is None or x is True or x is False:
        return x
    shape = tuple(getattr(x, "shape", ()) or ())
    if shape != p.shape:
        raise ValueError(f"{name} has shape {list(shape)}, but {p.reference} has {list(p.shape)}: every "
                         f"[rows, horizon] array has the shape of {p.reference}")
    if framework == "jax":
        return x.reshape(p.view)  # immutable arrays: XLA's reshape
    strides = _strides(x)
    batch_axes = slice(1, None) if p.time_axis == 0 else slice(0, len(p.batch))
    if strides is None or not hasattr(x, "reshape") or not _collapsible(shape[batch_axes], strides[batch_axes]):
        raise ValueError(f"{name} ({list(shape)}) cannot be read as {list(p.view)} without a copy: its batch "
                         f"axes do not collapse into one stride; pass a contiguous array (a copy)")
    return x.reshape(p.view)  # a view: the strides allow it


def row_view(x, rows: int, batch: tuple, name: str, framework: str):
    """A per-row array ([*B], [B, 1], [1, B], ...) as a [rows] view; anything else as it
    is, for the core to name."""
    shape = tuple(getattr(x, "shape", ()) or ()) if x is not None else ()
    if x is None or len(shape) == 1 or [n for n in shape if n != 1] != [n for n in batch if n != 1]:
        return x
    if framework == "jax":
        return x.reshape((rows,))
    strides = _strides(x)
    if strides is None or not hasattr(x, "reshape") or not _collapsible(shape, strides):
        raise ValueError(f"{name} ({list(shape)}) cannot be read as [{rows}] without a copy; pass a "
                         f"contiguous array")
    return x.reshape((rows,))


def back(x, shape: tuple):
    """An output the call allocated (contiguous), in the caller's shape."""
    return None if x is None else x.reshape(shape)
