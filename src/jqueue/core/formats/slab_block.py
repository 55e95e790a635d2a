"""A block: the rows of up to ``BLOCK_ROWS`` jobs in columns, the unit a slab (``slab.py``) is
made of and a checkpoint of the first layout held inline (ADR 0015).

A block is compact JSON in columns, one list per job field (``JobFields``), one row per job:
entrypoints as codes into a list of names, each payload as the ``segment`` and ``position``
of the entry that holds it, and a column whose values are all its default left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import msgspec

from jqueue.core.formats.payload_refs import columns_from_refs, refs_from_columns
from jqueue.core.formats.wire import UNDECODABLE, Count, wire_type
from jqueue.domain.records import ClaimState, JobRecord
from jqueue.domain.schema import CHANGING_FIELDS, STORED_FIELDS

if TYPE_CHECKING:
    from jqueue.core.formats.wire import DerivedStruct

BLOCK_ROWS = 4096
"""Rows a block holds at most: encoding one takes about a millisecond."""

_SPECIAL = ("id", "entrypoint", "payload")
"""Fields in columns of their own form: ``ids``, ``entrypoints`` and codes, ``segment`` and ``position``."""
_REQUIRED = [f for f in STORED_FIELDS if f.required and f.name not in _SPECIAL]
_OPTIONAL = [f for f in STORED_FIELDS if not f.required and f.name not in _SPECIAL]
_COLUMN_DEFAULTS = {f.name: f.default for f in _OPTIONAL}

BLOCK_FIELDS: list[tuple[str, Any]] = [
    ("entrypoints", list[str]),
    ("ids", list[str]),
    ("entrypoint", list[Count]),
    *((f.name, list[wire_type(f)]) for f in _REQUIRED),  # type: ignore[misc]
    ("order", list[Count]),
    ("segment", list[Count]),
    ("position", list[Count]),
]
"""The columns every block has, in order (then one optional column per ``_OPTIONAL`` field)."""
OPTIONAL_BLOCK_FIELDS: list[tuple[str, Any, None]] = [
    (f.name, list[wire_type(f)] | None, None)  # type: ignore[misc]
    for f in _OPTIONAL
]

if TYPE_CHECKING:

    class _Block(DerivedStruct):
        """A block on the wire: ``BLOCK_FIELDS``, then ``OPTIONAL_BLOCK_FIELDS``."""

else:
    _Block = msgspec.defstruct("_Block", [*BLOCK_FIELDS, *OPTIONAL_BLOCK_FIELDS])
BLOCK_TYPE = _Block
"""The decoded form of a block (``block_columns`` turns it into columns)."""
_block_decoder = msgspec.json.Decoder(_Block)
_changing_positions = [(name, position) for position, name in enumerate(CHANGING_FIELDS)]


def _sparse(default: Any, column: list[Any]) -> list[Any] | None:
    """Return a column, or None when every value is the column's default."""
    return None if column.count(default) == len(column) else column


def encode_block(records: Sequence[JobRecord], saved: Mapping[str, ClaimState]) -> tuple[bytes, list[int]]:
    """Encode the rows of ``records`` as one block, each with its values as of a freeze (those
    in ``saved``, for the records changed since); returns the bytes and each row's payload segment.

    Raises
    ------
    ValueError
        If a payload is not stored yet.
    """
    names = ("id", "entrypoint", "payload", "order", *(f.name for f in (*_REQUIRED, *_OPTIONAL)))
    columns = {name: list(map(attrgetter(name), records)) for name in names}
    for row, record in enumerate(records):  # after reading: a change made meanwhile saved its old values
        before = saved.get(record.id)
        if before is not None:
            for name, position in _changing_positions:
                columns[name][row] = before[position]
    refs = columns["payload"]
    if set(map(type, refs)) - {int}:
        raise ValueError("a payload is not stored yet")
    codes = {name: code for code, name in enumerate(dict.fromkeys(columns["entrypoint"]))}
    segments, positions = columns_from_refs(refs)
    block = _Block(
        entrypoints=list(codes),
        ids=columns["id"],
        entrypoint=list(map(codes.__getitem__, columns["entrypoint"])),
        order=columns["order"],
        segment=segments,
        position=positions,
        **{f.name: columns[f.name] for f in _REQUIRED},
        **{f.name: _sparse(f.default, columns[f.name]) for f in _OPTIONAL},
    )
    return msgspec.json.encode(block), segments


def block_columns(block: DerivedStruct) -> dict[str, list[Any]]:
    """Return one column per record field (and ``order``) of a decoded block, or of a checkpoint
    of the first layout, which holds its jobs as one block; an optional column left out of it
    is left out here too.

    Raises
    ------
    ValueError
        If its columns differ in length or a code names no entrypoint.
    """
    if max(block.entrypoint, default=-1) >= len(block.entrypoints):
        raise ValueError("an entrypoint code names no entrypoint")
    columns: dict[str, list[Any]] = {
        "id": block.ids,
        "entrypoint": list(map(block.entrypoints.__getitem__, block.entrypoint)),
        "payload": refs_from_columns(block.segment, block.position),
        "order": block.order,
    }
    columns |= {f.name: getattr(block, f.name) for f in _REQUIRED}
    columns |= {f.name: getattr(block, f.name) for f in _OPTIONAL if getattr(block, f.name) is not None}
    if len({len(column) for column in columns.values()}) > 1:
        raise ValueError("the columns differ in length")
    return columns


def decode_block(data: bytes) -> dict[str, list[Any]]:
    """Return the columns of one encoded block (``block_columns``).

    Raises
    ------
    ValueError
        If ``data`` is not a block.
    """
    try:
        return block_columns(_block_decoder.decode(data))
    except UNDECODABLE as exc:
        raise ValueError(str(exc)) from exc


def concatenated(parts: Sequence[Mapping[str, Sequence[Any]]]) -> dict[str, list[Any]]:
    """Return the rows of ``parts`` (each one column per field, with ``id``) one after the
    other, with an optional column that a part leaves out filled with its default."""
    names = dict.fromkeys(chain.from_iterable(parts))
    return {
        name: list(
            chain.from_iterable(
                part.get(name) or repeat(_COLUMN_DEFAULTS.get(name), len(part["id"])) for part in parts
            )
        )
        for name in names
    }
