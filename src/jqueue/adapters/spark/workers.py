"""Workers on Spark executors: each task of a job runs a ``Worker`` loop against the queue.

A task that Spark kills or retries loses no job: its claims' leases run out and the
jobs return to the queue for another task (or a later run).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterable, Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql import DataFrame, Row, SparkSession

from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.broker import BrokerQueue
from jqueue.core.runtime.handlers import Handler
from jqueue.core.runtime.outcomes import Outcome, WorkerStats
from jqueue.core.runtime.worker import Worker
from jqueue.domain.policy import QueuePolicy
from jqueue.domain.values import Bounds

STATS_SCHEMA = (
    "task int, attempt int, host string, pid int, claimed long, "
    + "".join(f"{outcome} long, " for outcome in Outcome)
    + "timed_out long, seconds double"
)
"""A task's row: a column per ``Outcome`` besides the counts of ``WorkerStats``."""
PARALLELISM = Bounds(ge=1)
"""The bounds of ``run_workers``'s ``parallelism``: how many tasks run a worker."""


async def _run_one(
    url: str,
    handlers: dict[str, Handler],
    until_empty: bool,
    policy: QueuePolicy | None,
    options: dict[str, Any],
) -> WorkerStats:
    async with BrokerQueue(storage_from_url(url), policy=policy) as queue:
        worker = Worker(queue, handlers, **options)
        return await worker.run(until_empty=until_empty, install_signals=False)


def run_workers(
    spark: SparkSession,
    url: str,
    handlers: dict[str, Handler],
    parallelism: int,
    until_empty: bool = True,
    policy: QueuePolicy | None = None,
    **worker_options: Any,
) -> DataFrame:
    """Run a ``Worker`` over the queue at ``url`` in each of ``parallelism`` tasks.

    ``handlers`` (entrypoint to handler) travel to the executors, so they must pickle
    (Spark's cloudpickle takes closures); ``worker_options`` go to ``Worker`` (say,
    ``concurrency``). With ``until_empty`` each task stops once nothing is claimable.
    Returns one row per task: its claims, outcomes and duration.
    """
    PARALLELISM.check("parallelism", parallelism)

    def task(indexes: Iterable[int]) -> Iterator[Row]:
        context = TaskContext.get()
        attempt = context.attemptNumber() if context else 0
        for index in indexes:
            stats = asyncio.run(_run_one(url, handlers, until_empty, policy, worker_options))
            outcomes = {str(outcome): count for outcome, count in stats.outcomes.items()}
            yield Row(
                task=index,
                attempt=attempt,
                host=socket.gethostname(),
                pid=os.getpid(),
                claimed=stats.claimed,
                **outcomes,
                timed_out=stats.timed_out,
                seconds=stats.seconds,
            )

    tasks = spark.sparkContext.parallelize(range(parallelism), parallelism).mapPartitions(task)
    return spark.createDataFrame(tasks.collect(), STATS_SCHEMA)
