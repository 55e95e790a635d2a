"""``jqueue serve`` in a subprocess for the tools (``jqueue.testing.serve``), yielding its URL and
process id."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from jqueue.testing import free_port, serve

__all__ = ["free_port", "jqueue_serve"]


@contextlib.contextmanager
def jqueue_serve(root: Path | str, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """Run ``jqueue serve --storage ROOT``; yield its URL and process id once ``/healthz`` answers."""
    with serve(root, env=env) as served:
        yield served.url, served.pid
