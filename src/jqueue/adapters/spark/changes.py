"""``spark.readStream.format("jqueue").option("mode", "changes")``: the queue's change feed.

Each row is one change that a commit made: a job ``added`` (``batch`` names the bulk write
of a staged one), a bulk write ``published`` or ``discarded``, a job ``acked``,
``cancelled``, ``dead`` or ``purged``. The offset is the log's sequence number (``{"seq":
N}``: every change up to commit N), so a restarted query replays exactly the commits of
its unfinished batch, read again from the log. ``startingOffsets`` is ``latest`` (the
default: changes from now on) or ``earliest`` (every commit the log still holds; entries
older than the queue's retention are compacted away). ``maxJobsPerTrigger`` bounds the
commits read per batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from jqueue.adapters.spark.shards import one_log
from jqueue.adapters.spark.writer import keyed_storage
from jqueue.core.formats.entry import ENTRY_PREFIX, decode_entry, entry_name, entry_seq
from jqueue.domain.effects import Added, Cancelled, Died, Discarded, Effect, Published, Removed
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.times import from_micros

CHANGES_SCHEMA = (
    "seq long, position int, at timestamp, change string, job_id string, entrypoint string, batch string"
)
"""A change: its commit's sequence number and time, its place in the commit, what happened to which job."""


@dataclass
class CommitRange(InputPartition):
    """The commits ``first`` to ``last`` (inclusive) of the log."""

    first: int
    last: int


def change_rows(seq: int, at: int, effects: list[Effect]) -> Iterator[tuple[Any, ...]]:
    """Yield the rows of one commit's changes (claims, beats and control changes are left out)."""
    when = from_micros(at)
    for position, effect in enumerate(effects):
        match effect:
            case Added(job_id, entrypoint, batch=batch):
                yield (seq, position, when, "added", job_id, entrypoint, batch)
            case Published(batch):
                yield (seq, position, when, "published", None, None, batch)
            case Discarded(batch):
                yield (seq, position, when, "discarded", None, None, batch)
            case Removed(job_id, removed_at):
                yield (seq, position, when, "purged" if removed_at is None else "acked", job_id, None, None)
            case Cancelled(job_id):
                yield (seq, position, when, "cancelled", job_id, None, None)
            case Died(job_id):
                yield (seq, position, when, "dead", job_id, None, None)


class ChangeFeedReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads the queue's commits as rows of changes; see the module docstring."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.url = options.get("path") or ""
        if not self.url:
            raise ValueError("give the queue's storage URL: .load(url)")
        self.starting = options.get("startingOffsets", "latest")
        if self.starting not in ("latest", "earliest"):
            raise ValueError(f"startingOffsets must be 'latest' or 'earliest', not {self.starting!r}")
        per_trigger = options.get("maxJobsPerTrigger")
        self.per_trigger = None if per_trigger is None else int(per_trigger)
        self.partition_count = int(options.get("partitions", "4"))
        self.target: int | None = None
        self.url = one_log(self.url, "a change feed", options.get("shard"))

    def _listed(self, after: int) -> list[int]:
        names = asyncio.run(keyed_storage(self.url).list_names(ENTRY_PREFIX, start_after=entry_name(after)))
        return [seq for seq in map(entry_seq, names) if seq is not None]

    def initialOffset(self) -> dict[str, int]:  # noqa: N802
        """The log's end (``latest``), or just before its oldest entry (``earliest``)."""
        listed = self._listed(0)
        if not listed:
            return {"seq": 0}
        return {"seq": listed[-1] if self.starting == "latest" else listed[0] - 1}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """``maxJobsPerTrigger`` commits a batch, or all there are."""
        return ReadAllAvailable() if self.per_trigger is None else ReadMaxRows(self.per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Stop at the commit that is newest now."""
        listed = self._listed(0)
        self.target = listed[-1] if listed else 0

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # noqa: N802
        """The newest commit after ``start`` that the limit (and ``AvailableNow``) allows."""
        after = int(start["seq"])
        end = after
        for seq in self._listed(after):
            if seq != end + 1:
                break  # a commit being written: wait for it
            end = seq
        if isinstance(limit, ReadMaxRows):
            end = min(end, after + limit.max_rows)
        if self.target is not None:
            end = min(end, max(after, self.target))
        return {"seq": end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[CommitRange]:
        """Split the commits after ``start`` up to ``end`` into ``partitions`` ranges."""
        first, last = int(start["seq"]) + 1, int(end["seq"])
        count = last - first + 1
        if count <= 0:
            return []
        size = -(-count // self.partition_count)
        return [CommitRange(lo, min(lo + size - 1, last)) for lo in range(first, last + 1, size)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Read the commits of one range (on an executor)."""
        if not isinstance(partition, CommitRange):
            raise TypeError(f"not a part of this read: {partition!r}")
        return iter(asyncio.run(self._read(partition)))

    async def _read(self, commits: CommitRange) -> list[tuple[Any, ...]]:
        storage = keyed_storage(self.url)
        rows: list[tuple[Any, ...]] = []
        for seq in range(commits.first, commits.last + 1):
            name = entry_name(seq)
            data = await storage.get(name)
            location = f"{self.url} {name}"
            if data is None:
                raise CorruptStateError(location, "this commit was compacted away (older than the retention)")
            entry = decode_entry(data, seq, location)
            rows += change_rows(seq, entry.at, entry.effects)
        return rows
