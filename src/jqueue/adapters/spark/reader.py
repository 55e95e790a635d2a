"""``spark.read.format("jqueue")``: the current jobs or the history of finished ones.

``.option("table", "jobs")`` (the default) or ``"history"``; ``.option("partitions", N)``
splits the read of each shard (one, for a queue never sharded) into N tasks (default 4),
each of which opens the shard through the project's own storage adapters and reads its
share (jobs by insertion order, history records by position), so payloads of a large queue
are fetched in parallel. Each task reads the newest state; commits made while the read runs
may show in some parts only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from jqueue.adapters.spark.shards import shard_urls
from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.direct import DirectQueue
from jqueue.domain.models import Job
from jqueue.domain.records import HISTORY_FIELDS, HistoryRecord
from jqueue.domain.schema import FIELDS, Kind
from jqueue.domain.values import Bounds

JOB_COLUMNS = (
    "id",
    "entrypoint",
    "status",
    "priority",
    "attempts",
    "created_at",
    "not_before",
    "heartbeat_at",
    "dead_at",
    "last_error",
    "dead_reason",
    "dedup_key",
    "payload",
    "tenant",
    "after",
)
"""The columns of the ``jobs`` table: ``Job`` attributes, typed by their kind (``SPARK_TYPES``)."""
SPARK_TYPES = {
    Kind.TEXT: "string",
    Kind.NAME: "string",
    Kind.INT64: "bigint",
    Kind.COUNT: "bigint",
    Kind.TIME: "timestamp",
    Kind.TIMES: "array<timestamp>",
    Kind.STATUS: "string",
    Kind.PAYLOAD: "binary",
    Kind.FRACTION: "double",
    Kind.SPAN: "interval day to second",
    Kind.IDS: "array<string>",
    Kind.RESULTS: "array<binary>",
}
_KINDS = {f.public: f.kind for f in FIELDS}
_AS_SPARK: dict[Kind, Callable[[Any], Any]] = {Kind.STATUS: str, Kind.IDS: list, Kind.RESULTS: list}
"""How a ``Job`` attribute of a kind becomes a Spark value where it is not one already."""


def job_schema(columns: Sequence[str]) -> str:
    """Return the Spark schema of rows of these ``Job`` attributes, each typed by its kind."""
    return ", ".join(f"{name} {SPARK_TYPES[_KINDS[name]]}" for name in columns)


def job_rows(columns: Sequence[str]) -> Callable[[Job], tuple[Any, ...]]:
    """Return what makes a row of ``job_schema(columns)`` of a job."""
    values = attrgetter(*columns)
    converts = [_AS_SPARK.get(_KINDS[name]) for name in columns]

    def row(job: Job) -> tuple[Any, ...]:
        return tuple(
            value if convert is None else convert(value)
            for convert, value in zip(converts, values(job), strict=True)
        )

    return row


JOBS_SCHEMA = job_schema(JOB_COLUMNS)
HISTORY_COLUMNS = (
    "job_id",
    "entrypoint",
    "outcome",
    "attempts",
    "created_at",
    "first_claimed_at",
    "last_claimed_at",
    "finished_at",
    "wait_seconds",
    "run_seconds",
    "error",
    "reason",
    "dedup_key",
    "tenant",
)
"""The columns of the ``history`` table: ``HistoryRecord`` attributes, its fields (by their public
names) typed by their kind, and the timings it derives from them."""
_HISTORY_TYPES = {f.public: SPARK_TYPES[f.kind] for f in HISTORY_FIELDS} | {
    "first_claimed_at": SPARK_TYPES[Kind.TIME],
    "last_claimed_at": SPARK_TYPES[Kind.TIME],
    "wait_seconds": "double",
    "run_seconds": "double",
}
HISTORY_SCHEMA = ", ".join(f"{name} {_HISTORY_TYPES[name]}" for name in HISTORY_COLUMNS)
TABLES = {"jobs": JOBS_SCHEMA, "history": HISTORY_SCHEMA}
PARTITIONS = Bounds(ge=1)
"""The bounds of the ``partitions`` option: how many parts a read (or a micro-batch) splits into."""


@dataclass
class Part(InputPartition):
    """The i-th of n parts of the read of one shard."""

    index: int
    count: int
    shard: int = 0


_history_row = attrgetter(*HISTORY_COLUMNS)


def history_row(record: HistoryRecord) -> tuple[Any, ...]:
    """Return a history record as a row of ``HISTORY_SCHEMA``."""
    row: tuple[Any, ...] = _history_row(record)
    return row


class JQueueReader(DataSourceReader):
    """Reads one table of a queue; see the module docstring."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.url = options.get("path") or ""
        if not self.url:
            raise ValueError("give the queue's storage URL: .load(url)")
        self.table = options.get("table", "jobs")
        if self.table not in TABLES:
            raise ValueError(f"table must be one of {sorted(TABLES)}, not {self.table!r}")
        self.count = int(options.get("partitions", "4"))
        PARTITIONS.check("partitions", self.count)
        self.shards = shard_urls(self.url)

    def partitions(self) -> list[Part]:
        """Split the read of each shard into ``partitions`` parts."""
        return [Part(index, self.count, k) for k in range(len(self.shards)) for index in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Read one part (on an executor)."""
        if not isinstance(partition, Part):
            raise TypeError(f"not a part of this read: {partition!r}")
        return iter(asyncio.run(self._read(partition)))

    async def _read(self, partition: Part) -> list[tuple[Any, ...]]:
        async with DirectQueue(storage_from_url(self.shards[partition.shard])) as queue:
            if self.table == "history":
                records = await queue.history()
                return [history_row(r) for r in records[partition.index :: partition.count]]
            jobs = await queue.jobs(limit=None, part=(partition.index, partition.count))
        return [job_row(job) for job in jobs]


job_row = job_rows(JOB_COLUMNS)
"""A job as a row of ``JOBS_SCHEMA`` (its status as text, its parents as a list)."""
