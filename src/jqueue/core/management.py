"""Looking at and steering a queue: browsing, counts, dead letters, purges, pauses, throttles, history."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from jqueue.core.changes import ChangeFeed
from jqueue.core.commits import Commits
from jqueue.core.layout import StoreOpener
from jqueue.domain.effects import Cancelled, LimitSet, PauseSet, ThrottleSet
from jqueue.domain.errors import JobCancelledError, JobFailedError, JobNotFoundError
from jqueue.domain.index import QueueIndex
from jqueue.domain.insight import (
    browse,
    matches,
)
from jqueue.domain.models import Job, JobStatus
from jqueue.domain.records import HistoryRecord, JobRecord
from jqueue.domain.schema import JobFields, JobForm
from jqueue.domain.spec import POSITIVE_SPAN
from jqueue.domain.stats import QueueStats, stats_of
from jqueue.domain.times import to_micros, utc_now
from jqueue.domain.values import checked_int64, checked_text, span

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


class ManagementCalls:
    """The calls of ``JobQueue`` that look at a queue without claiming, and those that steer it:
    the same commit strategy (``_commits``) and store (``_opener``) as every other call."""

    _commits: Commits
    _opener: StoreOpener
    changes: ChangeFeed

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
        ``limit`` (None for all). ``part=(i, n)`` keeps the i-th of n disjoint parts (by
        insertion order), for readers that split a large queue."""
        if part is not None and not 0 <= part[0] < part[1]:
            raise ValueError(f"part must be (i, n) with 0 <= i < n, got {part}")

        def look(index: QueueIndex) -> list[JobRecord]:
            chosen = self._chosen(index, status, entrypoint, older_than)
            if part is not None:
                chosen = (record for record in chosen if record.order % part[1] == part[0])
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
        JobNotFoundError
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
        JobNotFoundError
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
        JobNotFoundError
            If the job is not in the queue (finished, or never there).
        LeaseLostError
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
        JobFailedError
            If the job died; its ``error`` has the last error and traceback.
        JobCancelledError
            If the job was cancelled.
        JobNotFoundError
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
                raise JobNotFoundError(job_id)
            if isinstance(found, HistoryRecord):
                if found.outcome is JobStatus.DEAD:
                    raise JobFailedError(job_id, found.error, found.reason)
                if found.outcome is JobStatus.CANCELLED:
                    raise JobCancelledError(job_id, found.error)
                return found.result
            if found.status is JobStatus.DEAD:  # a dead letter stays in the queue until purged
                raise JobFailedError(job_id, found.last_error, found.dead_reason)
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
        if limit is not None and checked_int64("limit", limit) < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        POSITIVE_SPAN.check("per", per)
        window = per // timedelta(microseconds=1)
        if window < 1:
            raise ValueError(f"per must be positive, got {span(per)}")
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
        if n is not None and checked_int64("n", n) < 0:
            raise ValueError(f"n must not be negative, got {n}")
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
        before = _micros_before(older_than)

        def look(index: QueueIndex) -> tuple[list[JobFields], int | None]:
            page = browse(index, status, entrypoint, before, dedup_key, cursor, limit)
            return [record.as_added() for record in page.records], page.next_cursor

        snapshots, next_cursor = await self._view(look)
        return await self._jobs(snapshots), next_cursor
