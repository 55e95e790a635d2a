"""``QueueIndex``: the live queue of one process, the replay of effects on it, and the
decisions of each queue operation.

``IndexState`` keeps the state in structures whose cost does not grow with depth. A dict
finds a job by id; ``ClaimOrder``'s heaps order the claimable jobs by (priority, created,
insertion order), exactly the order of ``QueueState``, and the claimed ones by heartbeat and
lease expiry. Finished jobs leave history records; pauses and throttles live in
``controls``; the jobs that await parents are kept by parent in ``dependencies``. Claimable
rows left in a checkpoint's slabs stay cold (``ColdRows``, ADR 0015) until they are looked
up or claimed.

Every change is an ``Effect`` applied through ``IndexState.apply`` (a long run of adds in
bulk through ``apply_all``). Inside a transaction of its ``Journal`` each change is
journalled as an undo, so a batch that lost its commit race is undone in O(batch) and
re-applied on top of the newer state; a transaction may hold two commits' changes (those of
a commit in flight, and after a mark those applied ahead on top of it). ``freeze`` takes a
consistent snapshot while commits go on, and the jobs changed between two snapshots (what
an incremental checkpoint writes).

``QueueIndex`` adds the decisions: an operation decides its effects against the current
state (which jobs a claim takes, which nack kills a job); each decision applies the effects
it made and returns them, so the commit records exactly what was decided and any reader
replays it.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, Self, TypeVar

from jqueue.domain import effects as fx
from jqueue.domain.claim_order import ClaimOrder
from jqueue.domain.cold import ColdRows
from jqueue.domain.controls import Controls
from jqueue.domain.dependencies import ENDINGS, PURGED, Dependencies, parent_failure, settled_changes
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
    Owned,
    ParentSettled,
    PauseSet,
    Published,
    Removed,
    Requeued,
    Resharded,
    SinkMarked,
    ThrottleSet,
)
from jqueue.domain.errors import (
    JobCancelledError,
    JobNotFoundError,
    LeaseLostError,
    NotOwnerError,
    PayloadTooLargeError,
    QueuePausedError,
)
from jqueue.domain.history import History
from jqueue.domain.models import LEASE_EXPIRED, JobStatus, ParentFailure
from jqueue.domain.records import (
    RECORD_COLUMNS,
    ClaimState,
    Frozen,
    HistoryRecord,
    JobRecord,
)
from jqueue.domain.schema import FIELDS
from jqueue.domain.tally import DEAD, IN_PROGRESS, Tally
from jqueue.domain.times import checked_time

REQUIRED_COLUMNS = (*(f.name for f in FIELDS if f.required), "order")
"""The columns ``from_columns`` needs; the others may be left out (their default in every row)."""
COLUMN_DEFAULTS: dict[str, Any] = {f.name: f.default for f in FIELDS}
"""Each record field's value in a row whose column is left out."""
BULK_ADDS = 64
"""A run of at least this many adds is applied in bulk."""
_NO_PROGRESS: dict[str, Any] = dict(cancel_requested=None, progress=None, progress_note=None)
"""What a new claim, or a return to the queue, clears: the last attempt's progress and cancel."""


def insertion(record: JobRecord) -> int:
    """A record's insertion number (its place in insertion order)."""
    return record.order


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


Undo = Callable[[], None]
"""What puts one change of an index back as it was."""
Savepoint = tuple[int, int]
"""A mark in an open transaction: how many undos and how many effects it held then."""


class Journal:
    """Begin, commit and roll back (to a savepoint) the changes of an index.

    Attributes
    ----------
    undos : list of Undo, or None
        The undos of the open transaction, oldest first; None outside a transaction.
    effects : list of Effect
        The effects applied in the open transaction (what its commit writes).
    transaction : int
        How many transactions were begun: it tells one from the next.
    """

    def __init__(self, order: ClaimOrder) -> None:
        self._order = order
        self.undos: list[Undo] | None = None
        self.effects: list[Effect] = []
        self.transaction = 0

    @property
    def open(self) -> bool:
        """Whether a transaction is open."""
        return self.undos is not None

    def add(self, undo: Undo | None) -> None:
        """Keep ``undo`` (if any) for a rollback of the open transaction (none open: dropped)."""
        if self.undos is not None and undo is not None:
            self.undos.append(undo)

    def begin(self) -> None:
        """Start journalling changes so that ``rollback`` can undo them."""
        if self.undos is not None:
            raise RuntimeError("a transaction is already open")
        self._order.prune()
        self.undos = []
        self.effects = []
        self.transaction += 1

    def commit(self) -> None:
        """Keep the changes made since ``begin``."""
        self.undos = None
        self.effects = []

    def commit_through(self, savepoint: Savepoint) -> None:
        """Keep the changes made before ``savepoint``; those after it stay in the open transaction
        (which ends if there are none)."""
        undos = self._opened()
        undo_count, effect_count = savepoint
        if len(undos) == undo_count and len(self.effects) == effect_count:
            self.commit()
            return
        self.undos = undos[undo_count:]
        self.effects = self.effects[effect_count:]
        self._order.prune()  # as ``begin`` does: the transaction goes on as the next one

    def rollback(self) -> None:
        """Undo every change made since ``begin``, newest first."""
        undos, self.undos = self.undos or [], None
        self.effects = []
        for undo in reversed(undos):
            undo()
        self._order.unpark_all()  # what blocked a tenant may be undone

    def savepoint(self) -> Savepoint:
        """Mark the open transaction, so that ``rollback_to`` can undo what follows."""
        return len(self._opened()), len(self.effects)

    def rollback_to(self, savepoint: Savepoint) -> None:
        """Undo, newest first, the changes made since ``savepoint``; the transaction stays open."""
        undos = self._opened()
        undo_count, effect_count = savepoint
        while len(undos) > undo_count:
            undos.pop()()
        del self.effects[effect_count:]
        self._order.unpark_all()  # what blocked a tenant may be undone

    def _opened(self) -> list[Undo]:
        if self.undos is None:
            raise RuntimeError("no transaction is open")
        return self.undos


class IndexState:
    """The live queue: jobs by id, claimable jobs by priority, claimed jobs by time.

    Attributes
    ----------
    version : int
        The commit this index reflects.
    records : dict of str to JobRecord
        The jobs held as records, by id (cold ones are not among them).
    history : History
        Finished jobs, oldest first.
    controls : Controls
        Pauses and throttles.
    tally : Tally
        Jobs per entrypoint and status, kept as they change.
    order : ClaimOrder
        The claimable jobs in claim order, and the claimed ones by time.
    journal : Journal
        The open transaction's undos and effects.
    dependencies : Dependencies
        The jobs that await parents, by parent.
    cold : ColdRows or None
        The claimable rows of a checkpoint that are not records yet.
    changed : dict of str to JobRecord, or None
        The jobs touched since the last ``freeze`` (None before the first).
    """

    def __init__(self) -> None:
        self.version = 0
        self.records: dict[str, JobRecord] = {}
        self.history = History()
        self.controls = Controls()
        self.tally = Tally()
        self.order = ClaimOrder(self.records)
        self.journal = Journal(self.order)
        self.dependencies = Dependencies(self.records)
        self.cold: ColdRows | None = None
        self.changed: dict[str, JobRecord] | None = None
        self._dedup: dict[str, str] = {}
        self._staged: dict[str, set[str]] = {}
        self._next_order = 0
        self._last_stamp = 0
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
        index.records.update(zip(ids, records, strict=True))
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
                index.dependencies.link(record)
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

    def __len__(self) -> int:
        return len(self.records) + (0 if self.cold is None else len(self.cold))

    def job(self, job_id: str) -> JobRecord | None:
        """Return the record of live job ``job_id``, if any (a cold one becomes a record)."""
        record = self.records.get(job_id)
        if record is None and self.cold is not None:
            record = self.cold.take(job_id)
            if record is not None:
                self.records[record.id] = record  # no change to the queue: not journalled
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

    # --- cold rows ------------------------------------------------------------------

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

    # --- snapshots ------------------------------------------------------------------

    def freeze(self, every_job: bool = False) -> Frozen:
        """Take a snapshot of the jobs changed since the previous freeze (of every live job, if
        ``every_job`` or if this is the first), the history and the controls; ``thaw`` ends it.

        Past the first, it costs O(1) Python steps for the jobs (a copy of the jobs by id for
        every job), and O(parents) for each job with parents settled since the previous freeze
        (``Dependencies.flatten``): until ``thaw``, a record live now first saves its values as
        of now before it changes, and a removed one is kept, so a reader, even in another
        thread, can tell the jobs as they were now (``Frozen.live``). From the first freeze on,
        ``changed`` collects the jobs touched since the last one.

        Raises
        ------
        RuntimeError
            If a snapshot is being taken, or a transaction is open (its changes may be undone).
        """
        if self._frozen is not None:
            raise RuntimeError("a snapshot is already being taken")
        if self.journal.open:
            raise RuntimeError("a snapshot cannot be taken inside a transaction")
        self.dependencies.flatten()  # what a checkpoint reads, even from another thread, is tuples
        changed = dict(self.records) if every_job or self.changed is None else self.changed
        self.changed, self._frozen, self._removed_while_frozen = {}, {}, {}
        self._frozen_below = self._next_order
        return Frozen(
            version=self.version,
            changed=changed,
            records=self.records,
            saved=self._frozen,
            removed=self._removed_while_frozen,
            next_order=self._next_order,
            history=list(self.history),
            controls=self.controls.to_dict(),
        )

    def track_changes(self) -> None:
        """Start collecting in ``changed`` the jobs touched from now on (a freshly loaded index
        whose every job the store already holds)."""
        self.changed = {}

    def thaw(self) -> None:
        """End the snapshot started by ``freeze``."""
        self._frozen, self._removed_while_frozen = None, {}

    @property
    def frozen(self) -> bool:
        """Whether a snapshot started by ``freeze`` is still being taken."""
        return self._frozen is not None

    # --- replay ---------------------------------------------------------------------

    def apply(self, effect: Effect) -> None:
        """Apply one resolved effect (from this process or replayed from storage).

        Raises
        ------
        ValueError
            If the effect does not fit the state (a log that does not replay).
        """
        if self.journal.undos is not None:
            self.journal.effects.append(effect)
        _APPLIERS[type(effect)](self, effect)

    def apply_all(self, effects: Iterable[Effect], *, ids_looked_up: bool = False) -> None:
        """Apply effects in order, a run of at least ``BULK_ADDS`` adds in bulk (a bulk write's,
        or a replayed one): the same state as one ``apply`` an add, in fewer steps a job. With
        ``ids_looked_up``, the caller found no job holding an added id (``adding``), so a run
        of adds does not look for them among the cold jobs again."""
        run: list[Added] = []
        for effect in effects:
            if isinstance(effect, Added):
                run.append(effect)
                continue
            self._add_run(run, ids_looked_up)
            run = []
            self.apply(effect)
        self._add_run(run, ids_looked_up)
        if not self.journal.open:
            self.order.prune()

    def _claimed(self, effect: Claimed) -> None:
        record = self._existing(effect.job_id, effect)
        if record.status is not JobStatus.QUEUED:
            raise ValueError(f"{effect} claims a job that is {record.status}")
        at = effect.at
        claimed = dict(status=JobStatus.IN_PROGRESS, heartbeat=at, lease=effect.lease, expires=effect.expires)
        attempts, claims = record.attempts + 1, (*record.claims, at)
        self._update(record, record.changed(**claimed, **_NO_PROGRESS, attempts=attempts, claims=claims))
        self.journal.add(self.controls.count_claim(record.entrypoint, at, record.tenant))

    def _requeued(self, effect: Requeued) -> None:
        record = self._existing(effect.job_id, effect)
        queued: dict[str, Any] = dict(status=JobStatus.QUEUED, heartbeat=None, lease=None, expires=None)
        queued |= _NO_PROGRESS
        error = effect.error
        queued |= dict(not_before=effect.not_before, last_error=record.last_error if error is None else error)
        if effect.reset:
            queued |= dict(attempts=0, dead_reason=None, dead_at=None, claims=())
        self._update(record, record.changed(**queued))

    def _beat(self, effect: Beat) -> None:
        job_id, at = effect.job_id, effect.at
        record = self._existing(job_id, effect)
        expires = record.expires
        if effect.expires is not None:
            expires = effect.expires
        elif expires is not None and record.heartbeat is not None:
            expires = checked_time(at + (expires - record.heartbeat), f"the lease of job {job_id!r}")
        progress = effect.progress
        reported = {} if progress is None else dict(progress=progress, progress_note=effect.note)
        reported |= {} if effect.lease is None else {"lease": effect.lease}
        self._update(record, record.changed(heartbeat=at, expires=expires, **reported))

    def _cancel_asked(self, effect: CancelAsked) -> None:
        record = self._existing(effect.job_id, effect)
        if record.status is not JobStatus.IN_PROGRESS:
            raise ValueError(f"{effect} asks to cancel a job that is {record.status}")
        self._update(record, record.changed(cancel_requested=effect.at))

    def _cancelled(self, effect: Cancelled) -> None:
        record = self._existing(effect.job_id, effect)
        self._remove(record)
        finished = HistoryRecord.of(record, effect.at, JobStatus.CANCELLED, error=effect.error)
        self.journal.add(self.history.add(finished))

    def _died(self, effect: Died) -> None:
        record = self._existing(effect.job_id, effect)
        last_error = record.last_error if effect.error is None else effect.error
        dead = dict(status=JobStatus.DEAD, heartbeat=None, lease=None, expires=None, not_before=None)
        reason, at = effect.reason, effect.at
        self._update(record, record.changed(**dead, last_error=last_error, dead_reason=reason, dead_at=at))
        self.journal.add(self.history.add(HistoryRecord.of(record, at, JobStatus.DEAD)))

    def _removed(self, effect: Removed) -> None:
        record = self._existing(effect.job_id, effect)
        self._remove(record)
        if effect.at is not None:
            finished = HistoryRecord.of(record, effect.at, JobStatus.ACKED, effect.result)
            self.journal.add(self.history.add(finished))

    def _forgotten(self, effect: Forgotten) -> None:
        self.journal.add(self.history.drop_oldest(effect.count))

    def _published(self, effect: Published) -> None:
        for job_id in sorted(self._staged_ids(effect.batch, effect), key=lambda i: self.records[i].order):
            record = self.records[job_id]
            self._update(record, record.changed(status=JobStatus.QUEUED))

    def _discarded(self, effect: Discarded) -> None:
        for job_id in list(self._staged_ids(effect.batch, effect)):
            self._remove(self.records[job_id])

    def _pause_set(self, effect: PauseSet) -> None:
        self.journal.add(self.controls.set_pause(effect))

    def _throttle_set(self, effect: ThrottleSet) -> None:
        self.journal.add(self.controls.set_throttle(effect))
        self.order.unpark_all()

    def _limit_set(self, effect: LimitSet) -> None:
        self.journal.add(self.controls.set_limit(effect))
        self.order.unpark_all()

    def _sink_marked(self, effect: SinkMarked) -> None:
        self.journal.add(self.controls.set_mark(effect))

    def _owned(self, effect: Owned) -> None:
        self.journal.add(self.controls.set_owner(effect))

    def _resharded(self, effect: Resharded) -> None:
        self.journal.add(self.controls.set_shards(effect))

    def _parent_settled(self, effect: ParentSettled) -> None:
        record = self.job(effect.job_id)
        if record is None:
            raise ValueError(f"{effect} settles a parent that the job does not await")
        self._update(record, record.changed(**settled_changes(record, effect)))

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

    def _add(self, added: Added, id_looked_up: bool = False) -> None:
        """Apply ``added``; with ``id_looked_up``, the caller found no job holding its id, cold
        ones included, so only the records are looked at again."""
        if (self.records.get(added.id) if id_looked_up else self.job(added.id)) is not None:
            raise ValueError(f"{added.id} is added twice")
        if added.dedup_key is not None and added.dedup_key in self._dedup:
            raise ValueError(f"{added.id} reuses the dedup key of {self._dedup[added.dedup_key]}")
        record = JobRecord.from_added(added, self._next_order)
        self._next_order += 1
        self._insert(record)

        def undo() -> None:
            self._delete(record)
            self._next_order -= 1

        self.journal.add(undo)

    def _add_run(self, run: list[Added], ids_looked_up: bool) -> None:
        if len(run) < BULK_ADDS:
            journal = self.journal
            for added in run:
                if journal.undos is not None:
                    journal.effects.append(added)
                self._add(added, ids_looked_up)
            return
        keys = [a.dedup_key for a in run if a.dedup_key is not None]
        cold = not ids_looked_up and self.cold is not None and any(self.job(a.id) is not None for a in run)
        if cold or self.records.keys() & {a.id for a in run} or len({a.id for a in run}) < len(run):
            raise ValueError("a job is added twice")
        if self._dedup.keys() & set(keys) or len(set(keys)) < len(keys):
            raise ValueError("two jobs share a dedup key")
        first = self._next_order
        records = list(map(JobRecord.from_added, run, range(first, first + len(run))))
        for record in records:
            self.tally.add(record)  # first: it refuses a finished job's status before anything changed
        self._next_order += len(records)
        self.records.update((record.id, record) for record in records)
        if self.changed is not None:
            for record in records:
                self.changed.setdefault(record.id, record)
        self._dedup.update((r.dedup_key, r.id) for r in records if r.dedup_key is not None)
        for record in records:
            if record.status is JobStatus.STAGED:
                self._stage(record)
            if record.awaiting:
                self.dependencies.link(record)
            self._last_stamp += 1
            record.stamp = self._last_stamp
        self.order.push_many(records)
        if self.journal.undos is not None:
            self.journal.effects.extend(run)

            def undo() -> None:
                for record in reversed(records):
                    self._delete(record)
                self._next_order = first

            self.journal.add(undo)

    def _remove(self, record: JobRecord) -> None:
        self._delete(record)
        self.journal.add(lambda: self._insert(record))

    def _update(self, record: JobRecord, state: ClaimState) -> None:
        if self.journal.undos is None:  # a replay: nothing to undo
            self._set(record, state)
            return
        before = record.claim_state()
        self._set(record, state)
        self.journal.add(lambda: self._set(record, before))

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
            self.dependencies.relink(record, awaited)
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
            self.dependencies.link(record)
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
            self.dependencies.unlink(record)
        self.tally.discard(record)
        if record.status is JobStatus.IN_PROGRESS:
            self.order.unpark(record.tenant)

    def _push(self, record: JobRecord) -> None:
        self._last_stamp += 1  # unique in this index: an entry left by an undone change never matches
        record.stamp = self._last_stamp
        self.order.push(record)


_APPLIERS: dict[type[Any], Callable[[IndexState, Any], None]] = {
    Added: IndexState._add,
    Claimed: IndexState._claimed,
    Requeued: IndexState._requeued,
    Beat: IndexState._beat,
    CancelAsked: IndexState._cancel_asked,
    Cancelled: IndexState._cancelled,
    Died: IndexState._died,
    Removed: IndexState._removed,
    Forgotten: IndexState._forgotten,
    Published: IndexState._published,
    Discarded: IndexState._discarded,
    PauseSet: IndexState._pause_set,
    ThrottleSet: IndexState._throttle_set,
    LimitSet: IndexState._limit_set,
    SinkMarked: IndexState._sink_marked,
    Owned: IndexState._owned,
    Resharded: IndexState._resharded,
    ParentSettled: IndexState._parent_settled,
}
"""How ``IndexState.apply`` applies each kind of effect."""


_ENDINGS = (fx.Removed, fx.Died, fx.Cancelled)
"""The effects that end a job, and so settle the jobs that wait for it."""
Found = Added | HistoryRecord
"""What an add is answered with: the job it added, or the one that held its id or dedup key."""


class QueueIndex(IndexState):
    """The live queue and the decisions of the operations on it (see ``IndexState``)."""

    def running(self, scope: str | None) -> int:
        """How many jobs of ``scope`` (an entrypoint, or None for all) are in progress."""
        if scope is None:
            return self.tally.total(IN_PROGRESS)
        counts = self.tally.counts.get(scope)
        return 0 if counts is None else counts[IN_PROGRESS]

    def running_of(self, scope: str | None, tenant: str | None) -> int:
        """How many jobs of ``tenant`` of ``scope`` (an entrypoint, or None for all) are in progress."""
        return self.tally.running.get((scope, tenant), 0)

    def heap_entries(self) -> int:
        """How many entries the heaps hold, live or outdated (outdated ones are skipped lazily)."""
        return self.order.entries()

    def select(
        self,
        statuses: Collection[JobStatus] | None = None,
        entrypoints: Collection[str] | None = None,
        created_before: int | None = None,
        start: int = 0,
    ) -> Iterator[JobRecord]:
        """Yield the records with one of ``statuses``, of one of ``entrypoints``, created before
        ``created_before`` (each filter only when given), from insertion number ``start`` on, in
        insertion order; at depth, the first ones cost a few of the slabs' blocks."""
        for record in self.ordered(statuses, entrypoints, start):
            if created_before is None or record.created < created_before:
                yield record

    def known(self, job_id: str) -> JobRecord | HistoryRecord | None:
        """Return the live job ``job_id``, else its newest history record, if either exists."""
        record = self.job(job_id)
        return record if record is not None else self.history.finished(job_id)

    def with_dedup_key(self, key: str) -> JobRecord | None:
        """Return the live job enqueued with dedup key ``key``, if any."""
        job_id = self._dedup.get(key)
        return None if job_id is None else self.records[job_id]  # a job with a dedup key is never cold

    def dedup_match(self, key: str, acked_since: int) -> JobRecord | HistoryRecord | None:
        """Return the live job enqueued with ``key``, else the newest one acked at or after
        ``acked_since`` that history still holds."""
        live = self.with_dedup_key(key)
        return live if live is not None else self.history.acked(key, acked_since)

    def claim(
        self,
        entrypoints: Collection[str] | None,
        batch_size: int,
        now: int,
        expires: int | None = None,
        leases: Callable[[], str] | None = None,
    ) -> list[fx.Claimed]:
        """Claim up to ``batch_size`` claimable jobs in priority order (of ``entrypoints`` if
        given), each under a new lease from ``leases`` that runs out at ``expires``.

        Jobs not yet due wait; paused entrypoints, throttles that are used up and limits
        on the jobs in progress that are reached hand out nothing; a job past its deadline
        dies (``ttl``) instead of being claimed.
        """
        self.order.release_due(now)
        claimed: list[fx.Claimed] = []
        while len(claimed) < batch_size:
            found = self.order.next_claimable(entrypoints, self.controls, now, self.running, self.running_of)
            if found is None:
                break
            job_id, give_back_turn = found
            record = self.records[job_id]
            if record.not_before is not None and record.not_before > now:  # released by a clock ahead of now
                give_back_turn()
                self.order.reschedule(record)
                continue
            if record.deadline is not None and record.deadline <= now:
                give_back_turn()  # a turn is a claim's
                self._applied(fx.Died(record.id, now, "ttl", record.last_error))
                continue
            self.journal.add(give_back_turn)
            claimed.append(self._applied(fx.Claimed(record.id, now, leases() if leases else None, expires)))
        return claimed

    def peek(self, entrypoints: Collection[str] | None, limit: int, now: int) -> list[JobRecord]:
        """Return the (up to ``limit``) jobs ``claim`` would take now, in order, taking none:
        the claim is made and undone."""
        journal = self.journal
        opened = not journal.open
        if opened:
            journal.begin()
        mark = journal.savepoint()
        try:
            return [self.records[claim.job_id] for claim in self.claim(entrypoints, limit, now)]
        finally:
            journal.rollback_to(mark)
            if opened:
                journal.rollback()

    def remove(
        self,
        job_id: str,
        lease: str | None = None,
        at: int | None = None,
        result: bytes | None = None,
        *,
        now: int | None = None,
    ) -> fx.Removed:
        """Remove a job: an ack at ``at`` (fenced by ``lease`` if given) that keeps ``result``
        in its history record, or with ``at`` None a purge at ``now`` that leaves no history
        (its waiting children fail with it)."""
        self._holding(job_id, lease)
        return self._applied(fx.Removed(job_id, at, result), now)

    def nack(
        self,
        job_id: str,
        lease: str | None,
        now: int,
        retry_at: int | None = None,
        error: str | None = None,
        max_attempts: int | None = None,
        dead: bool = False,
    ) -> fx.Requeued | fx.Died | fx.Cancelled:
        """Return a job to the queue, claimable from ``retry_at`` (fenced by ``lease`` if given);
        a claimed job that used its last attempt dies instead, and with ``dead`` a claimed job
        dies at once (reason ``failed``). A claimed job whose cancel was asked for is cancelled.

        ``max_attempts`` is the queue's default for jobs that have none of their own.
        """
        record = self._holding(job_id, lease)
        if record.status is JobStatus.WAITING:
            raise ValueError(f"job {job_id!r} waits for its parents; cancel it instead")
        if record.status is JobStatus.IN_PROGRESS and record.cancel_requested is not None:
            return self._applied(fx.Cancelled(job_id, now, error))
        if record.status is JobStatus.IN_PROGRESS and dead:
            return self._applied(fx.Died(job_id, now, "failed", error))
        limit = record.max_attempts if record.max_attempts is not None else max_attempts
        if record.status is JobStatus.IN_PROGRESS and limit is not None and record.attempts >= limit:
            return self._applied(fx.Died(job_id, now, "max_attempts", error))
        return self._applied(fx.Requeued(job_id, retry_at, error))

    def release(self, job_id: str, lease: str | None, now: int) -> list[fx.Requeued | fx.Cancelled]:
        """Return a claimed job to the queue at once, not as a failure (fenced by ``lease`` if
        given), or cancel it at ``now`` if its cancel was asked for; unfenced, nothing for a job
        in another status."""
        record = self._holding(job_id, lease)
        if record.status is not JobStatus.IN_PROGRESS:
            return []
        if record.cancel_requested is not None:
            return [self._applied(fx.Cancelled(job_id, now))]
        return [self._applied(fx.Requeued(job_id))]

    def cancel(
        self, job_id: str, lease: str | None, now: int, reason: str | None = None
    ) -> list[fx.CancelAsked | fx.Cancelled]:
        """Cancel a job at ``now``: one that is not running, or (fenced by ``lease``) the claimed
        job of the worker that stopped it, leaves the queue with a history record (whose error
        is ``reason``, if given); a running job, unfenced, is marked for its worker to stop (once).

        Raises
        ------
        JobNotFoundError
            If the job is not in the queue.
        LeaseLostError
            Fenced, if ``lease`` no longer holds the job.
        ValueError
            If the job is staged (discard its bulk write instead).
        """
        record = self._holding(job_id, lease)
        if record.status is JobStatus.STAGED:
            raise ValueError(f"job {job_id!r} is staged by a bulk write not yet published; discard the write")
        if lease is None and record.status is JobStatus.IN_PROGRESS:
            return [] if record.cancel_requested is not None else [self._applied(fx.CancelAsked(job_id, now))]
        return [self._applied(fx.Cancelled(job_id, now, reason))]

    def add(
        self,
        new: list[Added],
        now: int,
        retention: int,
        fresh: Container[str] = frozenset(),
        max_bytes: int | None = None,
    ) -> tuple[list[Found], list[Added]]:
        """Add ``new`` jobs at ``now``: each is answered with the job it adds, or with the job that
        holds its id or its dedup key already (live, or acked within the ``retention`` microseconds
        before ``now``); returns the answers and the jobs added. No job holds an id of ``fresh``.

        A job with parents (``after``) waits for those not settled yet; those settled already give
        their results (at most ``max_bytes`` bytes, summed, else ``PayloadTooLargeError``), and one
        that failed cancels the job in the same commit (unless its policy is to run anyway). A
        parent may be a job earlier in the same call.
        """
        acked_since = now - retention
        found: list[Found] = []
        keyed: dict[str, Added] = {}
        ids: dict[str, Added] = {}
        answered: dict[str, str] = {}
        added: list[Added] = []
        doomed: list[tuple[str, str]] = []
        waiting: list[int] = []  # the answers of jobs with parents, made again once all is applied
        for job in new:
            if self.controls.enqueues_paused(job.entrypoint):
                raise QueuePausedError(job.entrypoint)
            key = job.dedup_key
            match = None if job.id in fresh else ids.get(job.id) or self.known(job.id)
            if match is None and key is not None:
                match = keyed.get(key) or self.dedup_match(key, acked_since)
            if isinstance(match, JobRecord):
                found.append(match.as_added())
                answered[job.id] = match.id
            elif match is not None:
                found.append(match)
                answered[job.id] = match.job_id if isinstance(match, HistoryRecord) else match.id
            else:
                if job.after:
                    job, failure = self._with_parents(job, ids, answered, max_bytes)
                    if failure is not None:
                        doomed.append((job.id, failure))
                    waiting.append(len(found))
                added.append(job)
                keyed.update({} if key is None else {key: job})
                ids[job.id] = job
                found.append(job)
        self.apply_all(added, ids_looked_up=True)
        for job_id, failure in doomed:
            if self.job(job_id) is not None:  # else an earlier cancel here took it with its parent
                self._applied(fx.Cancelled(job_id, now, failure))
        for position in waiting:  # a later job of the call may have settled or ended it
            job_id = found[position].job_id
            record = self.job(job_id)
            found[position] = (
                record.as_added() if record is not None else self.history.finished(job_id) or found[position]
            )
        return found, added

    def _with_parents(
        self,
        job: Added,
        earlier: Mapping[str, Added],
        answered: Mapping[str, str],
        max_bytes: int | None,
    ) -> tuple[Added, str | None]:
        """Return ``job`` with the parents it still awaits and the results of those acked, and the
        failure that cancels it (None if none does).

        Raises
        ------
        JobNotFoundError
            If a parent is neither in the queue, nor in its history, nor earlier in the call.
        PayloadTooLargeError
            If the results of the parents acked already are over ``max_bytes`` bytes, summed.
        ValueError
            If a parent is staged by a bulk write not yet published (its discard would leave the
            job waiting for nothing), or the job itself is staged (a failed parent would cancel one
            job of a write that is to become visible whole).
        """
        if job.status is JobStatus.STAGED:
            raise ValueError(
                f"job {job.id!r} is staged by a bulk write: a staged job cannot have parents yet"
            )
        after = tuple(dict.fromkeys(answered.get(parent, parent) for parent in job.after))
        results: list[bytes | None] = [None] * len(after)
        awaiting: list[str] = []
        failure = None
        runs_anyway = job.on_parent_failure == ParentFailure.RUN
        for position, parent in enumerate(after):
            ended = None if parent in earlier else self._ending_of(parent)
            if ended is None:
                awaiting.append(parent)
                continue
            outcome, result = ended
            if outcome is JobStatus.ACKED:
                results[position] = result
            elif failure is None and not runs_anyway:
                failure = parent_failure(parent, ENDINGS[outcome])
        size = sum(len(result) for result in results if result is not None)
        if max_bytes is not None and size > max_bytes:
            raise PayloadTooLargeError(size, max_bytes, job.id)
        settled = len(awaiting) < len(after)
        status = JobStatus.WAITING if awaiting else JobStatus.QUEUED
        changed = dataclasses.replace(
            job,
            after=after,
            awaiting=tuple(awaiting),
            parent_results=tuple(results) if settled else (),
            status=status,
        )
        return changed, failure

    def _ending_of(self, parent: str) -> tuple[JobStatus, bytes | None] | None:
        """How job ``parent`` ended (its outcome and result), or None while it is yet to settle.

        Raises
        ------
        JobNotFoundError
            If it is neither in the queue nor in its history.
        ValueError
            If it is staged by a bulk write not yet published.
        """
        live = self.job(parent)
        if live is None:
            finished = self.history.finished(parent)
            if finished is None:
                raise JobNotFoundError(parent)
            return finished.outcome, finished.result
        if live.status is JobStatus.STAGED:
            raise ValueError(
                f"job {parent!r} is staged by a bulk write not yet published; it cannot be a parent"
            )
        return (JobStatus.DEAD, None) if live.status is JobStatus.DEAD else None

    def requeue(self, job_ids: Iterable[str]) -> list[fx.Requeued]:
        """Make jobs claimable at once whatever their state: a dead one with its attempts reset,
        a claimed one released, a delayed one due now; a job already claimable, or waiting for
        its parents, is left alone.

        Raises
        ------
        JobNotFoundError
            If one of ``job_ids`` is not in the queue.
        """
        done: list[fx.Requeued] = []
        for job_id in dict.fromkeys(job_ids):
            record = self._require(job_id)
            if record.status is JobStatus.WAITING or (
                record.status is JobStatus.QUEUED and record.not_before is None
            ):
                continue
            done.append(self._applied(fx.Requeued(job_id, reset=record.status is JobStatus.DEAD)))
        return done

    def requeue_dead(self, job_ids: Iterable[str] | None = None) -> list[fx.Requeued]:
        """Requeue dead jobs (those of ``job_ids``, or all) with their attempts reset.

        Raises
        ------
        JobNotFoundError
            If one of ``job_ids`` is not in the queue.
        """
        if job_ids is None:
            dead = sorted(self.tally.ids(DEAD), key=lambda job_id: self.records[job_id].order)
        else:
            dead = [job_id for job_id in job_ids if self._require(job_id).status is JobStatus.DEAD]
        return [self._applied(fx.Requeued(job_id, reset=True)) for job_id in dict.fromkeys(dead)]

    def heartbeat(
        self,
        job_id: str,
        now: int,
        lease: str | None = None,
        expires: int | None = None,
        progress: float | None = None,
        note: str | None = None,
        new_lease: str | None = None,
    ) -> list[fx.Beat]:
        """Move a claimed job's heartbeat to ``now`` and extend its lease (to ``expires`` when
        given), recording its ``progress`` and ``note`` when given, and with ``new_lease``
        holding the claim under that lease from now on; unfenced, nothing for a job in another
        status.

        Raises
        ------
        JobCancelledError
            If the job's cancel was asked for: its worker is to stop it (nothing changes);
            also once it ended cancelled (its lease ran out after the cancel was asked for).
        """
        finished = None if self.job(job_id) is not None else self.history.finished(job_id)
        if finished is not None and finished.outcome is JobStatus.CANCELLED:
            raise JobCancelledError(job_id)
        record = self._holding(job_id, lease)
        if record.status is not JobStatus.IN_PROGRESS:
            return []
        if record.cancel_requested is not None:
            raise JobCancelledError(job_id)
        return [self._applied(fx.Beat(job_id, now, expires, progress, note, new_lease))]

    def requeue_expired(
        self, now: int, max_attempts: int | None = None
    ) -> list[fx.Requeued | fx.Died | fx.Cancelled]:
        """Return the claimed jobs whose lease ran out before ``now`` to the queue; one that used
        its last attempt (its own ``max_attempts``, else the one given) dies instead, and one
        whose cancel was asked for is cancelled."""
        expired = self.order.expired(now)
        return [self.nack(job_id, None, now, None, LEASE_EXPIRED, max_attempts) for job_id in expired]

    def requeue_stale(self, cutoff: int, now: int) -> list[fx.Requeued | fx.Cancelled]:
        """Requeue the claimed jobs whose heartbeat is older than ``cutoff`` (or missing); one
        whose cancel was asked for is cancelled at ``now``."""
        return [effect for job_id in self.order.stale(cutoff) for effect in self.release(job_id, None, now)]

    def take_over(self, broker: str, replacing: str | None) -> Owned:
        """Make ``broker`` the queue's owner in the next epoch (``Owned``), unless it owns it
        already; ``replacing`` is the owner the caller saw when it decided to take the queue.

        Raises
        ------
        NotOwnerError
            If another broker than ``replacing`` took the queue meanwhile: the caller decided
            on an old view, and leaves it to that broker.
        """
        owner = self.controls.owner
        if owner is not None and owner.owner == broker:
            return owner
        if (None if owner is None else owner.owner) != replacing:
            raise NotOwnerError(None if owner is None else owner.owner)
        taken = Owned(broker, 1 if owner is None else owner.epoch + 1)
        self.apply(taken)
        return taken

    def reshard(self, shards: int) -> int:
        """Make the queue one of ``shards`` shards, unless it is already; returns the count.

        Raises
        ------
        ValueError
            If the queue has more shards (a count is never lowered).
        """
        if self.controls.shards != shards:
            self.apply(Resharded(shards))
        return shards

    def staged_batches(self) -> dict[str, int]:
        """Return the bulk writes not yet published, with their job counts."""
        return {batch: len(ids) for batch, ids in self._staged.items()}

    def publish(self, batch: str) -> list[fx.Published]:
        """Make the staged jobs of ``batch`` claimable; nothing if it has none (published already)."""
        return [self._applied(fx.Published(batch))] if batch in self._staged else []

    def discard(self, batch: str) -> list[fx.Discarded]:
        """Drop the staged jobs of ``batch``; nothing if it has none."""
        return [self._applied(fx.Discarded(batch))] if batch in self._staged else []

    def discard_abandoned(self, staged_before: int) -> list[fx.Discarded]:
        """Drop each bulk write whose staged jobs were created before ``staged_before`` (one of
        them is looked at: a writer stages a batch in minutes, and the limit is far longer)."""
        records = self.records
        abandoned = [
            batch for batch, ids in self._staged.items() if records[next(iter(ids))].created < staged_before
        ]
        return [self._applied(fx.Discarded(batch)) for batch in abandoned]

    def forget(self, finished_before: int, keep: int) -> list[fx.Forgotten]:
        """Drop the oldest history records: those finished before ``finished_before`` and any
        beyond the newest ``keep``."""
        count = self.history.expired(finished_before, keep)
        return [self._applied(fx.Forgotten(count))] if count else []

    def _applied(self, effect: E, now: int | None = None) -> E:
        """Apply a decision's effect; one that ends a job settles its waiting children in the
        same commit (a purge's at ``now``)."""
        self.apply(effect)
        if self.dependencies.by_parent and isinstance(effect, _ENDINGS):
            self._settle_children(effect, now)
        return effect

    def _settle_children(self, ended: fx.Removed | fx.Died | fx.Cancelled, now: int | None) -> None:
        """Settle the children of ``ended``'s job, and theirs in turn when a failure cancels them:
        an ack passes on its result; a failure cancels each child, or settles it without a
        result when its policy is to run anyway."""
        todo: deque[fx.Removed | fx.Died | fx.Cancelled] = deque([ended])
        while todo:
            effect = todo.popleft()
            children = self.dependencies.children_of(effect.job_id)
            if not children:
                continue
            result, failure, at = _outcome(effect, now)
            for child in children:
                if failure is None or child.on_parent_failure == ParentFailure.RUN:
                    self.apply(fx.ParentSettled(child.id, effect.job_id, result, at))
                    continue
                if at is None:
                    raise ValueError(f"purging job {effect.job_id!r}, which jobs wait for, needs a time")
                cancelled = fx.Cancelled(child.id, at, parent_failure(effect.job_id, failure))
                self.apply(cancelled)
                todo.append(cancelled)


def _outcome(
    effect: fx.Removed | fx.Died | fx.Cancelled, now: int | None
) -> tuple[bytes | None, str | None, int | None]:
    """The result, the failure (None for an ack) and the time of a job's end."""
    if isinstance(effect, fx.Removed):
        return (effect.result, None, effect.at) if effect.at is not None else (None, PURGED, now)
    return None, ENDINGS[JobStatus.DEAD if isinstance(effect, fx.Died) else JobStatus.CANCELLED], effect.at
