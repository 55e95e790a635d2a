"""Structured Streaming into and out of a queue, with the query killed and restarted."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession, functions
from pyspark.sql.streaming.query import StreamingQuery

from conftest import BUCKET
from jqueue import DirectQueue, JobSpec, JobStatus, QueuePolicy, sharded, storage_from_url
from servers import S3Endpoint
from spark_faults import CrashingJQueue

pytestmark = pytest.mark.slow


@pytest.fixture
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    """Makes queue URLs on a local directory or on S3 (moto), as the test's parameter says. Each
    query runs on one of them (the queue's calls are the same on both; a query and its restarts
    take half a minute): the consuming query, whose leases and staged parts are the most
    storage-bound, on S3, the others on files. test_spark.py reads and writes on S3 too."""
    if request.param == "file":
        return lambda name: (tmp_path / f"{name}.json").as_uri()
    moto: S3Endpoint = request.getfixturevalue("moto")
    prefix = uuid.uuid4().hex
    return lambda name: f"s3://{BUCKET}/{prefix}/{name}.json?endpoint_url={moto.url}&region={moto.region}"


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


@pytest.mark.parametrize("root", ["file"], indirect=True)
@pytest.mark.parametrize("shards", [1, 3])
def test_each_micro_batch_is_enqueued_once_across_query_restarts(
    spark: SparkSession, tmp_path: Path, root: Callable[[str], str], shards: int
) -> None:
    spark.dataSource.register(CrashingJQueue)
    expected = _input_files(tmp_path / "in", files=4, rows=50)
    url = root("q")
    if shards > 1:
        asyncio.run(_made(tmp_path, shards))
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    (crashes / "after-1").touch()  # batch 1 commits to the queue, then the query dies
    (crashes / "before-2").touch()  # batch 2's tasks wrote parts, then the query dies
    if shards > 1:
        (crashes / "between-3").touch()  # batch 3 is in one shard of three, then the query dies
    checkpoint = tmp_path / "checkpoint"
    for _ in range(len(list(crashes.iterdir()))):
        with pytest.raises(StreamingQueryException):
            _run_sink(spark, tmp_path / "in", checkpoint, url, crashes)
    assert list(crashes.iterdir()) == []
    _run_sink(spark, tmp_path / "in", checkpoint, url, crashes)

    async def check() -> None:
        async with sharded(str(tmp_path), "q") as q:
            jobs = await q.jobs(limit=None)
            assert sorted(j.payload.decode() for j in jobs) == sorted(expected)
            assert {j.priority for j in jobs} == {0, 1}
            assert all([await shard.count() for shard in q.shards])  # the rows spread over them all
        async with DirectQueue(storage_from_url(url)) as first:
            assert await first.bulk.sink_mark(str(checkpoint)) == 3
        assert not list(tmp_path.rglob("intent/*"))  # each batch's intent went once it was complete

    asyncio.run(check())


async def _made(root: Path, shards: int) -> None:
    async with sharded(str(root), "q", shards):
        pass  # shard 0 records the count


def _to_queue(stream: DataFrame, url: str, checkpoint: Path, crash_dir: Path) -> StreamingQuery:
    return (
        stream.writeStream.format("jqueue_crashing")
        .option("entrypoint", "copied")
        .option("checkpointLocation", str(checkpoint))
        .option("crashDir", str(crash_dir))
        .trigger(availableNow=True)
        .start(url)
    )


def _crash_then_finish(start: Callable[[], StreamingQuery], crash_dir: Path, crashes: list[str]) -> None:
    for name in crashes:
        (crash_dir / name).touch()
    for _ in crashes:
        with pytest.raises(StreamingQueryException):
            start().awaitTermination()
    assert list(crash_dir.iterdir()) == []
    start().awaitTermination()


@pytest.mark.parametrize("root", ["s3"], indirect=True)
def test_a_consuming_query_hands_each_job_to_its_sink_once_across_restarts(
    spark: SparkSession, tmp_path: Path, root: Callable[[str], str]
) -> None:
    spark.dataSource.register(CrashingJQueue)
    source, target = root("source"), root("target")
    payloads = {b"job-%d" % i for i in range(300)}

    async def fill() -> None:
        async with DirectQueue(storage_from_url(source)) as q:
            await q.enqueue_many("work", sorted(payloads))
            await q.enqueue("other", b"not consumed")

    asyncio.run(fill())
    crashes = tmp_path / "crashes"
    crashes.mkdir()

    def start() -> StreamingQuery:
        stream = (
            spark.readStream.format("jqueue")
            .option("mode", "consume")
            .option("consumerId", "copier")
            .option("entrypoint", "work")
            .option("maxJobsPerTrigger", 100)
            .load(source)
        )
        return _to_queue(stream.select("payload"), target, tmp_path / "checkpoint", crashes)

    _crash_then_finish(start, crashes, ["after-1", "before-2"])

    async def check() -> None:
        async with DirectQueue(storage_from_url(target)) as copied:
            assert sorted(j.payload for j in await copied.jobs(limit=None)) == sorted(payloads)
        async with DirectQueue(storage_from_url(source)) as q:
            assert [j.payload for j in await q.jobs(limit=None)] == [b"not consumed"]
            acked = [h.job_id for h in await q.history(outcome=JobStatus.ACKED)]
            assert len(acked) == len(set(acked)) == 300
        assert await storage_from_url(source).list_names("stream/") == []  # type: ignore[attr-defined]

    asyncio.run(check())


@pytest.mark.parametrize("root", ["file"], indirect=True)
def test_a_consumed_job_comes_with_its_tenant_and_its_parents_results(
    spark: SparkSession, tmp_path: Path, root: Callable[[str], str]
) -> None:
    source = root("source")

    async def fill() -> str:
        async with DirectQueue(storage_from_url(source)) as q:
            parent = await q.enqueue("fetch", b"")
            child = await q.enqueue("work", b"c", tenant="acme", after=[parent.id])
            await q.enqueue("work", b"t", tenant="beta")
            [claimed] = await q.dequeue("fetch")
            await q.ack(claimed, result=b"\xff not text")
            return child.id

    child_id = asyncio.run(fill())
    stream = spark.readStream.format("jqueue").option("mode", "consume").option("consumerId", "c")
    query = (
        stream.load(source)
        .writeStream.format("memory")
        .queryName("consumed")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = {row["payload"]: row for row in spark.sql("SELECT * FROM consumed").collect()}
    assert set(rows) == {b"c", b"t"}
    assert (rows[b"c"]["id"], rows[b"c"]["tenant"]) == (child_id, "acme")
    assert rows[b"c"]["parent_results"] == [b"\xff not text"]
    assert (rows[b"t"]["tenant"], rows[b"t"]["parent_results"]) == ("beta", [])


@pytest.mark.parametrize("root", ["file"], indirect=True)
def test_the_change_feed_replays_each_commit_once_across_restarts(
    spark: SparkSession, tmp_path: Path, root: Callable[[str], str]
) -> None:
    spark.dataSource.register(CrashingJQueue)
    source, target = root("source"), root("target")

    async def changes() -> list[str]:
        async with DirectQueue(storage_from_url(source), policy=QueuePolicy(max_attempts=1)) as q:
            jobs = await q.enqueue_many("work", [b"a", b"b", b"c"])
            [first] = await q.dequeue()
            await q.ack(first)
            [second] = await q.dequeue()
            await q.nack(second, error="boom")  # its last attempt: dead
            [staged] = await q.bulk.stage_many([JobSpec("bulk", b"s")], "w1")
            await q.bulk.publish("w1")
            added = [f"added:{j.id}" for j in [*jobs, staged]]
            return [*added, f"acked:{first.id}", f"dead:{second.id}", "published:w1"]

    expected = asyncio.run(changes())
    crashes = tmp_path / "crashes"
    crashes.mkdir()

    def start() -> StreamingQuery:
        stream = (
            spark.readStream.format("jqueue")
            .option("mode", "changes")
            .option("startingOffsets", "earliest")
            .option("maxJobsPerTrigger", 1)
            .load(source)
        )
        described = functions.concat_ws(":", "change", functions.coalesce("job_id", "batch"))
        return _to_queue(stream.select(described.alias("payload")), target, tmp_path / "cp", crashes)

    _crash_then_finish(start, crashes, ["after-2", "before-4"])

    async def check() -> None:
        async with DirectQueue(storage_from_url(target)) as copied:
            seen = [j.payload.decode() for j in await copied.jobs(limit=None)]
        assert sorted(seen) == sorted(expected)

    asyncio.run(check())
