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

import msgspec

from jqueue.domain.effects import (
    Added,
    Beat,
    Claimed,
    Effect,
    Removed,
    Requeued,
    columns_from_refs,
    payload_ref,
    refs_from_columns,
)
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus
from jqueue.domain.records import IndexSnapshot

LAYOUT = "jqueue-log/1"
ENTRY_PREFIX = "log/"
CHECKPOINT_PREFIX = "checkpoint/"
BASE_PREFIX = "base/"
_SEQ_DIGITS = 20


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


def decode_marker(data: bytes) -> tuple[bool, str | None]:
    """Return whether ``data`` is a log-structured queue's marker, and its base object."""
    try:
        marker = msgspec.json.decode(data, type=_Marker)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False, None
    return marker.layout == LAYOUT, marker.base


class _Add(msgspec.Struct, tag="add", array_like=True):
    id: str
    entrypoint: str
    priority: int
    created: int
    status: JobStatus
    heartbeat: int | None
    payload: bytes
    attempts: int = 0
    lease: str | None = None
    expires: int | None = None


class _Claim(msgspec.Struct, tag="claim", array_like=True):
    id: str
    at: int
    lease: str | None = None
    expires: int | None = None


class _Requeue(msgspec.Struct, tag="requeue", array_like=True):
    id: str


class _Remove(msgspec.Struct, tag="remove", array_like=True):
    id: str


class _Beat(msgspec.Struct, tag="beat", array_like=True):
    id: str
    at: int


_WireEffect = _Add | _Claim | _Requeue | _Remove | _Beat


class _Entry(msgspec.Struct):
    seq: int
    commit: str
    at: int
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
            fields = (a.job_id, a.entrypoint, a.priority, a.created, a.status, a.heartbeat, a.payload)
            return _Add(*fields, a.attempts, a.lease, a.expires)
        case Claimed(job_id, at, lease, expires):
            return _Claim(job_id, at, lease, expires)
        case Requeued(job_id):
            return _Requeue(job_id)
        case Removed(job_id):
            return _Remove(job_id)
        case Beat(job_id, at):
            return _Beat(job_id, at)


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
    except msgspec.DecodeError as exc:
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
                fields = (w.id, w.entrypoint, w.priority, w.created, w.status, w.heartbeat, ref)
                effects.append(Added(*fields, w.attempts, w.lease, w.expires))
            case _Claim(job_id, at, lease, expires):
                effects.append(Claimed(job_id, at, lease, expires))
            case _Requeue(job_id):
                effects.append(Requeued(job_id))
            case _Remove(job_id):
                effects.append(Removed(job_id))
            case _Beat(job_id, at):
                effects.append(Beat(job_id, at))
    return Entry(wire.seq, wire.commit, effects, payloads)


def entry_commit_id(data: bytes) -> str | None:
    """Return the commit id of an encoded entry, or None if it is not one."""
    try:
        return _entry_decoder.decode(data).commit
    except msgspec.DecodeError:
        return None


class _Checkpoint(msgspec.Struct):
    layout: str
    seq: int
    at: int
    entrypoints: list[str]
    ids: list[str]
    entrypoint: list[int]
    priority: list[int]
    created: list[int]
    status: list[JobStatus]
    heartbeat: list[int | None]
    order: list[int]
    segment: list[int]
    position: list[int]
    attempts: list[int] | None = None
    lease: list[str | None] | None = None
    expires: list[int | None] | None = None


_checkpoint_decoder = msgspec.json.Decoder(_Checkpoint)


def encode_checkpoint(snapshot: IndexSnapshot, at: int) -> bytes:
    """Serialise every live job of a snapshot in columns (meant for a worker thread)."""
    c = snapshot.columns()
    refs = c["payload"]
    if set(map(type, refs)) - {int}:
        raise ValueError("a payload is not stored yet")
    names = {name: code for code, name in enumerate(dict.fromkeys(c["entrypoint"]))}
    wire = _Checkpoint(
        LAYOUT,
        snapshot.version,
        at,
        list(names),
        c["id"],
        list(map(names.__getitem__, c["entrypoint"])),
        c["priority"],
        c["created"],
        c["status"],
        c["heartbeat"],
        c["order"],
        *columns_from_refs(refs),
        c["attempts"],
        c["lease"],
        c["expires"],
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
    except msgspec.DecodeError as exc:
        raise CorruptStateError(location, str(exc)) from exc
    paused = gc.isenabled()
    gc.disable()  # a million new objects would set off full collections that find nothing to free
    try:
        if wire.layout != LAYOUT:
            raise ValueError(f"layout {wire.layout!r} is not {LAYOUT!r}")
        return QueueIndex.from_columns(
            wire.seq,
            wire.ids,
            list(map(wire.entrypoints.__getitem__, wire.entrypoint)),
            wire.priority,
            wire.created,
            wire.status,
            wire.heartbeat,
            refs_from_columns(wire.segment, wire.position),
            wire.order,
            [0] * len(wire.ids) if wire.attempts is None else wire.attempts,
            [None] * len(wire.ids) if wire.lease is None else wire.lease,
            [None] * len(wire.ids) if wire.expires is None else wire.expires,
        )
    except (IndexError, ValueError) as exc:
        raise CorruptStateError(location, f"not a jqueue checkpoint: {exc}") from exc
    finally:
        if paused:
            gc.enable()
