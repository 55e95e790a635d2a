"""jqueue on Spark (extra ``spark``): the ``jqueue`` data source and workers on executors.

``register(spark)`` makes ``df.write.format("jqueue")`` and ``spark.read.format("jqueue")``
available; ``run_workers`` runs ``Worker`` loops inside executor tasks. Importing this
package without the extra raises an ImportError that names it.
"""

from __future__ import annotations

from jqueue.adapters.optional import require

require("pyspark", extra="spark")

from pyspark.sql import SparkSession  # noqa: E402

from jqueue.adapters.spark.source import JQueueDataSource  # noqa: E402
from jqueue.adapters.spark.workers import run_workers  # noqa: E402


def register(spark: SparkSession) -> None:
    """Register the ``jqueue`` data source with ``spark``."""
    spark.dataSource.register(JQueueDataSource)


__all__ = ["register", "run_workers"]
