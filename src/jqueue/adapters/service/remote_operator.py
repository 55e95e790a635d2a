"""``RemoteOperator``: the operator calls of ``RemoteQueue``, each the ``JobQueue`` method of the
same name and signature, answered by the service's operator routes (``operator_wire``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jqueue.adapters.service import operator_wire as ow
from jqueue.adapters.service.wire import JobsResponse, job_of
from jqueue.domain.models import Job, JobStatus
from jqueue.domain.records import HistoryRecord
from jqueue.domain.stats import QueueStats


def _seconds(span: timedelta | None) -> float | None:
    return None if span is None else span.total_seconds()


class RemoteOperator:
    """What a remote operator reads and steers (``call`` is ``RemoteQueue.call``): a call fails
    with the exception the same call raises on the queue itself."""

    if TYPE_CHECKING:

        async def call(self, verb: str, body: Any, answer: type[Any], *, wait: float = 0.0) -> Any: ...

    async def queue_names(self) -> list[str]:
        """Return the queues of the service's root, sorted."""
        answer: ow.QueueNamesResponse = await self.call("/v1/queues", None, ow.QueueNamesResponse)
        return answer.queues

    async def stats(self) -> QueueStats:
        """Return counts per entrypoint and status, the oldest waiting job, pauses and throttles."""
        answer: ow.StatsResponse = await self.call("stats", ow.StatsRequest(), ow.StatsResponse)
        return answer.stats()

    async def jobs(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        limit: int | None = 100,
    ) -> list[Job]:
        """Return jobs without claiming them, oldest enqueue first (see ``JobQueue.jobs``)."""
        request = ow.JobsRequest(
            status=status, entrypoint=entrypoint, older_than_seconds=_seconds(older_than), limit=limit
        )
        answer: JobsResponse = await self.call("jobs", request, JobsResponse)
        return [job_of(job) for job in answer.jobs]

    async def count(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
    ) -> int:
        """Return how many jobs ``jobs`` would list without a limit."""
        request = ow.JobsRequest(
            status=status, entrypoint=entrypoint, older_than_seconds=_seconds(older_than)
        )
        answer: ow.CountResponse = await self.call("count", request, ow.CountResponse)
        return answer.count

    async def browse(
        self,
        status: JobStatus | None = None,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        dedup_key: str | None = None,
        cursor: int = 0,
        limit: int = 50,
    ) -> tuple[list[Job], int | None]:
        """Return one page of jobs from ``cursor`` and the next page's cursor (see ``JobQueue.browse``)."""
        request = ow.BrowseRequest(
            status=status,
            entrypoint=entrypoint,
            older_than_seconds=_seconds(older_than),
            dedup_key=dedup_key,
            cursor=cursor,
            limit=limit,
        )
        answer: ow.PageResponse = await self.call("browse", request, ow.PageResponse)
        return [job_of(job) for job in answer.jobs], answer.next_cursor

    async def find(self, job_id: str) -> Job | None:
        """Return one job as it is now, or None if it is not in the queue."""
        answer: ow.FoundResponse = await self.call("find", ow.JobRequest(job_id), ow.FoundResponse)
        return None if answer.job is None else job_of(answer.job)

    async def history(
        self,
        entrypoint: str | None = None,
        outcome: JobStatus | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> list[HistoryRecord]:
        """Return records of finished jobs, oldest first (see ``JobQueue.history``)."""
        request = ow.HistoryRequest(entrypoint=entrypoint, outcome=outcome, since=since, limit=limit)
        answer: ow.HistoryResponse = await self.call("history", request, ow.HistoryResponse)
        return answer.records

    async def finished(self, job_id: str) -> HistoryRecord | None:
        """Return the newest history record of job ``job_id``, if the history holds one."""
        answer: ow.FinishedResponse = await self.call("finished", ow.JobRequest(job_id), ow.FinishedResponse)
        return answer.record

    async def dead_letters(self, entrypoint: str | None = None, limit: int | None = 100) -> list[Job]:
        """Return dead jobs (with their ``dead_reason`` and ``last_error``), oldest enqueue first."""
        request = ow.DeadLettersRequest(entrypoint=entrypoint, limit=limit)
        answer: JobsResponse = await self.call("dead_letters", request, JobsResponse)
        return [job_of(job) for job in answer.jobs]

    async def requeue_dead(self, ids: Iterable[str] | None = None) -> int:
        """Return dead jobs (those of ``ids``, or all) to the queue with their attempts reset."""
        request = ow.IdsRequest(ids=None if ids is None else list(ids))
        answer: ow.CountResponse = await self.call("requeue_dead", request, ow.CountResponse)
        return answer.count

    async def requeue(self, ids: Iterable[str]) -> int:
        """Make jobs claimable at once whatever their state; returns how many changed."""
        answer: ow.CountResponse = await self.call("requeue", ow.IdsRequest(ids=list(ids)), ow.CountResponse)
        return answer.count

    async def purge(
        self,
        status: JobStatus | None = JobStatus.DEAD,
        entrypoint: str | None = None,
        older_than: timedelta | None = None,
        ids: Iterable[str] | None = None,
    ) -> int:
        """Delete jobs by status (dead letters by default; None: any), entrypoint, age and id."""
        request = ow.PurgeRequest(
            status=status,
            entrypoint=entrypoint,
            older_than_seconds=_seconds(older_than),
            ids=None if ids is None else list(ids),
        )
        answer: ow.CountResponse = await self.call("purge", request, ow.CountResponse)
        return answer.count

    async def pause(self, entrypoint: str | None = None, *, enqueues: bool = False) -> None:
        """Stop handing out jobs of ``entrypoint`` (None: the whole queue); with ``enqueues``,
        refuse new jobs too."""
        await self.call("pause", ow.PauseRequest(entrypoint=entrypoint, enqueues=enqueues), ow.DoneResponse)

    async def resume(self, entrypoint: str | None = None) -> None:
        """Undo ``pause`` of ``entrypoint`` (None: of the whole queue)."""
        await self.call("resume", ow.PauseRequest(entrypoint=entrypoint), ow.DoneResponse)

    async def throttle(self, limit: int | None, per: timedelta, entrypoint: str | None = None) -> None:
        """Allow at most ``limit`` claims per window of ``per`` (``limit=None`` lifts it)."""
        request = ow.ThrottleRequest(limit=limit, per_seconds=per.total_seconds(), entrypoint=entrypoint)
        await self.call("throttle", request, ow.DoneResponse)

    async def limit(self, entrypoint: str | None, n: int | None) -> None:
        """Allow at most ``n`` jobs of ``entrypoint`` in progress at once (``n=None`` lifts it)."""
        await self.call("limit", ow.LimitRequest(entrypoint=entrypoint, n=n), ow.DoneResponse)
