"""Imports of optional dependencies, failing with the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from jqueue.domain.errors import missing_extra


def require(module: str, *, extra: str) -> ModuleType:
    """Import ``module`` or raise an ImportError naming the jqueue extra that provides it
    (``missing_extra``)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise missing_extra(module, extra) from exc
