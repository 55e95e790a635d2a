"""A queue's history as a report: throughput, wait and run times, retry and dead-letter rates.

``compute`` is a Spark job over the history table (``spark.read.format("jqueue")
.option("table", "history")``); ``write`` renders it as Markdown with PNG charts
(matplotlib). ``main`` runs both on a local session: ``tools/queue_report.py URL`` or
``jqueue report URL``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as f

PERCENTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class EntrypointFigures:
    """One entrypoint's figures (times in seconds; rates are fractions of finished jobs)."""

    entrypoint: str
    finished: int
    wait: tuple[float, float, float]
    run: tuple[float, float, float]
    retry_rate: float
    dead_rate: float


@dataclass(frozen=True)
class Report:
    """Finished jobs per minute (start of the minute in UTC, count) and figures per entrypoint."""

    per_minute: list[tuple[str, int]]
    entrypoints: list[EntrypointFigures]


def _triple(values: Any) -> tuple[float, float, float]:
    if values is None:
        return (float("nan"),) * 3
    first, second, third = (float(v) for v in values)
    return first, second, third


def compute(history: DataFrame) -> Report:
    """Compute the report from a history DataFrame (exact percentiles, linear interpolation)."""
    minutes = (
        history.groupBy(f.date_trunc("minute", "finished_at").alias("minute"))
        .count()
        .orderBy("minute")
        .collect()
    )
    percentiles = f.array(*(f.lit(p) for p in PERCENTILES))
    rows = (
        history.groupBy("entrypoint")
        .agg(
            f.count("*").alias("finished"),
            f.percentile("wait_seconds", percentiles).alias("wait"),
            f.percentile("run_seconds", percentiles).alias("run"),
            f.avg((f.col("attempts") > 1).cast("double")).alias("retry_rate"),
            f.avg((f.col("outcome") == "dead").cast("double")).alias("dead_rate"),
        )
        .orderBy("entrypoint")
        .collect()
    )
    return Report(
        per_minute=[(row.minute.strftime("%Y-%m-%d %H:%M"), row["count"]) for row in minutes],
        entrypoints=[
            EntrypointFigures(
                row.entrypoint,
                row.finished,
                _triple(row.wait),
                _triple(row.run),
                row.retry_rate,
                row.dead_rate,
            )
            for row in rows
        ],
    )


def markdown(report: Report) -> str:
    """Return the report as Markdown tables."""
    lines = ["# Queue report", "", "## Per entrypoint", ""]
    lines.append(
        "| entrypoint | finished | wait p50 / p95 / p99 (s) | run p50 / p95 / p99 (s) | retried | dead |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|")
    for e in report.entrypoints:
        wait = " / ".join(f"{v:.3f}" for v in e.wait)
        run = " / ".join(f"{v:.3f}" for v in e.run)
        lines.append(
            f"| {e.entrypoint} | {e.finished} | {wait} | {run} | {e.retry_rate:.1%} | {e.dead_rate:.1%} |"
        )
    lines += ["", "## Finished jobs per minute", "", "| minute (UTC) | jobs |", "|---|---:|"]
    lines += [f"| {minute} | {count} |" for minute, count in report.per_minute]
    lines += ["", "![throughput](throughput.png)", "", "![times](times.png)", ""]
    return "\n".join(lines)


def write(report: Report, directory: Path) -> list[Path]:
    """Write ``report.md``, ``throughput.png`` and ``times.png`` into ``directory``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / "report.md", directory / "throughput.png", directory / "times.png"]
    written[0].write_text(markdown(report))

    figure, axes = pyplot.subplots(figsize=(8, 3))
    axes.bar([m for m, _ in report.per_minute], [c for _, c in report.per_minute])
    axes.set_ylabel("finished jobs")
    axes.set_title("Throughput per minute")
    axes.tick_params(axis="x", labelrotation=45)
    figure.tight_layout()
    figure.savefig(written[1])
    pyplot.close(figure)

    figure, axes = pyplot.subplots(figsize=(8, 3))
    names = [e.entrypoint for e in report.entrypoints]
    for offset, (label, pick) in enumerate((("wait p95", 0), ("run p95", 1))):
        values = [(e.wait if pick == 0 else e.run)[1] for e in report.entrypoints]
        axes.bar([i + offset * 0.4 for i in range(len(names))], values, width=0.4, label=label)
    axes.set_xticks([i + 0.2 for i in range(len(names))], names)
    axes.set_ylabel("seconds")
    axes.set_title("Wait and run time, p95, per entrypoint")
    axes.legend()
    figure.tight_layout()
    figure.savefig(written[2])
    pyplot.close(figure)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Run the report on a local Spark session; returns the exit status."""
    parser = argparse.ArgumentParser(prog="queue_report.py", description=__doc__)
    parser.add_argument("url", help="the queue's storage URL")
    parser.add_argument("--out", type=Path, default=Path("queue-report"), help="output directory")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from jqueue.adapters.spark import register

    spark = SparkSession.builder.master("local[*]").appName("jqueue-report").getOrCreate()
    try:
        register(spark)
        history = spark.read.format("jqueue").option("table", "history").load(args.url)
        written = write(compute(history), args.out)
    finally:
        spark.stop()
    for path in written:
        print(path)
    return 0
