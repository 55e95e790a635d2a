"""``SlabSet``: the slabs of the newest checkpoint a process wrote or loaded, and the cold jobs
they hold (ADR 0015).

Each live job has one row that counts, in one slab. A process keeps as records only the
jobs its index needs as objects: a slab's held rows (claimed, waiting for a time, dead,
staged, with a dedup key), the jobs changed since, and the rows it has looked up or claimed
(``taken``). The other rows stay in their slabs, cold: ``SlabSet`` is the index's
``ColdRows``, and hands them out by id (through each slab's filter) and, per entrypoint, in
claim order (a cursor per slab). A record's ``place`` is the number of the slab that held
its row when it was taken; a merge that retires that slab leaves a forward to the new one.
Within a process a dropped row is always a taken one, so a row is cold exactly while it is
not taken.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jqueue.core.formats.checkpoint import SlabEntry
from jqueue.core.formats.payload_refs import payload_place
from jqueue.core.formats.slab import OpenedSlab, id_hash, order_bounds
from jqueue.core.formats.slab_block import BLOCK_ROWS
from jqueue.domain.cold import ClaimKey
from jqueue.domain.index import COLUMN_DEFAULTS, IndexState
from jqueue.domain.lines import Line
from jqueue.domain.records import RECORD_COLUMNS, JobRecord

if TYPE_CHECKING:
    from jqueue.core.log.slab_plan import Merged, Plan

numbers = itertools.count(1)
"""The numbers of the slabs of this process."""
_CACHED_BLOCKS = 16
"""Decoded blocks kept for lookups by id (a block of 4,096 rows decodes in a few ms)."""


def record_at(columns: Mapping[str, list[Any]], row: int, place: int | None) -> JobRecord:
    """Return the record of row ``row`` of a decoded block."""
    values = [columns[name][row] if name in columns else COLUMN_DEFAULTS[name] for name in RECORD_COLUMNS]
    record = JobRecord(*values)
    record.place = place
    return record


def segments_of(slabs: Iterable[Slab]) -> set[int]:
    """Return the log entries that hold the payloads of the rows that count in ``slabs``."""
    return set().union(*(slab.segments_in_use() for slab in slabs))


class BlockCache:
    """The blocks of some slabs decoded lately, shared by the event loop and the plan's thread."""

    def __init__(self, size: int = _CACHED_BLOCKS) -> None:
        self._size = size
        self._blocks: OrderedDict[tuple[int, int], dict[str, list[Any]]] = OrderedDict()
        self._rows: OrderedDict[tuple[int, int], dict[str, int]] = OrderedDict()
        self._lock = threading.Lock()

    def block(self, slab: Slab, number: int) -> dict[str, list[Any]]:
        """Return block ``number`` of ``slab``, decoded.

        Raises
        ------
        CorruptStateError
            If it is damaged.
        """
        key = (slab.number, number)
        with self._lock:
            found = self._blocks.get(key)
            if found is not None:
                self._blocks.move_to_end(key)
                return found
        columns = slab.opened.block(number)
        with self._lock:
            self._keep(self._blocks, key, columns)
        return columns

    def row_in_block(self, slab: Slab, number: int, job_id: str) -> int | None:
        """Return the row of job ``job_id`` within block ``number`` of ``slab``, or None (from an
        index of the block's ids, made at its first lookup and cached like the block)."""
        key = (slab.number, number)
        with self._lock:
            rows = self._rows.get(key)
            if rows is not None:
                self._rows.move_to_end(key)
        if rows is None:
            ids = self.block(slab, number)["id"]
            rows = dict(zip(reversed(ids), range(len(ids) - 1, -1, -1), strict=True))  # first wins
            with self._lock:
                self._keep(self._rows, key, rows)
        return rows.get(job_id)

    def _keep(self, cache: OrderedDict[tuple[int, int], Any], key: tuple[int, int], value: Any) -> None:
        cache[key] = value
        while len(cache) > self._size:
            cache.popitem(last=False)


def _carry_taken(retired: Slab, moved: Sequence[int], new: Slab) -> None:
    """Take in ``new`` the rows taken in ``retired``, whose rows ``moved`` gives (-1: none)."""
    taken, row = retired.taken, retired.taken.find(1)
    while row != -1:
        if moved[row] >= 0:
            new.taken[moved[row]] = 1
        row = taken.find(1, row + 1)


@dataclass(eq=False)
class Slab:
    """A slab as this process knows it: its header and filter, which rows no longer count
    (``dropped``, one byte a row, as its checkpoint says) and which are records of this
    process (``taken``), and, per line, the first claimable row that may be cold and how
    many are."""

    name: str
    opened: OpenedSlab
    dropped: bytearray
    taken: bytearray
    number: int
    segments: dict[int, int]
    cursors: dict[Line, int] = field(default_factory=dict)
    cold: dict[Line, int] = field(default_factory=dict)
    spans: dict[Line, tuple[int, int]] = field(default_factory=dict)
    drops_since: list[tuple[int, int]] | None = None
    """While a merge retires it: the rows dropped since the merge began, with their payloads."""
    _bounds: list[tuple[int, int]] | None = field(default=None, init=False, repr=False)

    @classmethod
    def of(
        cls,
        name: str,
        opened: OpenedSlab,
        dropped: bytearray,
        taken: bytearray,
        number: int,
        segments: Mapping[int, int],
    ) -> Slab:
        """Return a slab whose rows marked in ``taken`` (a superset of ``dropped``) are records,
        and whose rows that count have their payloads in the log entries ``segments``."""
        slab = cls(name, opened, dropped, taken, number, dict(segments))
        slab.spans = opened.header.line_spans()
        for line, (start, end) in slab.spans.items():
            slab.cursors[line] = start
            slab.cold[line] = (end - start) - taken.count(1, start, end)
        return slab

    @property
    def rows(self) -> int:
        """How many rows it holds."""
        return self.opened.header.rows

    @property
    def live(self) -> int:
        """How many of its rows count."""
        return self.rows - self.dropped.count(1)

    def segments_in_use(self) -> set[int]:
        """The log entries that hold the payloads of its rows that count."""
        return {segment for segment, count in self.segments.items() if count > 0}

    def drop(self, row: int, payload: int) -> None:
        """Mark row ``row``, whose payload reference is ``payload``, as no longer counting."""
        self.dropped[row] = 1
        if self.drops_since is not None:
            self.drops_since.append((row, payload))
        segment = payload_place(payload)[0]
        self.segments[segment] = self.segments.get(segment, 0) - 1

    def entry(self) -> SlabEntry:
        """Return how a checkpoint names this slab."""
        return SlabEntry.of(self.name, self.dropped, self.segments)

    def bounds(self) -> list[tuple[int, int]]:
        """Return each block's lowest and highest insertion number (read from the blocks, once,
        for a slab written before its header gave them)."""
        if self._bounds is None:
            given, opened = self.opened.header.orders, self.opened
            blocks = range(len(opened.header.blocks))
            self._bounds = given or [order_bounds(opened.block(number)["order"]) for number in blocks]
        return self._bounds

    def blocks_in_order(self, entrypoints: Collection[str] | None, start: int) -> Iterator[tuple[int, int]]:
        """Yield the lowest insertion number and the number of each block that has a cold row
        (of ``entrypoints`` if given) numbered ``start`` or later."""
        header = self.opened.header
        spans = [span for name, span in header.ranges.items() if entrypoints is None or name in entrypoints]
        for number, (low, high) in enumerate(self.bounds()):
            first, end = number * BLOCK_ROWS, min((number + 1) * BLOCK_ROWS, header.rows)
            if high < start or not any(lo < end and first < hi for lo, hi in spans):
                continue
            if self.taken.count(0, first, end):
                yield low, number

    def row_of(self, job_id: str, hashed: int, blocks: BlockCache) -> int | None:
        """Return the row of job ``job_id``, whose id hashes to ``hashed`` (``id_hash``), or None
        (its block decoded through ``blocks``)."""
        for block in dict.fromkeys(self.opened.filter.blocks(hashed)):
            if block * BLOCK_ROWS >= self.rows:
                continue
            if (row := blocks.row_in_block(self, block, job_id)) is not None:
                return block * BLOCK_ROWS + row
        return None

    def head_row(self, line: Line) -> int | None:
        """Return the first cold claimable row of ``line``, or None."""
        span = self.spans.get(line)
        if span is None or not self.cold.get(line):
            return None
        row = self.taken.find(0, self.cursors[line], span[1])
        self.cursors[line] = span[1] if row < 0 else row
        return None if row < 0 else row

    def take(self, row: int, line: Line) -> None:
        """Make row ``row`` (a cold claimable one of ``line``) a record."""
        self.taken[row] = 1
        self.cold[line] -= 1


class SlabSet:
    """The slabs that the newest checkpoint this process wrote or loaded names, oldest first,
    and the cold rows among them (``ColdRows``).

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
        self.blocks = BlockCache()
        self._forwards: dict[int, int] = {}
        self._heads: dict[tuple[int, Line], tuple[int, ClaimKey]] = {}

    def segments(self) -> set[int]:
        """Return the log entries that hold the payloads of the slabs' rows that count."""
        return segments_of(self.slabs)

    def taken_now(self) -> dict[int, bytes]:
        """Return each slab's taken rows as they are now (what a checkpoint of every job skips)."""
        return {slab.number: bytes(slab.taken) for slab in self.slabs}

    def slab_of(self, place: int) -> Slab | None:
        """Return the slab holding the row of a record placed in slab number ``place`` (or in
        one a merge retired since), or None."""
        while place in self._forwards:
            place = self._forwards[place]
        return next((slab for slab in self.slabs if slab.number == place), None)

    def forget(self) -> None:
        """Let the next checkpoint write every live job (after one that failed)."""
        self.checkpoint = None

    def adopt(self, plan: Plan, index: IndexState) -> None:
        """Become the slabs of a checkpoint planned from this set and stored, and the cold rows
        of ``index``: the rows taken meanwhile in the slabs it retires are taken in its new
        slab too, and the changed jobs it holds as claimable rows that ``index`` lets go
        (``IndexState.cool``) become cold. An index that reaches other cold rows (one the
        store has replaced meanwhile) lets go of nothing."""
        if index.cold is None:
            index.attach(self, -1)
        new = plan.slab
        if new is not None:
            if index.cold is self:
                cooled = index.cool([record for _, record in plan.claimable])
                for (row, _), cool in zip(plan.claimable, cooled, strict=True):
                    if cool:
                        new.taken[row] = 0
            for retired, moved in plan.moved.items():
                _carry_taken(retired, moved, new)
                self._forwards[retired.number] = new.number
            new = Slab.of(new.name, new.opened, new.dropped, new.taken, new.number, new.segments)
        self.slabs = [*plan.kept, new] if new is not None else list(plan.kept)
        self.checkpoint = plan.checkpoint
        self._heads.clear()

    def take_merge(self, merged: Merged) -> bool:
        """Put the merged slab of a merge stored since it began in place of the slabs it retires,
        with the rows taken and dropped in them meanwhile taken and dropped in it (between
        plans, on the event loop); return False, changing nothing, if one of them is gone (a
        checkpoint of every job retired it, or the set was replaced)."""
        if any(all(slab is not retired for slab in self.slabs) for retired in merged.retired):
            return False
        new = merged.slab
        if new is not None:
            for retired in merged.retired:
                moved = merged.moved[retired]
                _carry_taken(retired, moved, new)
                for row, payload in retired.drops_since or ():
                    new.drop(moved[row], payload)
                self._forwards[retired.number] = new.number
            new = Slab.of(new.name, new.opened, new.dropped, new.taken, new.number, new.segments)
        at = next(n for n, slab in enumerate(self.slabs) if slab in merged.retired)
        kept = [slab for slab in self.slabs if slab not in merged.retired]
        self.slabs = [*kept[:at], new, *kept[at:]] if new is not None else kept
        self._heads.clear()
        return True

    # --- the cold rows (``ColdRows``) -------------------------------------------------

    def __len__(self) -> int:
        return sum(sum(slab.cold.values()) for slab in self.slabs)

    def counts(self) -> dict[str, int]:
        """How many rows of each entrypoint are cold."""
        counts: dict[str, int] = {}
        for slab in self.slabs:
            for (entrypoint, _), count in slab.cold.items():
                counts[entrypoint] = counts.get(entrypoint, 0) + count
        return counts

    def take(self, job_id: str) -> JobRecord | None:
        """Return the record of job ``job_id`` if a cold row holds it, taking it."""
        hashed = id_hash(job_id)
        for slab in reversed(self.slabs):  # the newest first: a job's row that counts is there
            if not slab.opened.filter.may_hold(hashed):
                continue
            row = slab.row_of(job_id, hashed, self.blocks)
            if row is None or slab.dropped[row]:
                continue
            if slab.taken[row]:
                return None
            record = record_at(*self._block_row(slab, row), slab.number)
            line = (record.entrypoint, record.tenant)
            slab.take(row, line)
            self._heads.pop((slab.number, line), None)
            return record
        return None

    def head(self, line: Line) -> ClaimKey | None:
        """Return where the first cold row of ``line`` stands in claim order, or None."""
        best = self._best(line)
        return None if best is None else best[2]

    def take_head(self, line: Line) -> JobRecord:
        """Return the record of the row ``head`` names, taking it."""
        best = self._best(line)
        assert best is not None
        slab, row, _ = best
        record = record_at(*self._block_row(slab, row), slab.number)
        slab.take(row, line)
        del self._heads[(slab.number, line)]
        return record

    def lines(self) -> Iterable[Line]:
        """Return the lines that have cold rows."""
        return list(dict.fromkeys(line for slab in self.slabs for line, count in slab.cold.items() if count))

    def ordered(self, entrypoints: Collection[str] | None = None, start: int = 0) -> Iterator[JobRecord]:
        """Yield a record of each cold row (of ``entrypoints`` if given) numbered ``start`` or
        later, in insertion order, taking none: a block is decoded only once the rows before
        it are yielded (its lowest number is the next), so a page costs a few blocks."""
        unread = [
            (low, slab.number, number, slab)
            for slab in self.slabs
            for low, number in slab.blocks_in_order(entrypoints, start)
        ]
        heapq.heapify(unread)
        rows: list[tuple[int, JobRecord]] = []
        while unread or rows:
            while unread and (not rows or unread[0][0] < rows[0][0]):
                _, _, number, slab = heapq.heappop(unread)
                columns, first, taken = slab.opened.block(number), number * BLOCK_ROWS, slab.taken
                names = columns["entrypoint"]
                for row, order in enumerate(columns["order"]):
                    wanted = entrypoints is None or names[row] in entrypoints
                    if wanted and order >= start and not taken[first + row]:
                        heapq.heappush(rows, (order, record_at(columns, row, slab.number)))
            if rows:
                yield heapq.heappop(rows)[1]

    def _best(self, line: Line) -> tuple[Slab, int, ClaimKey] | None:
        best: tuple[Slab, int, ClaimKey] | None = None
        for slab in self.slabs:
            cached = self._heads.get((slab.number, line))
            if cached is None or slab.taken[cached[0]]:
                row = slab.head_row(line)
                if row is None:
                    continue
                columns, at = self._block_row(slab, row)
                cached = (row, (columns["priority"][at], columns["created"][at], columns["order"][at]))
                self._heads[(slab.number, line)] = cached
            if best is None or cached[1] < best[2]:
                best = (slab, cached[0], cached[1])
        return best

    def _block_row(self, slab: Slab, row: int) -> tuple[dict[str, list[Any]], int]:
        return self.blocks.block(slab, row // BLOCK_ROWS), row % BLOCK_ROWS
