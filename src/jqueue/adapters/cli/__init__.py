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

    build_app()(args=global_options_first(sys.argv[1:]), prog_name="jqueue")


def global_options_first(args: list[str]) -> list[str]:
    """Move ``--storage URL`` (or ``--storage=URL``) given after a command to the front, where
    the command line reads global options; what follows ``--`` is left alone."""
    end = args.index("--") if "--" in args else len(args)
    moved: list[str] = []
    rest: list[str] = []
    position = 0
    while position < end:
        arg = args[position]
        if arg == "--storage" and position + 1 < end and position > 0:
            moved += args[position : position + 2]
            position += 2
            continue
        if arg.startswith("--storage=") and position > 0:
            moved.append(arg)
        else:
            rest.append(arg)
        position += 1
    return moved + rest + args[end:]
