"""``DirectQueue``: every call is its own compare-and-swap commit."""

from __future__ import annotations

from datetime import timedelta

from jqueue.core.commits import DirectCommits
from jqueue.core.layout import Layout
from jqueue.core.loop.retry import DIRECT_MAX_RETRIES, RetryPolicy
from jqueue.core.loop.settings import LogSettings
from jqueue.core.loop.timed import DEFAULT_STORAGE_TIMEOUT
from jqueue.core.queue import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_VISIBILITY_TIMEOUT, JobQueue
from jqueue.domain.policy import QueuePolicy
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

    The other parameters (``max_payload_bytes``, ``layout``, ``log``, ``policy``,
    ``storage_timeout``) are ``JobQueue``'s.
    """

    def __init__(
        self,
        storage: ObjectStoragePort,
        max_retries: int = DIRECT_MAX_RETRIES,
        *,
        max_payload_bytes: int | None = DEFAULT_MAX_PAYLOAD_BYTES,
        layout: Layout = "auto",
        log: LogSettings | None = None,
        visibility_timeout: timedelta = DEFAULT_VISIBILITY_TIMEOUT,
        policy: QueuePolicy | None = None,
        storage_timeout: timedelta | None = DEFAULT_STORAGE_TIMEOUT,
    ) -> None:
        super().__init__(
            storage,
            DirectCommits,
            retry=RetryPolicy(max_retries=max_retries),
            layout=layout,
            max_payload_bytes=max_payload_bytes,
            log=log,
            visibility_timeout=visibility_timeout,
            policy=policy,
            storage_timeout=storage_timeout,
        )
        self.max_retries = max_retries
