"""``SlabSet``: the slabs of the newest checkpoint a process wrote or loaded, and the making of
the next checkpoint from them in O(changes), not O(live jobs) (ADR 0015).

Each live job has one row that counts, in one slab; its record's ``place`` is that slab's
``number`` in this process, and a slab finds the row by its filter (rows are in claim order). A
checkpoint drops the rows of the jobs changed since the last one and writes their rows as
they are now into one new slab, together with the rows left in the slabs it retires:
those more than half dropped, and, size-tiered, ``FANOUT`` slabs of one size class at
once, so that a row is rewritten O(log(jobs / changes a checkpoint)) times.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from jqueue.core.formats.checkpoint import Manifest, SlabEntry, encode_manifest, encoded_history
from jqueue.core.formats.marker import checkpoint_name
from jqueue.core.formats.payload_refs import columns_from_refs, payload_place
from jqueue.core.formats.slab import DecodedSlab, RowKey, SlabFilter, SlabWriter, row_key, slab_name
from jqueue.core.formats.slab_block import BLOCK_ROWS, concatenated
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.index_state import REQUIRED_COLUMNS
from jqueue.domain.records import ClaimState, Frozen, JobRecord

FANOUT = 4
"""Slabs of one size class that a checkpoint merges into its new slab."""
SIZE_UNIT = BLOCK_ROWS
"""Rows of the smallest size class: classes go up by ``FANOUT`` times."""
_KEPT = bytes.maketrans(b"\x00\x01", b"\x01\x00")
"""Turns a slab's dropped bytes into the bytes that select its rows that count."""
_numbers = itertools.count(1)


@dataclass(eq=False)
class Slab:
    """A slab as this process knows it: its rows' job ids (in row order) and filter, which rows
    no longer count (one byte a row), and how many rows that count have their payload in each
    log entry."""

    name: str
    ids: list[str]
    filter: SlabFilter
    dropped: bytearray
    segments: Counter[int]
    number: int = field(default_factory=lambda: next(_numbers))

    @property
    def live(self) -> int:
        """How many of its rows count."""
        return len(self.ids) - self.dropped.count(1)

    def drop(self, job_id: str, payload: int) -> None:
        """Mark the row of job ``job_id``, whose payload reference is ``payload``, as no longer counting.

        Raises
        ------
        ValueError
            If the slab has no row of that job.
        """
        row = self.filter.row(job_id, self.ids)
        if row is None:
            raise ValueError(f"slab {self.name!r} has no row of job {job_id!r}")
        self.dropped[row] = 1
        segment = payload_place(payload)[0]
        self.segments[segment] -= 1
        if self.segments[segment] <= 0:
            del self.segments[segment]

    def kept_rows(self) -> bytearray:
        """One byte a row: 1 for a row that counts."""
        return self.dropped.translate(_KEPT)

    def entry(self) -> SlabEntry:
        """Return how a checkpoint names this slab."""
        return SlabEntry.of(self.name, self.dropped)


@dataclass(frozen=True)
class Plan:
    """What one checkpoint writes: a new slab (if any row is new), then the checkpoint naming
    ``slabs``, whose log entries ``segments`` hold their payloads."""

    slab: Slab | None
    content: bytes
    checkpoint: str
    slabs: list[Slab]
    segments: set[int]
    version: int
    at: int
    tag: str
    history: msgspec.Raw
    controls: dict[str, Any]
    _entries: list[SlabEntry]

    def manifest(self, written_at: int) -> bytes:
        """Name the new slab as written at ``written_at`` (epoch microseconds: compaction keeps a
        slab no checkpoint names for the retention from then) and return the checkpoint."""
        entries = self._entries
        if self.slab is not None:
            self.slab.name = slab_name(self.version, written_at, self.tag)
            entries = [*entries[:-1], self.slab.entry()]
        return encode_manifest(self.version, self.at, entries, self.history, self.controls)


def _size_class(rows: int, unit: int) -> int:
    return ((max(rows, unit) // unit).bit_length() - 1) // 2  # log4 of rows in units


def _segments(slabs: list[Slab]) -> set[int]:
    return set().union(*(slab.segments.keys() for slab in slabs))


def _batched(records: Iterable[JobRecord]) -> Iterator[list[JobRecord]]:
    iterator = iter(records)
    while chunk := list(itertools.islice(iterator, BLOCK_ROWS)):
        yield chunk


class SlabSet:
    """The slabs that the newest checkpoint this process wrote or loaded names, oldest first.

    Parameters
    ----------
    slabs : list of Slab
        The slabs.
    checkpoint : str or None
        The name of that checkpoint; None when there is none to build on, so the next
        checkpoint writes every live job.
    """

    def __init__(self, slabs: list[Slab] | None = None, checkpoint: str | None = None) -> None:
        self.slabs = slabs or []
        self.checkpoint = checkpoint
        self._by_number = {slab.number: slab for slab in self.slabs}

    @classmethod
    def loaded(
        cls, manifest: Manifest, contents: list[DecodedSlab], location: str
    ) -> tuple[QueueIndex, SlabSet]:
        """Build the index and the slab set of a checkpoint (at ``location``) from its slabs'
        decoded rows.

        Raises
        ------
        CorruptStateError
            If a slab's rows do not fit the checkpoint, or two live rows are of one job.
        """
        try:
            return cls._loaded(manifest, contents)
        except ValueError as exc:
            raise CorruptStateError(location, f"its slabs do not fit together: {exc}") from exc

    @staticmethod
    def _loaded(manifest: Manifest, contents: list[DecodedSlab]) -> tuple[QueueIndex, SlabSet]:
        if manifest.inline is not None:
            index = QueueIndex.from_columns(
                manifest.seq, manifest.inline, manifest.history, manifest.controls
            )
            index.track_changes()
            return index, SlabSet()
        slabs, parts, current = [], [], True
        for entry, decoded in zip(manifest.slabs, contents, strict=True):
            if len(decoded.ids) != entry.rows:
                raise ValueError(f"slab {entry.name!r} holds {len(decoded.ids)} rows, not {entry.rows}")
            slab = Slab(entry.name, decoded.ids, decoded.filter, bytearray(entry.dropped()), Counter())
            current = current and decoded.current
            kept = slab.kept_rows() if 1 in slab.dropped else None
            start = 0
            for block in decoded.blocks:
                rows = len(block["id"])
                if kept is not None:
                    selected = kept[start : start + rows]
                    block = {
                        name: list(itertools.compress(column, selected)) for name, column in block.items()
                    }
                start += rows
                if block["id"]:
                    block["place"] = [slab.number] * len(block["id"])
                    slab.segments.update(columns_from_refs(block["payload"])[0])
                    parts.append(block)
            slabs.append(slab)
        columns = concatenated(parts) if parts else {name: [] for name in REQUIRED_COLUMNS}
        index = QueueIndex.from_columns(manifest.seq, columns, manifest.history, manifest.controls)
        index.track_changes()
        return index, SlabSet(slabs, checkpoint_name(manifest.seq, manifest.at) if current else None)

    def segments(self) -> set[int]:
        """Return the log entries that hold the payloads of the slabs' rows that count."""
        return _segments(self.slabs)

    def forget(self) -> None:
        """Let the next checkpoint write every live job (after one that failed)."""
        self.checkpoint = None

    def adopt(self, plan: Plan) -> None:
        """Become the slabs of a checkpoint planned from this set and stored."""
        self.slabs, self.checkpoint = plan.slabs, plan.checkpoint
        self._by_number = {slab.number: slab for slab in plan.slabs}

    def plan(self, frozen: Frozen, at: int, tag: str, *, every_job: bool, unit: int = SIZE_UNIT) -> Plan:
        """Make the next checkpoint of ``frozen`` (meant for a worker thread, one at a time).

        With ``every_job`` (``frozen`` holds every live job) the new slab holds them all and
        no other slab is named; otherwise the changed jobs' old rows are dropped and the new
        slab holds their rows and those of the slabs it retires. Each row's record gets the
        new slab as its place; ``adopt`` makes the plan's slabs this set's once it is stored,
        and after a plan that is not, the next must write every job (``forget``): its drops
        and places are this set's already.

        Raises
        ------
        ValueError
            If a changed job has no row where its place says, or a job would get two rows.
        """
        retired: list[Slab] = []
        kept: list[Slab] = []
        if not every_job:
            for job_id, first in frozen.changed.items():
                if first.place is not None:
                    slab = self._by_number.get(first.place)
                    if slab is None or not isinstance(first.payload, int):
                        raise ValueError(f"job {job_id!r} is placed in no slab of the last checkpoint")
                    slab.drop(job_id, first.payload)
            retired = self._retired(len(frozen.changed), unit)
            kept = [slab for slab in self.slabs if slab not in retired]
        changed = [record for record in map(frozen.live, frozen.changed) if record is not None]

        def key(record: JobRecord) -> RowKey:
            return row_key(record, frozen.saved)

        streams: list[Iterable[JobRecord]] = [sorted(chunk, key=key) for chunk in _batched(changed)]
        if not every_job:
            streams += [
                map(self._survivor(frozen), itertools.compress(s.ids, s.kept_rows())) for s in retired
            ]
        slab, content = self._written(heapq.merge(*streams, key=key), frozen.saved)
        slabs = [*kept, slab] if slab is not None else kept
        entries = [s.entry() for s in slabs]
        segments = _segments(slabs)
        name, history = checkpoint_name(frozen.version, at), encoded_history(frozen.history)
        return Plan(
            slab, content, name, slabs, segments, frozen.version, at, tag, history, frozen.controls, entries
        )

    def _retired(self, new_rows: int, unit: int) -> list[Slab]:
        retired = [slab for slab in self.slabs if slab.dropped.count(1) * 2 > len(slab.ids)]
        rows = new_rows + sum(slab.live for slab in retired)
        while True:
            size = _size_class(rows, unit)
            alike = [s for s in self.slabs if s not in retired and _size_class(s.live, unit) <= size]
            if len(alike) + 1 < FANOUT:
                return retired
            retired += alike
            rows += sum(slab.live for slab in alike)

    @staticmethod
    def _survivor(frozen: Frozen) -> Callable[[str], JobRecord]:
        def live(job_id: str) -> JobRecord:
            record = frozen.live(job_id)
            if record is None:
                raise ValueError(f"a row that counts is of job {job_id!r}, which was not live")
            return record

        return live

    @staticmethod
    def _written(records: Iterable[JobRecord], saved: Mapping[str, ClaimState]) -> tuple[Slab | None, bytes]:
        number = next(_numbers)
        writer = SlabWriter(saved)
        for chunk in _batched(records):
            writer.add(chunk)
            for record in chunk:
                record.place = number
        if not writer.ids:
            return None, b""
        table = SlabFilter.of(writer.ids)
        slab = Slab("", writer.ids, table, bytearray(len(writer.ids)), Counter(writer.segments), number)
        return slab, writer.content(table)
