"""The wire format of the log-structured layout: marker, log entries and checkpoints.

All three are compact JSON (msgspec validates them in one pass):

- the **marker** is the queue's main object, ``{"layout": "jqueue-log/1"}``; it says
  that the state lives in the objects beside it;
- a **log entry** ``log/<seq>`` holds one commit's resolved effects, each an array
  tagged by its kind, e.g. ``["claim", "<job id>", 1767225600000000]``; an ``add``
  carries the job's payload (base64), which stays there for the job's life;
- a **checkpoint** ``checkpoint/<seq>-<micros>`` holds every live job's metadata at
  ``seq`` in columns, with a reference to the entry that holds its payload.

Times are integer microseconds since the Unix epoch.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from jqueue.domain.controls import Controls
from jqueue.domain.effects import (
    MAX_MICROS,
    MIN_MICROS,
    Added,
    Beat,
    Claimed,
    Died,
    Discarded,
    Effect,
    Forgotten,
    PauseSet,
    Published,
    Removed,
    Requeued,
    ThrottleSet,
    columns_from_refs,
    payload_ref,
    refs_from_columns,
)
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus
from jqueue.domain.records import ADDED_FIELDS, HistoryRecord, IndexSnapshot
from jqueue.domain.values import INT64_MAX, INT64_MIN

LAYOUT = "jqueue-log/1"
ENTRY_PREFIX = "log/"
CHECKPOINT_PREFIX = "checkpoint/"
BASE_PREFIX = "base/"
GENESIS = "genesis"
"""The object a new log-structured queue creates before its marker and never deletes: a
marker whose namespace lacks it (and holds no entry or checkpoint) lost its log."""
_SEQ_DIGITS = 20

Micros = Annotated[int, msgspec.Meta(ge=MIN_MICROS, le=MAX_MICROS)]
"""A time on the wire: microseconds since the epoch, within the years 1 to 9999."""
Count = Annotated[int, msgspec.Meta(ge=0)]
Int64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
Window = Annotated[int, msgspec.Meta(gt=0, le=INT64_MAX)]

UNDECODABLE = (msgspec.DecodeError, UnicodeDecodeError)
"""What msgspec raises for bytes that are not the expected JSON (invalid UTF-8 included)."""


def entry_name(seq: int) -> str:
    """Return the object name of log entry ``seq``."""
    return f"{ENTRY_PREFIX}{seq:0{_SEQ_DIGITS}d}"


def entry_seq(name: str) -> int | None:
    """Return the sequence number of a log entry name, or None for another object."""
    digits = name.removeprefix(ENTRY_PREFIX)
    return int(digits) if len(digits) == _SEQ_DIGITS and digits.isdigit() else None


def checkpoint_name(seq: int, at: int) -> str:
    """Return the object name of a checkpoint of ``seq`` taken at ``at``."""
    return f"{CHECKPOINT_PREFIX}{seq:0{_SEQ_DIGITS}d}-{at}"


def checkpoint_key(name: str) -> tuple[int, int] | None:
    """Return ``(seq, at)`` of a checkpoint name, or None for another object."""
    seq, _, at = name.removeprefix(CHECKPOINT_PREFIX).partition("-")
    if len(seq) != _SEQ_DIGITS or not seq.isdigit() or not at.isdigit():
        return None
    return int(seq), int(at)


class _Marker(msgspec.Struct):
    layout: str
    base: str | None = None


def encode_marker(base: str | None = None) -> bytes:
    """Return the main object's content for a log-structured queue.

    ``base`` names the object holding the jobs a migrated queue started with.
    """
    return msgspec.json.encode(_Marker(LAYOUT, base))


def encode_genesis(at: int) -> bytes:
    """Return the content of the ``GENESIS`` object of a queue created at ``at``."""
    return msgspec.json.encode({"layout": LAYOUT, "created": at})


def decode_marker(data: bytes) -> tuple[bool, str | None]:
    """Return whether ``data`` is a log-structured queue's marker, and its base object."""
    try:
        marker = msgspec.json.decode(data, type=_Marker)
    except UNDECODABLE:
        return False, None
    return marker.layout == LAYOUT, marker.base


class _Add(msgspec.Struct, tag="add", array_like=True, omit_defaults=True):
    id: str
    entrypoint: str
    priority: Int64
    created: Micros
    status: JobStatus
    heartbeat: Micros | None
    payload: bytes
    attempts: Count = 0
    lease: str | None = None
    expires: Micros | None = None
    max_attempts: Count | None = None
    not_before: Micros | None = None
    deadline: Micros | None = None
    dedup_key: str | None = None
    last_error: str | None = None
    dead_reason: str | None = None
    dead_at: Micros | None = None
    claims: tuple[Micros, ...] = ()
    batch: str | None = None


class _Claim(msgspec.Struct, tag="claim", array_like=True):
    id: str
    at: Micros
    lease: str | None = None
    expires: Micros | None = None


class _Requeue(msgspec.Struct, tag="requeue", array_like=True, omit_defaults=True):
    id: str
    not_before: Micros | None = None
    error: str | None = None
    reset: bool = False


class _Remove(msgspec.Struct, tag="remove", array_like=True, omit_defaults=True):
    id: str
    at: Micros | None = None


class _Beat(msgspec.Struct, tag="beat", array_like=True):
    id: str
    at: Micros


class _Die(msgspec.Struct, tag="die", array_like=True):
    id: str
    at: Micros
    reason: str
    error: str | None = None


class _Publish(msgspec.Struct, tag="publish", array_like=True):
    batch: str


class _Discard(msgspec.Struct, tag="discard", array_like=True):
    batch: str


class _Forget(msgspec.Struct, tag="forget", array_like=True):
    count: Count


class _Pause(msgspec.Struct, tag="pause", array_like=True):
    scope: str | None
    claims: bool
    enqueues: bool


class _Throttle(msgspec.Struct, tag="throttle", array_like=True):
    scope: str | None
    limit: Count | None
    window: Window


_WireEffect = (
    _Add | _Claim | _Requeue | _Remove | _Beat | _Die | _Forget | _Pause | _Throttle | _Publish | _Discard
)


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


class WireControls(msgspec.Struct):
    """Pauses and throttles on the wire (as in ``Controls.to_dict``)."""

    paused_claims: list[str | None] = []
    paused_enqueues: list[str | None] = []
    throttles: list[tuple[str | None, Count, Window]] = []
    usage: list[tuple[str | None, Count, Count]] = []


def wire_history(history: list[HistoryRecord]) -> list[WireHistory]:
    """Return history records in their wire form."""
    return [WireHistory(*(getattr(h, name) for name in HistoryRecord.__slots__)) for h in history]


def history_from_wire(wire: list[WireHistory]) -> list[HistoryRecord]:
    """Return history records from their wire form."""
    return [HistoryRecord(*(getattr(w, name) for name in HistoryRecord.__slots__)) for w in wire]


def controls_from_wire(wire: WireControls | None) -> Controls:
    """Return the controls of their wire form (none: no pause, no throttle)."""
    return Controls() if wire is None else Controls.from_dict(msgspec.structs.asdict(wire))


class _Entry(msgspec.Struct):
    seq: Count
    commit: str
    at: Micros
    effects: list[_WireEffect]


@dataclass(frozen=True)
class Entry:
    """A decoded log entry: effects with payloads replaced by references, and the payloads."""

    seq: int
    commit: str
    effects: list[Effect]
    payloads: list[bytes]


_entry_decoder = msgspec.json.Decoder(_Entry)


def _wire_effect(effect: Effect) -> _WireEffect:
    match effect:
        case Added() as a:
            if not isinstance(a.payload, bytes):
                raise ValueError(f"payload of {a.job_id} is not in memory")
            return _Add(*(getattr(a, name) for name in Added.__slots__))
        case Claimed(job_id, at, lease, expires):
            return _Claim(job_id, at, lease, expires)
        case Requeued(job_id, not_before, error, reset):
            return _Requeue(job_id, not_before, error, reset)
        case Removed(job_id, at):
            return _Remove(job_id, at)
        case Beat(job_id, at):
            return _Beat(job_id, at)
        case Died(job_id, at, reason, error):
            return _Die(job_id, at, reason, error)
        case Forgotten(count):
            return _Forget(count)
        case PauseSet(scope, claims, enqueues):
            return _Pause(scope, claims, enqueues)
        case ThrottleSet(scope, limit, window):
            return _Throttle(scope, limit, window)
        case Published(batch):
            return _Publish(batch)
        case Discarded(batch):
            return _Discard(batch)


def encode_entry(seq: int, commit_id: str, at: int, effects: Sequence[Effect]) -> bytes:
    """Serialise one commit's effects (payloads of added jobs must be in memory)."""
    return msgspec.json.encode(_Entry(seq, commit_id, at, [_wire_effect(e) for e in effects]))


def decode_entry(data: bytes, seq: int, location: str) -> Entry:
    """Deserialise log entry ``seq``; added jobs get ``payload_ref(seq, position)`` payloads.

    Raises
    ------
    CorruptStateError
        If ``data`` is not log entry ``seq``; ``location`` names the object.
    """
    try:
        wire = _entry_decoder.decode(data)
    except UNDECODABLE as exc:
        raise CorruptStateError(location, str(exc)) from exc
    if wire.seq != seq:
        raise CorruptStateError(location, f"holds entry {wire.seq}, expected {seq}")
    effects: list[Effect] = []
    payloads: list[bytes] = []
    for item in wire.effects:
        match item:
            case _Add() as w:
                ref = payload_ref(seq, len(payloads))
                payloads.append(w.payload)
                fields = [getattr(w, name) for name in _Add.__struct_fields__]
                fields[6] = ref
                effects.append(Added(*fields))
            case _Claim(job_id, at, lease, expires):
                effects.append(Claimed(job_id, at, lease, expires))
            case _Requeue(job_id, not_before, error, reset):
                effects.append(Requeued(job_id, not_before, error, reset))
            case _Remove(job_id, at):
                effects.append(Removed(job_id, at))
            case _Beat(job_id, at):
                effects.append(Beat(job_id, at))
            case _Die(job_id, at, reason, error):
                effects.append(Died(job_id, at, reason, error))
            case _Forget(count):
                effects.append(Forgotten(count))
            case _Pause(scope, claims, enqueues):
                effects.append(PauseSet(scope, claims, enqueues))
            case _Throttle(scope, limit, window):
                effects.append(ThrottleSet(scope, limit, window))
            case _Publish(batch):
                effects.append(Published(batch))
            case _Discard(batch):
                effects.append(Discarded(batch))
    return Entry(wire.seq, wire.commit, effects, payloads)


def entry_commit_id(data: bytes) -> str | None:
    """Return the commit id of an encoded entry, or None if it is not one."""
    try:
        return _entry_decoder.decode(data).commit
    except UNDECODABLE:
        return None


class _Checkpoint(msgspec.Struct):
    layout: str
    seq: Count
    at: Micros
    entrypoints: list[str]
    ids: list[str]
    entrypoint: list[Count]
    priority: list[Int64]
    created: list[Micros]
    status: list[JobStatus]
    heartbeat: list[Micros | None]
    order: list[Count]
    segment: list[Count]
    position: list[Count]
    attempts: list[Count] | None = None
    lease: list[str | None] | None = None
    expires: list[Micros | None] | None = None
    max_attempts: list[Count | None] | None = None
    not_before: list[Micros | None] | None = None
    deadline: list[Micros | None] | None = None
    dedup_key: list[str | None] | None = None
    last_error: list[str | None] | None = None
    dead_reason: list[str | None] | None = None
    dead_at: list[Micros | None] | None = None
    claims: list[tuple[Micros, ...]] | None = None
    batch: list[str | None] | None = None
    history: list[WireHistory] = []
    controls: WireControls | None = None


_checkpoint_decoder = msgspec.json.Decoder(_Checkpoint)
_OPTIONAL_COLUMNS = ADDED_FIELDS[7:]


_DEFAULTS: dict[str, Any] = {"attempts": 0, "claims": ()}


def _sparse(name: str, column: list[Any]) -> list[Any] | None:
    """Return a column, or None when every value is the column's default."""
    return None if column.count(_DEFAULTS.get(name)) == len(column) else column


def encode_checkpoint(snapshot: IndexSnapshot, at: int) -> bytes:
    """Serialise every live job of a snapshot in columns, with the history and the controls
    (meant for a worker thread). A column whose values are all defaults is left out."""
    refs = snapshot.column("payload")
    if set(map(type, refs)) - {int}:
        raise ValueError("a payload is not stored yet")
    entrypoints = snapshot.column("entrypoint")
    names = {name: code for code, name in enumerate(dict.fromkeys(entrypoints))}
    optional: dict[str, Any] = {name: _sparse(name, snapshot.column(name)) for name in _OPTIONAL_COLUMNS}
    c = {
        name: snapshot.column(name) for name in ("id", "priority", "created", "status", "heartbeat", "order")
    }
    wire = _Checkpoint(
        LAYOUT,
        snapshot.version,
        at,
        list(names),
        c["id"],
        list(map(names.__getitem__, entrypoints)),
        c["priority"],
        c["created"],
        c["status"],
        c["heartbeat"],
        c["order"],
        *columns_from_refs(refs),
        **optional,
        history=wire_history(snapshot.history),
        controls=WireControls(**snapshot.controls),
    )
    return msgspec.json.encode(wire)


def decode_checkpoint(data: bytes, location: str) -> QueueIndex:
    """Deserialise a checkpoint into an index at its sequence number.

    Raises
    ------
    CorruptStateError
        If ``data`` is not a checkpoint or its columns disagree.
    """
    try:
        wire = _checkpoint_decoder.decode(data)
    except UNDECODABLE as exc:
        raise CorruptStateError(location, str(exc)) from exc
    paused = gc.isenabled()
    gc.disable()  # a million new objects would set off full collections that find nothing to free
    try:
        if wire.layout != LAYOUT:
            raise ValueError(f"layout {wire.layout!r} is not {LAYOUT!r}")
        columns: dict[str, Any] = {
            "id": wire.ids,
            "entrypoint": list(map(wire.entrypoints.__getitem__, wire.entrypoint)),
            "priority": wire.priority,
            "created": wire.created,
            "status": wire.status,
            "heartbeat": wire.heartbeat,
            "payload": refs_from_columns(wire.segment, wire.position),
            "order": wire.order,
        }
        for name in _OPTIONAL_COLUMNS:
            column = getattr(wire, name)
            if column is not None:
                columns[name] = column
        history = history_from_wire(wire.history)
        return QueueIndex.from_columns(wire.seq, columns, history, controls_from_wire(wire.controls))
    except Exception as exc:  # columns that do not fit together
        raise CorruptStateError(location, f"not a jqueue checkpoint: {exc!r}") from exc
    finally:
        if paused:
            gc.enable()
