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
from datetime import timedelta
from itertools import compress, repeat
from typing import Any, TypeVar

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
)
from jqueue.domain.errors import JobNotFoundError, LeaseLostError
from jqueue.domain.models import UNLEASED_CLAIM_TIMEOUT, JobStatus, QueueState
from jqueue.domain.records import ClaimState, IndexSnapshot, JobRecord, added_from

_NO_HEARTBEAT = -(2**63)
_UNLEASED_MICROS = UNLEASED_CLAIM_TIMEOUT // timedelta(microseconds=1)


def _expiry_key(record: JobRecord) -> int:
    """When a claimed job's lease runs out; see ``Job.is_expired`` for claims without one."""
    if record.expires is not None:
        return record.expires
    return _NO_HEARTBEAT if record.heartbeat is None else record.heartbeat + _UNLEASED_MICROS

QueuedEntry = tuple[int, int, int, str]
ClaimedEntry = tuple[int, str]
LeasedEntry = tuple[int, str]
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
        self._leased: list[LeasedEntry] = []
        self._journal: list[Callable[[], None]] | None = None
        self.pending_effects: list[Effect] = []
        self._frozen: dict[str, ClaimState] | None = None

    # --- building and viewing -------------------------------------------------------

    @classmethod
    def from_state(cls, state: QueueState) -> QueueIndex:
        """Build an index holding the jobs of ``state`` (payloads in memory)."""
        index = cls()
        for job in state.jobs:
            index.apply(added_from(job))
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
        attempts: list[int],
        leases: list[str | None],
        expiries: list[int | None],
    ) -> QueueIndex:
        """Build an index from one column per field, one row per job (a checkpoint).

        Raises
        ------
        ValueError
            If two rows share an id or the columns differ in length.
        """
        columns: tuple[Sequence[Any], ...] = (ids, entrypoints, priorities, created, statuses, heartbeats)
        columns += (payloads, orders, attempts, leases, expiries)
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
        index._leased = [(_expiry_key(r), r.id) for r in compress(records, claimed)]
        for heap in index._queued.values():
            heapq.heapify(heap)
        heapq.heapify(index._claimed)
        heapq.heapify(index._leased)
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

    def savepoint(self) -> tuple[int, int]:
        """Mark the open transaction, so that ``rollback_to`` can undo what follows."""
        if self._journal is None:
            raise RuntimeError("no transaction is open")
        return len(self._journal), len(self.pending_effects)

    def rollback_to(self, savepoint: tuple[int, int]) -> None:
        """Undo, newest first, the changes made since ``savepoint``; the transaction stays open."""
        journal = self._journal
        if journal is None:
            raise RuntimeError("no transaction is open")
        undo_count, effect_count = savepoint
        while len(journal) > undo_count:
            journal.pop()()
        del self.pending_effects[effect_count:]

    # --- decisions: each applies its effects and returns them ------------------------

    def claim(
        self,
        entrypoint: str | None,
        batch_size: int,
        now: int,
        expires: int | None = None,
        leases: Callable[[], str] | None = None,
    ) -> list[Claimed]:
        """Claim up to ``batch_size`` queued jobs in priority order (of ``entrypoint`` if given),
        each under a new lease from ``leases`` that runs out at ``expires``."""
        claimed: list[Claimed] = []
        while len(claimed) < batch_size:
            heap = self._best_heap(entrypoint)
            if heap is None:
                break
            job_id = heapq.heappop(heap)[3]
            claimed.append(self._applied(Claimed(job_id, now, leases() if leases else None, expires)))
        return claimed

    def remove(self, job_id: str, lease: str | None = None) -> Removed:
        """Remove a job (an ack): in any status, or fenced by the ``lease`` that must hold it."""
        self._holding(job_id, lease)
        return self._applied(Removed(job_id))

    def requeue(self, job_id: str, lease: str | None = None) -> Requeued:
        """Put a job back in the queue (a nack), fenced by ``lease`` if given."""
        self._holding(job_id, lease)
        return self._applied(Requeued(job_id))

    def beat(self, job_id: str, now: int, lease: str | None = None) -> list[Beat]:
        """Move a claimed job's heartbeat to ``now`` and extend its lease; unfenced, nothing for
        a job in another status."""
        if self._holding(job_id, lease).status is not JobStatus.IN_PROGRESS:
            return []
        return [self._applied(Beat(job_id, now))]

    def requeue_expired(self, now: int) -> list[Requeued]:
        """Requeue the claimed jobs whose lease ran out before ``now``."""
        return self._requeue_before(self._leased, self._leased_entry_live, now)

    def requeue_stale(self, cutoff: int) -> list[Requeued]:
        """Requeue the claimed jobs whose heartbeat is older than ``cutoff`` (or missing)."""
        return self._requeue_before(self._claimed, self._claimed_entry_live, cutoff)

    def _requeue_before(
        self, heap: list[tuple[int, str]], live: Callable[[tuple[int, str]], bool], cutoff: int
    ) -> list[Requeued]:
        """Requeue the jobs of a (time, id) heap whose live entry is before ``cutoff``."""
        requeued: list[Requeued] = []
        while heap:
            if not live(heap[0]):
                heapq.heappop(heap)
            elif heap[0][0] < cutoff:
                requeued.append(self._applied(Requeued(heapq.heappop(heap)[1])))
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
            case Claimed(job_id, at, lease, expires):
                record = self._existing(job_id, effect)
                if record.status is not JobStatus.QUEUED:
                    raise ValueError(f"{effect} claims a job that is {record.status}")
                self._update(record, (JobStatus.IN_PROGRESS, at, record.attempts + 1, lease, expires))
            case Requeued(job_id):
                record = self._existing(job_id, effect)
                self._update(record, (JobStatus.QUEUED, None, record.attempts, None, None))
            case Beat(job_id, at):
                record = self._existing(job_id, effect)
                expires = record.expires
                if expires is not None and record.heartbeat is not None:
                    expires = at + (expires - record.heartbeat)
                self._update(record, (record.status, at, record.attempts, record.lease, expires))
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

    def _holding(self, job_id: str, lease: str | None) -> JobRecord:
        if lease is None:
            return self._require(job_id)
        record = self.records.get(job_id)
        if record is None or record.status is not JobStatus.IN_PROGRESS or record.lease != lease:
            raise LeaseLostError(job_id)
        return record

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
            a.job_id,
            a.entrypoint,
            a.priority,
            a.created,
            a.status,
            a.heartbeat,
            a.payload,
            self._next_order,
            a.attempts,
            a.lease,
            a.expires,
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

    def _update(self, record: JobRecord, state: ClaimState) -> None:
        before = record.claim_state()
        self._set(record, state)
        self._record_undo(lambda: self._set(record, before))

    def _set(self, record: JobRecord, state: ClaimState) -> None:
        frozen = self._frozen
        if frozen is not None and record.id not in frozen:
            frozen[record.id] = record.claim_state()
        record.set_claim_state(state)
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
            heapq.heappush(self._leased, (_expiry_key(record), record.id))

    def _queued_entry_live(self, entry: QueuedEntry) -> bool:
        record = self.records.get(entry[3])
        return record is not None and record.status is JobStatus.QUEUED and record.order == entry[2]

    def _claimed_entry_live(self, entry: ClaimedEntry) -> bool:
        record = self.records.get(entry[1])
        if record is None or record.status is not JobStatus.IN_PROGRESS:
            return False
        return entry[0] == (_NO_HEARTBEAT if record.heartbeat is None else record.heartbeat)

    def _leased_entry_live(self, entry: LeasedEntry) -> bool:
        record = self.records.get(entry[1])
        if record is None or record.status is not JobStatus.IN_PROGRESS:
            return False
        return _expiry_key(record) == entry[0]

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
