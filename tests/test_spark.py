"""The Spark pipeline on a local[2] session started here: exactly-once writes, reads, workers."""

from __future__ import annotations

import asyncio
import os
import random
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow
import pytest
from pyspark import TaskContext
from pyspark.sql import SparkSession, functions
from pyspark.sql.types import ArrayType, DoubleType, StringType, StructField, StructType

from conftest import BUCKET
from jqueue import DirectQueue, Job, JobSpec, JobStatus, sharded, storage_from_url
from jqueue.adapters.service.wire.root import shard_location
from jqueue.adapters.spark.changes import ChangeFeedReader
from jqueue.adapters.spark.consumer import ConsumerReader
from jqueue.adapters.spark.writer import JQueueStreamWriter, PartWriting
from jqueue.domain.sharding import routing_key, shard_of
from jqueue.domain.spec import LONGEST_SPAN
from jqueue.spark import run_workers
from servers import S3Endpoint

pytestmark = pytest.mark.slow


async def part_objects(url: str) -> list[str]:
    storage = storage_from_url(url)
    return await storage.list_names("part/")  # type: ignore[attr-defined, no-any-return]


def fails_on_first_attempt(value: str) -> str:
    context = TaskContext.get()
    if context is not None and context.partitionId() == 1 and context.attemptNumber() == 0:
        raise RuntimeError("the first attempt of partition 1 fails")
    return value


def always_fails_in_partition_2(value: str) -> str:
    context = TaskContext.get()
    if context is not None and context.partitionId() == 2:
        raise RuntimeError("partition 2 always fails")
    return value


def test_a_write_with_a_retried_task_enqueues_every_row_exactly_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = (tmp_path / "q.json").as_uri()
    flaky = functions.udf(fails_on_first_attempt, "string")
    rows = spark.range(20_000, numPartitions=4).select(
        flaky(functions.concat(functions.lit("job-"), functions.col("id").cast("string"))).alias("payload"),
        (functions.col("id") % 3).cast("int").alias("priority"),
        functions.when(
            functions.col("id") % 5 > 0, functions.concat(functions.lit("t"), functions.col("id") % 5)
        )
        .otherwise(functions.lit(None))
        .alias("customer"),
    )
    writer = rows.write.format("jqueue").option("entrypoint", "bulk").option("priorityColumn", "priority")
    writer.option("tenantColumn", "customer").mode("append").save(url)

    async def check() -> None:
        async with DirectQueue(storage_from_url(url)) as q:
            jobs = await q.jobs(limit=None)
            assert len(jobs) == 20_000
            assert {j.payload for j in jobs} == {b"job-%d" % i for i in range(20_000)}
            assert {j.status for j in jobs} == {JobStatus.QUEUED}
            assert {j.priority for j in jobs} == {0, 1, 2}
            assert {j.tenant for j in jobs} == {None, "t1", "t2", "t3", "t4"}
            first = await q.dequeue("bulk", batch_size=5)  # the tenants take turns
            assert {j.priority for j in first} == {0}
            assert len({j.tenant for j in first}) == 5
        # one part per partition: the failed attempt failed before its first part was written
        assert len(await part_objects(url)) == 4

    asyncio.run(check())


def test_an_aborted_write_leaves_nothing_visible_or_staged(spark: SparkSession, tmp_path: Path) -> None:
    url = (tmp_path / "q.json").as_uri()
    asyncio.run(_enqueue(url, 1))
    broken = functions.udf(always_fails_in_partition_2, "string")
    rows = spark.range(1000, numPartitions=4).select(
        broken(functions.col("id").cast("string")).alias("payload")
    )
    with pytest.raises(Exception, match="partition 2 always fails"):
        rows.write.format("jqueue").option("entrypoint", "bulk").mode("append").save(url)

    async def check() -> None:
        async with DirectQueue(storage_from_url(url)) as q:
            assert [j.entrypoint for j in await q.jobs(limit=None)] == ["before"]
        # abort deleted the parts it was told of; a task cancelled while it wrote may leave one
        # that nothing refers to, for compaction (test_parts.py)
        assert len(await part_objects(url)) <= 3  # at most one a partition that did not fail

    asyncio.run(check())


async def _enqueue(url: str, count: int) -> list[Job]:
    async with DirectQueue(storage_from_url(url)) as q:
        return await q.enqueue_many("before", [b"%d" % i for i in range(count)])


def test_reading_jobs_and_history_in_parallel_parts(spark: SparkSession, tmp_path: Path) -> None:
    url = (tmp_path / "q.json").as_uri()

    async def prepare() -> list[Job]:
        async with DirectQueue(storage_from_url(url)) as q:
            specs = [JobSpec("work", b"%d" % i, 1, tenant=f"t{i % 2}") for i in range(500)]
            jobs = await q.enqueue_many(specs)
            await q.ack_many(await q.dequeue(batch_size=200))
            [failed] = await q.dequeue()
            await q.nack(failed, error="boom")
            return jobs

    jobs = asyncio.run(prepare())
    read = spark.read.format("jqueue").option("partitions", "3").load(url)
    assert read.rdd.getNumPartitions() == 3
    rows = read.collect()
    assert len(rows) == 300
    assert {r.id for r in rows} == {j.id for j in jobs[200:]}
    assert {bytes(r.payload) for r in rows} == {b"%d" % i for i in range(200, 500)}
    [retried] = [r for r in rows if r.attempts == 1]
    assert (retried.status, retried.last_error) == ("queued", "boom")
    assert {r.tenant for r in rows} == {"t0", "t1"}

    history = spark.read.format("jqueue").option("table", "history").option("partitions", "2").load(url)
    acked = history.where("outcome = 'acked'")
    assert acked.count() == 200
    assert {r.job_id for r in acked.collect()} == {j.id for j in jobs[:200]}
    assert history.where("wait_seconds < 0 or run_seconds < 0").count() == 0
    assert acked.where("tenant = 't0'").count() == 100  # the tenants took turns


def test_a_read_of_a_sharded_queue_adds_its_shards_up(spark: SparkSession, tmp_path: Path) -> None:
    url = (tmp_path / "wide.json").as_uri()

    async def prepare() -> tuple[list[Job], set[str]]:
        async with sharded(str(tmp_path), "wide", 3) as queue:
            jobs = await queue.enqueue_many(
                [JobSpec("work", b"%d" % i, tenant=f"t{i % 3}") for i in range(90)]
            )
            assert all([await shard.count() for shard in queue.shards])
            acked = set()
            for _ in range(3):  # each shard first once
                for job in await queue.dequeue(batch_size=10):
                    await queue.ack(job)
                    acked.add(job.id)
            return jobs, acked

    jobs, acked = asyncio.run(prepare())
    read = spark.read.format("jqueue").option("partitions", "2").load(url)
    assert read.rdd.getNumPartitions() == 6  # two a shard
    assert sorted(r.id for r in read.collect()) == sorted(j.id for j in jobs if j.id not in acked)
    history = spark.read.format("jqueue").option("table", "history").load(url)
    assert {r.job_id for r in history.where("outcome = 'acked'").collect()} == acked


def test_the_readers_of_one_log_refuse_a_sharded_queue_and_a_write_its_rows_without_a_shard(
    tmp_path: Path,
) -> None:
    async def prepare() -> None:
        async with sharded(str(tmp_path), "wide", 3) as queue:
            await queue.enqueue_many("work", [b"x"])

    asyncio.run(prepare())
    url = (tmp_path / "wide.json").as_uri()
    for read in (ChangeFeedReader, lambda options: ConsumerReader({**options, "consumerId": "c"})):
        with pytest.raises(ValueError, match=r"a queue of 3 shards, .* choose a shard .* 0 to 2"):
            read({"path": url})
        assert read({"path": url, "shard": "2"}).url == (tmp_path / "wide.shard-2.json").as_uri()
        assert read({"path": url, "shard": "0"}).url == url
        with pytest.raises(ValueError, match="shard must be one of 0 to 2"):
            read({"path": url, "shard": "3"})
    options = {"path": url, "entrypoint": "e", "idColumn": "job", "afterColumn": "parents"}
    writing = PartWriting(options, SCHEMA)
    orphan = {"payload": ["x"], "job": ["orphan"], "parents": [["nowhere"]]}
    with pytest.raises(ValueError, match="waits for nowhere, which is neither in its partition nor in"):
        writing.write(iter([pyarrow.record_batch(orphan, SPARK_ARROW)]))


async def _sharded_payloads(root: Path) -> list[bytes]:
    async with sharded(str(root), "wide") as queue:
        return sorted(job.payload for job in await queue.jobs(limit=None))


def test_a_streaming_batch_cut_off_between_shards_is_finished_with_the_parts_it_began_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def made() -> None:
        async with sharded(str(tmp_path), "wide", 3):
            pass

    asyncio.run(made())
    url = (tmp_path / "wide.json").as_uri()
    schema = StructType([StructField("payload", StringType())])
    options = {"path": url, "entrypoint": "e", "sinkId": "sink"}
    rows = pyarrow.record_batch({"payload": [f"r{n}" for n in range(30)]})
    expected = sorted(f"r{n}".encode() for n in range(30))

    class CutError(Exception):
        pass

    add = JQueueStreamWriter._add

    async def cut_before_shard_0(
        self: JQueueStreamWriter, shard: int, parts: list[Any], mark: tuple[str, int] | None = None
    ) -> None:
        if shard == 0:
            raise CutError  # shards 1 and 2 have the batch, shard 0 (which completes it) not
        await add(self, shard, parts, mark)

    monkeypatch.setattr(JQueueStreamWriter, "_add", cut_before_shard_0)
    monkeypatch.setattr(random, "randrange", lambda count: 0)  # as RowRouter draws its first shard
    first = JQueueStreamWriter(options, schema)
    written = first.write(iter([rows]))
    with pytest.raises(CutError):
        first.commit([written], 7)
    first.abort([written], 7)  # keeps the parts the batch's intent names
    monkeypatch.setattr(JQueueStreamWriter, "_add", add)
    monkeypatch.setattr(random, "randrange", lambda count: 1)  # the replay spreads otherwise
    replay = JQueueStreamWriter(options, schema)
    replay.commit([replay.write(iter([rows]))], 7)
    assert asyncio.run(_sharded_payloads(tmp_path)) == expected  # each row once, in the shards begun with
    assert not list(tmp_path.rglob("intent/*"))
    late = JQueueStreamWriter(options, schema)  # the batch again, once complete: adds nothing
    late.commit([late.write(iter([rows]))], 7)
    assert asyncio.run(_sharded_payloads(tmp_path)) == expected
    parts = sum(len(asyncio.run(part_objects(shard_location(url, k)))) for k in range(3))
    assert parts == len(written.parts)  # the replays' own parts were deleted


SCHEMA = StructType(
    [
        StructField("payload", StringType()),
        StructField("job", StringType()),
        StructField("customer", StringType()),
        StructField("parents", ArrayType(StringType())),
        StructField("family", StringType()),
    ]
)
SPARK_ARROW = pyarrow.schema(
    [("payload", pyarrow.string()), ("job", pyarrow.string()), ("parents", pyarrow.list_(pyarrow.string()))]
)


def test_a_write_to_a_sharded_queue_puts_each_row_where_the_sharded_queue_would(
    spark: SparkSession, tmp_path: Path
) -> None:
    async def made() -> Job:
        async with sharded(str(tmp_path), "wide", 3) as queue:
            return await queue.enqueue("etl", b"old", tenant="c2", id="old-parent")

    old = asyncio.run(made())
    rows: list[tuple[str, str | None, str | None, list[str] | None, str]] = []
    rows += [(f"t{n}", None, f"c{n % 4}", None, f"t{n}") for n in range(40)]  # by tenant
    rows += [(f"s{n}", None, None, None, f"s{n}") for n in range(60)]  # spread
    rows += [(f"i{n}", f"id-{n}", None, None, f"i{n}") for n in range(20)]  # by id
    rows += [("leaf", "leaf", "c2", ["root"], "wf"), ("root", "root", "c1", None, "wf")]  # the child first
    rows += [("late", "late", None, ["old-parent"], "late")]  # its parent is in the queue
    frame = spark.createDataFrame(rows, SCHEMA).repartition(3, "family")  # a workflow in one partition
    writer = frame.write.format("jqueue").option("entrypoint", "etl").option("idColumn", "job")
    writer = writer.option("tenantColumn", "customer").option("afterColumn", "parents")
    writer.mode("append").save((tmp_path / "wide.json").as_uri())

    async def check() -> None:
        async with sharded(str(tmp_path), "wide") as queue:
            held = [{job.payload.decode(): job for job in await s.jobs(limit=None)} for s in queue.shards]
            assert sum(len(jobs) for jobs in held) == len(rows) + 1
            shard = {payload: k for k, jobs in enumerate(held) for payload in jobs}
            for n in range(40):
                assert shard[f"t{n}"] == shard_of(routing_key(f"c{n % 4}", None, ""), 3)
            for n in range(20):
                assert shard[f"i{n}"] == shard_of(routing_key(None, None, f"id-{n}"), 3)
            assert shard["leaf"] == shard["root"] == shard_of(routing_key("c1", None, ""), 3)
            assert shard["late"] == shard["old"]
            assert all(any(payload.startswith("s") for payload in jobs) for jobs in held)
            done: list[str] = []
            while claimed := await queue.dequeue("etl", batch_size=50):
                for job in claimed:
                    done.append(job.payload.decode())
                    await queue.ack(job)
            assert sorted(done) == sorted([*shard])
            assert done.index("leaf") > done.index("root")
            assert done.index("late") > done.index("old")

    asyncio.run(check())
    assert old.id == "old-parent"


def test_reads_and_writes_reach_s3_through_the_projects_adapters(
    spark: SparkSession, moto: S3Endpoint
) -> None:
    url = f"s3://{BUCKET}/spark-{os.getpid()}-{id(spark)}.json?endpoint_url={moto.url}&region={moto.region}"
    rows = spark.createDataFrame([(b"a", "k1"), (b"b", "k2"), (b"c", "k1")], "payload binary, key string")
    rows.write.format("jqueue").option("entrypoint", "s3").option("dedupKeyColumn", "key").mode(
        "append"
    ).save(url)
    read = spark.read.format("jqueue").load(url).collect()
    assert sorted(r.dedup_key for r in read) == ["k1", "k2"]  # the second k1 found the first


def test_run_workers_drains_the_queue_and_acks_every_job_once(spark: SparkSession, tmp_path: Path) -> None:
    url = (tmp_path / "q.json").as_uri()
    asyncio.run(_enqueue(url, 3_000))

    async def handle(job: Job) -> None:
        await asyncio.sleep(0)

    stats = run_workers(spark, url, {"before": handle}, parallelism=2, concurrency=16).collect()
    assert len(stats) == 2
    assert sum(r.acked for r in stats) == 3_000
    assert sum(r.lost + r.retried + r.dead for r in stats) == 0

    async def check() -> None:
        async with DirectQueue(storage_from_url(url)) as q:
            assert await q.count() == 0
            acked = [h.job_id for h in await q.history(outcome=JobStatus.ACKED)]
            assert len(acked) == len(set(acked)) == 3_000

    asyncio.run(check())


def test_the_report_is_the_same_in_python_and_with_spark_for_known_timings(
    spark: SparkSession, tmp_path: Path
) -> None:
    from jqueue.adapters.report import markdown, write
    from jqueue.adapters.spark.reader import HISTORY_SCHEMA, history_row
    from jqueue.adapters.spark.report import compute
    from jqueue.domain.figures import report_of
    from jqueue.domain.records import HistoryRecord

    def record(
        entrypoint: str, wait: float, run: float, attempts: int, outcome: str, at: str
    ) -> HistoryRecord:
        end = int(datetime.fromisoformat(f"2026-01-01T{at}+00:00").timestamp() * 1e6)
        claimed = end - int(run * 1e6)
        claims = (claimed,) * attempts
        return HistoryRecord(
            "id", entrypoint, claimed - int(wait * 1e6), claims, end, attempts, JobStatus(outcome)
        )

    records = [
        record("a", 1, 10, 1, "acked", "12:00:10"),
        record("a", 2, 20, 1, "acked", "12:00:50"),
        record("a", 3, 30, 2, "acked", "12:01:30"),
        record("a", 4, 40, 3, "dead", "12:02:05"),
        record("b", 5, 1, 1, "acked", "12:01:00"),
    ]
    in_python = report_of(records)
    with_spark = compute(spark.createDataFrame([history_row(r) for r in records], HISTORY_SCHEMA))
    for report in (in_python, with_spark):
        found = report.throughput
        assert (found.bucket, len(found.acked)) == (60_000_000, 30)  # the 30 minutes up to the last
        assert (found.acked[-3:], found.dead[-3:], sum(found.acked[:-3] + found.dead[:-3])) == (
            [2, 2, 0],
            [0, 0, 1],
            0,
        )
        assert {name: counts[-3:] for name, counts in found.per_entrypoint.items()} == {
            "a": [2, 1, 1],
            "b": [0, 1, 0],
        }
        a, b = report.timings["a"], report.timings["b"]
        assert (a.finished, a.acked, a.dead, a.retried) == (4, 3, 1, 2)
        assert a.wait == pytest.approx((2.5, 3.85, 3.97))
        assert a.run == pytest.approx((25.0, 38.5, 39.7))
        assert (b.finished, b.wait, b.run, b.retry_rate, b.dead_rate) == (
            1,
            (5.0, 5.0, 5.0),
            (1.0, 1.0, 1.0),
            0,
            0,
        )
    assert markdown(in_python) == markdown(with_spark)

    text, chart = write(in_python, tmp_path / "out")
    assert "| a | 4 | 2.500 / 3.850 / 3.970 | 25.000 / 38.500 / 39.700 | 50.0% | 25.0% |" in text.read_text()
    assert "| 2026-01-01 12:02 | 0 | 1 |" in text.read_text()
    assert chart.read_text().startswith('<svg xmlns="http://www.w3.org/2000/svg"')


def test_jqueue_report_runs_on_a_real_queue(tmp_path: Path) -> None:
    import subprocess

    url = (tmp_path / "q.json").as_uri()

    async def prepare() -> None:
        async with DirectQueue(storage_from_url(url)) as q:
            await q.enqueue_many("work", [b"1", b"2", b"3"])
            for job in await q.dequeue(batch_size=3):
                await q.ack(job)

    asyncio.run(prepare())
    out = tmp_path / "report"
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-m", "jqueue", "--storage", url, "report", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| work | 3 |" in (out / "report.md").read_text()
    assert "computed with python" in done.stderr
    assert (out / "throughput.svg").stat().st_size > 0


def test_a_part_staged_by_a_lost_attempt_is_never_published(tmp_path: Path) -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    from jqueue.adapters.spark.writer import JQueueWriter

    url = (tmp_path / "q.json").as_uri()
    schema = StructType([StructField("payload", StringType())])
    writer = JQueueWriter({"path": url, "entrypoint": "bulk"}, schema)
    reported = writer.write(iter([pyarrow.record_batch({"payload": ["kept-1", "kept-2"]})]))
    writer.write(iter([pyarrow.record_batch({"payload": ["from a lost executor"]})]))  # never reported
    writer.commit([reported, None])

    async def check() -> None:
        async with DirectQueue(storage_from_url(url)) as q:
            assert sorted(j.payload for j in await q.jobs(limit=None)) == [b"kept-1", b"kept-2"]
        assert len(await part_objects(url)) == 2  # the lost one is left to compaction

    asyncio.run(check())


def test_a_task_killed_mid_job_loses_nothing(spark: SparkSession, tmp_path: Path) -> None:
    from datetime import timedelta

    url = (tmp_path / "q.json").as_uri()
    asyncio.run(_enqueue(url, 200))
    victim = b"17"

    async def handle(job: Job) -> None:
        if job.payload == victim and job.attempts == 1:
            os._exit(1)  # the task's Python worker dies in the middle of the job
        await asyncio.sleep(0)

    async def state() -> tuple[list[Job], list[str]]:
        async with DirectQueue(storage_from_url(url)) as q:
            acked = [h.job_id for h in await q.history(outcome=JobStatus.ACKED)]
            return await q.jobs(limit=None), acked

    victim_id = next(job.id for job in asyncio.run(state())[0] if job.payload == victim)
    lease = timedelta(seconds=2)
    first = run_workers(spark, url, {"before": handle}, parallelism=2, visibility_timeout=lease).collect()

    # Spark ran the killed task again. The jobs the dead worker held stay leased until their
    # leases run out; on a busy machine the rerun may come after that and run them itself.
    held, acked = asyncio.run(state())
    assert {j.status for j in held} <= {JobStatus.IN_PROGRESS}
    assert len(set(acked)) == len(acked) == 200 - len(held)  # the dead task's stats row went with it
    assert sum(r.acked for r in first) <= len(acked)
    expiries = [j.lease_expires_at for j in held if j.lease_expires_at is not None]
    if expiries:
        import time

        time.sleep(max(0.0, (max(expiries) - datetime.now(UTC)).total_seconds()) + 0.5)  # they return
    second = run_workers(spark, url, {"before": handle}, parallelism=2, visibility_timeout=lease).collect()
    assert sum(r.acked for r in second) == len(held)

    async def check() -> None:
        async with DirectQueue(storage_from_url(url)) as q:
            assert await q.count() == 0
            history = await q.history(outcome=JobStatus.ACKED)
            assert len({h.job_id for h in history}) == len(history) == 200
            attempts = {h.job_id: h.attempts for h in history}
            assert attempts[victim_id] == 2  # the dead one, and again
            assert {attempts[j.id] for j in held} <= {2}

    asyncio.run(check())


def test_a_row_with_a_tenant_that_cannot_be_one_fails_its_task_naming_the_field(tmp_path: Path) -> None:
    schema = StructType([StructField("payload", StringType()), StructField("customer", StringType())])
    options = {"path": (tmp_path / "q.json").as_uri(), "entrypoint": "e", "tenantColumn": "customer"}
    writing = PartWriting(options, schema)
    good = pyarrow.RecordBatch.from_pydict({"payload": ["a", "b"], "customer": ["acme", None]})
    assert [row[4] for row in writing._rows(good, 0)] == ["acme", None]
    for bad, message in (("", "tenant must be 1 to 200 characters"), ("x" * 201, "tenant must be 1 to 200")):
        batch = pyarrow.RecordBatch.from_pydict({"payload": ["a"], "customer": [bad]})
        with pytest.raises(ValueError, match=message):
            writing._rows(batch, 0)
    with pytest.raises(ValueError, match="no column 'client'"):
        PartWriting({**options, "tenantColumn": "client"}, schema)


def test_a_delay_column_is_checked_as_enqueue_checks_a_delay(tmp_path: Path) -> None:
    schema = StructType([StructField("payload", StringType()), StructField("wait", DoubleType())])
    options = {"path": (tmp_path / "q.json").as_uri(), "entrypoint": "e", "delayColumn": "wait"}
    writing = PartWriting(options, schema)
    longest = LONGEST_SPAN.total_seconds()
    good = pyarrow.RecordBatch.from_pydict({"payload": ["a", "b", "c"], "wait": [1.5, None, longest]})
    assert [row.not_before for row in writing._rows(good, 10)] == [1_500_010, None, 10 + round(longest * 1e6)]
    for bad, message in (
        (-1.0, "delay must not be negative, got -1 s"),
        (longest + 1, "delay must be at most 365000 days"),
        (float("nan"), "delay must be a number of seconds, got nan"),
        (float("inf"), "delay must be a number of seconds, got inf"),
    ):
        batch = pyarrow.RecordBatch.from_pydict({"payload": ["a"], "wait": [bad]})
        with pytest.raises(ValueError, match=message):
            writing._rows(batch, 0)


def test_a_write_with_dependency_columns_makes_children_wait_whatever_the_partitions(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = (tmp_path / "q.json").as_uri()
    schema = "payload string, job string, parents array<string>, policy string"
    rows = [  # the children first: the commit orders them after their parents
        ("report", "report", ["merge"], "run"),
        ("merge", "merge", ["extract-a", "extract-b"], None),
        ("extract-b", "extract-b", None, None),
        ("extract-a", "extract-a", [], None),
    ]
    frame = spark.createDataFrame(rows, schema).repartition(2)
    writer = frame.write.format("jqueue").option("entrypoint", "etl").option("idColumn", "job")
    writer.option("afterColumn", "parents").option("onParentFailureColumn", "policy").mode("append").save(url)

    async def drain_extracts() -> None:
        async with DirectQueue(storage_from_url(url)) as q:
            statuses = {j.id: j.status for j in await q.jobs(limit=None)}
            assert statuses == {
                "report": JobStatus.WAITING,
                "merge": JobStatus.WAITING,
                "extract-a": JobStatus.QUEUED,
                "extract-b": JobStatus.QUEUED,
            }
            extracts = await q.dequeue("etl", batch_size=10)
            assert sorted(j.id for j in extracts) == ["extract-a", "extract-b"]
            for job in extracts:
                await q.ack(job, result=job.id.encode())
            [merge] = await q.dequeue("etl", batch_size=10)
            assert (merge.id, merge.parent_results) == ("merge", (b"extract-a", b"extract-b"))

    asyncio.run(drain_extracts())
    read = spark.read.format("jqueue").option("table", "jobs").load(url)
    assert {row.id: row.after for row in read.collect()} == {
        "report": ["merge"],
        "merge": ["extract-a", "extract-b"],
    }

    cycle = spark.createDataFrame([("a", "a", ["b"], None), ("b", "b", ["a"], None)], schema)
    writer = cycle.write.format("jqueue").option("entrypoint", "etl").option("idColumn", "job")
    with pytest.raises(Exception, match="cycle"):
        writer.option("afterColumn", "parents").mode("append").save(url)
    assert {row.id for row in read.collect()} == {"report", "merge"}


def test_rows_with_dependency_columns_are_checked_as_enqueue_checks_them(tmp_path: Path) -> None:
    schema = StructType(
        [StructField(name, StringType()) for name in ("payload", "job", "policy")]
        + [StructField("parents", ArrayType(StringType()))]
    )
    options = {"path": (tmp_path / "q.json").as_uri(), "entrypoint": "e", "idColumn": "job"}
    options |= {"afterColumn": "parents", "onParentFailureColumn": "policy"}
    writing = PartWriting(options, schema)

    def batch(job: str | None, parents: list[str] | str | None, policy: str | None) -> pyarrow.RecordBatch:
        return pyarrow.RecordBatch.from_pydict(
            {"payload": ["p"], "job": [job], "policy": [policy], "parents": [parents]}
        )

    [row] = writing._rows(batch("b", ["a", "a"], "run"), 0)
    assert (row.id, row.after, row.on_parent_failure) == ("b", ("a",), "run")
    [row] = writing._rows(batch(None, None, "cancel"), 0)
    assert (row.id, row.after, row.on_parent_failure) == (None, (), None)  # as enqueue stores them
    for bad, message in (
        (batch("a", ["a"], None), "cannot wait for itself"),
        (batch("", None, None), "id must be"),
        (batch("a", [""], None), "after must be"),
        (batch("a", None, "later"), "on_parent_failure must be one of"),
        (batch("b", "a,c", None), "after must be a sequence of job ids, got str"),
    ):
        with pytest.raises(ValueError, match=message):
            writing._rows(bad, 0)
