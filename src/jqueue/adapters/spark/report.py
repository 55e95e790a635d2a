"""The history report computed with Spark, for a history too large for one process.

``compute`` turns a history DataFrame (``spark.read.format("jqueue").option("table",
"history")``) into the same ``Report`` that ``jqueue.domain.figures.report_of`` computes in
Python: jobs finished per bucket, and per entrypoint the outcomes and the wait and run time
percentiles (exact, interpolated linearly, as ``figures.percentiles``). ``jqueue report``
(``jqueue.adapters.report``) chooses between the two and writes the files.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as f

from jqueue.domain.figures import PERCENTILES, Report, Timings, empty_throughput, report_window
from jqueue.domain.models import JobStatus


def _triple(values: Any) -> tuple[float, ...]:
    return () if values is None else tuple(float(v) for v in values)


def compute(history: DataFrame) -> Report:
    """Compute the report of a history DataFrame."""
    micros = history.withColumn("finished_us", f.unix_micros("finished_at"))
    bounds = micros.agg(f.min("finished_us").alias("first"), f.max("finished_us").alias("last")).first()
    if bounds is None or bounds.first is None:
        return Report(empty_throughput(0, 60_000_000, 0), {})
    start, bucket, buckets = report_window(bounds.first, bounds.last)
    slot = f.least(f.floor((f.col("finished_us") - start) / bucket), f.lit(buckets - 1)).cast("int")
    found = empty_throughput(start, bucket, buckets)
    for row in micros.groupBy(slot.alias("slot"), "entrypoint", "outcome").count().collect():
        if row.outcome == str(JobStatus.ACKED):
            found.acked[row.slot] += row["count"]
        elif row.outcome == str(JobStatus.DEAD):
            found.dead[row.slot] += row["count"]
        found.per_entrypoint.setdefault(row.entrypoint, [0] * buckets)[row.slot] += row["count"]
    points = f.array(*(f.lit(p) for p in PERCENTILES))
    per_entrypoint = (
        history.groupBy("entrypoint")
        .agg(
            f.count("*").alias("finished"),
            f.sum((f.col("outcome") == str(JobStatus.ACKED)).cast("int")).alias("acked"),
            f.sum((f.col("outcome") == str(JobStatus.DEAD)).cast("int")).alias("dead"),
            f.sum((f.col("attempts") > 1).cast("int")).alias("retried"),
            f.percentile("wait_seconds", points).alias("wait"),
            f.percentile("run_seconds", points).alias("run"),
        )
        .orderBy("entrypoint")
        .collect()
    )
    timings = {
        row.entrypoint: Timings(
            row.finished, row.acked, row.dead, row.retried, _triple(row.wait), _triple(row.run)
        )
        for row in per_entrypoint
    }
    return Report(found, timings)


def compute_at(url: str) -> Report:
    """Compute the report of the queue at ``url`` on a local Spark session of every core."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from jqueue.adapters.spark import register

    spark = SparkSession.builder.master("local[*]").appName("jqueue-report").getOrCreate()
    try:
        register(spark)
        return compute(spark.read.format("jqueue").option("table", "history").load(url))
    finally:
        spark.stop()
