"""pgqueuer on PostgreSQL (``fsync`` and ``synchronous_commit`` on), for ``benchmark_peers.py``:
``run_pgqueuer.py SCENARIO WORKDIR ...`` with the database in ``PGQ_DSN``."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import asyncpg
from common import (
    BATCH,
    ENTRYPOINT,
    Done,
    measured,
    paced,
    payload,
    ready_then_go,
    record_latency,
    run_asyncio_runner,
)
from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from pgqueuer.core.qm import QueueManager
from pgqueuer.models import Job
from pgqueuer.queries import Queries


async def produce(args: argparse.Namespace) -> dict[str, Any]:
    """The producer scenarios."""
    connection = await asyncpg.connect(os.environ["PGQ_DSN"])
    queries = Queries(AsyncpgDriver(connection))
    result: dict[str, Any] = {}
    try:
        if args.scenario == "install":
            await queries.install()
        elif args.scenario == "sequential":
            with measured(result, args.jobs):
                for _ in range(args.jobs):
                    await queries.enqueue(ENTRYPOINT, payload())
        elif args.scenario in ("batch", "fill"):
            with measured(result, args.jobs):
                for _ in range(args.jobs // BATCH):
                    await queries.enqueue(
                        [ENTRYPOINT] * BATCH, [payload() for _ in range(BATCH)], [0] * BATCH
                    )
        elif args.scenario == "paced":
            for pause in paced(args.jobs, args.rate):
                await asyncio.sleep(pause)
                await queries.enqueue(ENTRYPOINT, payload())
    finally:
        await connection.close()
    return result


async def work(args: argparse.Namespace) -> None:
    """A worker process: a ``QueueManager`` with its defaults (LISTEN/NOTIFY), until SIGTERM."""
    done = Done(args.workdir)
    record = record_latency(args.workdir) if args.scenario == "latency-worker" else None
    connection = await asyncpg.connect(os.environ["PGQ_DSN"])
    manager = QueueManager(Queries(AsyncpgDriver(connection)))

    @manager.entrypoint(ENTRYPOINT)
    async def handle(job: Job) -> None:
        if record is not None and job.payload is not None:
            record(job.payload)
        done.one()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, manager.shutdown.set)
    await ready_then_go(args)
    await manager.run(batch_size=args.concurrency)
    await connection.close()


if __name__ == "__main__":
    run_asyncio_runner(produce, work, worker_on_uvloop=True)  # as ``pgq run`` does
