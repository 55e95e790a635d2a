"""``IndexState``: the queue state kept in structures whose cost does not grow with depth, and
the replay of effects on it.

A dict finds a job by id; ``ClaimOrder``'s heaps order the claimable jobs by (priority,
created, insertion order), exactly the order of ``QueueState``, and the claimed ones by
heartbeat and lease expiry. Finished jobs leave history records; pauses and throttles
live in ``controls``. ``QueueIndex`` (``jqueue.domain.index``) adds the decisions.

Every change is an ``Effect`` applied through ``apply``. Inside ``begin`` ...
``commit``/``rollback`` each change is journalled, so a batch that lost its commit
race is undone in O(batch) and re-applied on top of the newer state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, Self, TypeVar

from jqueue.domain.bulk_adds import BulkAdds
from jqueue.domain.claim_order import ClaimOrder
from jqueue.domain.cold import ColdRows
from jqueue.domain.cold_jobs import ColdJobs
from jqueue.domain.controls import Controls
from jqueue.domain.dependencies import Dependencies
from jqueue.domain.effects import (
    Added,
    Beat,
    CancelAsked,
    Cancelled,
    Claimed,
    Died,
    Discarded,
    Effect,
    Forgotten,
    LimitSet,
    ParentSettled,
    PauseSet,
    Published,
    Removed,
    Requeued,
    SinkMarked,
    ThrottleSet,
)
from jqueue.domain.errors import JobNotFoundError, LeaseLostError
from jqueue.domain.freezing import Freezing
from jqueue.domain.history import History
from jqueue.domain.journal import Journal
from jqueue.domain.models import JobStatus
from jqueue.domain.records import (
    RECORD_COLUMNS,
    ClaimState,
    HistoryRecord,
    JobRecord,
)
from jqueue.domain.schema import FIELDS
from jqueue.domain.tally import Tally
from jqueue.domain.times import checked_time

REQUIRED_COLUMNS = (*(f.name for f in FIELDS if f.required), "order")
"""The columns ``from_columns`` needs; the others may be left out (their default in every row)."""
COLUMN_DEFAULTS: dict[str, Any] = {f.name: f.default for f in FIELDS}
"""Each record field's value in a row whose column is left out."""
_NO_PROGRESS: dict[str, Any] = dict(cancel_requested=None, progress=None, progress_note=None)
"""What a new claim, or a return to the queue, clears: the last attempt's progress and cancel."""


E = TypeVar(
    "E",
    Added,
    Claimed,
    Requeued,
    Removed,
    Beat,
    CancelAsked,
    Cancelled,
    Died,
    Forgotten,
    Published,
    Discarded,
    ParentSettled,
)


class IndexState(Journal, ColdJobs, Dependencies, BulkAdds, Freezing):
    """The live queue: jobs by id, claimable jobs by priority, claimed jobs by time.

    Attributes
    ----------
    version : int
        The commit this index reflects.
    history : History
        Finished jobs, oldest first.
    controls : Controls
        Pauses and throttles.
    tally : Tally
        Jobs per entrypoint and status, kept as they change.
    """

    def __init__(self) -> None:
        self.version = 0
        self.records: dict[str, JobRecord] = {}
        self.history = History()
        self.controls = Controls()
        self.tally = Tally()
        self._dedup: dict[str, str] = {}
        self._staged: dict[str, set[str]] = {}
        self._children: dict[str, dict[str, None]] = {}
        self._views: dict[str, None] = {}
        self._next_order = 0
        self._last_stamp = 0
        self.order = ClaimOrder(self.records)
        self.cold: ColdRows | None = None
        self._journal: list[Callable[[], None]] | None = None
        self.pending_effects: list[Effect] = []
        self.transaction = 0
        self.changed: dict[str, JobRecord] | None = None
        self._frozen: dict[str, ClaimState] | None = None
        self._removed_while_frozen: dict[str, JobRecord] = {}
        self._frozen_below = 0

    # --- building and viewing -------------------------------------------------------

    @classmethod
    def from_columns(
        cls,
        version: int,
        columns: Mapping[str, Sequence[Any]],
        history: Iterable[HistoryRecord] = (),
        controls: Controls | None = None,
    ) -> Self:
        """Build an index from one column per record field, one row per job (a checkpoint).

        Columns missing from ``columns`` (beyond ``REQUIRED_COLUMNS``) take their defaults;
        a ``place`` column sets each record's place.

        Raises
        ------
        ValueError
            If two rows share an id or an insertion number, or the columns differ in length.
        """
        ids = list(columns["id"])
        if len({len(column) for column in columns.values()} | {len(ids)}) > 1:
            raise ValueError("the columns differ in length")
        # A column left out is its default in every row: repeated, not built.
        full: dict[str, Iterable[Any]] = {name: repeat(COLUMN_DEFAULTS.get(name)) for name in RECORD_COLUMNS}
        full |= {name: columns[name] for name in REQUIRED_COLUMNS}
        full |= {name: column for name, column in columns.items() if name in full}
        index = cls()
        places = columns.get("place", repeat(None))
        records = list(map(JobRecord, *(full[name] for name in RECORD_COLUMNS), places))
        index.records = dict(zip(ids, records, strict=True))
        if len(index.records) != len(ids):
            raise ValueError("two jobs share an id")
        if len(set(columns["order"])) != len(ids):
            raise ValueError("two jobs share an insertion number")
        for record in records:
            if record.dedup_key is not None:
                if record.dedup_key in index._dedup:
                    raise ValueError(f"two jobs share the dedup key {record.dedup_key!r}")
                index._dedup[record.dedup_key] = record.id
            if record.status is JobStatus.STAGED:
                index._stage(record)
            if record.awaiting:
                index._link(record)
        index.order = ClaimOrder(index.records)
        index.order.rebuild()
        index.tally.rebuild(records)
        index.restore(history, controls or Controls())
        index._next_order = max(columns["order"], default=-1) + 1
        index.version = version
        return index

    def restore(self, history: Iterable[HistoryRecord], controls: Controls) -> None:
        """Set the history (oldest first) and the controls of a freshly built index."""
        for finished in history:
            self.history.add(finished)
        self.controls = controls

    def store_payload(self, job_id: str, handle: int) -> None:
        """Record that the store now keeps a job's payload under ``handle`` (not journalled: the
        bytes and the handle are the same payload)."""
        record = self.records.get(job_id)
        if record is not None and isinstance(record.payload, bytes):
            record.payload = handle

    def in_order(self) -> list[JobRecord]:
        """Return every record in insertion order (the order of ``QueueState.jobs``)."""
        return list(self.ordered())

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
                self._update(
                    record, record.changed(**claimed, **_NO_PROGRESS, attempts=attempts, claims=claims)
                )
                self._record_undo(self.controls.count_claim(record.entrypoint, at, record.tenant))
            case Requeued(job_id, not_before, error, reset):
                self._requeue(self._existing(job_id, effect), not_before, error, reset)
            case Beat(job_id, at, new_expiry, progress, note, new_lease):
                record = self._existing(job_id, effect)
                expires = record.expires
                if new_expiry is not None:
                    expires = new_expiry
                elif expires is not None and record.heartbeat is not None:
                    expires = checked_time(at + (expires - record.heartbeat), f"the lease of job {job_id!r}")
                reported = {} if progress is None else dict(progress=progress, progress_note=note)
                reported |= {} if new_lease is None else {"lease": new_lease}
                self._update(record, record.changed(heartbeat=at, expires=expires, **reported))
            case CancelAsked(job_id, at):
                record = self._existing(job_id, effect)
                if record.status is not JobStatus.IN_PROGRESS:
                    raise ValueError(f"{effect} asks to cancel a job that is {record.status}")
                self._update(record, record.changed(cancel_requested=at))
            case Cancelled(job_id, at, error):
                record = self._existing(job_id, effect)
                self._remove(record)
                finished = HistoryRecord.of(record, at, JobStatus.CANCELLED, error=error)
                self._record_undo(self.history.add(finished))
            case Died(job_id, at, reason, error):
                record = self._existing(job_id, effect)
                last_error = record.last_error if error is None else error
                dead = dict(status=JobStatus.DEAD, heartbeat=None, lease=None, expires=None, not_before=None)
                self._update(
                    record, record.changed(**dead, last_error=last_error, dead_reason=reason, dead_at=at)
                )
                self._record_undo(self.history.add(HistoryRecord.of(record, at, JobStatus.DEAD)))
            case Removed(job_id, at, result):
                record = self._existing(job_id, effect)
                self._remove(record)
                if at is not None:
                    self._record_undo(self.history.add(HistoryRecord.of(record, at, JobStatus.ACKED, result)))
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
                self.order.unpark_all()
            case LimitSet():
                self._record_undo(self.controls.set_limit(effect))
                self.order.unpark_all()
            case SinkMarked():
                self._record_undo(self.controls.set_mark(effect))
            case ParentSettled():
                self._settle(effect)

    # --- internals ------------------------------------------------------------------

    def _holding(self, job_id: str, lease: str | None) -> JobRecord:
        if lease is None:
            return self._require(job_id)
        record = self.records.get(job_id)  # a claimed job is never cold
        if record is None or record.status is not JobStatus.IN_PROGRESS or record.lease != lease:
            raise LeaseLostError(job_id)
        return record

    def _require(self, job_id: str) -> JobRecord:
        record = self.job(job_id)
        if record is None:
            raise JobNotFoundError(job_id)
        return record

    def _existing(self, job_id: str, effect: Effect) -> JobRecord:
        record = self.job(job_id)
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

    def _requeue(self, record: JobRecord, not_before: int | None, error: str | None, reset: bool) -> None:
        queued: dict[str, Any] = dict(status=JobStatus.QUEUED, heartbeat=None, lease=None, expires=None)
        queued |= _NO_PROGRESS
        queued |= dict(not_before=not_before, last_error=record.last_error if error is None else error)
        if reset:
            queued |= dict(attempts=0, dead_reason=None, dead_at=None, claims=())
        self._update(record, record.changed(**queued))

    def _add(self, added: Added) -> None:
        if self.job(added.id) is not None:
            raise ValueError(f"{added.id} is added twice")
        if added.dedup_key is not None and added.dedup_key in self._dedup:
            raise ValueError(f"{added.id} reuses the dedup key of {self._dedup[added.dedup_key]}")
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
        if self._journal is None:  # a replay: nothing to undo
            self._set(record, state)
            return
        before = record.claim_state()
        self._set(record, state)
        self._record_undo(lambda: self._set(record, before))

    def _set(self, record: JobRecord, state: ClaimState) -> None:
        frozen = self._frozen
        if frozen is not None and record.id not in frozen and record.order < self._frozen_below:
            frozen[record.id] = record.claim_state()
        if self.changed is not None:
            self.changed.setdefault(record.id, record)
        if record.status is JobStatus.STAGED:
            self._unstage(record)
        awaited, was_running = record.awaiting, record.status is JobStatus.IN_PROGRESS
        self.tally.discard(record)
        record.set_claim_state(state)
        self.tally.add(record)
        if was_running and record.status is not JobStatus.IN_PROGRESS:
            self.order.unpark(record.tenant)
        if record.status is JobStatus.STAGED:
            self._stage(record)
        if record.awaiting is not awaited:
            self._relink(record, awaited)
        self._push(record)

    def _insert(self, record: JobRecord) -> None:
        self.tally.add(record)  # first: it refuses a finished job's status before anything changed
        self.records[record.id] = record
        if self.changed is not None:
            self.changed.setdefault(record.id, record)
        if record.dedup_key is not None:
            self._dedup[record.dedup_key] = record.id
        if record.status is JobStatus.STAGED:
            self._stage(record)
        if record.awaiting:
            self._link(record)
        self._push(record)

    def _delete(self, record: JobRecord) -> None:
        if self._frozen is not None and record.order < self._frozen_below:  # first: Frozen.live finds it
            self._removed_while_frozen.setdefault(record.id, record)
        del self.records[record.id]
        if self.changed is not None:
            self.changed.setdefault(record.id, record)
        if record.dedup_key is not None:
            del self._dedup[record.dedup_key]
        if record.status is JobStatus.STAGED:
            self._unstage(record)
        if record.awaiting:
            self._unlink(record)
        self.tally.discard(record)
        if record.status is JobStatus.IN_PROGRESS:
            self.order.unpark(record.tenant)

    def _push(self, record: JobRecord) -> None:
        self._last_stamp += 1  # unique in this index: an entry left by an undone change never matches
        record.stamp = self._last_stamp
        self.order.push(record)
