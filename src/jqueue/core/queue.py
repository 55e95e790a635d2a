"""``JobQueue``: the queue API, written once over a commit strategy and a layout.

Each call checks its arguments, then becomes an ``Operation``: a function that decides
the call's effects on the queue index (applying them) and returns the caller's answer.
The queue's ``Commits`` (``jqueue.core.commits``) decide how operations reach the store:
one commit per call (``DirectQueue``), or many folded into one (``GroupCommitLoop``,
``BrokerQueue``). The calls that look at and steer a queue are in ``ManagementCalls``, those
that settle claimed jobs in ``SettleCalls``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Self, TypedDict, TypeVar

from jqueue.core.adding import Found, adding
from jqueue.core.bulk import BulkWrites
from jqueue.core.changes import ChangeFeed
from jqueue.core.commits import Commits, Housekeeping
from jqueue.core.enqueue_calls import EnqueueCalls
from jqueue.core.insight import QueueInsight
from jqueue.core.layout import Layout, StoreOpener
from jqueue.core.loop.retry import RetryPolicy
from jqueue.core.loop.settings import LogSettings
from jqueue.core.loop.store import StorageUse, describe
from jqueue.core.loop.timed import DEFAULT_STORAGE_TIMEOUT, timed
from jqueue.core.management import entrypoint_set, fence
from jqueue.core.settle_calls import SettleCalls, acking
from jqueue.core.spawn_guard import refuse_while_spawning
from jqueue.core.workflow_calls import WorkflowCalls
from jqueue.domain.effects import Added
from jqueue.domain.errors import JQueueError, LeaseLostError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import Job, QueueState
from jqueue.domain.policy import QueuePolicy
from jqueue.domain.schema import PUBLIC_FORM, JobForm
from jqueue.domain.spec import JobSpec, checked_span
from jqueue.domain.times import to_micros, utc_now
from jqueue.ports.storage import ObjectStoragePort

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
DEFAULT_VISIBILITY_TIMEOUT = timedelta(minutes=5)
CLOCK_SAFE_VISIBILITY = timedelta(seconds=30)
"""Below this visibility timeout a queue warns: a claimer whose clock runs ahead by more than
a lease sweeps leases that are still valid for their holders."""
logger = logging.getLogger("jqueue")
T = TypeVar("T")


LEASE_BITS = 128
"""A lease token is this many random bits: the queue's fencing token, which a stale holder's
lease never matches (an adapter that needs a shorter token maps it; see ``known_lease``)."""


def new_lease() -> str:
    """Return a fresh lease token: ``LEASE_BITS`` random bits in hexadecimal."""
    return os.urandom(LEASE_BITS // 8).hex()  # a third of secrets.randbits' cost, the same bits


def claiming(
    queue: JobQueue,
    batch_size: int,
    visibility_timeout: timedelta | None,
    entrypoint: str | Collection[str] | None,
) -> Callable[[QueueIndex], list[Added]]:
    """The operation of ``queue.dequeue``'s claim, its arguments checked (``ValueError``)."""
    if batch_size < 0:
        raise ValueError(f"batch_size must not be negative, got {batch_size}")
    visibility = queue.visibility_timeout
    if visibility_timeout is not None:
        visibility = checked_span("visibility_timeout", visibility_timeout)
    entrypoints = entrypoint_set(entrypoint)

    def operation(index: QueueIndex) -> list[Added]:
        now = utc_now()
        expires = to_micros(now + visibility)
        claims = index.claim(entrypoints, batch_size, to_micros(now), expires, new_lease)
        return [index.records[claim.job_id].as_added() for claim in claims]

    return operation


Strategy = Callable[[StoreOpener, Housekeeping, StorageUse], Commits]
"""Makes a queue's commit strategy: ``DirectCommits`` or ``GroupedCommits``."""


class QueueOptions(TypedDict, total=False):
    """The settings every kind of queue takes by keyword, their defaults ``JobQueue``'s:
    ``max_payload_bytes``, ``layout``, ``log``, ``policy`` and ``storage_timeout``."""

    max_payload_bytes: int | None
    layout: Layout
    log: LogSettings | None
    policy: QueuePolicy | None
    storage_timeout: timedelta | None


class JobQueue(SettleCalls, EnqueueCalls, WorkflowCalls):
    """The queue API over a commit strategy: the documented calls, management and the lifecycle.

    ``DirectQueue``, ``GroupCommitLoop`` and ``BrokerQueue`` are this class with a strategy
    (``strategy``, ``retry``) and their documented parameters; the settings they all take:

    Parameters
    ----------
    storage : ObjectStoragePort
        Where the queue lives.
    max_payload_bytes : int or None
        Largest payload ``enqueue`` accepts; None for no limit.
    layout : {"auto", "log", "single"}
        Storage layout: keep what exists and start new queues as a log (``"auto"``),
        migrate to or insist on the log (``"log"``), or the documented single object.
    log : LogSettings or None
        Checkpoint, retention and cache settings of the log layout.
    policy : QueuePolicy or None
        Defaults for retries, back-off, time to live and history.
    visibility_timeout : timedelta
        How long a claim holds a job without a heartbeat before the job returns to the
        queue (``dequeue`` can override it per call). Every commit returns the jobs whose
        lease ran out.
    storage_timeout : timedelta or None
        The longest a storage call may take before it fails with ``StorageError``; None
        waits forever.
    """

    def __init__(
        self,
        storage: ObjectStoragePort,
        strategy: Strategy,
        *,
        retry: RetryPolicy,
        visibility_timeout: timedelta,
        max_payload_bytes: int | None = DEFAULT_MAX_PAYLOAD_BYTES,
        layout: Layout = "auto",
        log: LogSettings | None = None,
        policy: QueuePolicy | None = None,
        storage_timeout: timedelta | None = DEFAULT_STORAGE_TIMEOUT,
    ) -> None:
        if checked_span("visibility_timeout", visibility_timeout) == timedelta(0):
            raise ValueError("visibility_timeout must be positive, got 0 s")
        if visibility_timeout < CLOCK_SAFE_VISIBILITY:
            logger.warning(
                "a visibility timeout of %s is short: leases assume that the clocks of all processes "
                "agree to well within it (see docs/guarantees.md, Clocks)",
                visibility_timeout,
            )
        self.storage = storage
        self.max_payload_bytes = max_payload_bytes
        self.visibility_timeout = visibility_timeout
        self.storage_timeout = storage_timeout
        self.policy = policy or QueuePolicy()
        self._opener = StoreOpener(timed(storage, storage_timeout), retry, layout, log or LogSettings())
        self.changes = ChangeFeed(storage)
        """Wakes idle callers when the queue may have changed (see ``Worker``)."""
        self._opener.on_commit = self.changes.notify
        self._commits = strategy(self._opener, Housekeeping(self.policy), StorageUse(storage))

    @property
    def location(self) -> str:
        """Where the queue is, for messages: its storage's URL."""
        return describe(self.storage)

    async def __aenter__(self) -> Self:
        refuse_while_spawning("a queue was opened")
        await self._commits.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._commits.close()
        finally:
            self.changes.close()

    async def checkpoint(self) -> bool:
        """Write a checkpoint of the queue now (log layout); False for the single object, which has none."""
        return await (await self._opener.store()).checkpoint()

    async def read_state(self) -> QueueState:
        """Return a fresh snapshot of the whole queue straight from storage."""
        return await (await self._opener.store()).read_state()

    async def _enqueue_specs(self, specs: list[JobSpec]) -> list[Job]:
        return await self._add(specs, None, PUBLIC_FORM)

    async def enqueue_as(self, form: JobForm[T], specs: list[JobSpec]) -> list[T]:
        """``enqueue_many(specs)``, answered in ``form``: an adapter's own form of each job (the
        service's wire form), made without a public ``Job`` in between."""
        return await self._add(specs, None, form)

    def _built(self, specs: Iterable[JobSpec], batch: str | None) -> list[Added]:
        now = utc_now()
        new = [spec.build(now, self.policy.ttl, batch) for spec in specs]
        for job in new:
            if isinstance(job.payload, bytes):
                self._checked(job.payload)
        return new

    async def _add(self, jobs: Iterable[JobSpec], batch: str | None, form: JobForm[T]) -> list[T]:
        specs = list(jobs)
        new = self._built(specs, batch)
        fresh = {job.id for spec, job in zip(specs, new, strict=True) if spec.id is None}
        operation = adding(new, self.policy.history_retention, fresh, self.max_payload_bytes)
        return await self._resolved(await self._commits.run(operation), form) if new else []

    @property
    def bulk(self) -> BulkWrites:
        """The writes of bulk loaders and adapters (``BulkWrites``): staged batches, parts, numbered jobs."""
        return BulkWrites(self)

    @property
    def insight(self) -> QueueInsight:
        """What the dashboard and the metrics read (``QueueInsight``): throughput, timings, dead
        letters grouped by error, commit counts."""
        return QueueInsight(self)

    async def _resolved(self, found: list[Found], form: JobForm[T]) -> list[T]:
        live = [item for item in found if isinstance(item, Added)]
        jobs = iter(await self._jobs_as(form, live))
        return [next(jobs) if isinstance(item, Added) else form.of_job(item.as_job()) for item in found]

    async def dequeue(
        self,
        entrypoint: str | Collection[str] | None = None,
        *,
        batch_size: int = 1,
        visibility_timeout: timedelta | None = None,
    ) -> list[Job]:
        """Claim up to ``batch_size`` claimable jobs (of ``entrypoint``, or of any of several),
        best priority first.

        Each claimed job gets a new ``lease`` that expires after ``visibility_timeout``
        (the queue's ``visibility_timeout`` by default) unless heartbeats extend it; an
        expired lease returns the job to the queue. Jobs not yet due, paused
        entrypoints and used-up throttles hand out nothing; a job past its deadline
        dies instead. Returns an empty list, without writing, when nothing is claimable.
        """
        return await self.dequeue_as(
            PUBLIC_FORM, entrypoint, batch_size=batch_size, visibility_timeout=visibility_timeout
        )

    async def dequeue_as(
        self,
        form: JobForm[T],
        entrypoint: str | Collection[str] | None = None,
        *,
        batch_size: int = 1,
        visibility_timeout: timedelta | None = None,
    ) -> list[T]:
        """``dequeue``, answered in ``form`` (see ``enqueue_as``)."""
        if batch_size == 0:  # claims nothing, as in jqueue
            return []
        claimed = await self._commits.run(claiming(self, batch_size, visibility_timeout, entrypoint))
        return await self._jobs_as(form, claimed) if claimed else []

    async def ack_and_dequeue(
        self,
        acks: Sequence[tuple[Job | str, bytes | None]],
        entrypoint: str | Collection[str] | None = None,
        *,
        batch_size: int = 1,
        visibility_timeout: timedelta | None = None,
    ) -> tuple[list[JQueueError | None], list[Job]]:
        """``ack_each(acks)``, then ``dequeue(entrypoint, batch_size=..., visibility_timeout=...)``,
        in one commit: a worker settles the jobs that just ended and claims the next ones with
        one write (and, through ``jqueue serve``, one request). Returns both answers."""
        return await self.ack_and_dequeue_as(
            PUBLIC_FORM, acks, entrypoint, batch_size=batch_size, visibility_timeout=visibility_timeout
        )

    async def ack_and_dequeue_as(
        self,
        form: JobForm[T],
        acks: Sequence[tuple[Job | str, bytes | None]],
        entrypoint: str | Collection[str] | None = None,
        *,
        batch_size: int = 1,
        visibility_timeout: timedelta | None = None,
    ) -> tuple[list[JQueueError | None], list[T]]:
        """``ack_and_dequeue``, answered in ``form`` (see ``enqueue_as``)."""
        acks_checked = self._checked_acks(acks)
        acks_operation = acking(acks_checked, self.max_payload_bytes)
        claims_operation = claiming(self, batch_size, visibility_timeout, entrypoint)

        def operation(index: QueueIndex) -> tuple[list[JQueueError | None], list[Added]]:
            return acks_operation(index), claims_operation(index) if batch_size else []

        outcomes, claimed = await self._commits.run(operation)
        return outcomes, await self._jobs_as(form, claimed) if claimed else []

    async def renew_lease(self, job: Job, *, visibility_timeout: timedelta | None = None) -> Job:
        """Heartbeat a claimed job as ``heartbeat`` does, and hold it from now on under a new
        lease, which the returned ``Job`` carries; the old lease no longer fences anything
        (queued's ``update`` issues a new poll tag this way).

        Raises
        ------
        LeaseLostError
            If ``job``'s lease no longer holds it.
        JobCancelledError
            If its cancel was asked for.
        """
        plain_id, lease = fence(job)
        if visibility_timeout is not None:
            checked_span("visibility_timeout", visibility_timeout)
        renewed = new_lease()

        def operation(index: QueueIndex) -> Added:
            now = utc_now()
            expires = None if visibility_timeout is None else to_micros(now + visibility_timeout)
            if not index.heartbeat(plain_id, to_micros(now), lease, expires, new_lease=renewed):
                raise LeaseLostError(plain_id)  # not claimed: no lease of it holds
            return index.records[plain_id].as_added()

        return (await self._jobs([await self._commits.run(operation)]))[0]

    async def known_lease(self, job_id: str) -> str | None:
        """Return the lease of a claimed job as this process last saw it, reading no storage
        (None if it knows no claim of it): for an adapter that maps a shorter token to the
        lease (queued's poll tag). A call fenced by it is still checked in its commit."""
        record = (await self._opener.store()).index.records.get(job_id)
        return None if record is None else record.lease

    async def sweep(self) -> int:
        """Return to the queue (or, past their last attempt, to the dead letters) the claimed jobs
        whose lease ran out, now; returns how many. Every commit does this anyway."""
        return await self._commits.sweep()

    async def requeue_stale(self, timeout: timedelta) -> int:  # noqa: ASYNC109  (documented name)
        """Requeue in-progress jobs with no heartbeat for ``timeout``; returns how many."""

        def operation(index: QueueIndex) -> int:
            now = utc_now()
            return len(index.requeue_stale(to_micros(now - timeout), to_micros(now)))

        return await self._commits.run(operation)
