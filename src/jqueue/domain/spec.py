"""``JobSpec``: a job to enqueue, with its options."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime, timedelta

from jqueue.domain.effects import Added
from jqueue.domain.models import JobStatus, new_job_id
from jqueue.domain.times import to_micros
from jqueue.domain.values import checked_int64, checked_text
from jqueue.domain.values import span as span_text

MAX_ID_LENGTH = 256
"""The longest job id a ``JobSpec`` takes."""
LONGEST_SPAN = timedelta(days=365 * 1000)
"""The longest ``delay`` or ``ttl`` a job takes (a time past it would not fit a datetime)."""


def checked_span(name: str, value: timedelta) -> timedelta:
    """Return ``value`` if it is from 0 to ``LONGEST_SPAN`` (a lease, which 0 ends at once), else
    raise ``ValueError``."""
    if not timedelta(0) <= value <= LONGEST_SPAN:
        raise ValueError(f"{name} must be from 0 to {LONGEST_SPAN.days} days, got {span_text(value)}")
    return value


@dataclass(frozen=True)
class JobSpec:
    """One job for ``enqueue_many``, with the options ``enqueue`` takes.

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
    """

    entrypoint: str
    payload: bytes
    priority: int = 0
    delay: timedelta | None = None
    not_before: datetime | None = None
    dedup_key: str | None = None
    max_attempts: int | None = None
    ttl: timedelta | None = None
    id: str | None = None

    def __post_init__(self) -> None:
        checked_text("entrypoint", self.entrypoint)
        if self.id is not None and not 0 < len(checked_text("id", self.id)) <= MAX_ID_LENGTH:
            raise ValueError(f"id must be 1 to {MAX_ID_LENGTH} characters, got {len(self.id)}")
        if not isinstance(self.payload, bytes | bytearray | str):  # a str is base64, as in jqueue
            raise ValueError(f"payload must be bytes, got {type(self.payload).__name__}")
        checked_int64("priority", self.priority)
        if self.dedup_key is not None:
            checked_text("dedup_key", self.dedup_key)
        if self.max_attempts is not None:
            checked_int64("max_attempts", self.max_attempts)
        for name, span in (("delay", self.delay), ("ttl", self.ttl)):
            if span is not None and span > LONGEST_SPAN:
                raise ValueError(f"{name} must be at most {LONGEST_SPAN.days} days, got {span_text(span)}")
        if self.delay is not None and self.not_before is not None:
            raise ValueError("give delay or not_before, not both")
        if self.delay is not None and self.delay < timedelta(0):
            raise ValueError(f"delay must not be negative, got {span_text(self.delay)}")
        if self.not_before is not None and self.not_before.tzinfo is None:
            raise ValueError("not_before must be an aware datetime")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.ttl is not None and self.ttl <= timedelta(0):
            raise ValueError(f"ttl must be positive, got {span_text(self.ttl)}")

    def build(self, now: datetime, default_ttl: timedelta | None = None, batch: str | None = None) -> Added:
        """Return the effect that adds the job this spec describes, enqueued at ``now``; staged
        (unclaimable until published) as part of bulk write ``batch``, if given."""
        not_before = self.not_before if self.delay is None else now + self.delay
        ttl = self.ttl if self.ttl is not None else default_ttl
        return Added(
            new_job_id() if self.id is None else self.id,
            self.entrypoint,
            self.priority,
            to_micros(now),
            JobStatus.QUEUED if batch is None else JobStatus.STAGED,
            None,
            payload_bytes(self.payload),
            max_attempts=self.max_attempts,
            not_before=None if not_before is None else to_micros(not_before),
            deadline=None if ttl is None else to_micros(now + ttl),
            dedup_key=self.dedup_key,
            batch=batch,
        )


def payload_bytes(payload: bytes | bytearray | str) -> bytes:
    """Return a payload as bytes; a ``str`` is base64, as in the documented jqueue."""
    if isinstance(payload, str):
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"payload is not valid base64: {exc}") from exc
    return bytes(payload)
