"""The checkpoint: the queue's state at one log entry, ``checkpoint/<seq>-<micros>`` (ADR 0015).

A checkpoint is a manifest: it names the slabs (``slab.py``) that together hold every job
live at entry ``seq``, with, for each, the rows that no longer count (``dropped``: one byte
a row, compressed), and it holds the history of finished jobs and the pauses and throttles.
A checkpoint of the first layout (``jqueue-log/1``) held every live job itself, as one
block; it reads as a manifest whose jobs are inline, and the next checkpoint rewrites them
into a slab.
"""

from __future__ import annotations

import operator
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from jqueue.core.formats.collections_paused import collections_paused
from jqueue.core.formats.entry import LAYOUT, MAX_SEQ
from jqueue.core.formats.slab import slab_written_at
from jqueue.core.formats.slab_block import BLOCK_FIELDS, OPTIONAL_BLOCK_FIELDS, block_columns
from jqueue.core.formats.wire import (
    UNDECODABLE,
    Count,
    Micros,
    WireControls,
    WireHistories,
    controls_from_wire,
    history_from_wire,
    wire_history,
)
from jqueue.domain.controls import Controls
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.records import HistoryRecord

if TYPE_CHECKING:
    from jqueue.core.formats.wire import DerivedStruct

MANIFEST_LAYOUT = "jqueue-log/2"
FIRST_LAYOUT = LAYOUT
"""The layout of a checkpoint that holds its jobs inline (read, never written)."""


class _SlabEntry(msgspec.Struct, array_like=True, omit_defaults=True):
    name: str
    rows: Count
    dropped: bytes = b""
    segments: list[tuple[Count, Count]] = []


if TYPE_CHECKING:

    class _Checkpoint(DerivedStruct):
        """A checkpoint on the wire: its own fields, then the columns of a block (first layout)."""

else:
    _Checkpoint = msgspec.defstruct(
        "_Checkpoint",
        [
            ("layout", str),
            ("seq", Annotated[int, msgspec.Meta(ge=0, le=MAX_SEQ)]),
            ("at", Micros),
            ("slabs", list[_SlabEntry] | None, None),
            ("history", WireHistories, []),
            ("controls", WireControls | None, None),
            *((name, kind | None, None) for name, kind in BLOCK_FIELDS),
            *OPTIONAL_BLOCK_FIELDS,
        ],
        kw_only=True,
        omit_defaults=True,
    )
_checkpoint_decoder = msgspec.json.Decoder(_Checkpoint)


class _Named(msgspec.Struct):
    layout: str
    slabs: list[_SlabEntry] | None = None


_named_decoder = msgspec.json.Decoder(_Named)


@dataclass(frozen=True)
class SlabEntry:
    """A slab a checkpoint names: its object, its rows, which of them no longer count
    (``packed``: one byte a row, 1 for a dropped row, compressed; empty when none is), and
    how many of those that count have their payload in each log entry (``segments``, empty
    in a checkpoint written before slabs were in claim order)."""

    name: str
    rows: int
    packed: bytes
    segments: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, dropped: bytes | bytearray, segments: Mapping[int, int]) -> SlabEntry:
        """Return the entry of slab ``name`` whose dropped rows are ``dropped`` (one byte a row)
        and whose rows that count have their payloads in the log entries ``segments``."""
        packed = zlib.compress(dropped) if 1 in dropped else b""
        return cls(name, len(dropped), packed, {segment: n for segment, n in segments.items() if n > 0})

    def dropped(self) -> bytes:
        """Return the dropped rows, one byte a row (call it once ``rows`` is known to be true).

        Raises
        ------
        ValueError
            If they do not fit the slab's rows.
        """
        if not self.packed:
            return bytes(self.rows)
        inflater = zlib.decompressobj()
        try:
            dropped = inflater.decompress(self.packed, self.rows + 1)
        except zlib.error as exc:
            raise ValueError(f"the dropped rows of {self.name!r} are damaged: {exc}") from exc
        if len(dropped) != self.rows or inflater.unconsumed_tail or dropped.strip(b"\x00\x01"):
            raise ValueError(f"the dropped rows of {self.name!r} do not fit its {self.rows} rows")
        return dropped


@dataclass(frozen=True)
class Manifest:
    """A decoded checkpoint; ``inline`` holds the jobs of one of the first layout (by column)."""

    seq: int
    at: int
    slabs: list[SlabEntry]
    history: list[HistoryRecord]
    controls: Controls
    inline: dict[str, list[Any]] | None = None


_encoder = msgspec.json.Encoder()


class HistoryEncoder:
    """Encodes a queue's history as its checkpoints hold it, each record once.

    Between two checkpoints a history loses its oldest records and gains new ones at its end,
    and its records never change: the records the last call encoded that are still there, in
    the same order, are taken as encoded then, found by identity. What the last call encoded
    is kept as one pair, so that even two calls at once (the plans of one queue run one at a
    time) each read a whole one.
    """

    def __init__(self) -> None:
        self._last: tuple[list[HistoryRecord], list[bytes]] = ([], [])

    def encode(self, history: list[HistoryRecord]) -> msgspec.Raw:
        """Return ``history`` encoded (a JSON array of ``WireHistory``)."""
        before, encoded = self._last
        kept = _kept(before, history)
        parts = encoded[len(encoded) - kept :]
        parts += [_encoder.encode(wire) for wire in wire_history(history[kept:])]
        self._last = (history, parts)
        return msgspec.Raw(b"[" + b",".join(parts) + b"]")


def _kept(before: list[HistoryRecord], history: list[HistoryRecord]) -> int:
    """How many records ``history`` starts with that end ``before``, the same objects."""
    if not history or not before:
        return 0
    first = history[0]
    start = next((at for at, record in enumerate(before) if record is first), None)
    if start is None:
        return 0
    tail = before[start:]
    if len(tail) > len(history) or not all(map(operator.is_, tail, history)):
        return 0
    return len(tail)


def encode_manifest(
    seq: int, at: int, slabs: list[SlabEntry], history: msgspec.Raw, controls: dict[str, Any]
) -> bytes:
    """Serialise a checkpoint of entry ``seq`` taken at ``at``, with its history encoded ahead
    (``HistoryEncoder``): the rest is small."""
    entries = [_SlabEntry(slab.name, slab.rows, slab.packed, sorted(slab.segments.items())) for slab in slabs]
    wire = _Checkpoint(
        layout=MANIFEST_LAYOUT,
        seq=seq,
        at=at,
        slabs=entries,
        history=history,
        controls=WireControls(**controls),
    )
    return msgspec.json.encode(wire)


def _slab_entry(entry: _SlabEntry) -> SlabEntry:
    if slab_written_at(entry.name) is None:
        raise ValueError(f"it names {entry.name[:100]!r}, which is not a slab")
    segments = dict(entry.segments)
    if len(segments) != len(entry.segments) or sum(segments.values()) > entry.rows:
        raise ValueError(f"the payload entries of slab {entry.name[:100]!r} do not fit its rows")
    return SlabEntry(entry.name, entry.rows, entry.dropped, segments)


def decode_manifest(data: bytes, location: str) -> Manifest:
    """Deserialise a checkpoint.

    Raises
    ------
    CorruptStateError
        If ``data`` is not a checkpoint or does not fit together.
    """
    try:
        wire = _checkpoint_decoder.decode(data)
    except UNDECODABLE as exc:
        raise CorruptStateError(location, str(exc)) from exc
    try:
        with collections_paused():
            history = history_from_wire(wire.history)
            controls = controls_from_wire(wire.controls)
            if wire.layout == FIRST_LAYOUT and wire.slabs is None:
                missing = [name for name, _ in BLOCK_FIELDS if getattr(wire, name) is None]
                if missing:
                    raise ValueError(f"it lacks the columns {', '.join(missing)}")
                return Manifest(wire.seq, wire.at, [], history, controls, inline=block_columns(wire))
            if wire.layout != MANIFEST_LAYOUT or wire.slabs is None or wire.ids is not None:
                raise ValueError(f"layout {wire.layout!r} is not {MANIFEST_LAYOUT!r}")
            slabs = list(map(_slab_entry, wire.slabs))
            return Manifest(wire.seq, wire.at, slabs, history, controls)
    except (ValueError, TypeError) as exc:  # columns or slabs that do not fit together
        raise CorruptStateError(location, f"not a jqueue checkpoint: {exc}") from exc


def named_slabs(data: bytes, location: str) -> set[str]:
    """Return the slabs a checkpoint names (none for one of the first layout), reading no more.

    Raises
    ------
    CorruptStateError
        If ``data`` is not a checkpoint.
    """
    try:
        wire = _named_decoder.decode(data)
    except UNDECODABLE as exc:
        raise CorruptStateError(location, str(exc)) from exc
    if wire.layout not in (FIRST_LAYOUT, MANIFEST_LAYOUT):
        raise CorruptStateError(location, f"not a jqueue checkpoint: layout {wire.layout!r}")
    return {entry.name for entry in wire.slabs or ()}
