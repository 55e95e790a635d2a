"""The parts every format shares: constrained value types, job fields by kind, history and controls.

Each format stores a job field according to its ``Kind`` (``jqueue.domain.schema``); the
types here let msgspec validate a whole object in one pass, so a foreign or damaged object
is rejected before anything could overwrite it.
"""

from __future__ import annotations

import operator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from jqueue.domain.controls import Controls
from jqueue.domain.models import JobStatus
from jqueue.domain.records import HISTORY_FIELDS, HistoryField, HistoryRecord
from jqueue.domain.schema import JobField, Kind
from jqueue.domain.times import MAX_MICROS, MIN_MICROS
from jqueue.domain.values import INT64_MAX, INT64_MIN

Micros = Annotated[int, msgspec.Meta(ge=MIN_MICROS, le=MAX_MICROS)]
"""A time on the wire: microseconds since the epoch, within the years 1 to 9999."""
AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]
"""A time on the wire as an ISO 8601 string with a time zone (the single-object format)."""
Count = Annotated[int, msgspec.Meta(ge=0)]
Name = Annotated[str, msgspec.Meta(min_length=1)]
"""A text that is never empty (``Kind.NAME``)."""
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]
Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
Span = Annotated[int, msgspec.Meta(gt=0, le=INT64_MAX)]
"""A span of time on the wire: positive microseconds."""

UNDECODABLE = (msgspec.DecodeError, UnicodeDecodeError)
"""What msgspec raises for bytes that are not the expected JSON (invalid UTF-8 included)."""


def kind_type(kind: Kind, time: Any = Micros) -> Any:
    """Return the msgspec type of a value of ``kind``, with times as ``time``: ``Micros`` (the
    domain's form: spans in microseconds too) or ``AwareDatetime`` (the public form: spans as
    ``timedelta``)."""
    kinds: dict[Kind, Any] = {
        Kind.TEXT: str,
        Kind.NAME: Name,
        Kind.INT64: Int64,
        Kind.COUNT: Count,
        Kind.TIME: time,
        Kind.TIMES: tuple[time, ...],
        Kind.STATUS: JobStatus,
        Kind.PAYLOAD: bytes,
        Kind.FRACTION: Fraction,
        Kind.SPAN: Span if time is Micros else timedelta,
        Kind.IDS: tuple[str, ...],
        Kind.RESULTS: tuple[bytes | None, ...],
    }
    return kinds[kind]


def wire_type(job_field: JobField | HistoryField, time: Any = Micros) -> Any:
    """Return the msgspec type of a job's (or a history record's) field, with times as ``time``."""
    base = kind_type(job_field.kind, time)
    return base | None if job_field.nullable else base


# The formats' structs whose fields come from the one declaration of a record's fields are made
# by ``msgspec.defstruct`` at import; the type checker sees each as a ``DerivedStruct`` subclass
# of its name: built by position or keyword, read by name (its fields typed ``Any``).
if TYPE_CHECKING:

    class DerivedStruct(msgspec.Struct):
        """A struct made from a declaration of fields (the type checker's view; not at run time)."""

        def __init__(self, *values: Any, **fields: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

    class WireHistory(DerivedStruct):
        """A history record on the wire: the fields of ``HistoryRecord``, in order."""

else:
    WireHistory = msgspec.defstruct(
        "WireHistory",
        [(f.name, wire_type(f)) if f.required else (f.name, wire_type(f), f.default) for f in HISTORY_FIELDS],
        array_like=True,
    )
WireHistories = list[WireHistory]


class WireControls(msgspec.Struct):
    """Pauses, throttles and limits on the wire (as in ``Controls.to_dict``)."""

    paused_claims: list[str | None] = []
    paused_enqueues: list[str | None] = []
    throttles: list[tuple[str | None, Count, Span]] = []
    usage: list[tuple[str | None, Count, Count]] = []
    limits: list[tuple[str | None, Count]] = []
    marks: list[tuple[str, Count]] = []
    tenant_throttles: list[tuple[str | None, Count, Span]] = []
    tenant_usage: list[tuple[str | None, Count, str | None, Count]] = []
    tenant_limits: list[tuple[str | None, Count]] = []
    owner: tuple[str, Count] | None = None
    shards: Count | None = None


_history_fields = operator.attrgetter(*(f.name for f in HISTORY_FIELDS))


def wire_history(history: list[HistoryRecord]) -> WireHistories:
    """Return history records in their wire form."""
    return [WireHistory(*_history_fields(h)) for h in history]


def history_from_wire(wire: WireHistories) -> list[HistoryRecord]:
    """Return history records from their wire form."""
    return [HistoryRecord(*msgspec.structs.astuple(w)) for w in wire]


def controls_from_wire(wire: WireControls | None) -> Controls:
    """Return the controls of their wire form (none: no pause, no throttle)."""
    return Controls() if wire is None else Controls.from_dict(msgspec.structs.asdict(wire))
