"""A ``jqueue`` data source whose streaming sink kills its own process at a chosen point of a
chosen batch's commit, once: as a driver that dies mid-batch (executors import it by name)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from jqueue.adapters.spark.source import JQueueDataSource
from jqueue.adapters.spark.writer import JQueueStreamWriter
from jqueue.core.log.parts import StoredPart


def _crash_if_asked(directory: str, when: str, batch_id: int) -> None:
    flag = Path(directory) / f"{when}-{batch_id}"
    if flag.exists():
        flag.unlink()
        os._exit(1)


class CrashingStreamWriter(JQueueStreamWriter):
    """Dies before or after its commit of a batch when ``crashDir`` holds ``before-N`` or ``after-N``,
    or (on a sharded queue) after the batch's first commit to a shard but 0 with ``between-N``."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        self.crash_dir = options["crashDir"]

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _crash_if_asked(self.crash_dir, "before", batchId)
        super().commit(messages, batchId)
        _crash_if_asked(self.crash_dir, "after", batchId)

    async def _add(self, shard: int, parts: list[StoredPart], mark: tuple[str, int] | None = None) -> None:
        await super()._add(shard, parts, mark)
        if mark is not None and shard != 0:  # a sharded queue's batch, committed in some shards only
            _crash_if_asked(self.crash_dir, "between", mark[1])


class CrashingJQueue(JQueueDataSource):
    """``format("jqueue_crashing")``."""

    @classmethod
    def name(cls) -> str:
        return "jqueue_crashing"

    def streamWriter(self, schema: StructType, overwrite: bool) -> CrashingStreamWriter:  # noqa: N802
        return CrashingStreamWriter(self.options, schema)
