"""The parts every format shares: constrained value types, job fields by kind, history and controls.

Each format stores a job field according to its ``Kind`` (``jqueue.domain.schema``); the
types here let msgspec validate a whole object in one pass, so a foreign or damaged object
is rejected before anything could overwrite it.
"""

from __future__ import annotations

import operator
from datetime import datetime
from typing import Annotated, Any

import msgspec

from jqueue.domain.controls import Controls
from jqueue.domain.models import JobStatus
from jqueue.domain.records import HistoryRecord
from jqueue.domain.schema import JobField, Kind
from jqueue.domain.times import MAX_MICROS, MIN_MICROS
from jqueue.domain.values import INT64_MAX, INT64_MIN

Micros = Annotated[int, msgspec.Meta(ge=MIN_MICROS, le=MAX_MICROS)]
"""A time on the wire: microseconds since the epoch, within the years 1 to 9999."""
AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]
"""A time on the wire as an ISO 8601 string with a time zone (the single-object format)."""
Count = Annotated[int, msgspec.Meta(ge=0)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]
Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
Window = Annotated[int, msgspec.Meta(gt=0, le=INT64_MAX)]

UNDECODABLE = (msgspec.DecodeError, UnicodeDecodeError)
"""What msgspec raises for bytes that are not the expected JSON (invalid UTF-8 included)."""


def wire_type(job_field: JobField, time: Any = Micros) -> Any:
    """Return the msgspec type of a job field, with times as ``time`` (``Micros`` or ``AwareDatetime``)."""
    kinds: dict[Kind, Any] = {
        Kind.TEXT: str,
        Kind.INT64: Int64,
        Kind.COUNT: Count,
        Kind.TIME: time,
        Kind.TIMES: tuple[time, ...],
        Kind.STATUS: JobStatus,
        Kind.PAYLOAD: bytes,
        Kind.FRACTION: Fraction,
    }
    base = kinds[job_field.kind]
    return base | None if job_field.nullable else base


class WireHistory(msgspec.Struct, array_like=True):
    """A history record on the wire (as in ``HistoryRecord``)."""

    job_id: str
    entrypoint: str
    created: Micros
    claims: tuple[Micros, ...]
    finished: Micros
    attempts: Count
    outcome: JobStatus
    error: str | None = None
    reason: str | None = None
    dedup_key: str | None = None
    result: bytes | None = None


class WireControls(msgspec.Struct):
    """Pauses, throttles and limits on the wire (as in ``Controls.to_dict``)."""

    paused_claims: list[str | None] = []
    paused_enqueues: list[str | None] = []
    throttles: list[tuple[str | None, Count, Window]] = []
    usage: list[tuple[str | None, Count, Count]] = []
    limits: list[tuple[str | None, Count]] = []
    marks: list[tuple[str, Count]] = []


_history_fields = operator.attrgetter(*HistoryRecord.__slots__)


def wire_history(history: list[HistoryRecord]) -> list[WireHistory]:
    """Return history records in their wire form."""
    return [WireHistory(*_history_fields(h)) for h in history]


def history_from_wire(wire: list[WireHistory]) -> list[HistoryRecord]:
    """Return history records from their wire form."""
    return [HistoryRecord(*(getattr(w, name) for name in HistoryRecord.__slots__)) for w in wire]


def controls_from_wire(wire: WireControls | None) -> Controls:
    """Return the controls of their wire form (none: no pause, no throttle)."""
    return Controls() if wire is None else Controls.from_dict(msgspec.structs.asdict(wire))
