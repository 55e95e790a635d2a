"""The ``jqueue`` command line (extra ``cli``: typer and rich)."""

from __future__ import annotations

import sys

_CLI_PACKAGES = {"typer", "rich", "click"}


def main() -> None:
    """Run the ``jqueue`` command."""
    try:
        from jqueue.adapters.cli.app import build_app
    except ImportError as exc:
        if exc.name in _CLI_PACKAGES:
            sys.exit("error: the jqueue command needs the 'cli' extra: pip install 'jqueue[cli]'")
        raise
    build_app()()
