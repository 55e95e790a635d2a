"""The plan of the next checkpoint, in O(changes), not O(live jobs), and of the merges of slabs
that run beside the checkpoints (ADR 0015).

A checkpoint drops the rows of the jobs changed since the last one and writes their rows as
they are now into one new slab. A merge retires slabs: those more than half dropped, and,
size-tiered, ``FANOUT`` slabs of one size class at once, so that a row is rewritten
O(log(jobs / changes a checkpoint)) times. It writes the rows that count in them (as of its
start) into one merged slab, reading them from their blocks, whether the process holds them
as records or not. A merge runs beside the checkpoints, which go on writing the changed jobs
meanwhile, so that the jobs a process holds as records are bounded by the checkpoint
interval, not by the length of a merge (ADR 0022); the next checkpoint after it names the
merged slab in place of the retired ones (``SlabSet.take_merge``). A checkpoint of every job
retires every slab itself.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import msgspec

from jqueue.core.formats.checkpoint import HistoryEncoder, encode_manifest
from jqueue.core.formats.entry import checkpoint_name
from jqueue.core.formats.slab import RowKey, SlabWriter, id_hash, open_slab, row_key, slab_name
from jqueue.core.formats.slab_block import BLOCK_ROWS
from jqueue.core.log.slabs import Slab, SlabSet, numbers, record_at, segments_of
from jqueue.domain.records import ClaimState, Frozen, JobRecord

FANOUT = 4
"""Slabs of one size class that a merge retires at once."""
SIZE_UNIT = BLOCK_ROWS
"""Rows of the smallest size class: classes go up by ``FANOUT`` times."""
MERGED_ROWS = 1 << 22
"""The most rows a merge writes (about 4.2M): slabs that would merge into more stay as they
are, so a merge holds at most a few hundred megabytes while it runs, whatever the depth (a
slab more than half dropped is still rewritten)."""

_Row = tuple[RowKey, JobRecord, int, int]
"""A row to write: its key, its record, and the slab (an index into the retired) and row it
comes from (-1, -1 for a changed job)."""


@dataclass(frozen=True)
class Plan:
    """What one checkpoint writes: a new slab (if any row is new), then the checkpoint naming
    the ``kept`` slabs and the new one, whose log entries ``segments`` hold their payloads;
    ``moved`` gives each retired slab's rows their rows in the new slab (-1 if dropped), and
    ``claimable`` the changed jobs' records that the new slab holds as claimable rows."""

    slab: Slab | None
    content: bytes
    checkpoint: str
    kept: list[Slab]
    moved: dict[Slab, array[int]]
    claimable: list[tuple[int, JobRecord]]
    segments: set[int]
    version: int
    at: int
    tag: str
    history: msgspec.Raw
    controls: dict[str, object]

    @property
    def slabs(self) -> list[Slab]:
        """The slabs the checkpoint names."""
        return [*self.kept, self.slab] if self.slab is not None else list(self.kept)

    def manifest(self, written_at: int) -> bytes:
        """Name the new slab as written at ``written_at`` (epoch microseconds: compaction keeps a
        slab no checkpoint names for the retention from then) and return the checkpoint."""
        if self.slab is not None:
            self.slab.name = slab_name(self.version, written_at, self.tag)
        entries = [slab.entry() for slab in self.slabs]
        return encode_manifest(self.version, self.at, entries, self.history, self.controls)


@dataclass(frozen=True)
class Merge:
    """A merge begun: the slabs it retires, the rows of each that counted at its start (one
    byte a row, as ``Slab.dropped``), the merged slab's number, and a flag that stops it."""

    retired: list[Slab]
    skips: list[bytes]
    number: int
    stop: threading.Event


@dataclass
class Merged:
    """A merge done: the merged slab (None if no row counted), its content, and each retired
    slab's rows' rows in it (-1 if dropped at the start); ``written_at`` is set once the
    merged slab is stored (epoch microseconds, as its name says)."""

    retired: list[Slab]
    slab: Slab | None
    content: bytes
    moved: dict[Slab, array[int]]
    written_at: int = 0


class MergeStoppedError(Exception):
    """A merge was stopped (its queue closes) before it was done."""


def merge_due(slabs: SlabSet, unit: int = SIZE_UNIT, fanout: int = FANOUT) -> Merge | None:
    """Begin the merge the slabs call for (size classes of ``unit`` rows, ``fanout`` slabs of
    one at once), or return None (on the event loop, between plans: each retired slab records
    the rows dropped from now on, for ``SlabSet.take_merge``)."""
    retired = _retired(slabs.slabs, unit, fanout)
    if not retired:
        return None
    for slab in retired:
        slab.drops_since = []
    return Merge(retired, [bytes(slab.dropped) for slab in retired], next(numbers), threading.Event())


def merge(begun: Merge) -> Merged:
    """Write the rows that counted in the retired slabs at the merge's start into one slab (meant
    for a worker thread, beside the checkpoints' plans).

    Raises
    ------
    MergeStoppedError
        If ``begun.stop`` is set meanwhile.
    """
    pairs = enumerate(zip(begun.retired, begun.skips, strict=True))
    streams = [_survivors(slab, origin, skip, {}) for origin, (slab, skip) in pairs]
    rows = heapq.merge(*streams, key=_key)
    slab, content, moved, _ = _written(rows, {}, begun.retired, begun.number, begun.stop)
    return Merged(begun.retired, slab, content, moved)


def _size_class(rows: int, unit: int) -> int:
    return ((max(rows, unit) // unit).bit_length() - 1) // 2  # log4 of rows in units


def _batched(rows: Iterable[_Row]) -> Iterator[list[_Row]]:
    iterator = iter(rows)
    while chunk := list(itertools.islice(iterator, BLOCK_ROWS)):
        yield chunk


def plan(
    slabs: SlabSet,
    frozen: Frozen,
    at: int,
    tag: str,
    *,
    every_job: bool,
    taken: Mapping[int, bytes] | None = None,
    history: HistoryEncoder | None = None,
) -> Plan:
    """Make the next checkpoint of ``frozen`` (meant for a worker thread, one at a time).

    With ``every_job`` (``frozen.changed`` holds every job that was a record at the freeze,
    and ``taken`` each slab's taken rows then) every slab is retired, and the new slab holds
    those jobs and every other row that counts; otherwise the changed jobs' old rows are
    dropped and the new slab holds their rows (merges retire slabs: ``merge``). Each
    changed record gets the new slab as its place; ``SlabSet.adopt`` makes the plan's slabs
    the set's once it is stored, and after a plan that is not, the next must write every job
    (``SlabSet.forget``): its drops are the set's already. ``history`` encodes the history
    (one kept across a queue's plans encodes each record once).

    Raises
    ------
    ValueError
        If a changed job has no row where its place says, or a job would get two rows.
    """
    if not every_job:
        for job_id, first in frozen.changed.items():
            if first.place is not None:
                slab = slabs.slab_of(first.place)
                row = None if slab is None else slab.row_of(job_id, id_hash(job_id), slabs.blocks)
                if slab is None or row is None or not isinstance(first.payload, int):
                    raise ValueError(f"job {job_id!r} is placed in no slab of the last checkpoint")
                slab.drop(row, first.payload)
    retired = list(slabs.slabs) if every_job else []
    kept = [slab for slab in slabs.slabs if slab not in retired]

    def keyed(record: JobRecord) -> _Row:
        return (row_key(record, frozen.saved), record, -1, -1)

    changed = [keyed(record) for record in map(frozen.live, frozen.changed) if record is not None]
    streams: list[Iterable[_Row]] = [sorted(chunk, key=_key) for chunk in _batched(changed)]
    for origin, slab in enumerate(retired):
        skip = slab.dropped if taken is None else _union(slab.dropped, taken.get(slab.number, b""))
        streams.append(_survivors(slab, origin, skip, frozen.saved))
    number = next(numbers)
    new, content, moved, claimable = _written(heapq.merge(*streams, key=_key), frozen.saved, retired, number)
    named = [*kept, new] if new is not None else kept
    segments = segments_of(named)
    name = checkpoint_name(frozen.version, at)
    encoded = (history or HistoryEncoder()).encode(frozen.history)
    version, controls = frozen.version, frozen.controls
    return Plan(new, content, name, kept, moved, claimable, segments, version, at, tag, encoded, controls)


def _key(row: _Row) -> RowKey:
    return row[0]


def _union(first: bytes | bytearray, second: bytes | bytearray) -> bytearray:
    """Return the rows marked in either of two byte-a-row masks (the second may be empty)."""
    if not second:
        return bytearray(first)
    joined = int.from_bytes(first, "little") | int.from_bytes(second, "little")
    return bytearray(joined.to_bytes(len(first), "little"))


def _retired(slabs: list[Slab], unit: int, fanout: int) -> list[Slab]:
    """Return the slabs a merge retires: those more than half dropped, and, from the smallest
    size class up, the slabs of a class and the ones below it once there are ``fanout`` of
    them, counting the merged slab of those retired already as one of its class, while the
    merged slab stays within ``MERGED_ROWS``."""
    retired = [slab for slab in slabs if slab.dropped.count(1) * 2 > slab.rows]
    rows = sum(slab.live for slab in retired)
    for size in sorted({_size_class(slab.live, unit) for slab in slabs}):
        merged = bool(retired)
        if merged:
            size = max(size, _size_class(rows, unit))
        alike = [s for s in slabs if s not in retired and _size_class(s.live, unit) <= size]
        more = sum(slab.live for slab in alike)
        if len(alike) + merged >= fanout and rows + more <= MERGED_ROWS:
            retired += alike
            rows += more
    return retired


def _survivors(
    slab: Slab, origin: int, skip: bytes | bytearray, saved: Mapping[str, ClaimState]
) -> Iterator[_Row]:
    """Yield the rows of ``slab`` not marked in ``skip``, in its order (claim order)."""
    for number in range(len(slab.opened.header.blocks)):
        first = number * BLOCK_ROWS
        if skip.count(0, first, first + BLOCK_ROWS) == 0:
            continue
        columns = slab.opened.block(number)
        for row in range(len(columns["id"])):
            if not skip[first + row]:
                record = record_at(columns, row, None)
                yield (row_key(record, saved), record, origin, first + row)


def _written(
    rows: Iterable[_Row],
    saved: Mapping[str, ClaimState],
    retired: list[Slab],
    number: int,
    stop: threading.Event | None = None,
) -> tuple[Slab | None, bytes, dict[Slab, array[int]], list[tuple[int, JobRecord]]]:
    moved = {slab: array("i", [-1]) * slab.rows for slab in retired}
    origins = list(moved.values())
    writer = SlabWriter(saved)
    taken = bytearray()
    claimable: list[tuple[int, JobRecord]] = []
    for chunk in _batched(rows):
        if stop is not None and stop.is_set():
            raise MergeStoppedError
        start = writer.rows
        writer.add([record for _, record, _, _ in chunk])
        for offset, (key, record, origin, row) in enumerate(chunk):
            if origin < 0:
                record.place = number
                taken.append(1)
                if key[0]:
                    claimable.append((start + offset, record))
            else:
                origins[origin][row] = start + offset
                taken.append(0)
    if not writer.rows:
        return None, b"", moved, claimable
    content = writer.content()
    opened = open_slab(content, "a slab being written")
    slab = Slab("", opened, bytearray(writer.rows), taken, number, dict(writer.segments))
    return slab, content, moved, claimable
