"""Validation of the relative names the keyed storage calls accept."""

from __future__ import annotations

import re

_NAME = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")


def checked_name(name: str) -> str:
    """Return ``name`` if it is a safe relative object name, else raise ValueError."""
    if not _NAME.fullmatch(name) or any(part in {".", ".."} for part in name.split("/")):
        raise ValueError(f"invalid object name {name!r}")
    return name


def checked_prefix(prefix: str) -> str:
    """Return ``prefix`` if it is empty or a safe name, optionally ending in '/'."""
    if prefix:
        checked_name(prefix.removesuffix("/"))
    return prefix
