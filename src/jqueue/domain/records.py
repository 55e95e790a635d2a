"""Records of jobs inside a ``QueueIndex``, their public form, and frozen snapshots of them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import Any

from jqueue.domain.effects import Added, Payload, from_micros, to_micros
from jqueue.domain.models import Job, JobStatus

ADDED_FIELDS = (
    "id",
    "entrypoint",
    "priority",
    "created",
    "status",
    "heartbeat",
    "payload",
    "attempts",
    "lease",
    "expires",
    "max_attempts",
    "not_before",
    "deadline",
    "dedup_key",
    "last_error",
    "dead_reason",
    "dead_at",
    "claims",
    "batch",
)
"""A record's fields in the order of ``Added`` (whose first field is ``job_id``)."""

CHANGING_FIELDS = (
    "status",
    "heartbeat",
    "attempts",
    "lease",
    "expires",
    "not_before",
    "last_error",
    "dead_reason",
    "dead_at",
    "claims",
)
"""The fields that change after a job is added (by claims, heartbeats, requeues, deaths)."""

ClaimState = tuple[Any, ...]
"""The values of ``CHANGING_FIELDS`` of one record."""

_changing = attrgetter(*CHANGING_FIELDS)
_POSITIONS = {name: position for position, name in enumerate(CHANGING_FIELDS)}


class JobRecord:
    """One job's mutable metadata inside an index; times in epoch microseconds.

    ``order`` is the job's insertion number; ``stamp`` marks the record's newest heap
    entry (set by the index on every move), so that older entries do not count.
    """

    __slots__ = (*ADDED_FIELDS, "order", "stamp")

    def __init__(
        self,
        job_id: str,
        entrypoint: str,
        priority: int,
        created: int,
        status: JobStatus,
        heartbeat: int | None,
        payload: Payload,
        order: int,
        attempts: int = 0,
        lease: str | None = None,
        expires: int | None = None,
        max_attempts: int | None = None,
        not_before: int | None = None,
        deadline: int | None = None,
        dedup_key: str | None = None,
        last_error: str | None = None,
        dead_reason: str | None = None,
        dead_at: int | None = None,
        claims: tuple[int, ...] = (),
        batch: str | None = None,
    ) -> None:
        self.id = job_id
        self.entrypoint = entrypoint
        self.priority = priority
        self.created = created
        self.status = status
        self.heartbeat = heartbeat
        self.payload = payload
        self.order = order
        self.attempts = attempts
        self.lease = lease
        self.expires = expires
        self.max_attempts = max_attempts
        self.not_before = not_before
        self.deadline = deadline
        self.dedup_key = dedup_key
        self.last_error = last_error
        self.dead_reason = dead_reason
        self.dead_at = dead_at
        self.claims = claims
        self.batch = batch
        self.stamp = 0

    @classmethod
    def from_added(cls, added: Added, order: int) -> JobRecord:
        """Return the record of an added job, inserted as number ``order``."""
        a = added
        head = (a.job_id, a.entrypoint, a.priority, a.created, a.status, a.heartbeat, a.payload, order)
        return cls(
            *head,
            a.attempts,
            a.lease,
            a.expires,
            a.max_attempts,
            a.not_before,
            a.deadline,
            a.dedup_key,
            a.last_error,
            a.dead_reason,
            a.dead_at,
            a.claims,
            a.batch,
        )

    def claim_state(self) -> ClaimState:
        """Return the values of ``CHANGING_FIELDS``."""
        values: ClaimState = _changing(self)
        return values

    def changed(self, **values: Any) -> ClaimState:
        """Return the values of ``CHANGING_FIELDS`` with some replaced."""
        state = list(_changing(self))
        for name, value in values.items():
            state[_POSITIONS[name]] = value
        return tuple(state)

    def set_claim_state(self, state: ClaimState) -> None:
        """Set the values of ``CHANGING_FIELDS``."""
        for name, value in zip(CHANGING_FIELDS, state, strict=True):
            setattr(self, name, value)

    def as_added(self) -> Added:
        """Return an immutable snapshot of this job as it is now (the effect that would add it)."""
        return Added(*attrgetter(*ADDED_FIELDS)(self))


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """What is kept of a finished job: times in epoch microseconds (see the ``*_at`` properties).

    Attributes
    ----------
    job_id, entrypoint : str
        The job.
    created : int
        When it was enqueued.
    claims : tuple of int
        When it was claimed, each time.
    finished : int
        When it was acked or died.
    attempts : int
        Claims it took.
    outcome : JobStatus
        ``acked`` or ``dead``.
    error, reason : str or None
        Its last error and, for a dead job, why it died.
    dedup_key : str or None
        The key it was enqueued with.
    """

    job_id: str
    entrypoint: str
    created: int
    claims: tuple[int, ...]
    finished: int
    attempts: int
    outcome: JobStatus
    error: str | None = None
    reason: str | None = None
    dedup_key: str | None = None

    @property
    def created_at(self) -> datetime:
        """When the job was enqueued."""
        return from_micros(self.created)

    @property
    def claimed_at(self) -> tuple[datetime, ...]:
        """When the job was claimed, each time."""
        return tuple(map(from_micros, self.claims))

    @property
    def finished_at(self) -> datetime:
        """When the job was acked or died."""
        return from_micros(self.finished)

    @classmethod
    def of(cls, record: JobRecord, finished: int, outcome: JobStatus) -> HistoryRecord:
        """Return the history record of ``record`` finishing at ``finished`` (acked or dead)."""
        r = record
        fields = (r.id, r.entrypoint, r.created, r.claims, finished, r.attempts, outcome)
        return cls(*fields, r.last_error, r.dead_reason, r.dedup_key)

    def as_job(self) -> Job:
        """Return the finished job as a ``Job`` (its payload is not kept: empty)."""
        return Job.model_construct(
            id=self.job_id,
            entrypoint=self.entrypoint,
            payload=b"",
            status=self.outcome,
            created_at=self.created_at,
            attempts=self.attempts,
            dedup_key=self.dedup_key,
            last_error=self.error,
            dead_reason=self.reason,
            claimed_at=self.claimed_at,
        )


def _datetime(micros: int | None) -> datetime | None:
    return None if micros is None else from_micros(micros)


def _micros(moment: datetime | None) -> int | None:
    return None if moment is None else to_micros(moment)


def job_from(snapshot: Added, payload: bytes) -> Job:
    """Return the public ``Job`` for a record snapshot, with its payload bytes."""
    s = snapshot
    return Job.model_construct(
        id=s.job_id,
        entrypoint=s.entrypoint,
        payload=payload,
        status=s.status,
        priority=s.priority,
        created_at=from_micros(s.created),
        heartbeat_at=_datetime(s.heartbeat),
        attempts=s.attempts,
        lease=s.lease,
        lease_expires_at=_datetime(s.expires),
        max_attempts=s.max_attempts,
        not_before=_datetime(s.not_before),
        deadline=_datetime(s.deadline),
        dedup_key=s.dedup_key,
        last_error=s.last_error,
        dead_reason=s.dead_reason,
        dead_at=_datetime(s.dead_at),
        claimed_at=tuple(map(from_micros, s.claims)),
        batch=s.batch,
    )


def added_from(job: Job) -> Added:
    """Return the effect that adds ``job`` exactly as it is (payload in memory)."""
    return Added(
        job.id,
        job.entrypoint,
        job.priority,
        to_micros(job.created_at),
        job.status,
        _micros(job.heartbeat_at),
        job.payload,
        job.attempts,
        job.lease,
        _micros(job.lease_expires_at),
        job.max_attempts,
        _micros(job.not_before),
        _micros(job.deadline),
        job.dedup_key,
        job.last_error,
        job.dead_reason,
        _micros(job.dead_at),
        tuple(map(to_micros, job.claimed_at)),
        job.batch,
    )


RECORD_COLUMNS = (*ADDED_FIELDS, "order")
"""The columns of a snapshot and of a checkpoint."""


class IndexSnapshot:
    """The live jobs, history and controls of an index at one version, read lazily
    (see ``QueueIndex.freeze``)."""

    def __init__(
        self,
        version: int,
        records: list[JobRecord],
        segments: set[int],
        saved: dict[str, ClaimState],
        history: list[HistoryRecord],
        controls: dict[str, Any],
    ) -> None:
        self.version = version
        self.segments = segments
        self.history = history
        self.controls = controls
        self._records = records
        self._saved = saved
        self._searched: set[str] = set()
        self._rows: dict[str, int] = {}

    def column(self, name: str) -> list[Any]:
        """Return one record column (``id``, ``entrypoint``, ... ``order``) as of the snapshot,
        built with a C-level loop so that the event loop is held up only briefly."""
        values = list(map(attrgetter(name), self._records))
        if name in CHANGING_FIELDS:
            position = CHANGING_FIELDS.index(name)
            for row, before in self._patches():
                values[row] = before[position]
        return values

    def _patches(self) -> list[tuple[int, ClaimState]]:
        """Return (row, values at the snapshot) of each record changed since; called after a
        column is read, so a change made meanwhile has saved its old values already."""
        saved = dict(self._saved)
        unseen = saved.keys() - self._searched
        if unseen:
            self._searched |= unseen
            for row, record in enumerate(self._records):
                if record.id in unseen:
                    self._rows[record.id] = row
        rows = self._rows
        return [(rows[job_id], before) for job_id, before in saved.items() if job_id in rows]
