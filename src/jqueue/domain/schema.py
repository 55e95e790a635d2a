"""The one definition of a job's fields; every other form of a job is derived from it by name.

``JobFields`` declares each field once: its name, type and default, and in its metadata
(``FieldMeta``) its kind, the name of the public ``Job`` attribute that shows it, whether
it changes after the add, whether it is stored, and whether a bulk write's rows set it. The
index's records, the ``Added`` effect, the public ``Job``, the wire formats, the Spark schema
and the Spark writer's columns all follow ``FIELDS``, so adding a field is one declaration
here plus its meaning (the transitions that set it).
``tests/test_job_schema.py`` fails when a form drifts from it, and ``tests/test_schema_forms.py``
when one written out for speed does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from operator import attrgetter
from typing import Annotated, Any, Generic, TypeVar

from jqueue.domain.declared import DeclaredField, declared_fields
from jqueue.domain.models import Job, JobStatus, trusted_job
from jqueue.domain.times import from_micros, span_micros, span_of, to_micros

T = TypeVar("T")


class Kind(StrEnum):
    """What a field's value means, which decides how each format stores it."""

    TEXT = "text"
    NAME = "name"
    """A text that is never empty (a tenant): the formats refuse an empty one as damage."""
    INT64 = "int64"
    COUNT = "count"
    """A non-negative integer."""
    TIME = "time"
    """Epoch microseconds in the domain; an aware datetime in ``Job``."""
    TIMES = "times"
    """A tuple of ``TIME`` values."""
    STATUS = "status"
    PAYLOAD = "payload"
    """Bytes in memory, or a handle (an int) under which a store keeps them."""
    FRACTION = "fraction"
    """A number from 0 to 1."""
    SPAN = "span"
    """A positive span of time: microseconds in the domain; a ``timedelta`` in ``Job``."""
    IDS = "ids"
    """A tuple of job ids."""
    RESULTS = "results"
    """A tuple of results (bytes), each None until it is known or when there is none."""


EpochMicros = Annotated[int, Kind.TIME]
"""A time in epoch microseconds, as effects and records hold it."""
Counted = Annotated[int, Kind.COUNT]
"""A non-negative integer."""
Share = Annotated[float, Kind.FRACTION]
"""A number from 0 to 1."""
Span = Annotated[int, Kind.SPAN]
"""A positive span of time in microseconds, as effects and records hold it."""


@dataclass(frozen=True)
class FieldMeta:
    """What ``JobFields`` says about one field beyond its type and default."""

    kind: Kind
    public: str | None = None
    """The ``Job`` attribute, when it is named differently."""
    changes: bool = False
    """Whether transitions after the add change it (claims, heartbeats, requeues, deaths)."""
    stored: bool = True
    """Whether the wire formats keep it."""
    written: bool = False
    """Whether a bulk write's rows may set it (a part's rows, a column of Spark's writer); the
    write sets the others (or leaves them at their defaults)."""


def _meta(
    kind: Kind,
    public: str | None = None,
    *,
    changes: bool = False,
    stored: bool = True,
    written: bool = False,
) -> dict[str, FieldMeta]:
    return {"jqueue": FieldMeta(kind, public, changes, stored, written)}


Payload = bytes | int
"""A payload in memory (bytes), or the handle under which the queue's store keeps it (an int
that only the store interprets)."""


@dataclass(slots=True)
class JobFields:
    """Everything about a job, with times in epoch microseconds: the order here is the order of
    the log layout's ``add`` array, so a new field goes last, with a default."""

    id: str = field(metadata=_meta(Kind.TEXT, written=True))
    entrypoint: str = field(metadata=_meta(Kind.TEXT))
    priority: int = field(metadata=_meta(Kind.INT64, written=True))
    created: int = field(metadata=_meta(Kind.TIME, "created_at"))
    status: JobStatus = field(metadata=_meta(Kind.STATUS, changes=True))
    heartbeat: int | None = field(metadata=_meta(Kind.TIME, "heartbeat_at", changes=True))
    payload: Payload = field(metadata=_meta(Kind.PAYLOAD, written=True))
    attempts: int = field(default=0, metadata=_meta(Kind.COUNT, changes=True))
    lease: str | None = field(default=None, metadata=_meta(Kind.TEXT, changes=True))
    expires: int | None = field(default=None, metadata=_meta(Kind.TIME, "lease_expires_at", changes=True))
    max_attempts: int | None = field(default=None, metadata=_meta(Kind.COUNT))
    not_before: int | None = field(default=None, metadata=_meta(Kind.TIME, changes=True, written=True))
    deadline: int | None = field(default=None, metadata=_meta(Kind.TIME))
    dedup_key: str | None = field(default=None, metadata=_meta(Kind.TEXT, written=True))
    last_error: str | None = field(default=None, metadata=_meta(Kind.TEXT, changes=True))
    dead_reason: str | None = field(default=None, metadata=_meta(Kind.TEXT, changes=True))
    dead_at: int | None = field(default=None, metadata=_meta(Kind.TIME, changes=True))
    claims: tuple[int, ...] = field(default=(), metadata=_meta(Kind.TIMES, "claimed_at", changes=True))
    batch: str | None = field(default=None, metadata=_meta(Kind.TEXT))
    cancel_requested: int | None = field(
        default=None, metadata=_meta(Kind.TIME, "cancel_requested_at", changes=True)
    )
    progress: float | None = field(default=None, metadata=_meta(Kind.FRACTION, changes=True))
    progress_note: str | None = field(default=None, metadata=_meta(Kind.TEXT, changes=True))
    after: tuple[str, ...] = field(default=(), metadata=_meta(Kind.IDS, written=True))
    on_parent_failure: str | None = field(default=None, metadata=_meta(Kind.TEXT, written=True))
    awaiting: tuple[str, ...] = field(default=(), metadata=_meta(Kind.IDS, changes=True))
    parent_results: tuple[bytes | None, ...] = field(default=(), metadata=_meta(Kind.RESULTS, changes=True))
    traceparent: str | None = field(default=None, metadata=_meta(Kind.TEXT))
    released: int | None = field(default=None, metadata=_meta(Kind.TIME, "released_at", changes=True))
    tenant: str | None = field(default=None, metadata=_meta(Kind.NAME, written=True))
    timeout: int | None = field(default=None, metadata=_meta(Kind.SPAN))


@dataclass(frozen=True)
class JobField(DeclaredField):
    """One field of ``JobFields``, resolved: see ``FieldMeta`` for the meaning of each part."""

    kind: Kind
    public: str
    changes: bool
    stored: bool
    written: bool


def _resolved() -> tuple[JobField, ...]:
    resolved = []
    for f in declared_fields(JobFields):
        meta: FieldMeta = f.field.metadata["jqueue"]
        public = meta.public or f.name
        resolved.append(
            JobField(
                **f.parts(),
                kind=meta.kind,
                public=public,
                changes=meta.changes,
                stored=meta.stored,
                written=meta.written,
            )
        )
    return tuple(resolved)


FIELDS = _resolved()
"""Every job field, in declaration order."""
FIELD_NAMES = tuple(f.name for f in FIELDS)
STORED_FIELDS = tuple(f for f in FIELDS if f.stored)
"""The fields the wire formats keep: the first ones (a field kept only in memory goes last)."""
CHANGING_FIELDS = tuple(f.name for f in FIELDS if f.changes)
"""The fields that change after a job is added."""
TIME_FIELDS = tuple(f for f in FIELDS if f.kind in (Kind.TIME, Kind.TIMES))
WRITTEN_FIELDS = tuple(f for f in FIELDS if f.written)
"""The fields a bulk write's rows may set: a part's rows (``PartRow``) and columns, and the columns
Spark's writer takes (a payload, a delay for ``not_before``, and an option for each other)."""

_values = attrgetter(*FIELD_NAMES)


def field_values(job: JobFields) -> tuple[Any, ...]:
    """Return a job's values in ``FIELDS`` order."""
    values: tuple[Any, ...] = _values(job)
    return values


def public_constructor(target: Callable[..., T]) -> Callable[[JobFields, bytes], T]:
    """Return a function that calls ``target`` with a job's fields as keywords named as on ``Job``
    (times as datetimes) and ``payload``: the public form of a job, or a format's object of it."""

    def public_form(job: JobFields, payload: bytes | None = None) -> T:
        # Written out rather than looped over FIELDS: a dequeue makes one of these per claimed job,
        # the single format one per job per commit, and a loop costs half as much again.
        # tests/test_schema_forms.py checks it against FIELDS: each field under its public name,
        # in the order of Job's fields (the order of a Job's __dict__).
        return target(
            id=job.id,
            entrypoint=job.entrypoint,
            payload=payload,
            status=job.status,
            priority=job.priority,
            created_at=from_micros(job.created),
            heartbeat_at=None if job.heartbeat is None else from_micros(job.heartbeat),
            attempts=job.attempts,
            lease=job.lease,
            lease_expires_at=None if job.expires is None else from_micros(job.expires),
            max_attempts=job.max_attempts,
            not_before=None if job.not_before is None else from_micros(job.not_before),
            deadline=None if job.deadline is None else from_micros(job.deadline),
            dedup_key=job.dedup_key,
            last_error=job.last_error,
            dead_reason=job.dead_reason,
            dead_at=None if job.dead_at is None else from_micros(job.dead_at),
            claimed_at=tuple(map(from_micros, job.claims)),
            batch=job.batch,
            cancel_requested_at=None if job.cancel_requested is None else from_micros(job.cancel_requested),
            progress=job.progress,
            progress_note=job.progress_note,
            after=job.after,
            on_parent_failure=job.on_parent_failure,
            awaiting=job.awaiting,
            parent_results=job.parent_results,
            traceparent=job.traceparent,
            released_at=None if job.released is None else from_micros(job.released),
            tenant=job.tenant,
            timeout=None if job.timeout is None else span_of(job.timeout),
        )

    return public_form


job_from = public_constructor(trusted_job)
"""Return the public ``Job`` for a job's fields, with its payload bytes."""


@dataclass(frozen=True)
class JobForm(Generic[T]):
    """What a queue's answers make of a job: the public ``Job`` (``PUBLIC_FORM``), or an adapter's
    own object of it (the service's wire form), made from the job's record with no ``Job`` in
    between.

    Attributes
    ----------
    of_record : callable
        The answer for a job's fields and its payload bytes.
    of_job : callable
        The answer for a ``Job`` (a finished job found in the history, which has no record).
    """

    of_record: Callable[[JobFields, bytes], T]
    of_job: Callable[[Job], T]


def _itself(job: Job) -> Job:
    return job


PUBLIC_FORM: JobForm[Job] = JobForm(job_from, _itself)
"""Answers as public ``Job`` objects: what every documented call returns."""


def domain_values(job: Any) -> tuple[Any, ...]:
    """Return the values of ``FIELDS`` for a public ``Job``, or any object with its attribute names
    (the single format's job objects), with the payload as bytes."""
    # Written out as public_form is, for the single format's reads (checked against FIELDS, in order).
    return (
        job.id,
        job.entrypoint,
        job.priority,
        to_micros(job.created_at),
        job.status,
        None if job.heartbeat_at is None else to_micros(job.heartbeat_at),
        job.payload,
        job.attempts,
        job.lease,
        None if job.lease_expires_at is None else to_micros(job.lease_expires_at),
        job.max_attempts,
        None if job.not_before is None else to_micros(job.not_before),
        None if job.deadline is None else to_micros(job.deadline),
        job.dedup_key,
        job.last_error,
        job.dead_reason,
        None if job.dead_at is None else to_micros(job.dead_at),
        tuple(map(to_micros, job.claimed_at)),
        job.batch,
        None if job.cancel_requested_at is None else to_micros(job.cancel_requested_at),
        job.progress,
        job.progress_note,
        job.after,
        job.on_parent_failure,
        job.awaiting,
        job.parent_results,
        job.traceparent,
        None if job.released_at is None else to_micros(job.released_at),
        job.tenant,
        None if job.timeout is None else span_micros(job.timeout),
    )
