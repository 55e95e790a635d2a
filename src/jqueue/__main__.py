"""``python -m jqueue``: the ``jqueue`` command."""

from jqueue.adapters.cli import main

main()
