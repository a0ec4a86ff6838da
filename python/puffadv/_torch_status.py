"""The torch operator library (lib/libpuffadv_torch.so): whether it was built,
which torch releases it loads into, and loading it with a message a user can
act on. Imports torch only in load(), so backend() stays cheap.

The library is built on torch's LibTorch Stable ABI for the floor release
(cmake/PuffTorch.cmake), so it loads into that torch and every later one, CPU
and CUDA builds alike: only a torch older than the floor is refused."""
from __future__ import annotations

import sys
from pathlib import Path

REBUILD = "pip install scikit-build-core nanobind cmake ninja && pip install --no-build-isolation ."  # in puffadv's source folder

_load_error: str | None = None  # why the last load() failed
_loaded = False


def build_facts():
    """The generated _torch_build module, or None when the library was not built."""
    try:
        from . import _torch_build
    except ImportError:
        return None
    return _torch_build


def library_path() -> Path | None:
    facts = build_facts()
    return None if facts is None else Path(__file__).resolve().parent / "lib" / facts.LIBRARY


def installed_torch() -> str | None:
    """The torch version this process uses (or would import), without importing it."""
    if "torch" in sys.modules:
        return str(sys.modules["torch"].__version__)
    try:
        from importlib.metadata import version
        return version("torch")
    except Exception:
        return None


def release(version: str) -> tuple[int, int]:
    """'2.11.0+cu130' -> (2, 11); '2.14.0a0+git1234' -> (2, 14)."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def too_old(floor: str, running: str) -> str | None:
    """The message for a torch older than the library's floor, or None."""
    if release(running) >= release(floor):
        return None
    return (f"puffadv's torch operator library needs torch >= {floor} (it is built on the LibTorch "
            f"Stable ABI of torch {floor}), but this process uses torch {running}; upgrade torch, "
            f"e.g. pip install 'torch>={floor}'")


def not_built_message() -> str:
    return ("puffadv was built without its torch operator library: torch was not importable "
            "by the Python that built it (`pip install .` builds in an isolated environment "
            f"without torch). Rebuild it in this environment with: {REBUILD}")


def load(torch) -> None:
    """torch.ops.load_library on the op library, or an ImportError that says what to do."""
    global _load_error, _loaded
    if _loaded:
        return
    facts = build_facts()
    problem = not_built_message() if facts is None else too_old(facts.TORCH_FLOOR, torch.__version__)
    if problem is None:
        try:
            torch.ops.load_library(str(library_path()))
        except OSError as e:  # e.g. an undefined symbol from a torch with another ABI
            problem = (f"puffadv's torch operator library {library_path()} (for torch >= "
                       f"{facts.TORCH_FLOOR}) does not load into torch {torch.__version__}: "
                       f"{str(e).splitlines()[0]}. Rebuild puffadv in this environment with: {REBUILD}")
    _load_error = problem
    if problem is not None:
        raise ImportError(problem)
    _loaded = True


def status() -> dict:
    """For backend(): built, for which torch releases, loaded."""
    facts = build_facts()
    report = {
        "built": facts is not None,
        "torch_floor": facts.TORCH_FLOOR if facts else None,
        "built_against": facts.TORCH_VERSION if facts else None,
        "library": str(library_path()) if facts else None,
        "torch_installed": installed_torch(),
        "loaded": _loaded,
        "error": _load_error,
    }
    if facts is None:
        report["error"] = not_built_message()
    elif report["error"] is None and report["torch_installed"]:
        report["error"] = too_old(facts.TORCH_FLOOR, report["torch_installed"])
    return report


def describe(report: dict) -> str:
    """One line for backend()'s printout."""
    if not report["built"]:
        return "not built (needs torch at build time: " + REBUILD + ")"
    line = (f"built for torch >= {report['torch_floor']} (Stable ABI; headers of torch "
            f"{report['built_against']})")
    if report["loaded"]:
        line += "; loaded (torch.ops.puffadv)"
    elif report["error"]:
        line += f"; NOT loadable: {report['error']}"
    else:
        line += "; not loaded (import puffadv.torch)"
    return line
