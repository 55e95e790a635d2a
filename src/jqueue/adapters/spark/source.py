"""The ``jqueue`` Spark data source: ``format("jqueue")`` for reads and writes."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from jqueue.adapters.spark.changes import CHANGES_SCHEMA, ChangeFeedReader
from jqueue.adapters.spark.consumer import CONSUMED_SCHEMA, ConsumerReader
from jqueue.adapters.spark.reader import TABLES, JQueueReader
from jqueue.adapters.spark.writer import JQueueStreamWriter, JQueueWriter


class JQueueDataSource(DataSource):
    """A queue as a Spark data source: write rows as jobs, read jobs or history.

    Writing takes ``entrypoint``, ``payloadColumn`` (default ``payload``; binary or
    string) and optionally ``priorityColumn``, ``dedupKeyColumn``, ``delayColumn``
    (seconds) and ``tenantColumn``; reading takes ``table`` (``jobs`` or ``history``) and ``partitions``.
    The path given to ``save``/``load`` is the queue's storage URL.
    """

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "jqueue"

    def schema(self) -> str:
        """The schema of the table being read (of the stream's ``mode`` in a streaming read)."""
        mode = self.options.get("mode")
        if mode is not None:
            return CONSUMED_SCHEMA if mode == "consume" else CHANGES_SCHEMA
        table = self.options.get("table", "jobs")
        if table not in TABLES:
            raise ValueError(f"table must be one of {sorted(TABLES)}, not {table!r}")
        return TABLES[table]

    def reader(self, schema: StructType) -> JQueueReader:
        """Return the reader."""
        return JQueueReader(self.options)

    def streamReader(self, schema: StructType) -> ChangeFeedReader | ConsumerReader:  # noqa: N802
        """Return the streaming reader of ``mode``: ``changes`` or ``consume``."""
        mode = self.options.get("mode")
        if mode == "changes":
            return ChangeFeedReader(self.options)
        if mode == "consume":
            return ConsumerReader(self.options)
        raise ValueError(f"a streaming read needs .option('mode', 'changes' or 'consume'), not {mode!r}")

    def writer(self, schema: StructType, overwrite: bool) -> JQueueWriter:
        """Return the writer (appends; there is no overwrite of a queue)."""
        _appends(overwrite)
        return JQueueWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> JQueueStreamWriter:  # noqa: N802
        """Return the streaming writer (``outputMode("append")``)."""
        _appends(overwrite)
        return JQueueStreamWriter(self.options, schema)


def _appends(overwrite: bool) -> None:
    if overwrite:
        raise ValueError("a queue takes appends only: use mode('append') or outputMode('append')")
