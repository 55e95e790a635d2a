"""``QueueIndex``: the queue state kept in structures whose cost does not grow with depth.

A dict finds a job by id; one heap per entrypoint orders the queued jobs by
(priority, created, insertion order), exactly the order of ``QueueState``; one heap
orders the claimed jobs by heartbeat for the stale sweep. Heaps are cleaned
lazily: an entry counts only while it still matches its job's record.

Every change is an ``Effect`` applied through ``apply``. Inside ``begin`` ...
``commit``/``rollback`` each change is journalled, so a batch that lost its commit
race is undone in O(batch) and re-applied on top of the newer state.
"""

from __future__ import annotations

import heapq
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, repeat
from typing import TypeVar

from jqueue.domain.effects import (
    Added,
    Beat,
    Claimed,
    Effect,
    Payload,
    Removed,
    Requeued,
    columns_from_refs,
    payload_place,
    to_micros,
)
from jqueue.domain.errors import JobNotFoundError
from jqueue.domain.models import JobStatus, QueueState
from jqueue.domain.records import IndexSnapshot, JobRecord

_NO_HEARTBEAT = -(2**63)

QueuedEntry = tuple[int, int, int, str]
ClaimedEntry = tuple[int, str]
E = TypeVar("E", Added, Claimed, Requeued, Removed, Beat)


class QueueIndex:
    """The live queue: jobs by id, queued jobs by priority, claimed jobs by heartbeat.

    Attributes
    ----------
    version : int
        The commit this index reflects.
    segment_refs : Counter
        Live jobs per payload segment (for payloads stored as references).
    """

    def __init__(self) -> None:
        self.version = 0
        self.records: dict[str, JobRecord] = {}
        self.segment_refs: Counter[int] = Counter()
        self._next_order = 0
        self._queued: dict[str, list[QueuedEntry]] = {}
        self._claimed: list[ClaimedEntry] = []
        self._journal: list[Callable[[], None]] | None = None
        self.pending_effects: list[Effect] = []
        self._frozen: dict[str, tuple[JobStatus, int | None]] | None = None

    # --- building and viewing -------------------------------------------------------

    @classmethod
    def from_state(cls, state: QueueState) -> QueueIndex:
        """Build an index holding the jobs of ``state`` (payloads in memory)."""
        index = cls()
        for job in state.jobs:
            heartbeat = None if job.heartbeat_at is None else to_micros(job.heartbeat_at)
            created = to_micros(job.created_at)
            entry = Added(job.id, job.entrypoint, job.priority, created, job.status, heartbeat, job.payload)
            index.apply(entry)
        index.version = state.version
        return index

    @classmethod
    def from_columns(
        cls,
        version: int,
        ids: list[str],
        entrypoints: list[str],
        priorities: list[int],
        created: list[int],
        statuses: list[JobStatus],
        heartbeats: list[int | None],
        payloads: Sequence[Payload],
        orders: list[int],
    ) -> QueueIndex:
        """Build an index from one column per field, one row per job (a checkpoint).

        Raises
        ------
        ValueError
            If two rows share an id or the columns differ in length.
        """
        columns = (ids, entrypoints, priorities, created, statuses, heartbeats, payloads, orders)
        if len({len(column) for column in columns}) > 1:
            raise ValueError("the columns differ in length")
        index = cls()
        records = list(map(JobRecord, *columns))
        index.records = dict(zip(ids, records, strict=True))
        if len(index.records) != len(ids):
            raise ValueError("two jobs share an id")
        stored = [p for p in payloads if isinstance(p, int)]
        index.segment_refs = Counter(columns_from_refs(stored)[0])
        queued = list(map(operator.is_, statuses, repeat(JobStatus.QUEUED)))
        entries = compress(zip(priorities, created, orders, ids, strict=True), queued)
        if len(set(entrypoints)) == 1:
            index._queued[entrypoints[0]] = list(entries)
        else:
            for entrypoint, entry in zip(compress(entrypoints, queued), entries, strict=True):
                index._queued.setdefault(entrypoint, []).append(entry)
        index._queued = {name: heap for name, heap in index._queued.items() if heap}
        claimed = list(map(operator.is_, statuses, repeat(JobStatus.IN_PROGRESS)))
        index._claimed = [
            (_NO_HEARTBEAT if beat is None else beat, job_id)
            for beat, job_id in compress(zip(heartbeats, ids, strict=True), claimed)
        ]
        for heap in index._queued.values():
            heapq.heapify(heap)
        heapq.heapify(index._claimed)
        index._next_order = max(orders, default=-1) + 1
        index.version = version
        return index

    def move_payload(self, job_id: str, ref: int) -> None:
        """Record that a job's payload is now kept in storage at ``ref`` (not journalled)."""
        record = self.records.get(job_id)
        if record is None or not isinstance(record.payload, bytes):
            return
        record.payload = ref
        self.segment_refs[payload_place(ref)[0]] += 1

    def __len__(self) -> int:
        return len(self.records)

    def in_order(self) -> list[JobRecord]:
        """Return every record in insertion order (the order of ``QueueState.jobs``)."""
        return sorted(self.records.values(), key=lambda record: record.order)

    # --- consistent snapshots while commits go on -------------------------------------

    def freeze(self) -> IndexSnapshot:
        """Take a snapshot of the live jobs in O(1) Python steps; ``thaw`` ends it.

        Until then every record change first saves the record's previous status and
        heartbeat, so ``IndexSnapshot.rows`` (which may run in another thread) sees
        the state as it was now.
        """
        if self._frozen is not None:
            raise RuntimeError("a snapshot is already being taken")
        self._frozen = {}
        return IndexSnapshot(self.version, list(self.records.values()), set(self.segment_refs), self._frozen)

    def thaw(self) -> None:
        """End the snapshot started by ``freeze``."""
        self._frozen = None

    # --- transactions ---------------------------------------------------------------

    def begin(self) -> None:
        """Start journalling changes so that ``rollback`` can undo them."""
        if self._journal is not None:
            raise RuntimeError("a transaction is already open")
        self._journal = []
        self.pending_effects = []

    def commit(self) -> None:
        """Keep the changes made since ``begin``."""
        self._journal = None
        self.pending_effects = []

    def rollback(self) -> None:
        """Undo every change made since ``begin``, newest first."""
        journal, self._journal = self._journal or [], None
        self.pending_effects = []
        for undo in reversed(journal):
            undo()

    # --- decisions: each applies its effects and returns them ------------------------

    def claim(self, entrypoint: str | None, batch_size: int, now: int) -> list[Claimed]:
        """Claim up to ``batch_size`` queued jobs in priority order (of ``entrypoint`` if given)."""
        claimed: list[Claimed] = []
        while len(claimed) < batch_size:
            heap = self._best_heap(entrypoint)
            if heap is None:
                break
            job_id = heapq.heappop(heap)[3]
            claimed.append(self._applied(Claimed(job_id, now)))
        return claimed

    def remove(self, job_id: str) -> Removed:
        """Remove a job in any status (an ack)."""
        self._require(job_id)
        return self._applied(Removed(job_id))

    def requeue(self, job_id: str) -> Requeued:
        """Put a job back in the queue (a nack)."""
        self._require(job_id)
        return self._applied(Requeued(job_id))

    def beat(self, job_id: str, now: int) -> list[Beat]:
        """Move a claimed job's heartbeat to ``now``; nothing for a job in another status."""
        if self._require(job_id).status is not JobStatus.IN_PROGRESS:
            return []
        return [self._applied(Beat(job_id, now))]

    def requeue_stale(self, cutoff: int) -> list[Requeued]:
        """Requeue the claimed jobs whose heartbeat is older than ``cutoff`` (or missing)."""
        requeued: list[Requeued] = []
        heap = self._claimed
        while heap:
            heartbeat_key, job_id = heap[0]
            if not self._claimed_entry_live(heap[0]):
                heapq.heappop(heap)
            elif heartbeat_key < cutoff:
                heapq.heappop(heap)
                requeued.append(self._applied(Requeued(job_id)))
            else:
                break
        return requeued

    # --- replay ---------------------------------------------------------------------

    def apply(self, effect: Effect) -> None:
        """Apply one resolved effect (from this process or replayed from storage).

        Raises
        ------
        ValueError
            If the effect does not fit the state (a log that does not replay).
        """
        if self._journal is not None:
            self.pending_effects.append(effect)
        match effect:
            case Added():
                self._add(effect)
            case Claimed(job_id, at):
                record = self._existing(job_id, effect)
                if record.status is not JobStatus.QUEUED:
                    raise ValueError(f"{effect} claims a job that is {record.status}")
                self._update(record, JobStatus.IN_PROGRESS, at)
            case Requeued(job_id):
                self._update(self._existing(job_id, effect), JobStatus.QUEUED, None)
            case Beat(job_id, at):
                record = self._existing(job_id, effect)
                self._update(record, record.status, at)
            case Removed(job_id):
                self._remove(self._existing(job_id, effect))

    def apply_all(self, effects: Iterable[Effect]) -> None:
        """Apply effects in order."""
        for effect in effects:
            self.apply(effect)

    # --- internals ------------------------------------------------------------------

    def _applied(self, effect: E) -> E:
        self.apply(effect)
        return effect

    def _require(self, job_id: str) -> JobRecord:
        record = self.records.get(job_id)
        if record is None:
            raise JobNotFoundError(job_id)
        return record

    def _existing(self, job_id: str, effect: Effect) -> JobRecord:
        record = self.records.get(job_id)
        if record is None:
            raise ValueError(f"{effect} refers to a job that is not in the queue")
        return record

    def _record_undo(self, undo: Callable[[], None]) -> None:
        if self._journal is not None:
            self._journal.append(undo)

    def _add(self, added: Added) -> None:
        if added.job_id in self.records:
            raise ValueError(f"{added.job_id} is added twice")
        a = added
        record = JobRecord(
            a.job_id, a.entrypoint, a.priority, a.created, a.status, a.heartbeat, a.payload, self._next_order
        )
        self._next_order += 1
        self._insert(record)

        def undo() -> None:
            self._delete(record)
            self._next_order -= 1

        self._record_undo(undo)

    def _remove(self, record: JobRecord) -> None:
        self._delete(record)
        self._record_undo(lambda: self._insert(record))

    def _update(self, record: JobRecord, status: JobStatus, heartbeat: int | None) -> None:
        before = (record.status, record.heartbeat)
        self._set(record, status, heartbeat)

        def undo() -> None:
            self._set(record, *before)

        self._record_undo(undo)

    def _set(self, record: JobRecord, status: JobStatus, heartbeat: int | None) -> None:
        frozen = self._frozen
        if frozen is not None and record.id not in frozen:
            frozen[record.id] = (record.status, record.heartbeat)
        record.status, record.heartbeat = status, heartbeat
        self._push(record)

    def _insert(self, record: JobRecord) -> None:
        self.records[record.id] = record
        if isinstance(record.payload, int):
            self.segment_refs[payload_place(record.payload)[0]] += 1
        self._push(record)

    def _delete(self, record: JobRecord) -> None:
        del self.records[record.id]
        if isinstance(record.payload, int):
            segment = payload_place(record.payload)[0]
            self.segment_refs[segment] -= 1
            if self.segment_refs[segment] <= 0:
                del self.segment_refs[segment]

    def _push(self, record: JobRecord) -> None:
        if record.status is JobStatus.QUEUED:
            entry = (record.priority, record.created, record.order, record.id)
            heapq.heappush(self._queued.setdefault(record.entrypoint, []), entry)
        elif record.status is JobStatus.IN_PROGRESS:
            key = _NO_HEARTBEAT if record.heartbeat is None else record.heartbeat
            heapq.heappush(self._claimed, (key, record.id))

    def _queued_entry_live(self, entry: QueuedEntry) -> bool:
        record = self.records.get(entry[3])
        return record is not None and record.status is JobStatus.QUEUED and record.order == entry[2]

    def _claimed_entry_live(self, entry: ClaimedEntry) -> bool:
        record = self.records.get(entry[1])
        if record is None or record.status is not JobStatus.IN_PROGRESS:
            return False
        return entry[0] == (_NO_HEARTBEAT if record.heartbeat is None else record.heartbeat)

    def _clean_top(self, entrypoint: str) -> list[QueuedEntry] | None:
        heap = self._queued.get(entrypoint)
        while heap and not self._queued_entry_live(heap[0]):
            heapq.heappop(heap)
        if not heap:
            self._queued.pop(entrypoint, None)
            return None
        return heap

    def _best_heap(self, entrypoint: str | None) -> list[QueuedEntry] | None:
        if entrypoint is not None:
            return self._clean_top(entrypoint)
        best: list[QueuedEntry] | None = None
        for name in list(self._queued):
            heap = self._clean_top(name)
            if heap is not None and (best is None or heap[0] < best[0]):
                best = heap
        return best
