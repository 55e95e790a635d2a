"""Imports of optional dependencies, failing with the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, *, extra: str) -> ModuleType:
    """Import ``module`` or raise an ImportError naming the jqueue extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{module} is not installed; install jqueue with the {extra!r} extra"
            f" (from a checkout: pip install '/path/to/checkout[{extra}]')"
        ) from exc
