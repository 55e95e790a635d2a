"""``QueueIndex``: the queue state kept in structures whose cost does not grow with depth.

A dict finds a job by id; one heap per entrypoint orders the claimable jobs by
(priority, created, insertion order), exactly the order of ``QueueState``; a heap of
scheduled jobs (delays, backoffs) releases them into those heaps when they are due;
heaps of claimed jobs by heartbeat and by lease expiry drive the sweeps. Heaps are
cleaned lazily: an entry counts only while its record still carries the entry's
stamp (or, for claimed jobs, its time). Finished jobs leave history records; pauses
and throttles live in ``controls``.

Every change is an ``Effect`` applied through ``apply``. Inside ``begin`` ...
``commit``/``rollback`` each change is journalled, so a batch that lost its commit
race is undone in O(batch) and re-applied on top of the newer state.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from itertools import compress, repeat
from typing import Any, TypeVar

from jqueue.domain.controls import Controls
from jqueue.domain.effects import (
    Added,
    Beat,
    Claimed,
    Died,
    Discarded,
    Effect,
    Forgotten,
    PauseSet,
    Published,
    Removed,
    Requeued,
    ThrottleSet,
    columns_from_refs,
    payload_place,
)
from jqueue.domain.errors import JobNotFoundError, LeaseLostError
from jqueue.domain.history import History
from jqueue.domain.models import LEASE_EXPIRED, UNLEASED_CLAIM_TIMEOUT, JobStatus, QueueState
from jqueue.domain.records import (
    RECORD_COLUMNS,
    ClaimState,
    HistoryRecord,
    IndexSnapshot,
    JobRecord,
    added_from,
)

_NO_HEARTBEAT = -(2**63)
_UNLEASED_MICROS = UNLEASED_CLAIM_TIMEOUT // timedelta(microseconds=1)


def _expiry_key(record: JobRecord) -> int:
    """When a claimed job's lease runs out; see ``Job.is_expired`` for claims without one."""
    if record.expires is not None:
        return record.expires
    return _NO_HEARTBEAT if record.heartbeat is None else record.heartbeat + _UNLEASED_MICROS


HEAP_SLACK = 4
HEAP_FLOOR = 1024
"""The heaps are rebuilt once they hold more than ``HEAP_SLACK`` entries per live job plus this."""

_REQUIRED_COLUMNS = ("id", "entrypoint", "priority", "created", "status", "heartbeat", "payload", "order")
_COLUMN_DEFAULTS: dict[str, Any] = {"attempts": 0, "claims": ()}


ReadyEntry = tuple[int, int, int, int, str]
TimedEntry = tuple[int, str]
ScheduledEntry = tuple[int, int, str]
E = TypeVar("E", Added, Claimed, Requeued, Removed, Beat, Died, Forgotten, Published, Discarded)


class QueueIndex:
    """The live queue: jobs by id, claimable jobs by priority, claimed jobs by time.

    Attributes
    ----------
    version : int
        The commit this index reflects.
    segment_refs : Counter
        Live jobs per payload segment (for payloads stored as references).
    history : History
        Finished jobs, oldest first.
    controls : Controls
        Pauses and throttles.
    """

    def __init__(self) -> None:
        self.version = 0
        self.records: dict[str, JobRecord] = {}
        self.segment_refs: Counter[int] = Counter()
        self.history = History()
        self.controls = Controls()
        self._dedup: dict[str, str] = {}
        self._staged: dict[str, set[str]] = {}
        self._next_order = 0
        self._last_stamp = 0
        self._ready: dict[str, list[ReadyEntry]] = {}
        self._scheduled: list[ScheduledEntry] = []
        self._claimed: list[TimedEntry] = []
        self._leased: list[TimedEntry] = []
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
        columns: Mapping[str, Sequence[Any]],
        history: Iterable[HistoryRecord] = (),
        controls: Controls | None = None,
    ) -> QueueIndex:
        """Build an index from one column per record field, one row per job (a checkpoint).

        Columns missing from ``columns`` (beyond ``id`` ... ``payload`` and ``order``)
        take their defaults.

        Raises
        ------
        ValueError
            If two rows share an id or the columns differ in length.
        """
        ids = list(columns["id"])
        if len({len(column) for column in columns.values()} | {len(ids)}) > 1:
            raise ValueError("the columns differ in length")
        # A column left out is its default in every row: repeated, not built.
        full: dict[str, Iterable[Any]] = {name: repeat(_COLUMN_DEFAULTS.get(name)) for name in RECORD_COLUMNS}
        full |= {name: columns[name] for name in _REQUIRED_COLUMNS}
        full |= columns
        index = cls()
        records = list(
            map(
                JobRecord,
                *(full[name] for name in _REQUIRED_COLUMNS),
                *(full[n] for n in RECORD_COLUMNS[7:-1]),
            )
        )
        index.records = dict(zip(ids, records, strict=True))
        if len(index.records) != len(ids):
            raise ValueError("two jobs share an id")
        stored = [p for p in columns["payload"] if isinstance(p, int)]
        index.segment_refs = Counter(columns_from_refs(stored)[0])
        for record in records:
            if record.dedup_key is not None:
                if record.dedup_key in index._dedup:
                    raise ValueError(f"two jobs share the dedup key {record.dedup_key!r}")
                index._dedup[record.dedup_key] = record.id
            if record.status is JobStatus.STAGED:
                index._stage(record)
        statuses = columns["status"]
        queued = [status is JobStatus.QUEUED for status in statuses]
        for record in compress(records, queued):
            if record.not_before is None:
                entry = (record.priority, record.created, record.order, 0, record.id)
                index._ready.setdefault(record.entrypoint, []).append(entry)
            else:
                index._scheduled.append((record.not_before, 0, record.id))
        claimed = [status is JobStatus.IN_PROGRESS for status in statuses]
        for record in compress(records, claimed):
            index._claimed.append(
                (_NO_HEARTBEAT if record.heartbeat is None else record.heartbeat, record.id)
            )
            index._leased.append((_expiry_key(record), record.id))
        heaps: list[list[Any]] = [*index._ready.values(), index._scheduled, index._claimed, index._leased]
        for heap in heaps:
            heapq.heapify(heap)
        index.restore(history, controls or Controls())
        index._next_order = max(columns["order"], default=-1) + 1
        index.version = version
        return index

    def restore(self, history: Iterable[HistoryRecord], controls: Controls) -> None:
        """Set the history (oldest first) and the controls of a freshly built index."""
        for finished in history:
            self.history.add(finished)
        self.controls = controls

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

    def select(
        self,
        statuses: Collection[JobStatus] | None = None,
        entrypoints: Collection[str] | None = None,
        created_before: int | None = None,
    ) -> Iterator[JobRecord]:
        """Yield the records with one of ``statuses``, of one of ``entrypoints``, created before
        ``created_before`` (each filter only when given), in insertion order."""
        for record in self.in_order():
            if statuses is not None and record.status not in statuses:
                continue
            if entrypoints is not None and record.entrypoint not in entrypoints:
                continue
            if created_before is not None and record.created >= created_before:
                continue
            yield record

    def dedup_match(self, key: str, acked_since: int) -> JobRecord | HistoryRecord | None:
        """Return the live job enqueued with ``key``, else the newest one acked at or after
        ``acked_since`` that history still holds."""
        job_id = self._dedup.get(key)
        if job_id is not None:
            return self.records[job_id]
        return self.history.acked(key, acked_since)

    # --- consistent snapshots while commits go on -------------------------------------

    def freeze(self) -> IndexSnapshot:
        """Take a snapshot of the live jobs, history and controls; ``thaw`` ends it.

        It costs O(1) Python steps for the jobs (until ``thaw`` every record change
        first saves the record's previous values, so ``IndexSnapshot.columns``, which
        may run in another thread, sees the jobs as they were now) and a copy of the
        history.
        """
        if self._frozen is not None:
            raise RuntimeError("a snapshot is already being taken")
        self._frozen = {}
        records = list(self.records.values())
        history = list(self.history)
        return IndexSnapshot(
            self.version, records, set(self.segment_refs), self._frozen, history, self.controls.to_dict()
        )

    def thaw(self) -> None:
        """End the snapshot started by ``freeze``."""
        self._frozen = None

    @property
    def frozen(self) -> bool:
        """Whether a snapshot started by ``freeze`` is still being taken."""
        return self._frozen is not None

    # --- transactions ---------------------------------------------------------------

    def begin(self) -> None:
        """Start journalling changes so that ``rollback`` can undo them."""
        if self._journal is not None:
            raise RuntimeError("a transaction is already open")
        self._prune_heaps()
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
        entrypoints: Collection[str] | None,
        batch_size: int,
        now: int,
        expires: int | None = None,
        leases: Callable[[], str] | None = None,
    ) -> list[Claimed]:
        """Claim up to ``batch_size`` claimable jobs in priority order (of ``entrypoints`` if
        given), each under a new lease from ``leases`` that runs out at ``expires``.

        Jobs not yet due wait; paused entrypoints and throttles that are used up hand
        out nothing; a job past its deadline dies (``ttl``) instead of being claimed.
        """
        self._release_due(now)
        claimed: list[Claimed] = []
        while len(claimed) < batch_size:
            heap = self._best_heap(entrypoints, now)
            if heap is None:
                break
            record = self.records[heapq.heappop(heap)[4]]
            if record.not_before is not None and record.not_before > now:  # released by a clock ahead of now
                heapq.heappush(self._scheduled, (record.not_before, record.stamp, record.id))
                continue
            if record.deadline is not None and record.deadline <= now:
                self.apply(Died(record.id, now, "ttl", record.last_error))
                continue
            claimed.append(self._applied(Claimed(record.id, now, leases() if leases else None, expires)))
        return claimed

    def peek(self, entrypoints: Collection[str] | None, limit: int, now: int) -> list[JobRecord]:
        """Return the (up to ``limit``) jobs ``claim`` would take now, in order, taking none:
        the claim is made and undone."""
        opened = self._journal is None
        if opened:
            self.begin()
        mark = self.savepoint()
        try:
            return [self.records[claim.job_id] for claim in self.claim(entrypoints, limit, now)]
        finally:
            self.rollback_to(mark)
            if opened:
                self.rollback()

    def remove(self, job_id: str, lease: str | None = None, at: int | None = None) -> Removed:
        """Remove a job: an ack at ``at`` (fenced by ``lease`` if given), or with ``at`` None a
        purge that leaves no history."""
        self._holding(job_id, lease)
        return self._applied(Removed(job_id, at))

    def nack(
        self,
        job_id: str,
        lease: str | None,
        now: int,
        retry_at: int | None = None,
        error: str | None = None,
        max_attempts: int | None = None,
    ) -> Requeued | Died:
        """Return a job to the queue, claimable from ``retry_at`` (fenced by ``lease`` if given);
        a claimed job that used its last attempt dies instead.

        ``max_attempts`` is the queue's default for jobs that have none of their own.
        """
        record = self._holding(job_id, lease)
        limit = record.max_attempts if record.max_attempts is not None else max_attempts
        if record.status is JobStatus.IN_PROGRESS and limit is not None and record.attempts >= limit:
            return self._applied(Died(job_id, now, "max_attempts", error))
        return self._applied(Requeued(job_id, retry_at, error))

    def release(self, job_id: str, lease: str | None = None) -> list[Requeued]:
        """Return a claimed job to the queue at once, not as a failure (fenced by ``lease`` if
        given); unfenced, nothing for a job in another status."""
        if self._holding(job_id, lease).status is not JobStatus.IN_PROGRESS:
            return []
        return [self._applied(Requeued(job_id))]

    def requeue_now(self, job_ids: Iterable[str]) -> list[Requeued]:
        """Make jobs claimable at once whatever their state: a dead one with its attempts reset,
        a claimed one released, a waiting one due now; a job already claimable is left alone.

        Raises
        ------
        JobNotFoundError
            If one of ``job_ids`` is not in the queue.
        """
        done: list[Requeued] = []
        for job_id in dict.fromkeys(job_ids):
            record = self._require(job_id)
            if record.status is JobStatus.QUEUED and record.not_before is None:
                continue
            done.append(self._applied(Requeued(job_id, reset=record.status is JobStatus.DEAD)))
        return done

    def revive(self, job_ids: Iterable[str] | None = None) -> list[Requeued]:
        """Requeue dead jobs (those of ``job_ids``, or all) with their attempts reset.

        Raises
        ------
        JobNotFoundError
            If one of ``job_ids`` is not in the queue.
        """
        if job_ids is None:
            dead = [r.id for r in self.select({JobStatus.DEAD})]
        else:
            dead = [job_id for job_id in job_ids if self._require(job_id).status is JobStatus.DEAD]
        return [self._applied(Requeued(job_id, reset=True)) for job_id in dict.fromkeys(dead)]

    def beat(self, job_id: str, now: int, lease: str | None = None) -> list[Beat]:
        """Move a claimed job's heartbeat to ``now`` and extend its lease; unfenced, nothing for
        a job in another status."""
        if self._holding(job_id, lease).status is not JobStatus.IN_PROGRESS:
            return []
        return [self._applied(Beat(job_id, now))]

    def requeue_expired(self, now: int, max_attempts: int | None = None) -> list[Requeued | Died]:
        """Return the claimed jobs whose lease ran out before ``now`` to the queue; one that used
        its last attempt (its own ``max_attempts``, else the one given) dies instead."""
        expired = self._pop_before(self._leased, self._leased_entry_live, now)
        return [self.nack(job_id, None, now, None, LEASE_EXPIRED, max_attempts) for job_id in expired]

    def requeue_stale(self, cutoff: int) -> list[Requeued]:
        """Requeue the claimed jobs whose heartbeat is older than ``cutoff`` (or missing)."""
        stale = self._pop_before(self._claimed, self._claimed_entry_live, cutoff)
        return [self._applied(Requeued(job_id)) for job_id in stale]

    @staticmethod
    def _pop_before(heap: list[TimedEntry], live: Callable[[TimedEntry], bool], cutoff: int) -> Iterator[str]:
        """Pop and yield the jobs of a (time, id) heap whose live entry is before ``cutoff``."""
        while heap:
            if not live(heap[0]):
                heapq.heappop(heap)
            elif heap[0][0] < cutoff:
                yield heapq.heappop(heap)[1]
            else:
                return

    def staged_batches(self) -> dict[str, int]:
        """Return the bulk writes not yet published, with their job counts."""
        return {batch: len(ids) for batch, ids in self._staged.items()}

    def publish(self, batch: str) -> list[Published]:
        """Make the staged jobs of ``batch`` claimable; nothing if it has none (published already)."""
        return [self._applied(Published(batch))] if batch in self._staged else []

    def discard(self, batch: str) -> list[Discarded]:
        """Drop the staged jobs of ``batch``; nothing if it has none."""
        return [self._applied(Discarded(batch))] if batch in self._staged else []

    def forget(self, finished_before: int, keep: int) -> list[Forgotten]:
        """Drop the oldest history records: those finished before ``finished_before`` and any
        beyond the newest ``keep``."""
        count = self.history.expired(finished_before, keep)
        return [self._applied(Forgotten(count))] if count else []

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
                claimed = dict(status=JobStatus.IN_PROGRESS, heartbeat=at, lease=lease, expires=expires)
                attempts, claims = record.attempts + 1, (*record.claims, at)
                self._update(record, record.changed(**claimed, attempts=attempts, claims=claims))
                self._record_undo(self.controls.count_claim(record.entrypoint, at))
            case Requeued(job_id, not_before, error, reset):
                self._requeue(self._existing(job_id, effect), not_before, error, reset)
            case Beat(job_id, at):
                record = self._existing(job_id, effect)
                expires = record.expires
                if expires is not None and record.heartbeat is not None:
                    expires = at + (expires - record.heartbeat)
                self._update(record, record.changed(heartbeat=at, expires=expires))
            case Died(job_id, at, reason, error):
                record = self._existing(job_id, effect)
                last_error = record.last_error if error is None else error
                dead = dict(status=JobStatus.DEAD, heartbeat=None, lease=None, expires=None, not_before=None)
                self._update(
                    record, record.changed(**dead, last_error=last_error, dead_reason=reason, dead_at=at)
                )
                self._record_undo(self.history.add(HistoryRecord.of(record, at, JobStatus.DEAD)))
            case Removed(job_id, at):
                record = self._existing(job_id, effect)
                self._remove(record)
                if at is not None:
                    self._record_undo(self.history.add(HistoryRecord.of(record, at, JobStatus.ACKED)))
            case Forgotten(count):
                self._record_undo(self.history.drop_oldest(count))
            case Published(batch):
                for job_id in sorted(self._staged_ids(batch, effect), key=lambda i: self.records[i].order):
                    record = self.records[job_id]
                    self._update(record, record.changed(status=JobStatus.QUEUED))
            case Discarded(batch):
                for job_id in list(self._staged_ids(batch, effect)):
                    self._remove(self.records[job_id])
            case PauseSet():
                self._record_undo(self.controls.set_pause(effect))
            case ThrottleSet():
                self._record_undo(self.controls.set_throttle(effect))

    def apply_all(self, effects: Iterable[Effect]) -> None:
        """Apply effects in order."""
        for effect in effects:
            self.apply(effect)
        if self._journal is None:
            self._prune_heaps()

    def heap_entries(self) -> int:
        """How many entries the heaps hold, live or outdated (outdated ones are skipped lazily)."""
        ready = sum(map(len, self._ready.values()))
        return ready + len(self._scheduled) + len(self._claimed) + len(self._leased)

    def _prune_heaps(self) -> None:
        """Rebuild the heaps from the live records once outdated entries outnumber them (every claim
        and heartbeat leaves one behind): amortised O(1) per change, memory O(live jobs)."""
        if self.heap_entries() <= HEAP_SLACK * len(self.records) + HEAP_FLOOR:
            return
        ready: dict[str, list[ReadyEntry]] = {}
        scheduled: list[ScheduledEntry] = []
        claimed: list[TimedEntry] = []
        leased: list[TimedEntry] = []
        for record in self.records.values():
            if record.status is JobStatus.QUEUED:
                if record.not_before is None:
                    entry = (record.priority, record.created, record.order, record.stamp, record.id)
                    ready.setdefault(record.entrypoint, []).append(entry)
                else:
                    scheduled.append((record.not_before, record.stamp, record.id))
            elif record.status is JobStatus.IN_PROGRESS:
                claimed.append((_NO_HEARTBEAT if record.heartbeat is None else record.heartbeat, record.id))
                leased.append((_expiry_key(record), record.id))
        heaps: list[list[Any]] = [*ready.values(), scheduled, claimed, leased]
        for heap in heaps:
            heapq.heapify(heap)
        self._ready, self._scheduled, self._claimed, self._leased = ready, scheduled, claimed, leased

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

    def _staged_ids(self, batch: str, effect: Effect) -> set[str]:
        ids = self._staged.get(batch)
        if not ids:
            raise ValueError(f"{effect} names a bulk write with no staged jobs")
        return ids

    def _stage(self, record: JobRecord) -> None:
        self._staged.setdefault(record.batch or "", set()).add(record.id)

    def _unstage(self, record: JobRecord) -> None:
        ids = self._staged.get(record.batch or "")
        if ids is not None:
            ids.discard(record.id)
            if not ids:
                del self._staged[record.batch or ""]

    def _record_undo(self, undo: Callable[[], None] | None) -> None:
        if self._journal is not None and undo is not None:
            self._journal.append(undo)

    def _requeue(self, record: JobRecord, not_before: int | None, error: str | None, reset: bool) -> None:
        queued: dict[str, Any] = dict(status=JobStatus.QUEUED, heartbeat=None, lease=None, expires=None)
        queued |= dict(not_before=not_before, last_error=record.last_error if error is None else error)
        if reset:
            queued |= dict(attempts=0, dead_reason=None, dead_at=None, claims=())
        self._update(record, record.changed(**queued))

    def _add(self, added: Added) -> None:
        if added.job_id in self.records:
            raise ValueError(f"{added.job_id} is added twice")
        if added.dedup_key is not None and added.dedup_key in self._dedup:
            raise ValueError(f"{added.job_id} reuses the dedup key of {self._dedup[added.dedup_key]}")
        record = JobRecord.from_added(added, self._next_order)
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
        if record.status is JobStatus.STAGED:
            self._unstage(record)
        record.set_claim_state(state)
        if record.status is JobStatus.STAGED:
            self._stage(record)
        self._push(record)

    def _insert(self, record: JobRecord) -> None:
        self.records[record.id] = record
        if record.dedup_key is not None:
            self._dedup[record.dedup_key] = record.id
        if record.status is JobStatus.STAGED:
            self._stage(record)
        if isinstance(record.payload, int):
            self.segment_refs[payload_place(record.payload)[0]] += 1
        self._push(record)

    def _delete(self, record: JobRecord) -> None:
        del self.records[record.id]
        if record.dedup_key is not None:
            del self._dedup[record.dedup_key]
        if record.status is JobStatus.STAGED:
            self._unstage(record)
        if isinstance(record.payload, int):
            segment = payload_place(record.payload)[0]
            self.segment_refs[segment] -= 1
            if self.segment_refs[segment] <= 0:
                del self.segment_refs[segment]

    def _push(self, record: JobRecord) -> None:
        self._last_stamp += 1  # unique in this index: an entry left by an undone change never matches
        record.stamp = self._last_stamp
        if record.status is JobStatus.QUEUED:
            if record.not_before is None:
                self._push_ready(record)
            else:
                heapq.heappush(self._scheduled, (record.not_before, record.stamp, record.id))
        elif record.status is JobStatus.IN_PROGRESS:
            key = _NO_HEARTBEAT if record.heartbeat is None else record.heartbeat
            heapq.heappush(self._claimed, (key, record.id))
            heapq.heappush(self._leased, (_expiry_key(record), record.id))

    def _push_ready(self, record: JobRecord) -> None:
        entry = (record.priority, record.created, record.order, record.stamp, record.id)
        heapq.heappush(self._ready.setdefault(record.entrypoint, []), entry)

    def _release_due(self, now: int) -> None:
        """Move the scheduled jobs due at ``now`` to the claimable heaps (no state changes)."""
        heap = self._scheduled
        while heap and heap[0][0] <= now:
            _, stamp, job_id = heapq.heappop(heap)
            record = self.records.get(job_id)
            if record is not None and record.status is JobStatus.QUEUED and record.stamp == stamp:
                self._push_ready(record)

    def _ready_entry_live(self, entry: ReadyEntry) -> bool:
        record = self.records.get(entry[4])
        return record is not None and record.status is JobStatus.QUEUED and record.stamp == entry[3]

    def _claimed_entry_live(self, entry: TimedEntry) -> bool:
        record = self.records.get(entry[1])
        if record is None or record.status is not JobStatus.IN_PROGRESS:
            return False
        return entry[0] == (_NO_HEARTBEAT if record.heartbeat is None else record.heartbeat)

    def _leased_entry_live(self, entry: TimedEntry) -> bool:
        record = self.records.get(entry[1])
        if record is None or record.status is not JobStatus.IN_PROGRESS:
            return False
        return _expiry_key(record) == entry[0]

    def _clean_top(self, entrypoint: str) -> list[ReadyEntry] | None:
        heap = self._ready.get(entrypoint)
        while heap and not self._ready_entry_live(heap[0]):
            heapq.heappop(heap)
        if not heap:
            self._ready.pop(entrypoint, None)
            return None
        return heap

    def _best_heap(self, entrypoints: Collection[str] | None, now: int) -> list[ReadyEntry] | None:
        controls = self.controls
        best: list[ReadyEntry] | None = None
        for name in list(self._ready) if entrypoints is None else entrypoints:
            if controls.claims_paused(name) or controls.remaining(name, now) == 0:
                continue
            heap = self._clean_top(name)
            if heap is not None and (best is None or heap[0] < best[0]):
                best = heap
        return best
