"""``df.write.format("jqueue")``: exactly once, also when Spark retries tasks or stages.

Each task attempt writes its rows as parts, immutable objects beside the queue in its
own payload format (``core/log/parts.py``, at most ``PART_ROWS`` jobs or about
``PART_BYTES`` of payload each), and reports their jobs' fields to the driver. Only
the successful attempt of each partition reaches the driver's ``commit``, which stages
those fields in the queue (payloads stay in the parts; at most ``COMMIT_JOBS`` jobs a
commit), publishes the whole write in one commit and checkpoints the queue. The
driver never reads or writes a payload. Parts that no commit refers to (failed
attempts, an aborted write, a driver that died) are deleted by the queue's compaction
once older than ``LogSettings.part_lifetime``; a write staged but never published is
discarded after ``QueuePolicy.staged_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.direct import DirectQueue
from jqueue.core.log.parts import PART_BYTES, PART_ROWS, StoredPart, part_name, write_part
from jqueue.core.queue import DEFAULT_MAX_PAYLOAD_BYTES
from jqueue.domain.errors import PayloadTooLargeError
from jqueue.domain.spec import LONGEST_SPAN
from jqueue.domain.times import to_micros, utc_now
from jqueue.domain.values import checked_int64, checked_text
from jqueue.ports.storage import KeyedStoragePort

COMMIT_JOBS = 100_000
"""The most jobs whose fields one staging commit carries."""
Row = tuple[bytes, int, str | None, int | None]


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


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"a payload must be binary or string, not {type(value).__name__}")


class JQueueWriter(DataSourceWriter):
    """Writes a DataFrame's rows as jobs; see the module docstring."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.url = options.get("path") or ""
        if not self.url:
            raise ValueError("give the queue's storage URL: .save(url)")
        self.entrypoint = options.get("entrypoint") or ""
        if not self.entrypoint:
            raise ValueError("give the jobs' entrypoint: .option('entrypoint', ...)")
        self.payload = options.get("payloadColumn", "payload")
        self.priority = options.get("priorityColumn")
        self.dedup_key = options.get("dedupKeyColumn")
        self.delay = options.get("delayColumn")
        self.max_payload_bytes = int(options.get("maxPayloadBytes", str(DEFAULT_MAX_PAYLOAD_BYTES)))
        names = set(schema.fieldNames())
        for column in (self.payload, self.priority, self.dedup_key, self.delay):
            if column is not None and column not in names:
                raise ValueError(f"the DataFrame has no column {column!r}")
        self.write_id = uuid.uuid4().hex

    def _row(self, row: Any, created: int) -> Row:
        payload = _bytes(row[self.payload])
        if len(payload) > self.max_payload_bytes:
            raise PayloadTooLargeError(len(payload), self.max_payload_bytes)
        priority = 0 if self.priority is None else checked_int64("priority", int(row[self.priority] or 0))
        key = None if self.dedup_key is None else row[self.dedup_key]
        if key is not None:
            checked_text("dedup_key", key)
        delay = None if self.delay is None else row[self.delay]
        if delay is not None and not 0 <= float(delay) <= LONGEST_SPAN.total_seconds():
            raise ValueError(f"a delay must be 0 to {LONGEST_SPAN.days} days in seconds, got {delay}")
        not_before = None if delay is None else created + round(float(delay) * 1_000_000)
        return payload, priority, key, not_before

    def write(self, iterator: Iterator[Any]) -> WrittenParts:
        """Write this task's rows as parts (runs on an executor)."""
        return WrittenParts(asyncio.run(self._write_parts(iterator)))

    async def _write_parts(self, iterator: Iterator[Any]) -> list[StoredPart]:
        storage = keyed_storage(self.url)
        created = to_micros(utc_now())
        parts: list[StoredPart] = []
        rows: list[Row] = []
        size = 0
        for item in iterator:
            row = self._row(item, created)
            rows.append(row)
            size += len(row[0])
            if len(rows) == PART_ROWS or size >= PART_BYTES:
                parts.append(await write_part(storage, self.entrypoint, created, rows))
                rows, size = [], 0
        if rows:
            parts.append(await write_part(storage, self.entrypoint, created, rows))
        return parts

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Stage every part's jobs, publish them in one commit (on the driver)."""
        parts = [part for m in messages if isinstance(m, WrittenParts) for part in m.parts]
        asyncio.run(self._publish(parts))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the parts of the attempts that succeeded (on the driver; nothing was staged)."""
        parts = [part for m in messages if isinstance(m, WrittenParts) for part in m.parts]
        asyncio.run(self._delete(parts))

    async def _publish(self, parts: list[StoredPart]) -> None:
        async with DirectQueue(storage_from_url(self.url)) as queue:
            try:
                staged = 0
                for chunk in _chunks(parts):
                    staged += await queue.stage_parts(chunk, self.write_id)
                published = await queue.publish(self.write_id)
                if published != staged:
                    raise RuntimeError(
                        f"{self.url}: published {published} of the {staged} jobs this write staged "
                        "(was it discarded as abandoned? see QueuePolicy.staged_timeout)"
                    )
            except BaseException:
                with contextlib.suppress(Exception):
                    if await queue.discard(self.write_id):  # still staged: never published
                        await self._delete(parts)
                raise
            await queue.checkpoint()  # readers that open the queue next start from here

    async def _delete(self, parts: list[StoredPart]) -> None:
        storage = keyed_storage(self.url)
        gate = asyncio.Semaphore(16)

        async def delete(part: StoredPart) -> None:
            async with gate:
                await storage.delete(part_name(part.segment))

        await asyncio.gather(*(delete(part) for part in parts))


def _chunks(parts: list[StoredPart]) -> Iterator[list[StoredPart]]:
    """Group parts into commits of at most ``COMMIT_JOBS`` jobs (a larger part goes alone)."""
    chunk: list[StoredPart] = []
    jobs = 0
    for part in parts:
        if chunk and jobs + part.count > COMMIT_JOBS:
            yield chunk
            chunk, jobs = [], 0
        chunk.append(part)
        jobs += part.count
    if chunk:
        yield chunk
