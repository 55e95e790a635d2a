"""Worker hooks: functions (plain or async) called at a worker's start and stop and around each job."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

Hook = Callable[..., Awaitable[object] | object]


async def call_hooks(hooks: list[Hook], *args: Any) -> None:
    """Call each hook with ``args`` in order, awaiting those that return an awaitable."""
    for hook in hooks:
        result = hook(*args)
        if inspect.isawaitable(result):
            await result
