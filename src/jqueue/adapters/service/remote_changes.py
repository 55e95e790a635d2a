"""``RemoteChanges``: how a client of ``jqueue serve`` learns that a served queue changed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from jqueue.adapters.service.wire import MAX_WAIT_SECONDS, ChangesRequest, ChangesResponse

if TYPE_CHECKING:
    from jqueue.adapters.service.client import RemoteQueue


class RemoteChanges:
    """The changes of a served queue, learnt by long polls: what ``Worker`` waits on when idle,
    so that a job enqueued anywhere wakes it at once."""

    def __init__(self, queue: RemoteQueue) -> None:
        self._queue = queue
        self.generation = 0

    async def wait(self, seen: int, seconds: float) -> int:
        """Return the service's change count once it is past ``seen``, or after ``seconds``."""
        request = ChangesRequest(seen=seen, wait_seconds=min(max(seconds, 0.0), MAX_WAIT_SECONDS))
        answer: ChangesResponse = await self._queue.call(
            "changes", request, ChangesResponse, wait=request.wait_seconds
        )
        self.generation = answer.generation
        return self.generation
