"""Whole slabs: every row of a slab at once, of this layout or of the first (``jqueue-slab/1``,
one JSON object whose rows are sorted by id, read and never written: the next checkpoint
rewrites its rows), and a slab as a JSON tree, to inspect it and for the fuzzers."""

from __future__ import annotations

import itertools
import zlib
from array import array
from dataclasses import dataclass
from itertools import chain
from typing import Any

import msgspec

from jqueue.core.formats.slab import (
    LENGTH_BYTES,
    MAGIC,
    ascending,
    little_endian_bytes,
    open_slab,
    table_of,
)
from jqueue.core.formats.slab_block import BLOCK_TYPE, block_columns
from jqueue.core.formats.wire import UNDECODABLE, Count
from jqueue.domain.errors import CorruptStateError

FIRST_SLAB_LAYOUT = "jqueue-slab/1"
"""The layout of a slab whose rows are sorted by id (read, never written)."""


class _FirstLayout(msgspec.Struct):
    layout: str
    rows: Count
    blocks: list[BLOCK_TYPE]


_first_decoder = msgspec.json.Decoder(_FirstLayout)


@dataclass(frozen=True)
class DecodedSlab:
    """A slab's rows: their job ids in row order and its blocks (each one column per record
    field, ``block_columns``); ``current`` is False for a slab of the first layout."""

    ids: list[str]
    blocks: list[dict[str, list[Any]]]
    current: bool = True


def decode_slab(data: bytes, location: str) -> DecodedSlab:
    """Return every row of a slab, of either layout.

    Raises
    ------
    CorruptStateError
        If ``data`` is not a slab, or its rows do not fit its header and filter.
    """
    if data.startswith(b"{"):
        try:
            return _decode_first(data)
        except (*UNDECODABLE, ValueError) as exc:
            raise CorruptStateError(location, f"not a jqueue slab: {exc}") from exc
    opened = open_slab(data, location)
    blocks = [opened.block(number) for number in range(len(opened.header.blocks))]
    ends = [keys[:1] + keys[1:][-1:] for keys in map(opened.keys, itertools.count(), blocks)]
    if not ascending(list(chain.from_iterable(ends))):
        raise CorruptStateError(location, "not a jqueue slab: its blocks are out of claim order")
    orders = list(chain.from_iterable(block["order"] for block in blocks))
    ids = list(chain.from_iterable(block["id"] for block in blocks))
    if len(set(orders)) != len(orders) or len(set(ids)) != len(ids):
        raise CorruptStateError(location, "not a jqueue slab: two of its rows are of one job")
    return DecodedSlab(ids, blocks)


def _decode_first(data: bytes) -> DecodedSlab:
    slab = _first_decoder.decode(data)
    if slab.layout != FIRST_SLAB_LAYOUT:
        raise ValueError(f"layout {slab.layout!r} is not {FIRST_SLAB_LAYOUT!r}")
    blocks = [block_columns(block) for block in slab.blocks]
    ids = list(chain.from_iterable(block["id"] for block in blocks))
    if len(ids) != slab.rows:
        raise ValueError(f"it holds {len(ids)} rows, not {slab.rows}")
    if not all(map(str.__lt__, ids, itertools.islice(ids, 1, None))):
        raise ValueError("its rows are not sorted by job id")
    return DecodedSlab(ids, blocks, current=False)


def slab_tree(data: bytes) -> dict[str, Any]:
    """Return a slab of this layout as one JSON tree: its header, its blocks and its filter (for
    inspecting a slab, and for the fuzzers, with ``tree_slab``).

    Raises
    ------
    ValueError
        If ``data`` is not a slab of this layout.
    """
    length = int.from_bytes(data[-LENGTH_BYTES:], "big")
    header: dict[str, Any] = msgspec.json.decode(data[len(data) - LENGTH_BYTES - length : -LENGTH_BYTES])
    blocks = [
        msgspec.json.decode(zlib.decompress(data[start : start + size])) for start, size in header["blocks"]
    ]
    end = header["blocks"][-1][0] + header["blocks"][-1][1] if header["blocks"] else len(MAGIC)
    return {
        "header": header,
        "blocks": blocks,
        "filter": list(table_of(data, end, len(data) - LENGTH_BYTES - length)),
    }


def tree_slab(tree: dict[str, Any]) -> bytes:
    """Return the slab of a tree from ``slab_tree``, its offsets and checksum made to fit."""
    parts, spans, offset = [MAGIC], [], len(MAGIC)
    for block in tree["blocks"]:
        parts.append(zlib.compress(msgspec.json.encode(block)))
        spans.append([offset, len(parts[-1])])
        offset += len(parts[-1])
    table = little_endian_bytes(array("Q", tree["filter"]))
    encoded = msgspec.json.encode({**tree["header"], "blocks": spans, "filter_crc": zlib.crc32(table)})
    return b"".join((*parts, table, encoded, len(encoded).to_bytes(LENGTH_BYTES, "big")))
