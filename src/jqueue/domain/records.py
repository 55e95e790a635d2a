"""Records of jobs inside a ``QueueIndex``, their public form, and frozen snapshots of them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import Any

from jqueue.domain.effects import Added
from jqueue.domain.errors import headline
from jqueue.domain.models import Job, JobStatus
from jqueue.domain.schema import CHANGING_FIELDS, FIELD_NAMES, JobFields, field_values
from jqueue.domain.times import from_micros

ClaimState = tuple[Any, ...]
"""The values of ``CHANGING_FIELDS`` of one record."""

_changing = attrgetter(*CHANGING_FIELDS)
_POSITIONS = {name: position for position, name in enumerate(CHANGING_FIELDS)}


@dataclass(slots=True, eq=False)
class JobRecord(JobFields):
    """One job's mutable fields inside an index; times in epoch microseconds.

    ``order`` is the job's insertion number; ``stamp`` marks the record's newest heap
    entry (set by the index on every move), so that older entries do not count.
    """

    order: int = 0
    stamp: int = 0

    @classmethod
    def from_added(cls, added: Added, order: int) -> JobRecord:
        """Return the record of an added job, inserted as number ``order``."""
        record = cls(*field_values(added))
        record.order = order
        return record

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
        return Added(*field_values(self))


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
        When it was acked, died or was cancelled.
    attempts : int
        Claims it took.
    outcome : JobStatus
        ``acked``, ``dead`` or ``cancelled``.
    error, reason : str or None
        Its last error and, for a dead job, why it died.
    dedup_key : str or None
        The key it was enqueued with.
    result : bytes or None
        What its handler returned (an acked job's, when it was acked with one).
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
    result: bytes | None = None

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

    @property
    def wait_seconds(self) -> float | None:
        """How long the job waited for its first claim (None if it was never claimed)."""
        return (self.claims[0] - self.created) / 1e6 if self.claims else None

    @property
    def run_seconds(self) -> float | None:
        """How long its last attempt ran (None if it was never claimed)."""
        return (self.finished - self.claims[-1]) / 1e6 if self.claims else None

    @property
    def error_line(self) -> str:
        """The line of its error that says what failed (``headline``; "" without an error)."""
        return headline(self.error or "")

    @classmethod
    def of(
        cls,
        record: JobRecord,
        finished: int,
        outcome: JobStatus,
        result: bytes | None = None,
        error: str | None = None,
    ) -> HistoryRecord:
        """Return the history record of ``record`` finishing at ``finished`` (acked, dead or
        cancelled), with its handler's ``result``, and ``error`` as its last error if given."""
        r = record
        fields = (r.id, r.entrypoint, r.created, r.claims, finished, r.attempts, outcome)
        return cls(*fields, r.last_error if error is None else error, r.dead_reason, r.dedup_key, result)

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


RECORD_COLUMNS = (*FIELD_NAMES, "order")
"""The columns of a record (its fields and its insertion number)."""


@dataclass(frozen=True)
class Frozen:
    """The live jobs, history and controls of an index at one version (see ``QueueIndex.freeze``).

    ``records`` change as commits go on; until the index thaws, each record first saves its
    values as of the freeze in ``saved`` (by job id), so the version's values can be rebuilt.
    """

    version: int
    records: list[JobRecord]
    saved: dict[str, ClaimState]
    history: list[HistoryRecord]
    controls: dict[str, Any]
