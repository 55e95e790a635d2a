"""Resolved effects: what a commit did, recorded so any reader replays it to the same state.

An operation decides its effects against the current state (which jobs a dequeue
claims, at what time); the effects carry those decisions, so replaying them needs
no clock and no choice. Times are integer microseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from jqueue.domain.models import JobStatus

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(moment: datetime) -> int:
    """Return an aware datetime as integer microseconds since the epoch."""
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    """Return integer microseconds since the epoch as an aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=micros)


class PayloadRef(NamedTuple):
    """Where a payload is stored when it is not held in memory: entry ``segment``, item ``position``."""

    segment: int
    position: int


Payload = bytes | PayloadRef


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


@dataclass(frozen=True, slots=True)
class Claimed:
    """A queued job was claimed at ``at``."""

    job_id: str
    at: int


@dataclass(frozen=True, slots=True)
class Requeued:
    """A job went back to the queue."""

    job_id: str


@dataclass(frozen=True, slots=True)
class Removed:
    """A job left the queue (acked)."""

    job_id: str


@dataclass(frozen=True, slots=True)
class Beat:
    """A claimed job's heartbeat moved to ``at``."""

    job_id: str
    at: int


Effect = Added | Claimed | Requeued | Removed | Beat
