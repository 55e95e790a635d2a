"""``JobQueue``: the queue API, written once over a commit strategy and a layout.

Each call checks its arguments, then becomes an ``Operation``: a function that decides
the call's effects on the queue index (applying them) and returns the caller's answer.
The queue's ``Commits`` (``jqueue.core.commits``) decide how operations reach the store:
one commit per call (``DirectQueue``), or many folded into one (``GroupCommitLoop``,
``BrokerQueue``). The class holds every call of the API in this one module, in its groups:
the lifecycle, adding and claiming jobs, settling claimed ones (``ack``, ``nack``,
``release``, ``heartbeat``), looking at and steering the queue, and workflows. The operations
that are more than a closure are beside it (``adding``, ``claiming``, ``acking``: each hands a
``QueueIndex`` decision to the commit), as are ``EnqueueCalls`` (the ``enqueue`` calls that
``RemoteQueue`` shares) and ``ChangeFeed`` (what wakes a queue's idle callers).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self, TypedDict, TypeVar, Unpack, overload

from jqueue.core import telemetry
from jqueue.core.bulk import BulkWrites
from jqueue.core.commits import Commits, Housekeeping, Layout, Operation, StoreOpener
from jqueue.core.insight import QueueInsight
from jqueue.core.log.store import LogSettings
from jqueue.core.loop.retry import RetryPolicy
from jqueue.core.loop.store import DEFAULT_STORAGE_TIMEOUT, StorageUse, describe, timed
from jqueue.core.spawn_guard import refuse_while_spawning
from jqueue.domain import errors
from jqueue.domain.awaiting import results_size
from jqueue.domain.controls import JOBS_ALLOWED
from jqueue.domain.effects import Added, Cancelled, LimitSet, Owned, PauseSet, ThrottleSet
from jqueue.domain.index import Found, QueueIndex
from jqueue.domain.insight import LISTED, browse, matches
from jqueue.domain.models import Job, JobStatus, QueueState
from jqueue.domain.policy import QueuePolicy
from jqueue.domain.records import HistoryRecord, JobRecord
from jqueue.domain.schema import PUBLIC_FORM, JobFields, JobForm
from jqueue.domain.sharding import SHARDS
from jqueue.domain.spec import ATTEMPTS, BATCH_SIZE, POSITIVE_SPAN, EnqueueOptions, JobSpec, checked_span
from jqueue.domain.stats import QueueStats, stats_of
from jqueue.domain.times import span_micros, to_micros, utc_now
from jqueue.domain.values import checked_int64, checked_progress, checked_text, span, storable_text
from jqueue.domain.workflows import Member, workflow_of
from jqueue.ports.storage import ChangeSignalPort, ObjectStoragePort

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
DEFAULT_VISIBILITY_TIMEOUT = timedelta(minutes=5)
CLOCK_SAFE_VISIBILITY = timedelta(seconds=30)
"""Below this visibility timeout a queue warns: a claimer whose clock runs ahead by more than
a lease sweeps leases that are still valid for their holders."""
logger = logging.getLogger("jqueue")
T = TypeVar("T")
RESULT_POLL_FIRST = 0.05
RESULT_POLL_LONGEST = 1.0
"""``result`` looks again after these many seconds, doubling (at once on a commit of this process)."""


def fence(job: Job | str) -> tuple[str, str | None]:
    """Return the job id and, for a claimed ``Job``, the lease that fences the call."""
    return (job, None) if isinstance(job, str) else (job.id, job.lease)


def entrypoint_set(entrypoint: str | Collection[str] | None) -> Collection[str] | None:
    """Return one entrypoint, several, or None (all) as a collection or None."""
    return (entrypoint,) if isinstance(entrypoint, str) else entrypoint


def _scope(entrypoint: str | None) -> None:
    if entrypoint is not None:
        checked_text("entrypoint", entrypoint)


def _micros_before(age: timedelta | None) -> int | None:
    """Return the epoch microseconds ``age`` ago, or None."""
    return None if age is None else to_micros(utc_now() - age)


CheckedAck = tuple[str, str | None, bytes | None] | errors.JQueueError
"""An ack ready for its commit (the job's id, the lease that fences it, the result), or the error
that kept it out."""


def acking(
    checked: list[CheckedAck], max_bytes: int | None = None
) -> Callable[[QueueIndex], list[errors.JQueueError | None]]:
    """The operation that acks each of ``checked``, each under a savepoint of its own, and answers
    None or the error, per ack. An ack whose result would take a waiting child's parent results
    past ``max_bytes`` bytes, summed, fails with ``PayloadTooLargeError`` naming the child."""

    def operation(index: QueueIndex) -> list[errors.JQueueError | None]:
        now = to_micros(utc_now())
        outcomes: list[errors.JQueueError | None] = []
        for item in checked:
            if isinstance(item, errors.JQueueError):
                outcomes.append(item)
                continue
            job_id, lease, result = item
            savepoint = index.journal.savepoint()
            try:
                children = index.dependencies.children_of(job_id) if max_bytes is not None and result else ()
                index.remove(job_id, lease, now, result)
                for child in children:
                    _check_inputs(index, child.id, max_bytes)
                outcomes.append(None)
            except errors.JQueueError as exc:
                index.journal.rollback_to(savepoint)  # a failed ack leaves nothing behind
                outcomes.append(exc)
        return outcomes

    return operation


def _check_inputs(index: QueueIndex, child_id: str, max_bytes: int | None) -> None:
    """Raise ``PayloadTooLargeError`` if the parent results ``child_id`` keeps, summed, are over
    ``max_bytes`` bytes."""
    child = index.job(child_id)  # None: the ack's cascade ended it
    if child is None or max_bytes is None:
        return
    size = results_size(child.parent_results)
    if size > max_bytes:
        raise errors.PayloadTooLargeError(size, max_bytes, child_id)


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
    BATCH_SIZE.check("batch_size", batch_size)
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


class Adding:
    """How a queue adds jobs: built from their specs (each payload within ``max_payload_bytes``),
    committed by ``adding`` and answered in a ``JobForm``. ``JobQueue``'s enqueues and
    ``queue.bulk``'s writes share it.

    Parameters
    ----------
    commits : Commits
        The queue's commit strategy.
    opener : StoreOpener
        The queue's store, for the answers' payloads.
    policy : QueuePolicy
        The queue's defaults (time to live, history retention).
    max_payload_bytes : int or None
        The largest payload (or result) the queue takes; None for no bound.
    """

    def __init__(
        self, commits: Commits, opener: StoreOpener, policy: QueuePolicy, max_payload_bytes: int | None
    ) -> None:
        self.commits = commits
        self.opener = opener
        self.policy = policy
        self.max_payload_bytes = max_payload_bytes

    def checked(self, payload: bytes) -> bytes:
        """Return ``payload`` if it is within ``max_payload_bytes``, else raise ``PayloadTooLargeError``."""
        max_bytes = self.max_payload_bytes
        if max_bytes is not None and len(payload) > max_bytes:
            raise errors.PayloadTooLargeError(len(payload), max_bytes)
        return payload

    def built(self, specs: Iterable[JobSpec], batch: str | None) -> list[Added]:
        """The jobs of ``specs``, enqueued now (staged under ``batch``, if given)."""
        now = utc_now()
        new = [spec.build(now, self.policy.ttl, batch) for spec in specs]
        for job in new:
            if isinstance(job.payload, bytes):
                self.checked(job.payload)
        return new

    async def add(self, jobs: Iterable[JobSpec], batch: str | None, form: JobForm[T]) -> list[T]:
        """Add the jobs of ``jobs`` in one commit; return each one's answer in ``form``."""
        specs = list(jobs)
        new = self.built(specs, batch)
        fresh = {job.id for spec, job in zip(specs, new, strict=True) if spec.id is None}
        return await self.answers(await self.commits.run(self.operation(new, fresh)), form) if new else []

    def operation(self, new: list[Added], fresh: Container[str] = frozenset()) -> Operation[list[Found]]:
        """The operation that adds ``new`` now (``QueueIndex.add``): acked dedup keys count for the
        history's retention; the ids in ``fresh`` were made for this call (no job holds them)."""
        retention, max_bytes = span_micros(self.policy.history_retention), self.max_payload_bytes

        def operation(index: QueueIndex) -> list[Found]:
            return index.add(new, to_micros(utc_now()), retention, fresh, max_bytes)[0]

        return operation

    async def answers(self, found: list[Found], form: JobForm[T]) -> list[T]:
        """The answers in ``form`` to what an add found: each job added, or the one that held its
        id or dedup key (a finished one from the history)."""
        live = [item for item in found if isinstance(item, Added)]
        jobs = iter(await (await self.opener.store()).jobs_as(form, live))
        return [next(jobs) if isinstance(item, Added) else form.of_job(item.as_job()) for item in found]


class QueueOptions(TypedDict, total=False):
    """The settings every kind of queue takes by keyword, their defaults ``JobQueue``'s:
    ``max_payload_bytes``, ``layout``, ``log``, ``policy`` and ``storage_timeout``."""

    max_payload_bytes: int | None
    layout: Layout
    log: LogSettings | None
    policy: QueuePolicy | None
    storage_timeout: timedelta | None


class ChangeFeed:
    """The changes of one queue.

    Parameters
    ----------
    storage : ObjectStoragePort
        The queue's backend; its change signal is used if it has one.
    """

    def __init__(self, storage: ObjectStoragePort) -> None:
        self._storage = storage if isinstance(storage, ChangeSignalPort) else None
        self._stop: Callable[[], None] | None = None
        self._waiters: set[asyncio.Future[None]] = set()
        self.generation = 0

    @property
    def signalled(self) -> bool:
        """Whether commits of other processes are signalled too (else only this object's)."""
        return self._watching()

    def notify(self) -> None:
        """Record a change and wake every waiter."""
        self.generation += 1
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def wait(self, seen: int, seconds: float) -> int:
        """Return the generation once it is past ``seen``, or after ``seconds``."""
        self._watching()
        if self.generation == seen:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.add(waiter)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter, seconds)
            finally:
                self._waiters.discard(waiter)
        return self.generation

    def _watching(self) -> bool:
        if self._stop is None and self._storage is not None:
            self._stop = self._storage.watch_changes(self.notify)
        return self._stop is not None

    def close(self) -> None:
        """Stop listening to the backend's signal."""
        if self._stop is not None:
            self._stop()
            self._stop = None


_OPTIONS = EnqueueOptions.__optional_keys__ | EnqueueOptions.__required_keys__


class EnqueueCalls(ABC):
    """The documented ways to add jobs, over the one a queue implements (``_enqueue_specs``)."""

    async def enqueue(
        self,
        entrypoint: str,
        payload: bytes,
        priority: int = 0,
        **options: Unpack[EnqueueOptions],
    ) -> Job:
        """Add a job; returns it once it is durably committed.

        The options (``delay``, ``not_before``, ``dedup_key``, ``max_attempts``, ``ttl``,
        ``id``: ``EnqueueOptions``) are those of ``JobSpec``, by keyword. With a
        ``dedup_key`` that a job in the queue holds, that job is returned and nothing is
        added; for a key acked within the history's retention, the acked job is returned
        (status ``ACKED``, empty payload).

        Raises
        ------
        errors.PayloadTooLargeError
            If ``payload`` is over ``max_payload_bytes``.
        QueuePausedError
            If enqueues of ``entrypoint`` are paused.
        """
        if not options.keys() <= _OPTIONS:
            raise TypeError(
                f"enqueue() got an unexpected keyword argument {min(options.keys() - _OPTIONS)!r}"
            )
        spec = JobSpec(entrypoint, payload, priority, **options)
        return (await self.enqueue_many([spec]))[0]

    @overload
    async def enqueue_many(self, jobs: Iterable[JobSpec], /) -> list[Job]: ...

    @overload
    async def enqueue_many(
        self, entrypoint: str, payloads: Iterable[bytes], /, priority: int = 0
    ) -> list[Job]: ...

    async def enqueue_many(
        self, jobs: str | Iterable[JobSpec], payloads: Iterable[bytes] = (), /, priority: int = 0
    ) -> list[Job]:
        """Add many jobs in one commit, all or none; returns them in order.

        Either ``enqueue_many(entrypoint, payloads, priority=0)``, one job per payload,
        or ``enqueue_many(specs)`` with a ``JobSpec`` per job. Dedup keys work as in
        ``enqueue``, also between jobs of the same call.

        Raises
        ------
        errors.PayloadTooLargeError
            If a payload is over ``max_payload_bytes``; then none is added.
        QueuePausedError
            If enqueues of one of the entrypoints are paused; then none is added.
        """
        if isinstance(jobs, str):
            jobs = [JobSpec(jobs, payload, priority) for payload in payloads]
        specs = list(jobs)
        with telemetry.enqueuing(specs) as traceparent:
            if traceparent is not None:  # the jobs run in this trace (unless one carries its own)
                specs = [replace(spec, traceparent=spec.traceparent or traceparent) for spec in specs]
            return await self._enqueue_specs(specs)

    @abstractmethod
    async def _enqueue_specs(self, specs: list[JobSpec]) -> list[Job]:
        """Add the jobs of ``specs`` in one commit, all or none; return them in order."""


class JobQueue(EnqueueCalls):
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
        POSITIVE_SPAN.check("visibility_timeout", visibility_timeout)
        if visibility_timeout < CLOCK_SAFE_VISIBILITY:
            logger.warning(
                "a visibility timeout of %s is short: leases assume that the clocks of all processes "
                "agree to well within it (see docs/guarantees.md, Clocks)",
                visibility_timeout,
            )
        self.storage = storage
        self.visibility_timeout = visibility_timeout
        self.storage_timeout = storage_timeout
        policy = policy or QueuePolicy()
        self._opener = StoreOpener(timed(storage, storage_timeout), retry, layout, log or LogSettings())
        self.changes = ChangeFeed(storage)
        """Wakes idle callers when the queue may have changed (see ``Worker``)."""
        self._opener.on_commit = self.changes.notify
        self._housekeeping = Housekeeping(policy)
        self._commits = strategy(self._opener, self._housekeeping, StorageUse(storage))
        self._adding = Adding(self._commits, self._opener, policy, max_payload_bytes)

    @property
    def max_payload_bytes(self) -> int | None:
        """The largest payload (or result) the queue takes; None for no bound."""
        return self._adding.max_payload_bytes

    @max_payload_bytes.setter
    def max_payload_bytes(self, value: int | None) -> None:
        self._adding.max_payload_bytes = value

    @property
    def policy(self) -> QueuePolicy:
        """The queue's defaults for retries, back-off, time to live and history."""
        return self._adding.policy

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
        return await self._adding.add(specs, None, PUBLIC_FORM)

    async def enqueue_as(self, form: JobForm[T], specs: list[JobSpec]) -> list[T]:
        """``enqueue_many(specs)``, answered in ``form``: an adapter's own form of each job (the
        service's wire form), made without a public ``Job`` in between."""
        return await self._adding.add(specs, None, form)

    @property
    def bulk(self) -> BulkWrites:
        """The writes of bulk loaders and adapters (``BulkWrites``): staged batches, parts, numbered jobs."""
        return BulkWrites(self._adding, self._commits, self._opener)

    @property
    def insight(self) -> QueueInsight:
        """What the dashboard and the metrics read (``QueueInsight``): throughput, timings, dead
        letters grouped by error, commit counts."""
        return QueueInsight(self._opener)

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
    ) -> tuple[list[errors.JQueueError | None], list[Job]]:
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
    ) -> tuple[list[errors.JQueueError | None], list[T]]:
        """``ack_and_dequeue``, answered in ``form`` (see ``enqueue_as``)."""
        acks_checked = self._checked_acks(acks)
        acks_operation = acking(acks_checked, self.max_payload_bytes)
        claims_operation = claiming(self, batch_size, visibility_timeout, entrypoint)

        def operation(index: QueueIndex) -> tuple[list[errors.JQueueError | None], list[Added]]:
            return acks_operation(index), claims_operation(index) if batch_size else []

        outcomes, claimed = await self._commits.run(operation)
        return outcomes, await self._jobs_as(form, claimed) if claimed else []

    async def renew_lease(self, job: Job, *, visibility_timeout: timedelta | None = None) -> Job:
        """Heartbeat a claimed job as ``heartbeat`` does, and hold it from now on under a new
        lease, which the returned ``Job`` carries; the old lease no longer fences anything
        (queued's ``update`` issues a new poll tag this way).

        Raises
        ------
        errors.LeaseLostError
            If ``job``'s lease no longer holds it.
        errors.JobCancelledError
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
                raise errors.LeaseLostError(plain_id)  # not claimed: no lease of it holds
            return index.records[plain_id].as_added()

        return (await self._jobs([await self._commits.run(operation)]))[0]

    async def known_lease(self, job_id: str) -> str | None:
        """Return the lease of a claimed job as this process last saw it, reading no storage
        (None if it knows no claim of it): for an adapter that maps a shorter token to the
        lease (queued's poll tag). A call fenced by it is still checked in its commit."""
        record = (await self._opener.store()).index.records.get(job_id)
        return None if record is None else record.lease

    async def take_over(self, broker: str, replacing: str | None = None) -> Owned:
        """Commit that broker ``broker`` owns the queue from now on, unless it does already, and
        commit as that broker from then on (what ``jqueue serve`` does with a queue it serves).
        When another broker takes the queue over later, every call of this queue fails with
        ``NotOwnerError`` and changes nothing (its commits are fenced by the ``Owned`` entry).

        Parameters
        ----------
        broker : str
            The id of the taking broker.
        replacing : str or None
            The owner seen when deciding to take the queue (None: no broker owned it).

        Returns
        -------
        Owned
            The owner and its epoch.

        Raises
        ------
        NotOwnerError
            If another broker than ``replacing`` took the queue meanwhile.
        """
        store = await self._opener.store()
        before, store.writer = store.writer, broker  # the Owned entry is the new owner's first
        try:
            owned = await store.apply(lambda index: index.take_over(broker, replacing))
        except BaseException:
            store.writer = before
            raise
        self._housekeeping.broker = broker
        return owned

    async def owner(self) -> Owned | None:
        """The broker that owns the queue and its epoch, as the newest state says (None: no
        broker took it)."""
        return await self._view(lambda index: index.controls.owner)

    async def shards(self) -> int:
        """How many shards the queue is made of (1 unless ``reshard`` made it more): this queue is
        shard 0, and ``ShardedQueue`` opens the others beside it."""
        return await self._view(lambda index: index.controls.shards or 1)

    async def reshard(self, shards: int) -> int:
        """Record that the queue is made of ``shards`` shards from now on (see ``ShardedQueue``).

        Raises
        ------
        ValueError
            If ``shards`` is out of ``SHARDS`` or lower than the count recorded.
        """
        SHARDS.check("shards", shards)
        return await self._commits.run(lambda index: index.reshard(shards))

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

    # --- settling claimed jobs -------------------------------------------------------

    async def ack(self, job_id: Job | str, *, result: bytes | None = None) -> None:
        """Remove a finished job, leaving a history record (that keeps ``result``, what its
        handler returned, for ``result()`` to read while the history holds it).

        Pass the claimed ``Job`` to fence the call with its lease, or a job id to
        remove the job whatever its state (as the documented jqueue does).

        Raises
        ------
        errors.PayloadTooLargeError
            If ``result`` is over ``max_payload_bytes``; nothing changes.
        errors.LeaseLostError
            Fenced, if the lease no longer holds the job (it expired and the job was
            claimed again, or someone else acked or requeued it); nothing changes.
        errors.JobNotFoundError
            Unfenced, if the job is not in the queue (for example, acked already).
        """
        [error] = await self.ack_each([(job_id, result)])
        if error is not None:
            raise error

    async def ack_many(self, jobs: Iterable[Job | str]) -> None:
        """Remove finished jobs, all in one commit, each fenced as in ``ack``.

        If one of them cannot be acked (``LeaseLostError``, ``JobNotFoundError``), the
        error is raised and none is removed.
        """
        fences = [fence(job) for job in jobs]

        def operation(index: QueueIndex) -> None:
            now = to_micros(utc_now())
            for job_id, lease in fences:
                index.remove(job_id, lease, now, None)

        await self._commits.run(operation)

    async def ack_each(
        self, acks: Sequence[tuple[Job | str, bytes | None]]
    ) -> list[errors.JQueueError | None]:
        """Ack each job with its result (``ack`` with ``result``), all in one commit; returns, per
        job, None or the error that kept it from being acked, as ``ack`` raises it. One job's
        error leaves the others acked (``ack_many`` instead acks all or none)."""
        checked = self._checked_acks(acks)
        if all(isinstance(item, errors.JQueueError) for item in checked):  # nothing to commit
            return [item for item in checked if isinstance(item, errors.JQueueError)]
        return await self._commits.run(acking(checked, self.max_payload_bytes))

    def _checked_acks(self, acks: Sequence[tuple[Job | str, bytes | None]]) -> list[CheckedAck]:
        """Each ack's fence and result, or the error that keeps it from the commit."""
        checked: list[CheckedAck] = []
        for job, result in acks:
            try:
                checked.append((*fence(job), None if result is None else self._adding.checked(bytes(result))))
            except errors.JQueueError as exc:
                checked.append(exc)
        return checked

    async def nack(
        self,
        job_id: Job | str,
        delay: timedelta | None = None,
        error: str | None = None,
        *,
        max_attempts: int | None = None,
        dead: bool = False,
    ) -> None:
        """Return a claimed job to the queue after a wait: ``delay``, else the queue's back-off
        (none by default); a job that used its last attempt dies instead.

        ``error`` is recorded as the job's last error (what UTF-8 cannot store is escaped).
        ``max_attempts`` is the limit for a job without one of its own (by default the
        queue policy's). With ``dead``, the claimed job goes to the dead letters at once
        (``dead_reason`` ``failed``), whatever attempts it has left. Fenced when given the
        claimed ``Job``, as in ``ack``.
        """
        await self.nack_many([job_id], delay, error, max_attempts=max_attempts, dead=dead)

    async def nack_many(
        self,
        jobs: Iterable[Job | str],
        delay: timedelta | None = None,
        error: str | None = None,
        *,
        max_attempts: int | None = None,
        dead: bool = False,
    ) -> None:
        """Return claimed jobs to the queue as ``nack`` does, all in one commit.

        If one of them cannot be, the error is raised and none is.
        """
        if delay is not None:
            checked_span("delay", delay)
        if max_attempts is not None:
            ATTEMPTS.check("max_attempts", checked_int64("max_attempts", max_attempts))
        fences = [fence(job) for job in jobs]
        policy = self.policy
        attempts_allowed = policy.max_attempts if max_attempts is None else max_attempts
        text = None if error is None else storable_text(str(error))

        def operation(index: QueueIndex) -> None:
            now = utc_now()
            for job_id, lease in fences:
                record = index.records.get(job_id)  # a claimed job is never cold
                wait = delay if delay is not None else policy.retry_delay(record.attempts if record else 1)
                retry_at = None if not wait else to_micros(now + wait)
                index.nack(job_id, lease, to_micros(now), retry_at, text, attempts_allowed, dead)

        await self._commits.run(operation)

    async def release(self, job_id: Job | str) -> None:
        """Return a claimed job to the queue at once, not as a failure (a worker shutting down);
        fenced when given the claimed ``Job``."""
        plain_id, lease = fence(job_id)
        await self._commits.run(lambda index: index.release(plain_id, lease, to_micros(utc_now())))

    async def heartbeat(
        self,
        job_id: Job | str,
        *,
        visibility_timeout: timedelta | None = None,
        progress: float | None = None,
        note: str | None = None,
    ) -> None:
        """Record that the worker on a job is alive, extending its lease by its visibility timeout
        (or to ``visibility_timeout`` from now, when given), and with ``progress`` (0 to 1)
        and ``note``, how far the job got.

        Fenced when given the claimed ``Job``: a lost lease raises ``LeaseLostError``. A job
        whose cancel was asked for raises ``JobCancelledError``: its worker is to stop it.
        """
        plain_id, lease = fence(job_id)
        reported = (None, None) if progress is None else checked_progress(progress, note)
        if visibility_timeout is not None:
            checked_span("visibility_timeout", visibility_timeout)

        def operation(index: QueueIndex) -> None:
            now = utc_now()
            expires = None if visibility_timeout is None else to_micros(now + visibility_timeout)
            index.heartbeat(plain_id, to_micros(now), lease, expires, *reported)

        await self._commits.run(operation)

    # --- looking at and steering the queue --------------------------------------------

    async def _view(self, look: Callable[[QueueIndex], T]) -> T:
        return await (await self._opener.store()).view(look)

    async def _jobs(self, snapshots: Sequence[JobFields]) -> list[Job]:
        return await (await self._opener.store()).jobs(snapshots)

    async def _jobs_as(self, form: JobForm[T], snapshots: Sequence[JobFields]) -> list[T]:
        return await (await self._opener.store()).jobs_as(form, snapshots)

    def _chosen(
        self,
        index: QueueIndex,
        status: JobStatus | None,
        entrypoint: str | None,
        older_than: timedelta | None,
    ) -> Iterator[JobRecord]:
        statuses = None if status is None else {status}
        return index.select(statuses, entrypoint_set(entrypoint), _micros_before(older_than))

    def _selected(
        self,
        index: QueueIndex,
        status: JobStatus | None,
        entrypoint: str | None,
        older_than: timedelta | None,
    ) -> list[JobRecord]:
        return list(self._chosen(index, status, entrypoint, older_than))

    async def jobs(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        limit: int | None = 100,
        part: tuple[int, int] | None = None,
    ) -> list[Job]:
        """Return jobs without claiming them, oldest enqueue first: those with ``status``, of
        ``entrypoint``, enqueued more than ``older_than`` ago (each filter when given), at most
        ``limit`` (None for all). ``part=(i, n)`` keeps the i-th of n disjoint parts of the
        listing (by insertion order), for readers that split a large queue (Spark's)."""
        if limit is not None:
            LISTED.check("limit", limit)
        if part is not None and not 0 <= part[0] < part[1]:
            raise ValueError(f"part must be (i, n) with 0 <= i < n, got {part}")

        def look(index: QueueIndex) -> list[JobRecord]:
            chosen = self._chosen(index, status, entrypoint, older_than)
            if part is not None:
                index_of, count = part
                chosen = (record for record in chosen if record.order % count == index_of)
            return list(itertools.islice(chosen, limit))

        return await self._jobs([record.as_added() for record in await self._view(look)])

    async def count(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
    ) -> int:
        """Return how many jobs ``jobs`` would list without a limit."""
        if older_than is None:  # from the counts the index keeps, whatever the depth
            return await self._view(lambda index: index.tally.jobs(status, entrypoint_set(entrypoint)))
        return await self._view(lambda index: len(self._selected(index, status, entrypoint, older_than)))

    async def peek(self, entrypoint: str | Collection[str] | None = None, limit: int = 1) -> list[Job]:
        """Return the jobs a ``dequeue`` would claim now, in order, without claiming them."""
        entrypoints = entrypoint_set(entrypoint)

        def look(index: QueueIndex) -> list[JobRecord]:
            return index.peek(entrypoints, limit, to_micros(utc_now()))

        return await self._jobs([record.as_added() for record in await self._view(look)])

    async def stats(self) -> QueueStats:
        """Return counts per entrypoint and status, the oldest queued job, pauses and throttles."""
        return await self._view(lambda index: stats_of(index, to_micros(utc_now())))

    async def dead_letters(self, entrypoint: str | None = None, limit: int | None = 100) -> list[Job]:
        """Return dead jobs (with their ``dead_reason`` and ``last_error``), oldest enqueue first."""
        return await self.jobs(JobStatus.DEAD, entrypoint, limit=limit)

    async def requeue_dead(self, ids: Iterable[str] | None = None) -> int:
        """Return dead jobs (those of ``ids``, or all) to the queue with their attempts reset;
        returns how many. Ids of jobs that are not dead are left alone.

        Raises
        ------
        errors.JobNotFoundError
            If one of ``ids`` is not in the queue; then nothing changes.
        """
        chosen = None if ids is None else list(ids)
        return await self._commits.run(lambda index: len(index.requeue_dead(chosen)))

    async def requeue(self, ids: Iterable[str]) -> int:
        """Make jobs claimable at once whatever their state (dead ones with attempts reset,
        claimed ones released, delayed ones due now; one waiting for its parents stays
        waiting); returns how many changed.

        Raises
        ------
        errors.JobNotFoundError
            If one of ``ids`` is not in the queue; then nothing changes.
        """
        chosen = list(ids)
        return await self._commits.run(lambda index: len(index.requeue(chosen)))

    async def find(self, job_id: str) -> Job | None:
        """Return one job as it is now, or None if it is not in the queue."""

        def look(index: QueueIndex) -> list[JobRecord]:
            record = index.job(job_id)
            return [] if record is None else [record]

        found = await self._jobs([record.as_added() for record in await self._view(look)])
        return found[0] if found else None

    async def cancel_requested(self, job_id: Job | str) -> bool:
        """Whether a running job's cancel was asked for, or a finished one ended cancelled: read
        (catching up with storage), never committed, so a worker can ask every few seconds."""
        plain_id = fence(job_id)[0]

        def look(index: QueueIndex) -> bool:
            record = index.job(plain_id)
            if record is not None:
                return record.cancel_requested is not None
            finished = index.history.finished(plain_id)
            return finished is not None and finished.outcome is JobStatus.CANCELLED

        return await self._view(look)

    async def cancel(self, job_id: Job | str) -> bool:
        """Cancel a job; True if it left the queue now (with a history record of outcome
        ``cancelled``), False if it is running and its worker is asked to stop it.

        A running job's worker learns of the cancel within seconds (``cancel_requested``, or
        its next heartbeat), stops the handler and ends the job cancelled (so does the sweep
        if its lease runs out first). Given the claimed ``Job``, the call is fenced: the
        worker that holds it ends it cancelled now.

        Raises
        ------
        errors.JobNotFoundError
            If the job is not in the queue (finished, or never there).
        errors.LeaseLostError
            Fenced, if the lease no longer holds the job.
        """
        plain_id, lease = fence(job_id)

        def operation(index: QueueIndex) -> bool:
            done = index.cancel(plain_id, lease, to_micros(utc_now()))
            return bool(done) and isinstance(done[0], Cancelled)

        return await self._commits.run(operation)

    async def result(self, job_id: str, timeout: timedelta | None = None) -> bytes | None:  # noqa: ASYNC109
        """Wait until job ``job_id`` is finished and return what its handler returned (None
        if nothing), while the history holds its record.

        Raises
        ------
        errors.JobFailedError
            If the job died; its ``error`` has the last error and traceback.
        errors.JobCancelledError
            If the job was cancelled.
        errors.JobNotFoundError
            If the job is neither in the queue nor in the history.
        TimeoutError
            If it is not finished within ``timeout`` (None: wait as long as it takes).
        """
        deadline = None if timeout is None else time.monotonic() + timeout.total_seconds()
        pause = RESULT_POLL_FIRST
        while True:
            seen = self.changes.generation
            found = await self._view(lambda index: index.known(job_id))
            if found is None:
                raise errors.JobNotFoundError(job_id)
            if isinstance(found, HistoryRecord):
                if found.outcome is JobStatus.DEAD:
                    raise errors.JobFailedError(job_id, found.error, found.reason)
                if found.outcome is JobStatus.CANCELLED:
                    raise errors.JobCancelledError(job_id, found.error)
                return found.result
            if found.status is JobStatus.DEAD:  # a dead letter stays in the queue until purged
                raise errors.JobFailedError(job_id, found.last_error, found.dead_reason)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"job {job_id!r} did not finish within {span(timeout or timedelta(0))}")
            await self.changes.wait(seen, pause if left is None else min(pause, left))
            pause = min(RESULT_POLL_LONGEST, pause * 2)

    async def finished(self, job_id: str) -> HistoryRecord | None:
        """Return the newest history record of job ``job_id``, if the history holds one."""
        return await self._view(lambda index: index.history.finished(job_id))

    async def purge(
        self,
        status: JobStatus | None = JobStatus.DEAD,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        ids: Iterable[str] | None = None,
    ) -> int:
        """Delete jobs with ``status`` (dead letters by default; None for every status), of
        ``entrypoint``, enqueued more than ``older_than`` ago, among ``ids`` (each filter when
        given; ids not in the queue are skipped); returns how many. Purged jobs leave no
        history record."""
        wanted = None if ids is None else list(ids)

        def operation(index: QueueIndex) -> int:
            if wanted is None:
                chosen = self._selected(index, status, entrypoint, older_than)
            else:
                before = _micros_before(older_than)
                found = (index.job(job_id) for job_id in dict.fromkeys(wanted))
                chosen = [r for r in found if r is not None and matches(r, status, entrypoint, before)]
            now = to_micros(utc_now())
            for record in chosen:
                index.remove(record.id, now=now)
            return len(chosen)

        return await self._commits.run(operation)

    async def pause(self, entrypoint: str | None = None, *, enqueues: bool = False) -> None:
        """Stop handing out jobs of ``entrypoint`` (None: of the whole queue) to every process;
        with ``enqueues``, refuse new jobs too (``QueuePausedError``)."""
        _scope(entrypoint)

        def operation(index: QueueIndex) -> None:
            enqueues_paused = enqueues or entrypoint in index.controls.paused_enqueues
            index.apply(PauseSet(entrypoint, True, enqueues_paused))

        await self._commits.run(operation)

    async def resume(self, entrypoint: str | None = None) -> None:
        """Undo ``pause`` of ``entrypoint`` (None: of the whole queue): claims and enqueues."""
        _scope(entrypoint)
        await self._commits.run(lambda index: index.apply(PauseSet(entrypoint, False, False)))

    async def throttle(
        self, limit: int | None, per: timedelta, entrypoint: str | None = None, per_tenant: bool = False
    ) -> None:
        """Allow at most ``limit`` claims per window of ``per`` of ``entrypoint`` (None: of the
        whole queue), shared by every process; ``limit=None`` lifts the throttle. With
        ``per_tenant``, the throttle is a separate one that holds for each tenant's jobs apart.

        Windows are fixed (counted from the epoch), so a burst may straddle two.
        """
        _scope(entrypoint)
        if limit is not None:
            JOBS_ALLOWED.check("limit", checked_int64("limit", limit))
        POSITIVE_SPAN.check("per", per)  # so at least a microsecond: a timedelta's least step
        window = span_micros(per)
        await self._commits.run(lambda index: index.apply(ThrottleSet(entrypoint, limit, window, per_tenant)))

    async def limit(self, entrypoint: str | None, n: int | None, per_tenant: bool = False) -> None:
        """Allow at most ``n`` jobs of ``entrypoint`` (None: of the whole queue) in progress at
        once, however many workers claim, in every process; ``n=None`` lifts the limit. With
        ``per_tenant``, the limit is a separate one that holds for each tenant's jobs apart.

        The claim enforces it, as it does throttles: a claim hands out no job of an
        entrypoint whose limit is reached until one of its jobs is acked, nacked, released
        or dies.
        """
        _scope(entrypoint)
        if n is not None:
            JOBS_ALLOWED.check("n", checked_int64("n", n))
        await self._commits.run(lambda index: index.apply(LimitSet(entrypoint, n, per_tenant)))

    async def history(
        self,
        entrypoint: str | None = None,
        outcome: JobStatus | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> list[HistoryRecord]:
        """Return records of finished jobs, oldest first: of ``entrypoint``, with ``outcome``
        (``ACKED`` or ``DEAD``), finished at or after ``since`` (each filter when given); the
        newest ``limit`` if given."""
        if limit is not None:
            LISTED.check("limit", limit)
        after = None if since is None else to_micros(since)

        def look(index: QueueIndex) -> list[HistoryRecord]:
            chosen = [
                h
                for h in index.history
                if (entrypoint is None or h.entrypoint == entrypoint)
                and (outcome is None or h.outcome is outcome)
                and (after is None or h.finished >= after)
            ]
            return chosen if limit is None else chosen[len(chosen) - limit :] if limit else []

        return await self._view(look)

    async def browse(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        dedup_key: str | None = None,
        cursor: int = 0,
        limit: int = 50,
    ) -> tuple[list[Job], int | None]:
        """Return one page of jobs (as ``jobs`` filters them, and by ``dedup_key``) from
        ``cursor``, and the cursor of the next page (None at the end), in insertion order. A page
        looks at the jobs held as records once and decodes a few of the slabs' blocks, whatever
        the depth; the cursor is an insertion number, so a page starts where the last ended."""
        LISTED.check("limit", limit)
        before = _micros_before(older_than)

        def look(index: QueueIndex) -> tuple[list[JobFields], int | None]:
            page = browse(index, status, entrypoint, before, dedup_key, cursor, limit)
            return [record.as_added() for record in page.records], page.next_cursor

        snapshots, next_cursor = await self._view(look)
        return await self._jobs(snapshots), next_cursor

    # --- workflows -------------------------------------------------------------------

    async def workflow(self, job_id: str) -> list[Job]:
        """Return the jobs of ``job_id``'s workflow, parents before children: the jobs it waits for
        (``after``), those that wait for it, theirs in turn, in the queue or, finished, as the
        history keeps them (their payload is not kept: empty). It reads every job and history
        record of the queue.

        Raises
        ------
        errors.JobNotFoundError
            If the job is neither in the queue nor in its history.
        """
        return await self._members(await self._view(lambda index: workflow_of(index, job_id)))

    async def cancel_workflow(self, job_id: str) -> list[Job]:
        """Cancel every job of ``job_id``'s workflow still in the queue, in one commit (a running
        one's worker is asked to stop it, as ``cancel`` does); returns the workflow as the
        commit left it, as ``workflow`` does.

        Raises
        ------
        errors.JobNotFoundError
            If the job is neither in the queue nor in its history.
        """

        def operation(index: QueueIndex) -> list[Member]:
            now = to_micros(utc_now())
            reason = f"its workflow was cancelled (by job {job_id})"
            for member in reversed(workflow_of(index, job_id)):  # children first: each says why
                if isinstance(member, JobRecord) and index.job(member.id) is not None:
                    index.cancel(member.id, None, now, reason)
            return workflow_of(index, job_id)

        return await self._members(await self._commits.run(operation))

    async def _members(self, members: Sequence[Member]) -> list[Job]:
        live = await self._jobs([member.as_added() for member in members if isinstance(member, JobRecord)])
        by_id = {job.id: job for job in live}
        return [by_id[member.id] if isinstance(member, JobRecord) else member.as_job() for member in members]
