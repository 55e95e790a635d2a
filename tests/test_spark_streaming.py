"""Structured Streaming into and out of a queue, with the query killed and restarted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from jqueue import DirectQueue, storage_from_url
from spark_faults import CrashingJQueue

pytestmark = pytest.mark.slow


def _input_files(directory: Path, files: int, rows: int) -> list[str]:
    directory.mkdir()
    expected = []
    for number in range(files):
        lines = [json.dumps({"payload": f"f{number}-r{row}", "prio": row % 2}) for row in range(rows)]
        (directory / f"{number:03d}.json").write_text("\n".join(lines) + "\n")
        expected += [f"f{number}-r{row}" for row in range(rows)]
    return expected


def _run_sink(spark: SparkSession, source: Path, checkpoint: Path, url: str, crash_dir: Path) -> None:
    stream = (
        spark.readStream.schema("payload string, prio int").option("maxFilesPerTrigger", 1).json(str(source))
    )
    query = (
        stream.writeStream.format("jqueue_crashing")
        .option("entrypoint", "streamed")
        .option("priorityColumn", "prio")
        .option("checkpointLocation", str(checkpoint))
        .option("crashDir", str(crash_dir))
        .trigger(availableNow=True)
        .start(url)
    )
    query.awaitTermination()


def test_each_micro_batch_is_enqueued_once_across_query_restarts(spark: SparkSession, tmp_path: Path) -> None:
    spark.dataSource.register(CrashingJQueue)
    expected = _input_files(tmp_path / "in", files=4, rows=50)
    url = (tmp_path / "q.json").as_uri()
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    (crashes / "after-1").touch()  # batch 1 commits to the queue, then the query dies
    (crashes / "before-2").touch()  # batch 2's tasks wrote parts, then the query dies
    checkpoint = tmp_path / "checkpoint"
    for _ in range(2):
        with pytest.raises(StreamingQueryException):
            _run_sink(spark, tmp_path / "in", checkpoint, url, crashes)
    assert list(crashes.iterdir()) == []
    _run_sink(spark, tmp_path / "in", checkpoint, url, crashes)

    async def check() -> None:
        async with DirectQueue(storage_from_url(url)) as q:
            jobs = await q.jobs(limit=None)
            assert sorted(j.payload.decode() for j in jobs) == sorted(expected)
            assert {j.priority for j in jobs} == {0, 1}
            assert await q.sink_mark(str(checkpoint)) == 3

    asyncio.run(check())
