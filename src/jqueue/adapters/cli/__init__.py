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


GLOBAL_OPTIONS = ("--storage", "--server", "--queue")
"""The options of every queue command, which the command line reads before the command's name."""


def global_options_first(args: list[str]) -> list[str]:
    """Move the ``GLOBAL_OPTIONS`` given after a command (``--storage URL`` or ``--storage=URL``)
    to the front, where the command line reads global options; what follows ``--`` is left alone."""
    end = args.index("--") if "--" in args else len(args)
    moved: list[str] = []
    rest: list[str] = []
    position = 0
    while position < end:
        arg = args[position]
        if arg in GLOBAL_OPTIONS and position + 1 < end and position > 0:
            moved += args[position : position + 2]
            position += 2
            continue
        if arg.startswith(tuple(f"{name}=" for name in GLOBAL_OPTIONS)) and position > 0:
            moved.append(arg)
        else:
            rest.append(arg)
        position += 1
    return moved + rest + args[end:]
