"""Measure a bulk write through Spark, and the queue's cost per operation afterwards.

Writes ROWS rows of PAYLOAD bytes with ``df.write.format("jqueue")`` (a local Spark
session, ``--cores`` cores) into a fresh file queue, then times sequential enqueues and
dequeue+ack pairs on it and on an empty queue beside it, each in a fresh process (not
the Spark driver's), in ``--rounds`` rounds that alternate the two queues (the disk may
still be writing back the write's gigabytes in the first), and prints JSON: per call the
mean, median and 99th percentile in ms (a dequeue that first touches a part fetches it
whole, so the mean carries a one-off read per ``PART_BYTES`` of payload)::

    .venv/bin/python tools/benchmark_spark_write.py --rows 1000000 --payload-bytes 1024
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jqueue import DirectQueue, storage_from_url
from jqueue.adapters.spark import register

ENTRYPOINT = "bulk"


async def _per_call(url: str, ops: int, payload: bytes) -> dict[str, float]:
    async with DirectQueue(storage_from_url(url), max_payload_bytes=None) as queue:
        opened = time.perf_counter()
        await queue.dequeue("nothing")
        reopen = time.perf_counter() - opened
        enqueue: list[float] = []
        dequeue_ack: list[float] = []
        for _ in range(ops):
            start = time.perf_counter()
            await queue.enqueue(ENTRYPOINT, payload)
            enqueue.append((time.perf_counter() - start) * 1000)
        for _ in range(ops):
            start = time.perf_counter()
            [job] = await queue.dequeue(ENTRYPOINT)
            await queue.ack(job)
            dequeue_ack.append((time.perf_counter() - start) * 1000)
        return {
            "reopen_s": round(reopen, 3),
            **_summary("enqueue", enqueue),
            **_summary("dequeue_ack", dequeue_ack),
            "jobs_after": await queue.count(),
        }


def _summary(name: str, millis: list[float]) -> dict[str, float]:
    ordered = sorted(millis)
    return {
        f"{name}_mean_ms": round(statistics.fmean(ordered), 3),
        f"{name}_median_ms": round(statistics.median(ordered), 3),
        f"{name}_p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the measurement; prints JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--payload-bytes", type=int, default=1024)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--ops", type=int, default=500, help="sequential calls per measurement afterwards")
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each queue, alternating")
    parser.add_argument("--dir", type=Path, default=None, help="where the queues go (default: a temp dir)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(asyncio.run(_per_call(args.measure, args.ops, b"y" * args.payload_bytes))))
        return 0
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as f

    directory = args.dir or Path(tempfile.mkdtemp(prefix="jqueue-spark-"))
    url, empty_url = (directory / "bulk.json").as_uri(), (directory / "empty.json").as_uri()
    spark = (
        SparkSession.builder.master(f"local[{args.cores}]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    try:
        register(spark)
        padding = max(0, args.payload_bytes - 12)
        rows = spark.range(args.rows, numPartitions=args.cores * 4).select(
            f.concat(f.lpad(f.col("id").cast("string"), 12, "0"), f.lit("x" * padding)).alias("payload")
        )
        start = time.perf_counter()
        rows.write.format("jqueue").option("entrypoint", ENTRYPOINT).mode("append").save(url)
        seconds = time.perf_counter() - start
    finally:
        spark.stop()
    result: dict[str, Any] = {
        "rows": args.rows,
        "payload_bytes": args.payload_bytes,
        "cores": args.cores,
        "write_s": round(seconds, 1),
        "rows_per_s": round(args.rows / seconds),
        "driver_python_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    os.sync()  # each call fsyncs: let the gigabytes just written reach the disk first
    for round_number in range(1, args.rounds + 1):
        for name, queue_url in (("after_write", url), ("empty_queue", empty_url)):
            command = [sys.executable, __file__, "--measure", queue_url, "--ops", str(args.ops)]
            command += ["--payload-bytes", str(args.payload_bytes)]
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            result[f"{name}_round_{round_number}"] = json.loads(done.stdout)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
