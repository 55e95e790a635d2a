"""``DirectQueue``: every call is its own compare-and-swap commit."""

from __future__ import annotations

from datetime import timedelta
from typing import Unpack

from jqueue.core.commits import DirectCommits
from jqueue.core.loop.retry import DIRECT_MAX_RETRIES, RetryPolicy
from jqueue.core.queue import DEFAULT_VISIBILITY_TIMEOUT, JobQueue, QueueOptions
from jqueue.ports.storage import ObjectStoragePort


class DirectQueue(JobQueue):
    """A queue that commits each call on its own; no background task.

    Calls from one ``DirectQueue`` take turns, so they never conflict with each
    other; conflicts with other processes are retried on fresh state.

    Parameters
    ----------
    storage : ObjectStoragePort
        Where the queue lives.
    max_retries : int
        Conflicting commits retried before ``CASConflictError`` reaches the caller.
    visibility_timeout : timedelta
        How long a claim holds a job without a heartbeat (``JobQueue``).
    **options
        ``QueueOptions``: ``max_payload_bytes``, ``layout``, ``log``, ``policy`` and
        ``storage_timeout``, as ``JobQueue`` takes them.
    """

    def __init__(
        self,
        storage: ObjectStoragePort,
        max_retries: int = DIRECT_MAX_RETRIES,
        *,
        visibility_timeout: timedelta = DEFAULT_VISIBILITY_TIMEOUT,
        **options: Unpack[QueueOptions],
    ) -> None:
        retry = RetryPolicy(max_retries=max_retries)
        super().__init__(
            storage, DirectCommits, retry=retry, visibility_timeout=visibility_timeout, **options
        )
        self.max_retries = max_retries
