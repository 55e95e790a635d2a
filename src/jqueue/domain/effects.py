"""Resolved effects: what a commit did, recorded so any reader replays it to the same state.

An operation decides its effects against the current state (which jobs a dequeue
claims, at what time); the effects carry those decisions, so replaying them needs
no clock and no choice. Times are integer microseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import repeat

from jqueue.domain.models import JobStatus

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
MIN_MICROS = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
MAX_MICROS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
"""The range of times a ``datetime`` can hold, in microseconds since the epoch."""
_POSITION_BITS = 24
POSITIONS_PER_SEGMENT = 1 << _POSITION_BITS


def to_micros(moment: datetime) -> int:
    """Return an aware datetime as integer microseconds since the epoch."""
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    """Return integer microseconds since the epoch as an aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=micros)


def payload_ref(segment: int, position: int) -> int:
    """Return the reference to item ``position`` of log entry ``segment``: an int, so that a
    million references cost little to build and to keep (``segment << 24 | position``)."""
    if not 0 <= position < POSITIONS_PER_SEGMENT:
        raise ValueError(f"an entry holds at most {POSITIONS_PER_SEGMENT} payloads")
    return segment << _POSITION_BITS | position


def payload_place(ref: int) -> tuple[int, int]:
    """Return the ``(segment, position)`` of a payload reference."""
    return ref >> _POSITION_BITS, ref & (POSITIONS_PER_SEGMENT - 1)


def refs_from_columns(segments: list[int], positions: list[int]) -> list[int]:
    """Return ``payload_ref(s, p)`` for each pair, in C-level loops (a checkpoint's million rows)."""
    if positions and (min(positions) < 0 or max(positions) >= POSITIONS_PER_SEGMENT):
        raise ValueError("a payload position is out of range")
    shifted = map(operator.lshift, segments, repeat(_POSITION_BITS))
    return list(map(operator.or_, shifted, positions))


def columns_from_refs(refs: list[int]) -> tuple[list[int], list[int]]:
    """Return the segments and positions of ``refs``, in C-level loops."""
    segments = list(map(operator.rshift, refs, repeat(_POSITION_BITS)))
    return segments, list(map(operator.and_, refs, repeat(POSITIONS_PER_SEGMENT - 1)))


Payload = bytes | int
"""A payload in memory (bytes) or where it is stored (an int from ``payload_ref``)."""


@dataclass(frozen=True, slots=True)
class Added:
    """A job entered the queue, with everything about it."""

    job_id: str
    entrypoint: str
    priority: int
    created: int
    status: JobStatus
    heartbeat: int | None
    payload: Payload
    attempts: int = 0
    lease: str | None = None
    expires: int | None = None
    max_attempts: int | None = None
    not_before: int | None = None
    deadline: int | None = None
    dedup_key: str | None = None
    last_error: str | None = None
    dead_reason: str | None = None
    dead_at: int | None = None
    claims: tuple[int, ...] = ()
    batch: str | None = None


@dataclass(frozen=True, slots=True)
class Claimed:
    """A queued job was claimed at ``at`` under ``lease`` until ``expires`` (one more attempt)."""

    job_id: str
    at: int
    lease: str | None = None
    expires: int | None = None


@dataclass(frozen=True, slots=True)
class Requeued:
    """A job went back to the queue, claimable from ``not_before`` (at once if None).

    ``error`` becomes the job's last error when given; ``reset`` starts its attempts
    and claim times afresh (a dead letter redriven).
    """

    job_id: str
    not_before: int | None = None
    error: str | None = None
    reset: bool = False


@dataclass(frozen=True, slots=True)
class Removed:
    """A job left the queue: acked at ``at`` (leaving a history record), or purged (``at`` None)."""

    job_id: str
    at: int | None = None


@dataclass(frozen=True, slots=True)
class Died:
    """A job became a dead letter at ``at`` for ``reason``, with its last ``error``."""

    job_id: str
    at: int
    reason: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Published:
    """The staged jobs of bulk write ``batch`` became claimable, all at once."""

    batch: str


@dataclass(frozen=True, slots=True)
class Discarded:
    """The staged jobs of bulk write ``batch`` were dropped (an aborted write)."""

    batch: str


@dataclass(frozen=True, slots=True)
class Forgotten:
    """The ``count`` oldest history records were dropped (retention)."""

    count: int


@dataclass(frozen=True, slots=True)
class PauseSet:
    """Claims and/or enqueues of ``scope`` (an entrypoint, or None for the whole queue) were
    paused (True) or resumed (False)."""

    scope: str | None
    claims: bool
    enqueues: bool


@dataclass(frozen=True, slots=True)
class ThrottleSet:
    """Claims of ``scope`` (an entrypoint, or None for the whole queue) are limited to ``limit``
    per ``window`` microseconds; a ``limit`` of None lifts the throttle."""

    scope: str | None
    limit: int | None
    window: int


@dataclass(frozen=True, slots=True)
class Beat:
    """A claimed job's heartbeat moved to ``at``; its lease, if it expires, is as long again from ``at``."""

    job_id: str
    at: int


Effect = (
    Added
    | Claimed
    | Requeued
    | Removed
    | Beat
    | Died
    | Forgotten
    | PauseSet
    | ThrottleSet
    | Published
    | Discarded
)
