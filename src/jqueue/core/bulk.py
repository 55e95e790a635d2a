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
from typing import TYPE_CHECKING, TypeVar

from jqueue.core.commits import Commits, StoreOpener
from jqueue.core.formats.collections_paused import collections_paused
from jqueue.core.formats.payload_refs import payload_place
from jqueue.core.log.parts import StoredPart, part_name, part_written_at
from jqueue.core.log.store import LogStore
from jqueue.core.numbered import IdSource, numbering
from jqueue.domain.dependencies import parents_first
from jqueue.domain.effects import SinkMarked
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import Job
from jqueue.domain.policy import QueuePolicy
from jqueue.domain.schema import PUBLIC_FORM, JobForm
from jqueue.domain.spec import JobSpec
from jqueue.domain.times import span_micros, to_micros, utc_now
from jqueue.domain.values import Bounds, checked_text, span

if TYPE_CHECKING:
    from jqueue.core.queue import Adding


T = TypeVar("T")

BATCH_NAME = Bounds(min_length=1)
"""The bounds of a bulk write's name (``stage_many``'s ``batch``): never empty."""
SINK_BATCH_ID = Bounds(ge=0)
"""The bounds of a streaming sink's batch id (``add_parts``'s ``mark``)."""


def _batch_name(batch: str) -> str:
    BATCH_NAME.check("batch", checked_text("batch", batch))
    return batch


class BulkWrites:
    """The writes of bulk loaders and adapters, as ``queue.bulk``: jobs staged under a batch
    name and published in one commit, jobs of parts written beside the queue (Spark's), and
    jobs under numeric ids drawn inside the commit (queued's API)."""

    def __init__(self, adding: Adding, commits: Commits, opener: StoreOpener) -> None:
        self._adding = adding
        self._commits = commits
        self._opener = opener
        self.policy: QueuePolicy = adding.policy

    async def stage_many(self, jobs: Iterable[JobSpec], batch: str) -> list[Job]:
        """Add jobs as part of bulk write ``batch``, staged: stored, but not claimable until
        ``publish(batch)`` makes every job of the batch claimable in one commit (or
        ``discard(batch)`` drops them). A bulk write too large for one commit stages its jobs
        in several calls; dedup keys work as in ``enqueue_many``."""
        return await self._adding.add(jobs, _batch_name(batch), PUBLIC_FORM)

    async def enqueue_numbered(self, form: JobForm[T], specs: Iterable[JobSpec], ids: IdSource) -> list[T]:
        """Add jobs in one commit, all or none, each under a numeric id drawn from ``ids`` inside
        the commit: one that no job in the queue or its history has, so every job is added
        (unlike an id chosen before, which a job of the queue may hold). Returns them in order,
        in ``form`` (``PUBLIC_FORM`` for public jobs).

        Raises
        ------
        ValueError
            If a spec has an ``id`` or a ``dedup_key`` (either could match a job already there).
        """
        specs = list(specs)
        if any(spec.id is not None or spec.dedup_key is not None for spec in specs):
            raise ValueError("numbered jobs take neither an id nor a dedup key")
        new = self._adding.built(specs, None)
        if not new:
            return []
        found = await self._commits.run(
            numbering(new, self.policy.history_retention, ids, self._adding.max_payload_bytes)
        )
        return await self._adding.answers(list(found), form)

    async def add_parts(self, parts: Sequence[StoredPart], mark: tuple[str, int] | None = None) -> int | None:
        """Add the jobs of parts already written beside the queue (``write_part``), claimable at
        once: one commit, whose entry holds a few columns a part (``AddPart``) while the
        payloads stay in the parts. All or none of them are added, however many.

        Returns how many jobs it added; a job whose id or dedup key a job in the queue holds
        (or held, acked within the history's retention) is not added. A job may wait for
        jobs of the parts (``after``), in any order, and for jobs in the queue or its history.
        With ``mark``, a streaming sink's ``(sink, batch id)``, the same commit records the
        batch as the sink's newest, and a batch the sink committed already adds nothing and
        returns None (a replay).

        Raises
        ------
        ValueError
            If the queue is not in the log layout, a part is older than
            ``LogSettings.part_lifetime`` (compaction may have deleted it), or jobs wait for
            each other (a cycle).
        JobNotFoundError
            If a job waits for one that is neither in the parts, nor in the queue or its history.
        """
        if mark is not None:
            checked_text("sink", mark[0])
            SINK_BATCH_ID.check("a batch id", mark[1])
        store = await self._log_store()
        lifetime = store.settings.part_lifetime
        oldest = utc_now().timestamp() - lifetime.total_seconds()
        for part in parts:
            if part_written_at(part.segment) < oldest:
                where = store.where(part_name(part.segment))
                raise ValueError(f"{where} is older than the part lifetime ({span(lifetime)})")
        with collections_paused():
            now = to_micros(utc_now())
            new = parents_first([job for part in parts for job in part.jobs(now)])
            retention, max_bytes = span_micros(self.policy.history_retention), self._adding.max_payload_bytes

            def operation(index: QueueIndex) -> int | None:
                if mark is not None:
                    if index.controls.is_replay(*mark):
                        return None
                    index.apply(SinkMarked(*mark))
                _, added = index.add(new, to_micros(utc_now()), retention, max_bytes=max_bytes)
                return len(added)

            return await self._commits.run(operation)

    async def delete_unused_parts(self, parts: Sequence[StoredPart]) -> int:
        """Delete the parts that no job in the queue refers to (a write that failed, or was a
        replay); returns how many. A part of a write whose commit may have landed is kept."""
        store = await self._log_store()

        def refers(index: QueueIndex, job_id: str, segment: int) -> bool:
            record = index.job(job_id)  # a job whose id a writer chose may be another's
            payload = None if record is None else record.payload
            return isinstance(payload, int) and payload_place(payload)[0] == segment

        def unused(index: QueueIndex) -> list[str]:
            return [
                part_name(part.segment)
                for part in parts
                if not any(refers(index, job_id, part.segment) for job_id in part.job_ids())
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
