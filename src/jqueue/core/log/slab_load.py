"""Opening a checkpoint: the index of its jobs, built from the held rows of its slabs, with the
claimable rows left cold in them (ADR 0015).

Checkpoints and slabs of a first layout (jobs inline, or rows sorted by id) are read whole,
every job a record, and the next checkpoint writes them all into a slab of this layout.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from jqueue.core.formats.checkpoint import Manifest
from jqueue.core.formats.entry import checkpoint_name
from jqueue.core.formats.payload_refs import columns_from_refs
from jqueue.core.formats.slab import is_slab, open_slab
from jqueue.core.formats.slab_block import BLOCK_ROWS, concatenated
from jqueue.core.formats.slab_whole import decode_slab
from jqueue.core.log.slabs import Slab, SlabSet, numbers
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import REQUIRED_COLUMNS, QueueIndex

Columns = dict[str, list[Any]]
Loaded = tuple[QueueIndex, SlabSet, set[int]]
Content = bytes | memoryview
"""A slab's bytes, read or mapped (``MappedStoragePort``)."""
_KEPT = bytes.maketrans(b"\x00\x01", b"\x01\x00")
"""Turns a slab's dropped rows into the rows that count."""


def loaded(manifest: Manifest, contents: Sequence[Content], locations: list[str], location: str) -> Loaded:
    """Return the index of a checkpoint (at ``location``), its slab set, and the log entries
    that hold the payloads of its jobs, from its slabs' bytes (each at its location).

    Raises
    ------
    CorruptStateError
        If a slab is damaged, or the slabs do not fit the checkpoint.
    """
    try:
        if manifest.inline is not None:
            index = _index(manifest, manifest.inline)
            return index, SlabSet(), set(columns_from_refs(manifest.inline["payload"])[0])
        if not all(map(is_slab, contents)):
            return _whole(manifest, contents, locations)
        return _cold(manifest, contents, locations)
    except ValueError as exc:
        raise CorruptStateError(location, f"its slabs do not fit together: {exc}") from exc


def _index(manifest: Manifest, columns: Columns) -> QueueIndex:
    index = QueueIndex.from_columns(manifest.seq, columns, manifest.history, manifest.controls)
    index.track_changes()
    return index


def _selected(columns: Columns, rows: int, kept: bytes | bytearray) -> Columns:
    """Return the first ``rows`` rows of a block's columns, those marked in ``kept``."""
    return {name: list(itertools.compress(column[:rows], kept)) for name, column in columns.items()}


def _joined(parts: list[Columns]) -> Columns:
    parts = [part for part in parts if part["id"]]
    return concatenated(parts) if parts else {name: [] for name in REQUIRED_COLUMNS}


def _whole(manifest: Manifest, contents: Sequence[Content], locations: list[str]) -> Loaded:
    """Every job of a checkpoint naming a slab of the first layout, as a record."""
    parts: list[Columns] = []
    for entry, content, where in zip(manifest.slabs, contents, locations, strict=True):
        decoded = decode_slab(bytes(content), where)
        if len(decoded.ids) != entry.rows:
            raise ValueError(f"slab {entry.name!r} holds {len(decoded.ids)} rows, not {entry.rows}")
        kept, start = entry.dropped().translate(_KEPT), 0
        for block in decoded.blocks:
            rows = len(block["id"])
            parts.append(_selected(block, rows, kept[start : start + rows]))
            start += rows
    columns = _joined(parts)
    return _index(manifest, columns), SlabSet(), set(columns_from_refs(columns["payload"])[0])


def _cold(manifest: Manifest, contents: Sequence[Content], locations: list[str]) -> Loaded:
    """The held rows of each slab as records, the others cold."""
    slabs: list[Slab] = []
    parts: list[Columns] = []
    last_order = -1
    for entry, content, where in zip(manifest.slabs, contents, locations, strict=True):
        opened = open_slab(content, where)
        header = opened.header
        if header.rows != entry.rows:
            raise ValueError(f"slab {entry.name!r} holds {header.rows} rows, not {entry.rows}")
        dropped = bytearray(entry.dropped())
        taken = bytearray(dropped)
        taken[: header.held] = b"\x01" * header.held
        number = next(numbers)
        kept = bytes(dropped[: header.held]).translate(_KEPT)
        for block in range(-(-header.held // BLOCK_ROWS)):
            first = block * BLOCK_ROWS
            rows = min(BLOCK_ROWS, header.held - first)
            part = _selected(opened.block(block), rows, kept[first : first + rows])
            part["place"] = [number] * len(part["id"])
            parts.append(part)
        slabs.append(Slab.of(entry.name, opened, dropped, taken, number, entry.segments))
        last_order = max(last_order, header.last_order)
    index = _index(manifest, _joined(parts))
    slab_set = SlabSet(slabs, checkpoint_name(manifest.seq, manifest.at))
    index.attach(slab_set, last_order)
    return index, slab_set, slab_set.segments()
