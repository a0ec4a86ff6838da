"""Types of the public API's arguments, for annotations (mypy, IDEs)."""
from __future__ import annotations

from typing import Any, Protocol, SupportsFloat, TypeVar, Union

__all__ = ["Array", "ArrayT", "PerStep", "Real", "Stream"]


class Array(Protocol):
    """Any array puffadv reads: NumPy, PyTorch, CuPy, JAX or another DLPack producer."""

    def __dlpack__(self) -> Any: ...


ArrayT = TypeVar("ArrayT", bound=Array)  # an output comes back in its input's framework

#: A real number: a Python or NumPy scalar, or a 0-d numeric array (bool is refused).
Real = SupportsFloat

#: gamma or a lambda: a real number, or an array of the rewards' shape (one value per step).
PerStep = Union[Real, Array]

#: An explicit GPU stream: an int handle, a torch.cuda.Stream or a cupy Stream.
Stream = Union[int, Any]
