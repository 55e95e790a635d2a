"""The log entry: one commit's resolved effects, ``log/<seq>`` in the log layout.

An entry is compact JSON, ``{"seq": 7, "commit": "<id>", "at": <micros>, "effects": [...]}``,
each effect an array tagged by its kind, e.g. ``["claim", "<job id>", 1767225600000000]``.
An ``add`` carries every field of the job in ``JobFields`` order (the payload as base64),
and the payload stays in that entry for the job's life. The jobs of a bulk write, whose
payloads stay in parts beside the queue, come in ``add_part`` runs (``part_runs.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import msgspec

from jqueue.core.formats.part_runs import AddPart, PartRun
from jqueue.core.formats.wire import UNDECODABLE, Count, Fraction, Micros, Window, wire_type
from jqueue.core.log.payload_refs import payload_ref
from jqueue.domain.effects import (
    Added,
    Beat,
    CancelAsked,
    Cancelled,
    Claimed,
    Died,
    Discarded,
    Effect,
    Forgotten,
    LimitSet,
    PauseSet,
    Published,
    Removed,
    Requeued,
    SinkMarked,
    ThrottleSet,
)
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.schema import STORED_FIELDS, field_values

_Add: Any = msgspec.defstruct(
    "_Add",
    [(f.name, wire_type(f)) if f.required else (f.name, wire_type(f), f.default) for f in STORED_FIELDS],
    tag="add",
    array_like=True,
    omit_defaults=True,
)
"""An added job on the wire: its fields in ``JobFields`` order, trailing defaults left out."""
_add_values = attrgetter(*(f.name for f in STORED_FIELDS))
"""The stored fields of an ``_Add``: a prefix of ``JobFields`` (see ``STORED_FIELDS``)."""


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
    result: bytes | None = None


class _Beat(msgspec.Struct, tag="beat", array_like=True, omit_defaults=True):
    id: str
    at: Micros
    expires: Micros | None = None
    progress: Fraction | None = None
    note: str | None = None
    lease: str | None = None


class _CancelAsk(msgspec.Struct, tag="cancel_ask", array_like=True):
    id: str
    at: Micros


class _Cancel(msgspec.Struct, tag="cancel", array_like=True, omit_defaults=True):
    id: str
    at: Micros
    error: str | None = None


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


class _Limit(msgspec.Struct, tag="limit", array_like=True):
    scope: str | None
    limit: Count | None


class _SinkMark(msgspec.Struct, tag="sink_mark", array_like=True):
    sink: str
    batch_id: Count


if TYPE_CHECKING:
    _WireEffect = Any
else:
    _WireEffect = (
        _Add
        | AddPart
        | _Claim
        | _Requeue
        | _Remove
        | _Beat
        | _CancelAsk
        | _Cancel
        | _Die
        | _Forget
        | _Pause
        | _Throttle
        | _Limit
        | _SinkMark
        | _Publish
        | _Discard
    )


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
    at: int
    effects: list[Effect]
    payloads: list[bytes]


_entry_decoder = msgspec.json.Decoder(_Entry)


def _wire_effect(effect: Effect) -> _WireEffect:
    match effect:
        case Added() as a:
            if not isinstance(a.payload, bytes):
                raise ValueError(f"payload of {a.job_id} is not in memory")
            return _Add(*field_values(a))
        case Claimed(job_id, at, lease, expires):
            return _Claim(job_id, at, lease, expires)
        case Requeued(job_id, not_before, error, reset):
            return _Requeue(job_id, not_before, error, reset)
        case Removed(job_id, at, result):
            return _Remove(job_id, at, result)
        case Beat(job_id, at, expires, progress, note, lease):
            return _Beat(job_id, at, expires, progress, note, lease)
        case CancelAsked(job_id, at):
            return _CancelAsk(job_id, at)
        case Cancelled(job_id, at, error):
            return _Cancel(job_id, at, error)
        case Died(job_id, at, reason, error):
            return _Die(job_id, at, reason, error)
        case Forgotten(count):
            return _Forget(count)
        case PauseSet(scope, claims, enqueues):
            return _Pause(scope, claims, enqueues)
        case ThrottleSet(scope, limit, window):
            return _Throttle(scope, limit, window)
        case LimitSet(scope, limit):
            return _Limit(scope, limit)
        case SinkMarked(sink, batch_id):
            return _SinkMark(sink, batch_id)
        case Published(batch):
            return _Publish(batch)
        case Discarded(batch):
            return _Discard(batch)


def encode_entry(seq: int, commit_id: str, at: int, effects: Sequence[Effect]) -> bytes:
    """Serialise one commit's effects: an added job's payload in memory, or a part's jobs in runs
    (``AddPart``)."""
    wire: list[_WireEffect | PartRun] = []
    for effect in effects:
        if isinstance(effect, Added) and isinstance(effect.payload, int):
            run = wire[-1] if wire else None
            if not isinstance(run, PartRun) or not run.takes(effect):
                run = PartRun(effect)
                wire.append(run)
            run.add(effect)
        else:
            wire.append(_wire_effect(effect))
    items = [item.wire() if isinstance(item, PartRun) else item for item in wire]
    return msgspec.json.encode(_Entry(seq, commit_id, at, items))


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
                added = Added(*_add_values(w))
                payloads.append(w.payload)
                added.payload = payload_ref(seq, len(payloads) - 1)
                effects.append(added)
            case AddPart() as w:
                try:
                    effects += w.effects()
                except ValueError as exc:
                    raise CorruptStateError(location, str(exc)) from exc
            case _Claim(job_id, at, lease, expires):
                effects.append(Claimed(job_id, at, lease, expires))
            case _Requeue(job_id, not_before, error, reset):
                effects.append(Requeued(job_id, not_before, error, reset))
            case _Remove(job_id, at, result):
                effects.append(Removed(job_id, at, result))
            case _Beat(job_id, at, expires, progress, note, lease):
                effects.append(Beat(job_id, at, expires, progress, note, lease))
            case _CancelAsk(job_id, at):
                effects.append(CancelAsked(job_id, at))
            case _Cancel(job_id, at, error):
                effects.append(Cancelled(job_id, at, error))
            case _Die(job_id, at, reason, error):
                effects.append(Died(job_id, at, reason, error))
            case _Forget(count):
                effects.append(Forgotten(count))
            case _Pause(scope, claims, enqueues):
                effects.append(PauseSet(scope, claims, enqueues))
            case _Throttle(scope, limit, window):
                effects.append(ThrottleSet(scope, limit, window))
            case _Limit(scope, limit):
                effects.append(LimitSet(scope, limit))
            case _SinkMark(sink, batch_id):
                effects.append(SinkMarked(sink, batch_id))
            case _Publish(batch):
                effects.append(Published(batch))
            case _Discard(batch):
                effects.append(Discarded(batch))
    return Entry(wire.seq, wire.commit, wire.at, effects, payloads)


def entry_commit_id(data: bytes) -> str | None:
    """Return the commit id of an encoded entry, or None if it is not one."""
    try:
        return _entry_decoder.decode(data).commit
    except UNDECODABLE:
        return None
