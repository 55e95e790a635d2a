"""``ColdJobs``: the jobs an ``IndexState`` reaches without holding their records (ADR 0015):
claimable rows left in a checkpoint's slabs (``ColdRows``), which become records as they are
looked up or claimed, and records the index lets go once the slabs hold them as they are."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator, Sequence
from typing import TYPE_CHECKING

from jqueue.domain.cold import ColdRows
from jqueue.domain.models import JobStatus
from jqueue.domain.records import ClaimState, JobRecord

if TYPE_CHECKING:
    from jqueue.domain.claim_order import ClaimOrder
    from jqueue.domain.tally import Tally


def insertion(record: JobRecord) -> int:
    """A record's insertion number (its place in insertion order)."""
    return record.order


class ColdJobs:
    """The cold jobs of an ``IndexState``."""

    records: dict[str, JobRecord]
    cold: ColdRows | None
    order: ClaimOrder
    tally: Tally
    changed: dict[str, JobRecord] | None
    _frozen: dict[str, ClaimState] | None
    _next_order: int

    def _push(self, record: JobRecord) -> None:
        raise NotImplementedError

    def attach(self, cold: ColdRows, last_order: int) -> None:
        """Reach the jobs of ``cold`` too (a freshly built index), the last inserted as number
        ``last_order`` or before: they count as claimable jobs, and become records as they are
        looked up or claimed."""
        self.cold = cold
        self.order.attach(cold)
        self._next_order = max(self._next_order, last_order + 1)
        for entrypoint, count in cold.counts().items():
            self.tally.count_ready(entrypoint, count)

    def cool(self, records: Sequence[JobRecord]) -> list[bool]:
        """Let go of each of ``records`` that the attached cold rows now hold as it is: a
        claimable job with no dedup key, untouched since the last freeze; returns which."""
        changed, live = self.changed, self.records
        cooled = []
        for record in records:
            cool = (
                self._frozen is None
                and changed is not None
                and record.id not in changed
                and live.get(record.id) is record
                and record.status is JobStatus.QUEUED
                and record.not_before is None
                and record.dedup_key is None
            )
            if cool:
                del live[record.id]
            cooled.append(cool)
        return cooled

    def __len__(self) -> int:
        return len(self.records) + (0 if self.cold is None else len(self.cold))

    def job(self, job_id: str) -> JobRecord | None:
        """Return the record of live job ``job_id``, if any (a cold one becomes a record)."""
        record = self.records.get(job_id)
        if record is None and self.cold is not None:
            record = self.cold.take(job_id)
            if record is not None:
                self._warm(record)
                self._push(record)
        return record

    def ordered(
        self,
        statuses: Collection[JobStatus] | None = None,
        entrypoints: Collection[str] | None = None,
        start: int = 0,
    ) -> Iterator[JobRecord]:
        """Yield the record of each live job with one of ``statuses``, of one of ``entrypoints``
        (each filter when given), whose insertion number is ``start`` or more, in insertion
        order (those of cold jobs, all queued, are not to be changed)."""
        hot = [
            (record.order, record)
            for record in self.records.values()
            if record.order >= start
            and (statuses is None or record.status in statuses)
            and (entrypoints is None or record.entrypoint in entrypoints)
        ]
        heapq.heapify(hot)  # popped as listed: a page of a few costs O(records), not a sort
        records = (heapq.heappop(hot)[1] for _ in range(len(hot)))
        if self.cold is None or (statuses is not None and JobStatus.QUEUED not in statuses):
            return records
        return heapq.merge(records, self.cold.ordered(entrypoints, start), key=insertion)

    def _warm(self, record: JobRecord) -> None:
        """Keep a cold job's record from now on (no change to the queue: not journalled)."""
        self.records[record.id] = record
