"""The one ImportError every integration raises when its trainer is missing."""
from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, package: str, extra: str) -> ModuleType:
    """Import `module` (from the PyPI `package`), or raise an ImportError that says what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"puffadv.integrations.{extra} needs {package}, which is not installed: "
            f"pip install 'puffadv[{extra}]' (or pip install {package})") from error
