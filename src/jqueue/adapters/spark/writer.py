"""``df.write.format("jqueue")``: exactly once, also when Spark retries tasks or stages.

Each task attempt writes its rows (Arrow batches) as parts, immutable objects beside the
queue in its own payload format (``core/log/parts.py``, at most ``PART_ROWS`` jobs or
about ``PART_BYTES`` of payload each), and reports their jobs' fields to the driver. Only
the successful attempt of each partition reaches the driver's ``commit``, which adds all
of them with ``add_parts``: one commit whose entry holds a few columns a part, so the
driver never reads or writes a payload, and consumers see all of the write or none of
it. The commit is followed by a checkpoint. ``abort`` deletes the parts of the attempts
that succeeded; parts that no commit refers to (failed attempts, a driver that died
before committing) are deleted by the queue's compaction once older than
``LogSettings.part_lifetime``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from itertools import repeat
from typing import Any

from pyarrow import RecordBatch
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from jqueue.adapters.spark.shards import unsharded
from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.direct import DirectQueue
from jqueue.core.formats.part_runs import PART_ROWS
from jqueue.core.log.parts import PART_BYTES, PartRow, StoredPart, write_part
from jqueue.core.queue import DEFAULT_MAX_PAYLOAD_BYTES
from jqueue.domain.errors import PayloadTooLargeError
from jqueue.domain.schema import WRITTEN_FIELDS
from jqueue.domain.spec import check_field, check_not_own_parent, stored_parent_failure
from jqueue.domain.times import to_micros, utc_now
from jqueue.domain.values import checked_text
from jqueue.ports.storage import KeyedStoragePort

logger = logging.getLogger("jqueue")


@dataclass
class WrittenParts(WriterCommitMessage):
    """What a task wrote: its parts, with their jobs' fields."""

    parts: list[StoredPart]


def keyed_storage(url: str) -> KeyedStoragePort:
    """Return the storage at ``url``, which must hold named objects beside the queue."""
    storage = storage_from_url(url)
    if not isinstance(storage, KeyedStoragePort):
        raise TypeError(f"{url}: a bulk write needs a storage with named objects")
    return storage


def _micros(delay: Any) -> int:
    """Return a delay column's value, in seconds, in microseconds, checked as ``JobSpec`` checks a delay."""
    seconds = float(delay)
    try:
        wait = timedelta(seconds=seconds)
    except (OverflowError, ValueError):  # not a number, infinite, or longer than any timedelta
        raise ValueError(f"delay must be a number of seconds, got {delay}") from None
    check_field("delay", wait)
    return round(seconds * 1_000_000)


def _option(field: str) -> str:
    """Return the option that names the column of ``field`` (``dedup_key``: ``dedupKeyColumn``)."""
    first, *rest = field.split("_")
    return "".join([first, *(word.title() for word in rest), "Column"])


_FIELD_OPTIONS = {f.name: _option(f.name) for f in WRITTEN_FIELDS if f.name not in ("payload", "not_before")}
"""The option that names the column of each field a row may set (besides its payload, in
``payloadColumn``, and ``not_before``, set by a delay in ``delayColumn``)."""


def _checked(field: str, values: list[Any]) -> list[Any]:
    """Return a column's values as a part's rows hold them, each checked as ``JobSpec`` checks it."""
    if field == "priority":
        values = [int(value or 0) for value in values]
    for value in values:
        check_field(field, value)  # parents as an array of ids, not as a string of them
    if field == "after":
        values = [tuple(dict.fromkeys(value or ())) for value in values]
    elif field == "on_parent_failure":
        values = [stored_parent_failure(value) for value in values]
    return values


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"a payload must be binary or string, not {type(value).__name__}")


class PartWriting:
    """What the batch and the streaming writer share: the options, and writing a task's rows
    as parts (on an executor)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.url = options.get("path") or ""
        if not self.url:
            raise ValueError("give the queue's storage URL: .save(url) or .start(url)")
        self.entrypoint = options.get("entrypoint") or ""
        if not self.entrypoint:
            raise ValueError("give the jobs' entrypoint: .option('entrypoint', ...)")
        self.payload = options.get("payloadColumn", "payload")
        self.delay = options.get("delayColumn")
        self.columns = {
            field: options[option] for field, option in _FIELD_OPTIONS.items() if options.get(option)
        }
        self.max_payload_bytes = int(options.get("maxPayloadBytes", str(DEFAULT_MAX_PAYLOAD_BYTES)))
        names = set(schema.fieldNames())
        for column in (self.payload, self.delay, *self.columns.values()):
            if column is not None and column not in names:
                raise ValueError(f"the DataFrame has no column {column!r}")
        unsharded(self.url)

    def _rows(self, batch: RecordBatch, created: int) -> list[PartRow]:
        payloads = [_bytes(value) for value in batch.column(self.payload).to_pylist()]
        for payload in payloads:
            if len(payload) > self.max_payload_bytes:
                raise PayloadTooLargeError(len(payload), self.max_payload_bytes)
        values: dict[str, list[Any]] = {"payload": payloads}
        for field, column in self.columns.items():
            values[field] = _checked(field, batch.column(column).to_pylist())
        if self.delay is not None:
            delays = batch.column(self.delay).to_pylist()
            values["not_before"] = [None if d is None else created + _micros(d) for d in delays]
        if "id" in values and "after" in values:
            for job_id, after in zip(values["id"], values["after"], strict=True):
                check_not_own_parent(job_id, after)
        fields = [values.get(field) or repeat(default) for field, default in PartRow._field_defaults.items()]
        return list(map(PartRow._make, zip(payloads, *fields, strict=False)))  # the defaults repeat

    def write(self, iterator: Iterator[RecordBatch]) -> WrittenParts:
        """Write this task's rows as parts (runs on an executor)."""
        return WrittenParts(asyncio.run(self._write_parts(iterator)))

    async def _write_parts(self, batches: Iterator[RecordBatch]) -> list[StoredPart]:
        storage = keyed_storage(self.url)
        created = to_micros(utc_now())
        parts: list[StoredPart] = []
        rows: list[PartRow] = []
        size = 0
        for batch in batches:
            for row in self._rows(batch, created):
                rows.append(row)
                size += len(row[0])
                if len(rows) == PART_ROWS or size >= PART_BYTES:
                    parts.append(await write_part(storage, self.entrypoint, created, rows))
                    rows, size = [], 0
        if rows:
            parts.append(await write_part(storage, self.entrypoint, created, rows))
        return parts

    async def _delete_unused(self, parts: list[StoredPart]) -> None:
        """Delete the parts no job refers to: an abort may follow a commit that landed."""
        if parts:
            async with DirectQueue(storage_from_url(self.url)) as queue:
                await queue.bulk.delete_unused_parts(parts)


def _parts(messages: list[WriterCommitMessage | None]) -> list[StoredPart]:
    return [part for m in messages if isinstance(m, WrittenParts) for part in m.parts]


class JQueueWriter(PartWriting, DataSourceArrowWriter):
    """Writes a DataFrame's rows as jobs; see the module docstring."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Add every part's jobs in one commit, then checkpoint (on the driver)."""
        asyncio.run(self._publish(_parts(messages)))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the parts of the attempts that succeeded, unless jobs refer to them (on the driver)."""
        asyncio.run(self._delete_unused(_parts(messages)))

    async def _publish(self, parts: list[StoredPart]) -> None:
        async with DirectQueue(storage_from_url(self.url)) as queue:
            await queue.bulk.add_parts(parts)  # one commit: all or nothing, whatever the size
            try:
                await queue.checkpoint()  # readers that open the queue next start from here
            except Exception as exc:  # the write is durable: failing it now would invite a rerun
                logger.warning("the write to %s landed, but its checkpoint failed: %r", self.url, exc)


class JQueueStreamWriter(PartWriting, DataSourceStreamArrowWriter):
    """Writes each micro-batch of a streaming query as jobs, exactly once across restarts.

    Each batch is one ``add_parts`` commit that also records the batch id as the sink's
    newest (``SinkMarked``); a batch that Spark runs again after a restart finds its id
    recorded, adds nothing and deletes its parts. The sink is named by ``sinkId``, else by
    the query's ``checkpointLocation``.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        self.sink = options.get("sinkId") or options.get("checkpointLocation") or ""
        if not self.sink:
            raise ValueError("name the sink: .option('checkpointLocation', ...) or .option('sinkId', ...)")
        checked_text("sinkId", self.sink)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Add the batch's jobs in one commit that records ``batchId`` (on the driver)."""
        asyncio.run(self._publish(_parts(messages), batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Delete the parts of the batch's attempts that succeeded, unless jobs refer to them (on
        the driver: the commit may have landed before the query died)."""
        asyncio.run(self._delete_unused(_parts(messages)))

    async def _publish(self, parts: list[StoredPart], batch_id: int) -> None:
        async with DirectQueue(storage_from_url(self.url)) as queue:
            if await queue.bulk.add_parts(parts, (self.sink, batch_id)) is None:
                await queue.bulk.delete_unused_parts(parts)  # a replayed batch: its jobs came before
