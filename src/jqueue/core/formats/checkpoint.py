"""The checkpoint: every live job's fields at one log entry, ``checkpoint/<seq>-<micros>``.

A checkpoint is compact JSON in columns, one list per job field (``JobFields``), one row
per job: entrypoints as codes into a list of names, each payload as the ``segment`` and
``position`` of the entry that holds it, and a column whose values are all its default
left out. It also holds the history of finished jobs and the pauses and throttles.
"""

from __future__ import annotations

from typing import Any

import msgspec

from jqueue.core.formats.collections_paused import collections_paused
from jqueue.core.formats.marker import LAYOUT
from jqueue.core.formats.payload_refs import columns_from_refs, refs_from_columns
from jqueue.core.formats.snapshot import IndexSnapshot
from jqueue.core.formats.wire import (
    UNDECODABLE,
    Count,
    Micros,
    WireControls,
    WireHistories,
    controls_from_wire,
    history_from_wire,
    wire_history,
    wire_type,
)
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.schema import STORED_FIELDS

_SPECIAL = ("id", "entrypoint", "payload")
"""Fields in columns of their own form: ``ids``, ``entrypoints`` and codes, ``segment`` and ``position``."""
_REQUIRED = [f for f in STORED_FIELDS if f.required and f.name not in _SPECIAL]
_OPTIONAL = [f for f in STORED_FIELDS if not f.required and f.name not in _SPECIAL]

_Checkpoint: Any = msgspec.defstruct(
    "_Checkpoint",
    [
        ("layout", str),
        ("seq", Count),
        ("at", Micros),
        ("entrypoints", list[str]),
        ("ids", list[str]),
        ("entrypoint", list[Count]),
        *((f.name, list[wire_type(f)]) for f in _REQUIRED),  # type: ignore[misc]
        ("order", list[Count]),
        ("segment", list[Count]),
        ("position", list[Count]),
        *((f.name, list[wire_type(f)] | None, None) for f in _OPTIONAL),  # type: ignore[misc]
        ("history", WireHistories, []),
        ("controls", WireControls | None, None),
    ],
)
_checkpoint_decoder = msgspec.json.Decoder(_Checkpoint)


def _sparse(default: Any, column: list[Any]) -> list[Any] | None:
    """Return a column, or None when every value is the column's default."""
    return None if column.count(default) == len(column) else column


def encode_checkpoint(snapshot: IndexSnapshot, at: int) -> tuple[bytes, set[int]]:
    """Serialise every live job of a snapshot in columns, with the history and the controls
    (meant for a worker thread); returns the bytes and the segments that hold the payloads."""
    refs = snapshot.column("payload")
    if set(map(type, refs)) - {int}:
        raise ValueError("a payload is not stored yet")
    entrypoints = snapshot.column("entrypoint")
    codes = {name: code for code, name in enumerate(dict.fromkeys(entrypoints))}
    segments, positions = columns_from_refs(refs)
    wire = _Checkpoint(
        layout=LAYOUT,
        seq=snapshot.version,
        at=at,
        entrypoints=list(codes),
        ids=snapshot.column("id"),
        entrypoint=list(map(codes.__getitem__, entrypoints)),
        order=snapshot.column("order"),
        segment=segments,
        position=positions,
        history=wire_history(snapshot.history),
        controls=WireControls(**snapshot.controls),
        **{f.name: snapshot.column(f.name) for f in _REQUIRED},
        **{f.name: _sparse(f.default, snapshot.column(f.name)) for f in _OPTIONAL},
    )
    return msgspec.json.encode(wire), set(segments)


def decode_checkpoint(data: bytes, location: str) -> tuple[QueueIndex, set[int]]:
    """Deserialise a checkpoint into an index at its sequence number; returns it and the
    segments that hold its payloads.

    Raises
    ------
    CorruptStateError
        If ``data`` is not a checkpoint or its columns disagree.
    """
    try:
        wire = _checkpoint_decoder.decode(data)
    except UNDECODABLE as exc:
        raise CorruptStateError(location, str(exc)) from exc
    try:
        with collections_paused():
            if wire.layout != LAYOUT:
                raise ValueError(f"layout {wire.layout!r} is not {LAYOUT!r}")
            columns: dict[str, Any] = {
                "id": wire.ids,
                "entrypoint": list(map(wire.entrypoints.__getitem__, wire.entrypoint)),
                "payload": refs_from_columns(wire.segment, wire.position),
                "order": wire.order,
            }
            columns |= {f.name: getattr(wire, f.name) for f in _REQUIRED}
            columns |= {f.name: getattr(wire, f.name) for f in _OPTIONAL if getattr(wire, f.name) is not None}
            history = history_from_wire(wire.history)
            index = QueueIndex.from_columns(wire.seq, columns, history, controls_from_wire(wire.controls))
            return index, set(wire.segment)
    except Exception as exc:  # columns that do not fit together
        raise CorruptStateError(location, f"not a jqueue checkpoint: {exc!r}") from exc
