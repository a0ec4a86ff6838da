"""Shared fixtures: every test runs over each array framework and device this
machine has (NumPy, torch CPU, and on a GPU machine torch CUDA and CuPy)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # for `import reference`


def _available_targets():
    targets = ["numpy"]
    try:
        import torch
        targets.append("torch-cpu")
        if torch.cuda.is_available():
            targets.append("torch-cuda")
    except ImportError:
        pass
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            targets.append("cupy")
    except Exception:
        pass
    return targets


TARGETS = _available_targets()


class Target:
    """Moves NumPy arrays to a framework/device and back."""

    def __init__(self, name):
        self.name = name
        self.is_gpu = name in ("torch-cuda", "cupy")

    def put(self, a):
        if self.name == "numpy":
            return a
        if self.name.startswith("torch"):
            import torch
            return torch.from_numpy(np.ascontiguousarray(a)).to("cuda" if self.is_gpu else "cpu")
        import cupy
        return cupy.asarray(a)

    def get(self, x):
        if self.name == "numpy":
            return np.asarray(x)
        if self.name.startswith("torch"):
            return x.cpu().numpy()
        return x.get()

    def full(self, shape, value, dtype):
        return self.put(np.full(shape, value, dtype=dtype))

    def synchronize(self):
        if self.name == "torch-cuda":
            import torch
            torch.cuda.synchronize()
        elif self.name == "cupy":
            import cupy
            cupy.cuda.get_current_stream().synchronize()

    def __repr__(self):
        return self.name


@pytest.fixture(params=TARGETS)
def target(request):
    return Target(request.param)


@pytest.fixture
def rng():
    return np.random.default_rng()
