"""The ``jqueue`` command line (extra ``cli``: typer and rich)."""

from __future__ import annotations

import sys

from jqueue.adapters.optional import require


def main() -> None:
    """Run the ``jqueue`` command."""
    try:
        for module in ("typer", "rich"):
            require(module, extra="cli")
    except ImportError as exc:
        sys.exit(f"error: {exc}")
    from jqueue.adapters.cli.app import build_app

    build_app()()
