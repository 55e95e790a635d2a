"""jqueue on Spark (extra ``spark``): the ``jqueue`` data source and workers on executors.

``register(spark)`` makes ``df.write.format("jqueue")`` and ``spark.read.format("jqueue")``
available; ``run_workers`` runs ``Worker`` loops inside executor tasks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jqueue.core.handlers import Handler


def _require() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "jqueue's Spark pipeline needs the 'spark' extra: pip install 'jqueue[spark]'"
        ) from exc


def register(spark: SparkSession) -> None:
    """Register the ``jqueue`` data source with ``spark``."""
    _require()
    from jqueue.adapters.spark.source import JQueueDataSource

    spark.dataSource.register(JQueueDataSource)


def run_workers(
    spark: SparkSession,
    url: str,
    handlers: dict[str, Handler],
    parallelism: int,
    until_empty: bool = True,
    **worker_options: Any,
) -> DataFrame:
    """Run a ``Worker`` in each of ``parallelism`` executor tasks; returns their statistics.

    See ``jqueue.adapters.spark.workers.run_workers``.
    """
    _require()
    from jqueue.adapters.spark.workers import run_workers as run

    return run(spark, url, handlers, parallelism, until_empty, **worker_options)


__all__ = ["register", "run_workers"]
