"""The log entry: one commit's resolved effects, ``log/<seq>`` in the log layout.

An entry is compact JSON, ``{"seq": 7, "commit": "<id>", "at": <micros>, "effects": [...]}``,
each effect an array tagged by its kind, e.g. ``["claim", "<job id>", 1767225600000000]``.
An ``add`` carries every field of the job in ``JobFields`` order (the payload as base64),
and the payload stays in that entry for the job's life. The jobs of a bulk write, whose
payloads stay in parts beside the queue, come in ``add_part`` runs (``part_runs.py``).
"""

from __future__ import annotations

import functools
import operator
import re
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar, Union, get_args, get_origin

import msgspec

from jqueue.core.formats.part_runs import AddPart, PartRun
from jqueue.core.formats.payload_refs import payload_ref
from jqueue.core.formats.wire import UNDECODABLE, Count, Micros, kind_type, wire_type
from jqueue.domain import effects as fx
from jqueue.domain.declared import declared_fields
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.schema import STORED_FIELDS, field_values

if TYPE_CHECKING:
    from jqueue.core.formats.wire import DerivedStruct

    class _Add(DerivedStruct):
        """An added job on the wire: its fields in ``JobFields`` order, trailing defaults left out."""

else:
    _Add = msgspec.defstruct(
        "_Add",
        [(f.name, wire_type(f)) if f.required else (f.name, wire_type(f), f.default) for f in STORED_FIELDS],
        tag="add",
        array_like=True,
        omit_defaults=True,
    )
_add_values = operator.attrgetter(*(f.name for f in STORED_FIELDS))
"""The stored fields of an ``_Add``: a prefix of ``JobFields`` (see ``STORED_FIELDS``)."""


TAGS: dict[type[fx.Effect], str] = {
    fx.Claimed: "claim",
    fx.Requeued: "requeue",
    fx.Removed: "remove",
    fx.Beat: "beat",
    fx.CancelAsked: "cancel_ask",
    fx.Cancelled: "cancel",
    fx.Died: "die",
    fx.Forgotten: "forget",
    fx.PauseSet: "pause",
    fx.ThrottleSet: "throttle",
    fx.LimitSet: "limit",
    fx.SinkMarked: "sink_mark",
    fx.Owned: "owned",
    fx.Resharded: "resharded",
    fx.Published: "publish",
    fx.Discarded: "discard",
    fx.ParentSettled: "parent_settled",
}
"""Each effect's tag in an entry (``Added`` is ``add``, or ``add_part`` runs): the one thing the
format says of an effect; its array is the effect's fields in order, typed by their kinds."""


LAYOUT = "jqueue-log/1"
ENTRY_PREFIX = "log/"
CHECKPOINT_PREFIX = "checkpoint/"
BASE_PREFIX = "base/"
GENESIS = "genesis"
"""The object a new log-structured queue creates before its marker and never deletes: a
marker whose namespace lacks it (and holds no entry or checkpoint) lost its log."""
_SEQ_DIGITS = 20
MAX_SEQ = 2**63 - 1
"""The highest entry number: it fits an int64 and a name's 20 digits."""
_BASE_NAME = re.compile(rf"{BASE_PREFIX}[A-Za-z0-9_-]{{1,200}}")
"""A base object's name, as ``migrate`` makes them (``base/<uuid hex>``)."""


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


def decode_marker(data: bytes, location: str = "<bytes>") -> tuple[bool, str | None]:
    """Return whether ``data`` is a log-structured queue's marker, and its base object.

    Raises
    ------
    CorruptStateError
        If it is a marker whose base is not a ``base/<id>`` name beside it (at ``location``).
    """
    try:
        marker = msgspec.json.decode(data, type=_Marker)
    except UNDECODABLE:
        return False, None
    is_log, base = marker.layout == LAYOUT, marker.base
    if is_log and base is not None and not _BASE_NAME.fullmatch(base):
        raise CorruptStateError(location, f"its marker names a base {base[:100]!r} outside the queue")
    return is_log, base


def _field_type(hint: Any) -> Any:
    if get_origin(hint) in (Union, types.UnionType):
        return functools.reduce(operator.or_, map(_field_type, get_args(hint)))
    if get_origin(hint) is Annotated:
        return kind_type(get_args(hint)[1])
    return hint


def _wire_struct(effect: type[Any], tag: str) -> type[msgspec.Struct]:
    shapes = [
        (f.name, _field_type(f.hint)) if f.required else (f.name, _field_type(f.hint), f.default)
        for f in declared_fields(effect, include_extras=True)
    ]
    name = "_" + effect.__name__
    return msgspec.defstruct(name, shapes, tag=tag, array_like=True, omit_defaults=True)


def _values(effect: type[Any]) -> Callable[[Any], tuple[Any, ...]]:
    names = [f.name for f in fields(effect)]
    get = operator.attrgetter(*names)
    return get if len(names) > 1 else lambda item: (get(item),)


_WIRE = {effect: (_wire_struct(effect, tag), _values(effect)) for effect, tag in TAGS.items()}
_EFFECT = {wire: effect for effect, (wire, _) in _WIRE.items()}

if TYPE_CHECKING:
    _WireEffect = _Add | AddPart | msgspec.Struct
else:
    _WireEffect = functools.reduce(operator.or_, [_Add, AddPart, *_EFFECT])


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
    effects: list[fx.Effect]
    payloads: list[bytes]


_entry_decoder = msgspec.json.Decoder(_Entry)


def _wire_effect(effect: fx.Effect) -> _WireEffect:
    if isinstance(effect, fx.Added):
        if not isinstance(effect.payload, bytes):
            raise ValueError(f"payload of {effect.job_id} is not in memory")
        return _Add(*field_values(effect))
    wire, values = _WIRE[type(effect)]
    return wire(*values(effect))


def encode_entry(seq: int, commit_id: str, at: int, effects: Sequence[fx.Effect]) -> bytes:
    """Serialise one commit's effects: an added job's payload in memory, or a part's jobs in runs
    (``AddPart``)."""
    wire: list[_WireEffect | PartRun] = []
    for effect in effects:
        if isinstance(effect, fx.Added) and isinstance(effect.payload, int):
            run = wire[-1] if wire else None
            if not isinstance(run, PartRun) or not run.takes(effect):
                run = PartRun(effect)
                wire.append(run)
            run.add(effect)
        else:
            wire.append(_wire_effect(effect))
    items = [item.wire() if isinstance(item, PartRun) else item for item in wire]
    return msgspec.json.encode(_Entry(seq, commit_id, at, items))


class _Numbered(Protocol):
    """A decoded entry, as far as ``_entry_of`` reads it."""

    @property
    def seq(self) -> int: ...


_N = TypeVar("_N", bound=_Numbered)


def _entry_of(decoder: msgspec.json.Decoder[_N], data: bytes, seq: int, location: str) -> _N:
    """Decode log entry ``seq`` with ``decoder`` (of a struct with its ``seq``)."""
    try:
        wire = decoder.decode(data)
    except UNDECODABLE as exc:
        raise CorruptStateError(location, str(exc)) from exc
    if wire.seq != seq:
        raise CorruptStateError(location, f"holds entry {wire.seq}, expected {seq}")
    return wire


def decode_entry(data: bytes, seq: int, location: str) -> Entry:
    """Deserialise log entry ``seq``; added jobs get ``payload_ref(seq, position)`` payloads.

    Raises
    ------
    CorruptStateError
        If ``data`` is not log entry ``seq``; ``location`` names the object.
    """
    wire = _entry_of(_entry_decoder, data, seq, location)
    effects: list[fx.Effect] = []
    payloads: list[bytes] = []
    for item in wire.effects:
        match item:
            case _Add() as w:
                added = fx.Added(*_add_values(w))
                payloads.append(w.payload)
                added.payload = payload_ref(seq, len(payloads) - 1)
                effects.append(added)
            case AddPart() as w:
                try:
                    effects += w.effects()
                except ValueError as exc:
                    raise CorruptStateError(location, str(exc)) from exc
            case _:
                effects.append(_EFFECT[type(item)](*msgspec.structs.astuple(item)))
    return Entry(wire.seq, wire.commit, wire.at, effects, payloads)


_PAYLOAD_AT = [f.name for f in STORED_FIELDS].index("payload")
if TYPE_CHECKING:

    class _AddPayload(DerivedStruct):
        """An added job read only up to its payload (the rest of its array is skipped)."""

else:
    _AddPayload = msgspec.defstruct(
        "_AddPayload",
        [
            *((f.name, msgspec.Raw) for f in STORED_FIELDS[:_PAYLOAD_AT]),
            ("payload", wire_type(STORED_FIELDS[_PAYLOAD_AT])),
        ],
        tag="add",
        array_like=True,
    )
if TYPE_CHECKING:
    _Skipped = msgspec.Struct
else:
    _Skipped = functools.reduce(
        operator.or_,
        [
            msgspec.defstruct(f"_Skip{i}", [], tag=tag, array_like=True)
            for i, tag in enumerate([*TAGS.values(), "add_part"])
        ],
    )


class _Payloads(msgspec.Struct):
    seq: Count
    effects: list[_AddPayload | _Skipped]


_payloads_decoder = msgspec.json.Decoder(_Payloads)


def decode_payloads(data: bytes, seq: int, location: str) -> list[bytes]:
    """Return the payloads log entry ``seq`` holds, in order, skipping the rest of it (what a
    claim that fetches a payload needs: several times faster than ``decode_entry``).

    Raises
    ------
    CorruptStateError
        If ``data`` is not log entry ``seq``.
    """
    wire = _entry_of(_payloads_decoder, data, seq, location)
    return [item.payload for item in wire.effects if isinstance(item, _AddPayload)]


def entry_commit_id(data: bytes) -> str | None:
    """Return the commit id of an encoded entry, or None if it is not one."""
    try:
        return _entry_decoder.decode(data).commit
    except UNDECODABLE:
        return None
