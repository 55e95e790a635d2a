"""``GroupCommitLoop``: one writer task folds every pending operation into one commit."""

from __future__ import annotations

from datetime import timedelta
from typing import Unpack

from jqueue.core.commits import GroupedCommits
from jqueue.core.loop.retry import GROUPED_MAX_RETRIES, RetryPolicy
from jqueue.core.queue import DEFAULT_VISIBILITY_TIMEOUT, JobQueue, QueueOptions
from jqueue.ports.storage import ObjectStoragePort


class GroupCommitLoop(JobQueue):
    """A queue whose calls are batched by a single writer task into one commit per round.

    While one commit is in flight, new calls collect; the next round applies them all
    to the newest state and commits once. An operation that fails (say, an ack of an
    unknown job) fails only its own caller. A lost race re-applies the whole batch to
    fresh state after an exponential, jittered back-off. Every round also returns to
    the queue the claimed jobs whose lease ran out.

    Parameters
    ----------
    storage : ObjectStoragePort
        Where the state lives.
    stale_timeout : timedelta
        The documented name of ``visibility_timeout``.
    max_retries : int
        Conflicting commits retried before the batch fails with ``CASConflictError``.
    visibility_timeout : timedelta or None
        How long a claim holds a job without a heartbeat (``JobQueue``); ``stale_timeout``
        if None.
    **options
        ``QueueOptions``: ``max_payload_bytes``, ``layout``, ``log``, ``policy`` and
        ``storage_timeout``, as ``JobQueue`` takes them.
    """

    def __init__(
        self,
        storage: ObjectStoragePort,
        stale_timeout: timedelta = DEFAULT_VISIBILITY_TIMEOUT,
        *,
        max_retries: int = GROUPED_MAX_RETRIES,
        visibility_timeout: timedelta | None = None,
        **options: Unpack[QueueOptions],
    ) -> None:
        if visibility_timeout is not None and stale_timeout != DEFAULT_VISIBILITY_TIMEOUT:
            raise ValueError("give visibility_timeout or its documented alias stale_timeout, not both")
        retry = RetryPolicy(max_retries=max_retries)
        timeout = stale_timeout if visibility_timeout is None else visibility_timeout
        super().__init__(storage, GroupedCommits, retry=retry, visibility_timeout=timeout, **options)

    @property
    def stale_timeout(self) -> timedelta:
        """The documented name of ``visibility_timeout``."""
        return self.visibility_timeout

    async def start(self) -> None:
        """Start the writer task (what entering ``async with`` does)."""
        await self._commits.open()

    async def stop(self) -> None:
        """Commit every operation submitted so far, then stop the writer task."""
        await self._commits.close()
