"""``run_event_loop``: the event loop ``jqueue worker`` runs its handlers on: uvloop's where it is
installed (the ``cli`` extra brings it; ``jqueue serve`` runs on it through uvicorn), else
asyncio's own. A worker process spends about a third less CPU a job on uvloop's.

Not for ``jqueue exec``: uvloop gives a child process socket pairs for its standard streams,
not pipes, so a command that opens ``/dev/stdin`` fails (uvloop issues 505 and 532), and a
write to a command that exited raises ``RuntimeError`` (issue 506).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_event_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end, as ``asyncio.run`` does, on uvloop's loop if installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)
