"""Adding jobs, and bulk writes: jobs staged under a batch name, then published in one commit.

A bulk write too large for one commit stages its jobs in several (``stage_many``), then
``publish`` makes all of them claimable at once and ``discard`` drops them. Jobs whose
payloads a writer stored as parts beside a log-structured queue (``log/parts.py``) need
no staging: ``add_parts`` adds any number in one small commit. A batch left staged longer
than ``QueuePolicy.staged_timeout`` is discarded by the next commit (its writer died).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import timedelta

from jqueue.core.commits import Commits, Operation
from jqueue.core.formats.collections_paused import collections_paused
from jqueue.core.layout import StoreOpener
from jqueue.core.log.parts import StoredPart, part_name, part_written_at
from jqueue.core.log.store import LogStore
from jqueue.domain.effects import Added, SinkMarked
from jqueue.domain.errors import QueuePausedError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import Job
from jqueue.domain.policy import QueuePolicy
from jqueue.domain.records import HistoryRecord, JobRecord
from jqueue.domain.spec import JobSpec
from jqueue.domain.times import to_micros, utc_now
from jqueue.domain.values import checked_text, span

Found = Added | HistoryRecord
"""What an add is answered with: the job it added, or the one that held its id or dedup key."""


def adding(new: list[Added], retention: timedelta) -> Operation[list[Found]]:
    """Return the operation that adds ``new`` jobs: each is answered with the job it adds, or
    with the job that holds its id or its dedup key already (live, or acked within ``retention``)."""

    def operation(index: QueueIndex) -> list[Found]:
        acked_since = to_micros(utc_now() - retention)
        found: list[Found] = []
        keyed: dict[str, Added] = {}
        ids: dict[str, Added] = {}
        accepted: list[Added] = []
        for job in new:
            if index.controls.enqueues_paused(job.entrypoint):
                raise QueuePausedError(job.entrypoint)
            key = job.dedup_key
            match = ids.get(job.id) or index.known(job.id)
            if match is None and key is not None:
                match = keyed.get(key) or index.dedup_match(key, acked_since)
            if isinstance(match, JobRecord):
                found.append(match.as_added())
            elif match is not None:
                found.append(match)
            else:
                accepted.append(job)
                keyed.update({} if key is None else {key: job})
                ids[job.id] = job
                found.append(job)
        index.apply_all(accepted)
        return found

    return operation


def _batch_name(batch: str) -> str:
    if not checked_text("batch", batch):
        raise ValueError("a bulk write needs a name")
    return batch


class BulkWrites:
    """The bulk-write calls of ``JobQueue``, over its commit strategy and store."""

    _commits: Commits
    _opener: StoreOpener
    policy: QueuePolicy

    async def _add(self, jobs: Iterable[JobSpec], batch: str | None) -> list[Job]:
        raise NotImplementedError

    async def stage_many(self, jobs: Iterable[JobSpec], batch: str) -> list[Job]:
        """Add jobs as part of bulk write ``batch``, staged: stored, but not claimable until
        ``publish(batch)`` makes every job of the batch claimable in one commit (or
        ``discard(batch)`` drops them). A bulk write too large for one commit stages its jobs
        in several calls; dedup keys work as in ``enqueue_many``."""
        return await self._add(jobs, _batch_name(batch))

    async def add_parts(self, parts: Sequence[StoredPart], mark: tuple[str, int] | None = None) -> int | None:
        """Add the jobs of parts already written beside the queue (``write_part``), claimable at
        once: one commit, whose entry holds a few columns a part (``AddPart``) while the
        payloads stay in the parts. All or none of them are added, however many.

        Returns how many jobs it added; a job whose dedup key a job in the queue holds (or
        held, acked within the history's retention) is not added. With ``mark``, a streaming
        sink's ``(sink, batch id)``, the same commit records the batch as the sink's newest,
        and a batch the sink committed already adds nothing and returns None (a replay).

        Raises
        ------
        ValueError
            If the queue is not in the log layout, or a part is older than
            ``LogSettings.part_lifetime`` (compaction may have deleted it).
        """
        if mark is not None:
            checked_text("sink", mark[0])
            if mark[1] < 0:
                raise ValueError(f"a batch id must not be negative, got {mark[1]}")
        store = await self._log_store()
        lifetime = store.settings.part_lifetime
        oldest = utc_now().timestamp() - lifetime.total_seconds()
        for part in parts:
            if part_written_at(part.segment) < oldest:
                where = store.where(part_name(part.segment))
                raise ValueError(f"{where} is older than the part lifetime ({span(lifetime)})")
        with collections_paused():
            now = to_micros(utc_now())
            new = [job for part in parts for job in part.jobs(now)]
            add = adding(new, self.policy.history_retention)

            def operation(index: QueueIndex) -> int | None:
                if mark is not None:
                    if index.controls.is_replay(*mark):
                        return None
                    index.apply(SinkMarked(*mark))
                found = add(index)
                return sum(1 for job, answer in zip(new, found, strict=True) if answer is job)

            return await self._commits.run(operation)

    async def delete_unused_parts(self, parts: Sequence[StoredPart]) -> int:
        """Delete the parts that no job in the queue refers to (a write that failed, or was a
        replay); returns how many. A part of a write whose commit may have landed is kept."""
        store = await self._log_store()

        def unused(index: QueueIndex) -> list[str]:
            records = index.records
            return [
                part_name(part.segment)
                for part in parts
                if not any(job_id in records for job_id in part.job_ids())
            ]

        names = await store.view(unused)
        await asyncio.gather(*(store.keyed.delete(name) for name in names))
        return len(names)

    async def _log_store(self) -> LogStore:
        store = await self._opener.store()
        if not isinstance(store, LogStore):
            raise ValueError(
                f"{store.location}: parts need the log layout; "
                "open the queue once with layout='log' to migrate it"
            )
        return store

    async def sink_mark(self, sink: str) -> int | None:
        """Return the newest batch id streaming sink ``sink`` committed (``add_parts``), if any."""
        return await (await self._opener.store()).view(lambda index: index.controls.marks.get(sink))

    async def publish(self, batch: str) -> int:
        """Make every staged job of bulk write ``batch`` claimable, in one commit; returns how many
        (0 if the batch was published already or has no jobs)."""

        def operation(index: QueueIndex) -> int:
            count = index.staged_batches().get(batch, 0)
            index.publish(batch)
            return count

        return await self._commits.run(operation)

    async def discard(self, batch: str) -> int:
        """Drop every staged job of bulk write ``batch`` (an aborted write); returns how many."""

        def operation(index: QueueIndex) -> int:
            count = index.staged_batches().get(batch, 0)
            index.discard(batch)
            return count

        return await self._commits.run(operation)
