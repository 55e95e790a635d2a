"""``df.write.format("jqueue")``: exactly once, also when Spark retries tasks or stages.

Each task attempt stages its rows as one immutable object and reports its name; only
the successful attempt of each partition reaches the driver's ``commit``, which
stages those parts' jobs in the queue (unclaimable, in commits of at most
``CHUNK_BYTES`` of payload, so that each log entry stays small enough for the payload
cache), then publishes the whole write in one commit and checkpoints the queue. ``abort``
discards whatever was staged. Both end by deleting every staged object of the write,
those of failed attempts too.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from jqueue.adapters.spark.staging import StagedJob, decode_part, encode_part, keyed_storage, part_prefix
from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.direct import DirectQueue
from jqueue.domain.spec import JobSpec

CHUNK_BYTES = 8 * 1024 * 1024


@dataclass
class StagedPart(WriterCommitMessage):
    """What a task staged: the object's name and its job count."""

    name: str
    jobs: int


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
        names = set(schema.fieldNames())
        for column in (self.payload, self.priority, self.dedup_key, self.delay):
            if column is not None and column not in names:
                raise ValueError(f"the DataFrame has no column {column!r}")
        self.write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> StagedPart:
        """Stage this task's rows as one object (runs on an executor)."""
        jobs: list[StagedJob] = []
        for row in iterator:
            priority = 0 if self.priority is None else int(row[self.priority] or 0)
            key = None if self.dedup_key is None else row[self.dedup_key]
            delay = None if self.delay is None or row[self.delay] is None else float(row[self.delay])
            jobs.append((_bytes(row[self.payload]), priority, key, delay))
        context = TaskContext.get()
        partition, attempt = (context.partitionId(), context.attemptNumber()) if context else (0, 0)
        name = f"{part_prefix(self.write_id)}{partition:06d}-{attempt}-{uuid.uuid4().hex[:8]}"
        asyncio.run(keyed_storage(self.url).create(name, encode_part(self.entrypoint, jobs)))
        return StagedPart(name, len(jobs))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Stage every part's jobs, publish them in one commit, clean up (on the driver)."""
        parts = sorted(m.name for m in messages if isinstance(m, StagedPart))
        asyncio.run(self._publish(parts))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Drop what was staged and clean up (on the driver)."""
        asyncio.run(self._discard())

    async def _publish(self, parts: list[str]) -> None:
        storage = keyed_storage(self.url)
        try:
            async with DirectQueue(storage_from_url(self.url)) as queue:
                pending: list[JobSpec] = []
                size = 0
                for name in parts:
                    data = await storage.get(name)
                    if data is None:
                        raise FileNotFoundError(f"staged part {name} is missing")
                    for spec in decode_part(data):
                        pending.append(spec)
                        size += len(spec.payload)
                        if size >= CHUNK_BYTES:
                            await queue.stage_many(pending, self.write_id)
                            pending, size = [], 0
                if pending:
                    await queue.stage_many(pending, self.write_id)
                await queue.publish(self.write_id)
                await queue.checkpoint()  # readers that open the queue next start from here
        except BaseException:
            await self._discard()
            raise
        await self._clean_up()

    async def _discard(self) -> None:
        async with DirectQueue(storage_from_url(self.url)) as queue:
            await queue.discard(self.write_id)
        await self._clean_up()

    async def _clean_up(self) -> None:
        storage = keyed_storage(self.url)
        names = await storage.list_names(part_prefix(self.write_id))
        await asyncio.gather(*(storage.delete(name) for name in names))
