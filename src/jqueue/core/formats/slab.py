"""A slab: the rows of some jobs, ``slab/<seq>-<micros>-<tag>`` (ADR 0015).

A slab is immutable; a checkpoint (a manifest, ``checkpoint.py``) names the slabs that
together hold every live job, with the rows of each that no longer count. Its rows are in
claim order: first the held jobs, those a claim does not take as they are (claimed, waiting
for a time, dead, staged) or that carry a dedup key, by insertion; then the claimable ones
by line (entrypoint, then tenant), priority, creation and insertion, the order of the claim
heaps, so each line's next claimable rows are a block away. The layout ``jqueue-slab/2`` is, byte after byte:

- ``MAGIC``;
- the blocks (``slab_block.py``) of up to ``BLOCK_ROWS`` rows, each zlib-compressed;
- the filter: one little-endian 64-bit value a row, ``hash(id) << 24 | block`` (40 bits of
  BLAKE2b), sorted, so the block holding a job is found by bisecting it;
- the header, JSON: the rows, how many come before the claimable ones (``held``), each
  block's offset and length, each entrypoint's claimable rows (and each line's, when a job
  has a tenant), the filter's checksum;
- the header's length, 8 bytes big-endian.

``slab_whole.py`` reads every row of a slab at once, of this layout or the first.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import operator
import re
import sys
import zlib
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from jqueue.core.formats.slab_block import BLOCK_ROWS, decode_block, encode_block
from jqueue.core.formats.slab_header import SlabHeader, check_spans
from jqueue.core.formats.wire import UNDECODABLE
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.lines import Line
from jqueue.domain.models import JobStatus
from jqueue.domain.records import ClaimState, JobRecord
from jqueue.domain.schema import CHANGING_FIELDS

SLAB_PREFIX = "slab/"
SLAB_LAYOUT = "jqueue-slab/2"
MAGIC = b"jqueue-slab\n"
LENGTH_BYTES = 8
_BLOCK_BITS = 24
_BLOCK_MASK = (1 << _BLOCK_BITS) - 1
_HASH_BYTES = 5
"""40 bits of hash: a lookup of an id a slab of 10M rows lacks decodes a block once in 100,000."""
_COMPRESSION = 1
"""zlib's fastest level: a block of 4,096 rows in about 2 ms, to a third of its size."""

_NAME = re.compile(rf"{SLAB_PREFIX}(\d{{20}})-(\d+)-[0-9a-f]{{1,32}}")
_STATUS = CHANGING_FIELDS.index("status")
_NOT_BEFORE = CHANGING_FIELDS.index("not_before")

RowKey = tuple[int, str, str, int, int, int]
"""(1 for a claimable row, entrypoint, tenant or "", priority, created, insertion number);
held rows have only the insertion number."""


_header_decoder = msgspec.json.Decoder(SlabHeader)


def slab_name(seq: int, at: int, tag: str) -> str:
    """Return the object name of a slab written for the checkpoint of ``seq`` taken at ``at``."""
    return f"{SLAB_PREFIX}{seq:020d}-{at}-{tag}"


def slab_written_at(name: str) -> int | None:
    """Return when a slab was written (epoch microseconds, from its name), or None for another object."""
    match = _NAME.fullmatch(name)
    return None if match is None else int(match[2])


def id_hash(job_id: str) -> int:
    """Return the 40-bit hash of a job id that a slab's filter holds."""
    return int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=_HASH_BYTES).digest(), "big")


CLAIMABLE: dict[str, Any] = {"status": JobStatus.QUEUED, "not_before": None, "dedup_key": None}
"""The values a job has to be among a slab's claimable rows (the others are held)."""


def claimable(status: JobStatus, not_before: int | None, dedup_key: str | None) -> bool:
    """Whether a job with these values is among a slab's claimable rows (``CLAIMABLE``)."""
    return (status, not_before, dedup_key) == tuple(CLAIMABLE.values())


def row_key(record: JobRecord, saved: Mapping[str, ClaimState]) -> RowKey:
    """Return where a job's row goes in a slab, with its values as of a freeze (those in
    ``saved`` for the records changed since): held rows by insertion, then claimable ones in
    claim order."""
    status, not_before = record.status, record.not_before
    state = saved.get(record.id)  # after reading: a change made meanwhile saved its old values
    if state is not None:
        status, not_before = state[_STATUS], state[_NOT_BEFORE]
    if claimable(status, not_before, record.dedup_key):
        return (1, record.entrypoint, record.tenant or "", record.priority, record.created, record.order)
    return (0, "", "", 0, 0, record.order)


def _little_endian(values: array[int]) -> array[int]:
    """Return ``values`` in little-endian order (swapped in place on a big-endian machine)."""
    if sys.byteorder != "little":
        values.byteswap()
    return values


def little_endian_bytes(values: array[int]) -> bytes:
    return values.tobytes() if sys.byteorder == "little" else _little_endian(array("Q", values)).tobytes()


def table_of(data: bytes | memoryview, start: int, end: int) -> Sequence[int]:
    """Return a filter's values, read in place from ``data`` where the machine is little-endian."""
    if sys.byteorder == "little":
        return memoryview(data)[start:end].cast("Q")
    values = array("Q")
    values.frombytes(data[start:end])
    return _little_endian(values)


class SlabFilter:
    """A slab's blocks by the hashes of the job ids they hold: ``hash << 24 | block``, sorted."""

    def __init__(self, values: Sequence[int]) -> None:
        self.values = values

    def may_hold(self, hashed: int) -> bool:
        """Whether an id that hashes to ``hashed`` may be in the slab (the quick answer of a miss)."""
        at = self._first(hashed)
        return at < len(self.values) and self.values[at] >> _BLOCK_BITS == hashed

    def blocks(self, hashed: int) -> list[int]:
        """Return the blocks that may hold the job whose id hashes to ``hashed`` (``id_hash``):
        those holding an id with that hash."""
        values, at, found = self.values, self._first(hashed), []
        while at < len(values) and values[at] >> _BLOCK_BITS == hashed:
            found.append(values[at] & _BLOCK_MASK)
            at += 1
        return found

    def _first(self, hashed: int) -> int:
        return bisect_left(self.values, hashed << _BLOCK_BITS)


@dataclass
class SlabWriter:
    """Builds a slab from rows given in claim order (``row_key``), a block at a time, keeping
    8 B a row besides the compressed blocks; ``segments`` counts its rows per log entry
    holding their payloads."""

    saved: Mapping[str, ClaimState]
    rows: int = 0
    segments: Counter[int] = field(default_factory=Counter)
    _hashes: array[int] = field(default_factory=lambda: array("Q"))
    _runs: list[int] = field(default_factory=list)
    """Where each block's run of sorted hashes starts in ``_hashes``."""
    _parts: list[bytes] = field(default_factory=lambda: [MAGIC])
    _offset: int = len(MAGIC)
    _blocks: list[tuple[int, int]] = field(default_factory=list)
    _held: int = 0
    _ranges: dict[str, list[int]] = field(default_factory=dict)
    _lines: dict[Line, list[int]] = field(default_factory=dict)
    _last: RowKey | None = None
    _last_order: int = -1
    _orders: list[tuple[int, int]] = field(default_factory=list)

    def add(self, records: Sequence[JobRecord]) -> None:
        """Append a block of at most ``BLOCK_ROWS`` rows, which follow the rows before them in claim order.

        Raises
        ------
        ValueError
            If they do not (a job would have two rows), or a payload is not stored yet.
        """
        assert 0 < len(records) <= BLOCK_ROWS
        hashes: list[int] = []
        for record in records:
            key, row = row_key(record, self.saved), self.rows
            if self._last is not None and key <= self._last:
                raise ValueError(f"job {record.id!r} is out of claim order (or would have two rows)")
            if key[0]:
                self._ranges.setdefault(key[1], [row, row])[1] = row + 1
                self._lines.setdefault((key[1], record.tenant), [row, row])[1] = row + 1
            else:
                self._held = row + 1
            self._last, self._last_order = key, max(self._last_order, record.order)
            hashes.append(id_hash(record.id) << _BLOCK_BITS | row // BLOCK_ROWS)
            self.rows += 1
        self._runs.append(len(self._hashes))
        self._hashes.extend(sorted(hashes))  # sorted a block at a time: content() merges the runs
        self._orders.append(order_bounds([record.order for record in records]))
        encoded, segments = encode_block(records, self.saved)
        self.segments.update(segments)
        compressed = zlib.compress(encoded, _COMPRESSION)
        self._parts.append(compressed)
        self._blocks.append((self._offset, len(compressed)))
        self._offset += len(compressed)

    def content(self) -> bytes:
        """Return the slab's bytes."""
        bounds = [*self._runs, len(self._hashes)]
        with memoryview(self._hashes) as hashes:  # runs read in place, not copied
            runs = [hashes[start:end] for start, end in itertools.pairwise(bounds)]
            merged = array("Q", heapq.merge(*runs))  # no int object a row at once
            for run in runs:
                run.release()
        self._hashes = array("Q")  # a row's 8 B go before the table's are copied out
        table = little_endian_bytes(merged)
        del merged
        header = SlabHeader(
            SLAB_LAYOUT,
            self.rows,
            self._held,
            self._blocks,
            {name: (start, end) for name, (start, end) in self._ranges.items()},
            self._last_order,
            zlib.crc32(table),
            self._orders,
            None
            if all(tenant is None for _, tenant in self._lines)
            else [(name, tenant, start, end) for (name, tenant), (start, end) in self._lines.items()],
        )
        encoded = msgspec.json.encode(header)
        return b"".join((*self._parts, table, encoded, len(encoded).to_bytes(LENGTH_BYTES, "big")))


@dataclass(frozen=True)
class OpenedSlab:
    """A slab of this layout whose header and filter are read, and whose blocks are decoded
    one at a time (``block``)."""

    data: bytes | memoryview
    header: SlabHeader
    filter: SlabFilter
    location: str

    def moved_to(self, data: bytes | memoryview) -> OpenedSlab:
        """Return this slab read from ``data``, a copy of its bytes (a mapping of the object it
        was written to, say), whose header and filter need not be read again."""
        if len(data) != len(self.data):
            raise CorruptStateError(self.location, f"it holds {len(data)} bytes, not {len(self.data)}")
        end = len(data) - LENGTH_BYTES - int.from_bytes(data[-LENGTH_BYTES:], "big")
        table = table_of(data, end - self.header.rows * 8, end)
        return OpenedSlab(data, self.header, SlabFilter(table), self.location)

    def block(self, number: int) -> dict[str, list[Any]]:
        """Return the columns of block ``number`` (``block_columns``).

        Raises
        ------
        CorruptStateError
            If it is damaged, or does not hold the rows the header gives it.
        """
        start, size = self.header.blocks[number]
        rows = min(BLOCK_ROWS, self.header.rows - number * BLOCK_ROWS)
        try:
            columns = decode_block(zlib.decompress(self.data[start : start + size]))
        except (ValueError, zlib.error) as exc:
            raise CorruptStateError(self.location, f"block {number} is damaged: {exc}") from exc
        if len(columns["id"]) != rows:
            raise CorruptStateError(self.location, f"block {number} does not hold {rows} rows")
        problem = self._misfit(number * BLOCK_ROWS, columns)
        if problem:
            raise CorruptStateError(self.location, f"block {number} {problem}")
        return columns

    def keys(self, number: int, columns: dict[str, list[Any]]) -> list[RowKey]:
        """Return where the rows of block ``number`` (decoded as ``columns``) go (``row_key``)."""
        held = max(0, min(self.header.held - number * BLOCK_ROWS, len(columns["id"])))
        orders, entrypoints = columns["order"], columns["entrypoint"]
        none, zero, one = itertools.repeat(""), itertools.repeat(0), itertools.repeat(1)
        keys: list[RowKey] = list(zip(zero, none, none, zero, zero, orders[:held], strict=False))
        priorities, created = columns["priority"][held:], columns["created"][held:]
        tenants = [tenant or "" for tenant in columns["tenant"][held:]] if "tenant" in columns else none
        claimable = zip(one, entrypoints[held:], tenants, priorities, created, orders[held:], strict=False)
        return keys + list(claimable)

    def _misfit(self, first: int, columns: dict[str, list[Any]]) -> str:
        """Say how the rows of a block (its first row being ``first``) do not fit the header:
        claimable rows not of claimable jobs (``CLAIMABLE``), or not of the line (entrypoint
        and tenant) the header gives them, or rows out of claim order; empty if they fit."""
        header, rows = self.header, len(columns["id"])
        lowest = min(rows, max(0, header.held - first))  # held rows may fill this block and more
        nones: list[Any] = [None] * rows
        for name, value in CLAIMABLE.items():
            if (columns.get(name) or nones)[lowest:].count(value) != rows - lowest:
                return "has a held job among its claimable rows"
        tenants = columns.get("tenant") or nones
        for (entrypoint, tenant), (start, end) in header.line_spans().items():
            span = slice(max(start - first, lowest), max(0, min(end - first, rows)))
            if columns["entrypoint"][span].count(entrypoint) != len(columns["entrypoint"][span]):
                return f"has a job of another entrypoint among those of {entrypoint[:100]!r}"
            if tenants[span].count(tenant) != len(tenants[span]):
                return f"has a job of another tenant among those of {str(tenant)[:100]!r}"
        if not ascending(self.keys(first // BLOCK_ROWS, columns)):
            return "has rows out of claim order"
        if len(set(columns["order"])) != rows or len(set(columns["id"])) != rows:
            return "has two rows of one job"
        if header.orders is not None and header.orders[first // BLOCK_ROWS] != order_bounds(columns["order"]):
            return "has insertion numbers other than its header gives it"
        return ""


def open_slab(data: bytes | memoryview, location: str) -> OpenedSlab:
    """Read a slab's header and filter.

    Raises
    ------
    CorruptStateError
        If ``data`` is not a slab of this layout, or its header and filter do not fit it.
    """
    try:
        return _opened(data, location)
    except UNDECODABLE as exc:
        raise CorruptStateError(location, f"not a jqueue slab: {exc}") from exc
    except ValueError as exc:
        raise CorruptStateError(location, f"not a jqueue slab: {exc}") from exc


def order_bounds(orders: Sequence[int]) -> tuple[int, int]:
    """Return the lowest and the highest of a block's insertion numbers."""
    return (min(orders), max(orders))


def ascending(keys: list[RowKey]) -> bool:
    """Whether ``keys`` rise strictly."""
    return all(map(operator.lt, keys, itertools.islice(keys, 1, None)))


def is_slab(data: bytes | memoryview) -> bool:
    """Whether ``data`` begins as a slab of this layout does."""
    return data[: len(MAGIC)] == MAGIC


def _opened(data: bytes | memoryview, location: str) -> OpenedSlab:
    if not is_slab(data) or len(data) < len(MAGIC) + LENGTH_BYTES:
        raise ValueError("it does not begin as a slab does")
    length = int.from_bytes(data[-LENGTH_BYTES:], "big")
    table_end = len(data) - LENGTH_BYTES - length
    if length > len(data) or table_end < len(MAGIC):
        raise ValueError("its header length is out of range")
    header = _header_decoder.decode(data[table_end : len(data) - LENGTH_BYTES])
    if header.layout != SLAB_LAYOUT:
        raise ValueError(f"layout {header.layout!r} is not {SLAB_LAYOUT!r}")
    offset = len(MAGIC)
    for start, size in header.blocks:
        if start != offset or start + size > table_end:
            raise ValueError("its blocks do not follow each other")
        offset = start + size
    if len(header.blocks) != -(-header.rows // BLOCK_ROWS):
        raise ValueError(f"it does not have one block for each {BLOCK_ROWS} of its {header.rows} rows")
    if table_end - offset != header.rows * 8:
        raise ValueError(f"its filter does not have {header.rows} rows")
    if zlib.crc32(memoryview(data)[offset:table_end]) != header.filter_crc:
        raise ValueError("its filter does not match its checksum")
    if header.rows and header.last_order < 0:
        raise ValueError("its insertion numbers do not fit its rows")
    if header.orders is not None and (
        len(header.orders) != len(header.blocks)
        or any(low > high or high > header.last_order for low, high in header.orders)
    ):
        raise ValueError("its blocks' insertion numbers do not fit its rows")
    check_spans(header)
    return OpenedSlab(data, header, SlabFilter(table_of(data, offset, table_end)), location)
