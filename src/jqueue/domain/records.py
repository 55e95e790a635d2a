"""Records of jobs inside a ``QueueIndex``, their public form, and frozen snapshots of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter
from typing import Any

from jqueue.domain.awaiting import as_tuple
from jqueue.domain.declared import DeclaredField, declared_fields
from jqueue.domain.effects import Added
from jqueue.domain.errors import headline
from jqueue.domain.models import Job, JobStatus
from jqueue.domain.schema import CHANGING_FIELDS, FIELD_NAMES, JobFields, Kind, field_values
from jqueue.domain.times import from_micros

ClaimState = tuple[Any, ...]
"""The values of ``CHANGING_FIELDS`` of one record."""

_changing = attrgetter(*CHANGING_FIELDS)
_POSITIONS = {name: position for position, name in enumerate(CHANGING_FIELDS)}


@dataclass(slots=True, eq=False)
class JobRecord(JobFields):
    """One job's mutable fields inside an index; times in epoch microseconds.

    ``order`` is the job's insertion number; ``place`` is opaque to the domain (the log
    layout's slab that holds the job's row, like a payload reference); ``stamp`` marks the
    record's newest heap entry (set by the index on every move), so that older entries do
    not count. Inside an index, ``awaiting`` and ``parent_results`` of a job whose parents are
    being settled may be views that read as the tuples (``jqueue.domain.awaiting``):
    ``as_added`` and a freeze make tuples of them.
    """

    order: int = 0
    place: int | None = None
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
        """Set the values of ``CHANGING_FIELDS``.

        Written out, as one assignment: every claim, ack and heartbeat sets a record's state, and
        a loop of ``setattr`` over the fields costs about six times as much.
        ``tests/test_schema_forms.py`` checks that it names them all, in order; a state of
        another length fails here.
        """
        (
            self.status,
            self.heartbeat,
            self.attempts,
            self.lease,
            self.expires,
            self.not_before,
            self.last_error,
            self.dead_reason,
            self.dead_at,
            self.claims,
            self.cancel_requested,
            self.progress,
            self.progress_note,
            self.awaiting,
            self.parent_results,
            self.released,
        ) = state

    def as_added(self) -> Added:
        """Return an immutable snapshot of this job as it is now (the effect that would add it)."""
        added = Added(*field_values(self))
        if added.awaiting.__class__ is not tuple or added.parent_results.__class__ is not tuple:
            added.awaiting, added.parent_results = as_tuple(added.awaiting), as_tuple(added.parent_results)
        return added


def _kept(kind: Kind, public: str | None = None, job: str | None = None) -> dict[str, HistoryMeta]:
    return {"jqueue": HistoryMeta(kind, public, job)}


@dataclass(frozen=True)
class HistoryMeta:
    """What ``HistoryRecord`` says about one field: its ``Kind`` (how formats store it), its
    public name (times as datetimes), and the ``Job`` attribute that shows it."""

    kind: Kind
    public: str | None = None
    job: str | None = None


@dataclass(frozen=True, slots=True)
class HistoryRecord:
    """What is kept of a finished job: times in epoch microseconds (see the ``*_at`` properties).

    The one declaration of a history record: its wire form, its public form (``public``,
    which the CLI and the HTTP API show), its ``Job`` (``as_job``) and the Spark ``history``
    table follow these fields (``HISTORY_FIELDS``).

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
    after : tuple of str
        Its parents' ids (``Job.after``), so that a workflow can be shown once it is done.
    tenant : str or None
        Whose job it was (``Job.tenant``).
    lease : str or None
        The lease of the claim it finished under (None for a job that finished unclaimed, or
        one an earlier version recorded): which of its claims an ``ack`` landed for.
    """

    job_id: str = field(metadata=_kept(Kind.TEXT, job="id"))
    entrypoint: str = field(metadata=_kept(Kind.TEXT, job="entrypoint"))
    created: int = field(metadata=_kept(Kind.TIME, "created_at", "created_at"))
    claims: tuple[int, ...] = field(metadata=_kept(Kind.TIMES, "claimed_at", "claimed_at"))
    finished: int = field(metadata=_kept(Kind.TIME, "finished_at"))
    attempts: int = field(metadata=_kept(Kind.COUNT, job="attempts"))
    outcome: JobStatus = field(metadata=_kept(Kind.STATUS, job="status"))
    error: str | None = field(default=None, metadata=_kept(Kind.TEXT, job="last_error"))
    reason: str | None = field(default=None, metadata=_kept(Kind.TEXT, job="dead_reason"))
    dedup_key: str | None = field(default=None, metadata=_kept(Kind.TEXT, job="dedup_key"))
    result: bytes | None = field(default=None, metadata=_kept(Kind.PAYLOAD))
    after: tuple[str, ...] = field(default=(), metadata=_kept(Kind.IDS, job="after"))
    tenant: str | None = field(default=None, metadata=_kept(Kind.NAME, job="tenant"))
    lease: str | None = field(default=None, metadata=_kept(Kind.TEXT))

    @property
    def created_at(self) -> datetime:
        """When the job was enqueued."""
        return from_micros(self.created)

    @property
    def claimed_at(self) -> tuple[datetime, ...]:
        """When the job was claimed, each time."""
        return tuple(map(from_micros, self.claims))

    @property
    def first_claimed_at(self) -> datetime | None:
        """When the job was first claimed (None if it never was)."""
        return from_micros(self.claims[0]) if self.claims else None

    @property
    def last_claimed_at(self) -> datetime | None:
        """When the job was last claimed (None if it never was)."""
        return from_micros(self.claims[-1]) if self.claims else None

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
        error = r.last_error if error is None else error
        return cls(*fields, error, r.dead_reason, r.dedup_key, result, r.after, r.tenant, r.lease)

    def public(self) -> dict[str, Any]:
        """Return the record's fields by their public names (times as datetimes)."""
        return {f.public: getattr(self, f.public) for f in HISTORY_FIELDS}

    def as_job(self) -> Job:
        """Return the finished job as a ``Job`` (its payload is not kept: empty)."""
        shown = {f.job: getattr(self, f.public) for f in HISTORY_FIELDS if f.job is not None}
        return Job.model_construct(payload=b"", **shown)


@dataclass(frozen=True)
class HistoryField(DeclaredField):
    """One field of ``HistoryRecord``, resolved (see ``HistoryMeta``)."""

    kind: Kind
    public: str
    job: str | None


def _history_fields() -> tuple[HistoryField, ...]:
    resolved = []
    for f in declared_fields(HistoryRecord):
        meta: HistoryMeta = f.field.metadata["jqueue"]
        public = meta.public or f.name
        resolved.append(HistoryField(**f.parts(), kind=meta.kind, public=public, job=meta.job))
    return tuple(resolved)


HISTORY_FIELDS = _history_fields()
"""Every field of a history record, in declaration order (the wire order)."""


RECORD_COLUMNS = (*FIELD_NAMES, "order")
"""The columns of a record (its fields and its insertion number)."""


@dataclass(frozen=True)
class Frozen:
    """The jobs changed since the previous freeze, the history and the controls of an index at
    one version (see ``QueueIndex.freeze``).

    ``records`` is the index's own dict, which changes as commits go on; until the index
    thaws, a record first saves its values as of the freeze in ``saved`` and a removed one
    stays in ``removed`` (by job id), so ``live`` can tell the version's jobs.
    ``changed`` holds each job touched since the previous freeze as it was first touched
    (a removed job's record, too).
    """

    version: int
    changed: dict[str, JobRecord]
    records: dict[str, JobRecord]
    saved: dict[str, ClaimState]
    removed: dict[str, JobRecord]
    next_order: int
    history: list[HistoryRecord]
    controls: dict[str, Any]

    def live(self, job_id: str) -> JobRecord | None:
        """Return the record of job ``job_id`` if it was live at the freeze (its values may have
        changed since: ``saved`` holds those of the freeze), else None; safe from another
        thread, as a removed record enters ``removed`` before it leaves ``records``."""
        for found in (self.records.get(job_id), self.removed.get(job_id)):
            if found is not None and found.order < self.next_order:
                return found
        return None
