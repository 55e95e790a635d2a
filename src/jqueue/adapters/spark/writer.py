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

On a queue of several shards (``jqueue.sharded``) each row goes to its shard as
``ShardedQueue`` places a job (``RowRouter``), each task writes parts per shard, and the
commit is one ``add_parts`` per shard, shard 0 last. A batch write is then atomic per shard,
not across shards. A streaming batch stays exactly once: before its first commit, the driver
records the batch's parts in an intent object beside shard 0 (``INTENT_PREFIX``), and a
replay of a batch whose commits had begun adds those parts, not its own; shard 0's mark of
the batch, committed last, says that the batch is complete.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from itertools import repeat
from typing import Any

import msgspec
from pyarrow import RecordBatch
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from jqueue.adapters.spark.shards import RowRouter, shard_urls
from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.direct import DirectQueue
from jqueue.core.formats.part_runs import PART_ROWS
from jqueue.core.log.parts import PART_BYTES, PartRow, StoredPart, write_part
from jqueue.core.queue import DEFAULT_MAX_PAYLOAD_BYTES
from jqueue.domain.errors import CASConflictError, PayloadTooLargeError
from jqueue.domain.schema import WRITTEN_FIELDS
from jqueue.domain.spec import check_field, check_not_own_parent, stored_parent_failure
from jqueue.domain.times import to_micros, utc_now
from jqueue.domain.values import checked_text
from jqueue.ports.storage import KeyedStoragePort

logger = logging.getLogger("jqueue")


INTENT_PREFIX = "intent/"
"""Where beside shard 0 a streaming batch's parts are recorded while its commits run."""


@dataclass
class WrittenParts(WriterCommitMessage):
    """What a task wrote: its parts, with their jobs' fields, and the shard of each."""

    parts: list[StoredPart]
    shards: list[int] = dataclasses.field(default_factory=list)
    """By part (empty: all in shard 0)."""


Placed = list[tuple[int, StoredPart]]
"""Parts, each with its shard."""


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
        self.urls = shard_urls(self.url)

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
        placed = asyncio.run(self._write_parts(iterator))
        return WrittenParts([part for _, part in placed], [shard for shard, _ in placed])

    async def _write_parts(self, batches: Iterator[RecordBatch]) -> Placed:
        """Write the rows as parts, each row in its shard's (shard 0: the queue's own)."""
        router = RowRouter(self.urls) if len(self.urls) > 1 else None
        parts = _ShardParts(self.entrypoint, self.urls, to_micros(utc_now()))
        waiting: list[PartRow] = []
        for batch in batches:
            for row in self._rows(batch, parts.created):
                shard = 0 if router is None else router.route(row)
                if shard is None:
                    waiting.append(row)  # its first parent may come later in the task
                else:
                    await parts.add(shard, row)
        if router is not None and waiting:
            for row, shard in zip(waiting, await router.settle(waiting), strict=True):
                await parts.add(shard, row)
        return await parts.close()

    async def _delete_unused(self, placed: Placed) -> None:
        """Delete the parts no job refers to: an abort may follow a commit that landed."""
        for shard, parts in _by_shard(placed).items():
            async with DirectQueue(storage_from_url(self.urls[shard])) as queue:
                await queue.bulk.delete_unused_parts(parts)

    async def _add(self, shard: int, parts: list[StoredPart], mark: tuple[str, int] | None = None) -> None:
        """Add ``parts`` to shard ``shard`` in one commit: a batch write's then checkpoints the
        shard; a streaming batch's records ``mark``, and adds nothing (deleting its parts,
        unless jobs refer to them) if the shard recorded it already."""
        async with DirectQueue(storage_from_url(self.urls[shard])) as queue:
            if await queue.bulk.add_parts(parts, mark) is None:  # one commit: all or nothing
                await queue.bulk.delete_unused_parts(parts)  # a replayed batch: its jobs came before
            elif mark is None:
                try:
                    await queue.checkpoint()  # readers that open the queue next start from here
                except Exception as exc:  # the write is durable: failing it now would invite a rerun
                    where = self.urls[shard]
                    logger.warning("the write to %s landed, but its checkpoint failed: %r", where, exc)


class _ShardParts:
    """The parts one task writes: rows gathered by shard, each shard's written as a part once
    it holds ``PART_ROWS`` rows or ``PART_BYTES`` of payload."""

    def __init__(self, entrypoint: str, urls: list[str], created: int) -> None:
        self.entrypoint, self.urls, self.created = entrypoint, urls, created
        self._rows: dict[int, tuple[list[PartRow], int]] = {}
        self._storages: dict[int, KeyedStoragePort] = {}
        self.placed: Placed = []

    async def add(self, shard: int, row: PartRow) -> None:
        rows, size = self._rows.get(shard, ([], 0))
        rows.append(row)
        size += len(row[0])
        self._rows[shard] = (rows, size)
        if len(rows) == PART_ROWS or size >= PART_BYTES:
            await self._write(shard)

    async def close(self) -> Placed:
        """Write what is left; return every part with its shard."""
        for shard in list(self._rows):
            await self._write(shard)
        return self.placed

    async def _write(self, shard: int) -> None:
        rows, _ = self._rows.pop(shard)
        if shard not in self._storages:
            self._storages[shard] = keyed_storage(self.urls[shard])
        self.placed.append(
            (shard, await write_part(self._storages[shard], self.entrypoint, self.created, rows))
        )


def _placed(messages: list[WriterCommitMessage | None]) -> Placed:
    """The parts the tasks reported, each with its shard."""
    return [
        (m.shards[n] if m.shards else 0, part)
        for m in messages
        if isinstance(m, WrittenParts)
        for n, part in enumerate(m.parts)
    ]


def _by_shard(placed: Placed) -> dict[int, list[StoredPart]]:
    """The parts by shard, shard 0 last (its commit is the one that completes a batch)."""
    grouped: dict[int, list[StoredPart]] = {}
    for shard, part in sorted(placed, key=lambda item: item[0] == 0):
        grouped.setdefault(shard, []).append(part)
    return grouped


class JQueueWriter(PartWriting, DataSourceArrowWriter):
    """Writes a DataFrame's rows as jobs; see the module docstring."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Add every part's jobs in one commit a shard, then checkpoint (on the driver)."""
        asyncio.run(self._publish(_placed(messages)))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the parts of the attempts that succeeded, unless jobs refer to them (on the driver)."""
        asyncio.run(self._delete_unused(_placed(messages)))

    async def _publish(self, placed: Placed) -> None:
        for shard, parts in (_by_shard(placed) or {0: []}).items():
            await self._add(shard, parts)


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
        """Add the batch's jobs in one commit a shard that records ``batchId`` (on the driver)."""
        asyncio.run(self._publish(_placed(messages), batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Delete the parts of the batch's attempts that succeeded, unless jobs refer to them or
        the batch's intent names them (on the driver: the commit may have landed, or begun,
        before the query died)."""
        asyncio.run(self._abort(_placed(messages), batchId))

    async def _publish(self, placed: Placed, batch_id: int) -> None:
        mark = (self.sink, batch_id)
        if len(self.urls) == 1:
            await self._add(0, [part for _, part in placed], mark)
            return
        intents, name = keyed_storage(self.url), self._intent_name(batch_id)
        async with DirectQueue(storage_from_url(self.url)) as first:
            newest = await first.bulk.sink_mark(self.sink)
        if newest is not None and newest >= batch_id:  # complete before: a replay
            await self._delete_unused(placed)
            return
        try:
            await intents.create(name, msgspec.msgpack.encode(placed))
        except CASConflictError:  # its commits had begun: finish them with the parts they named
            recorded = _decoded(await intents.get(name))
            await self._delete_unused(_unrecorded(placed, recorded))
            placed = recorded
        grouped = _by_shard(placed)
        for shard, parts in ({**grouped, 0: []} if 0 not in grouped else grouped).items():
            await self._add(shard, parts, mark)
        await intents.delete(name)

    async def _abort(self, placed: Placed, batch_id: int) -> None:
        if len(self.urls) > 1:
            content = await keyed_storage(self.url).get(self._intent_name(batch_id))
            placed = placed if content is None else _unrecorded(placed, _decoded(content))
        await self._delete_unused(placed)

    def _intent_name(self, batch_id: int) -> str:
        sink = hashlib.blake2b(self.sink.encode(), digest_size=16).hexdigest()
        return f"{INTENT_PREFIX}{sink}-{batch_id:020d}"


def _decoded(content: bytes | None) -> Placed:
    """The parts an intent object records (its ``after`` values as tuples again)."""
    if content is None:
        return []
    placed = msgspec.msgpack.decode(content, type=list[tuple[int, StoredPart]])
    for _, part in placed:
        if "after" in part.columns:
            part.columns["after"] = [tuple(parents) for parents in part.columns["after"]]
    return placed


def _unrecorded(placed: Placed, recorded: Placed) -> Placed:
    """The parts of ``placed`` that ``recorded`` does not name."""
    named = {part.segment for _, part in recorded}
    return [(shard, part) for shard, part in placed if part.segment not in named]
