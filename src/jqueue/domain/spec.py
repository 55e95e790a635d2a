"""``JobSpec``: a job to enqueue, with its options."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict, get_origin

from jqueue.domain.declared import DeclaredField, declared_fields
from jqueue.domain.effects import Added
from jqueue.domain.models import JobStatus, ParentFailure, new_job_id
from jqueue.domain.times import span_micros, to_micros
from jqueue.domain.values import INT64_MAX, INT64_MIN, Bounds, checked_int64, checked_text

MAX_ID_LENGTH = 256
"""The longest job id a ``JobSpec`` takes."""
MAX_PARENTS = 10_000
"""The most parents (``after``) a job may have: one job waiting for more should wait for a few
steps that each wait for a share of them (a workflow's group of chords)."""
LONGEST_SPAN = timedelta(days=365 * 1000)
"""The longest ``delay`` or ``ttl`` a job takes (a time past it would not fit a datetime)."""


SPAN = Bounds(ge=timedelta(0), le=LONGEST_SPAN)
"""A span a caller hands over (a delay, a lease, which 0 ends at once): 0 to ``LONGEST_SPAN``."""
POSITIVE_SPAN = Bounds(gt=timedelta(0), le=LONGEST_SPAN)
"""A span that must be positive (a ttl, a visibility timeout)."""
ATTEMPTS = Bounds(ge=1, le=INT64_MAX)
"""A number of attempts (a job's, a policy's, a worker's ``max_attempts``)."""
BATCH_SIZE = Bounds(ge=0)
"""How many jobs one claim asks for (``batch_size``; 0 claims none)."""
INT64 = Bounds(ge=INT64_MIN, le=INT64_MAX)
JOB_ID = Bounds(min_length=1, max_length=MAX_ID_LENGTH)
PARENTS = Bounds(max_length=MAX_PARENTS)
"""A job's parents: at most ``MAX_PARENTS`` ids."""
TRACEPARENT = Bounds(min_length=1, max_length=512)
TENANT = Bounds(min_length=1, max_length=200)
"""A trace context: ``version-traceid-spanid-flags`` is 55 characters; later versions may add."""
TRACE_CONTEXT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[0-9a-zA-Z._-]*)?")
"""The W3C ``traceparent`` header's form (a later version may add fields after a dash)."""
ENTRYPOINT = Bounds(min_length=1)
"""An entrypoint is never empty: an empty one would read as "every entrypoint" in a filter."""


def checked_span(name: str, value: timedelta) -> timedelta:
    """Return ``value`` if it is within ``SPAN``, else raise ``ValueError``."""
    SPAN.check(name, value)
    return value


@dataclass(frozen=True)
class JobSpec:
    r"""One job for ``enqueue_many``, with the options ``enqueue`` takes.

    The fields, their types and their ``Bounds`` are the one declaration of a job's options:
    ``enqueue``'s keywords (``EnqueueOptions``), the HTTP API's ``NewJob`` and the checks
    here all follow them.

    Attributes
    ----------
    entrypoint : str
        Routes the job to its handler.
    payload : bytes
        Opaque bytes.
    priority : int
        Lower runs first.
    delay : timedelta or None
        Not claimable until this long after enqueue.
    not_before : datetime or None
        Not claimable before this (aware) time; not together with ``delay``.
    dedup_key : str or None
        Enqueue nothing if a job with this key is in the queue or was acked within the
        history's retention.
    max_attempts : int or None
        Claims allowed before a failure makes the job dead (else the queue's default).
    ttl : timedelta or None
        The job dies instead of being claimed once this old (else the queue's default).
    id : str or None
        The job's id (else a new random UUID). Enqueueing an id that a job in the queue or
        in the history has returns that job and adds nothing, so that an enqueue repeated
        after an unknown outcome is not doubled.
    after : sequence of str or None
        The ids of the job's parents: it waits (``WAITING``) until each is acked. Each must be
        in the queue, in its history, or earlier in the same ``enqueue_many``; at most
        ``MAX_PARENTS`` (10,000) of them.
    on_parent_failure : ParentFailure, str or None
        What a parent that dies, is cancelled or is purged does to the job: ``cancel`` it (the
        default, None), or ``run`` it once the others have settled.
    traceparent : str or None
        A W3C trace context for the job's run (else, with OpenTelemetry installed, the
        enqueue's own span's).
    tenant : str or None
        Whose job it is: claims serve an entrypoint's tenants in turn at each priority (None
        is a tenant like any other), and ``limit`` and ``throttle`` may count per tenant.
    timeout : timedelta or None
        How long one attempt may run before its worker stops it (else the handler's own time
        limit, if it has one).
    """

    entrypoint: str = field(metadata={"bounds": ENTRYPOINT})
    payload: bytes
    priority: int = field(default=0, metadata={"bounds": INT64})
    delay: timedelta | None = field(default=None, metadata={"bounds": SPAN})
    not_before: datetime | None = None
    dedup_key: str | None = None
    max_attempts: int | None = field(default=None, metadata={"bounds": ATTEMPTS})
    ttl: timedelta | None = field(default=None, metadata={"bounds": POSITIVE_SPAN})
    id: str | None = field(default=None, metadata={"bounds": JOB_ID})
    after: Sequence[str] | None = field(default=None, metadata={"bounds": PARENTS})
    on_parent_failure: ParentFailure | str | None = None
    traceparent: str | None = field(default=None, metadata={"bounds": TRACEPARENT})
    tenant: str | None = field(default=None, metadata={"bounds": TENANT})
    timeout: timedelta | None = field(default=None, metadata={"bounds": POSITIVE_SPAN})

    def __post_init__(self) -> None:
        for name in _CHECKS:
            value = getattr(self, name)
            if value is not None or name in _NOT_NULL:  # what check_field passes, without the call
                check_field(name, value)
        if self.delay is not None and self.not_before is not None:
            raise ValueError("give delay or not_before, not both")
        if self.traceparent is not None and not TRACE_CONTEXT.fullmatch(self.traceparent):
            raise ValueError(
                "traceparent must be a W3C trace context (version-traceid-spanid-flags), "
                f"got {self.traceparent!r}"
            )
        if self.after is not None:
            object.__setattr__(self, "after", tuple(dict.fromkeys(self.after)))
            check_not_own_parent(self.id, self.after)

    def build(self, now: datetime, default_ttl: timedelta | None = None, batch: str | None = None) -> Added:
        """Return the effect that adds the job this spec describes, enqueued at ``now``; staged
        (unclaimable until published) as part of bulk write ``batch``, if given."""
        not_before = self.not_before if self.delay is None else now + self.delay
        ttl = self.ttl if self.ttl is not None else default_ttl
        after = tuple(self.after or ())
        status = JobStatus.STAGED if batch is not None else JobStatus.WAITING if after else JobStatus.QUEUED
        return Added(
            new_job_id() if self.id is None else self.id,
            self.entrypoint,
            self.priority,
            to_micros(now),
            status,
            None,
            payload_bytes(self.payload),
            max_attempts=self.max_attempts,
            not_before=None if not_before is None else to_micros(not_before),
            deadline=None if ttl is None else to_micros(now + ttl),
            dedup_key=self.dedup_key,
            batch=batch,
            after=after,
            on_parent_failure=stored_parent_failure(self.on_parent_failure),
            awaiting=after,
            traceparent=self.traceparent,
            tenant=self.tenant,
            timeout=None if self.timeout is None else span_micros(self.timeout),
        )


class EnqueueOptions(TypedDict, total=False):
    """The keywords of ``enqueue``: the fields of ``JobSpec`` after ``priority``, as it documents them."""

    delay: timedelta | None
    not_before: datetime | None
    dedup_key: str | None
    max_attempts: int | None
    ttl: timedelta | None
    id: str | None
    after: Sequence[str] | None
    on_parent_failure: ParentFailure | str | None
    traceparent: str | None
    tenant: str | None
    timeout: timedelta | None


@dataclass(frozen=True)
class SpecField(DeclaredField):
    """One field of ``JobSpec``, resolved, with its ``Bounds``."""

    bounds: Bounds


def _resolved() -> tuple[SpecField, ...]:
    return tuple(
        SpecField(**f.parts(), bounds=f.field.metadata.get("bounds", Bounds()))
        for f in declared_fields(JobSpec)
    )


def _aware(name: str, value: object) -> None:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ValueError(f"{name} must be an aware datetime")


def _span_value(name: str, value: object) -> None:
    if not isinstance(value, timedelta):
        raise ValueError(f"{name} must be a timedelta, got {type(value).__name__}")


def _job_ids(name: str, value: object) -> None:
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{name} must be a sequence of job ids, got {type(value).__name__}")
    for item in value:
        JOB_ID.check(name, item)


def _parent_failure(name: str, value: object) -> None:
    if value not in ParentFailure.__members__.values():
        choices = ", ".join(repr(choice.value) for choice in ParentFailure)
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _payload(name: str, value: object) -> None:
    if not isinstance(value, bytes | bytearray | str):  # a str is base64, as in jqueue
        raise ValueError(f"{name} must be bytes, got {type(value).__name__}")


_TYPE_CHECKS: dict[type, Callable[[str, object], object]] = {
    str: checked_text,
    int: checked_int64,
    bytes: _payload,
    timedelta: _span_value,
    datetime: _aware,
    Sequence: _job_ids,
    ParentFailure: _parent_failure,
}
SPEC_FIELDS = _resolved()
"""The fields of ``JobSpec``, in order: ``EnqueueOptions`` are those after ``priority``."""
_CHECKS = {
    f.name: (f.nullable, _TYPE_CHECKS[get_origin(f.base) or f.base], f.bounds if f.bounds.given else None)
    for f in SPEC_FIELDS
}
_NOT_NULL = frozenset(name for name, (nullable, _, _) in _CHECKS.items() if not nullable)


def check_field(name: str, value: object) -> None:
    """Check one ``JobSpec`` field's value as ``JobSpec`` does: its type and its limit (None
    passes where the field may be None), for writers that take fields one by one (Spark's).

    Raises
    ------
    ValueError
        If ``value`` is not one the field takes; the message names the field.
    """
    nullable, check_type, limit = _CHECKS[name]
    if value is not None or not nullable:
        check_type(name, value)
        if limit is not None:
            limit.check(name, value)


def check_not_own_parent(job_id: str | None, after: Sequence[str]) -> None:
    """Raise ``ValueError`` if job ``job_id`` waits for itself."""
    if job_id is not None and job_id in after:
        raise ValueError(f"job {job_id!r} cannot wait for itself")


def stored_parent_failure(policy: ParentFailure | str | None) -> str | None:
    """Return a checked ``on_parent_failure`` as a job stores it: None for the default (cancel)."""
    return ParentFailure.RUN.value if policy == ParentFailure.RUN else None


def payload_bytes(payload: bytes | bytearray | str) -> bytes:
    """Return a payload as bytes; a ``str`` is base64, as in the documented jqueue."""
    if isinstance(payload, str):
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"payload is not valid base64: {exc}") from exc
    return bytes(payload)
